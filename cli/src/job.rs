//! The job a command describes, from the `place` flags or a job file:
//! `place`, `launch` and `run` read it the same way, checked against the
//! catalog's clouds, regions and zones.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use gpufleet::placer::CheckpointInterval;
use gpufleet::runtime::verbs::input::{JobFlags, JobInput};
use gpufleet::{Cloud, Error, GpuRequirement, Money};

use crate::args::{parse_cloud, parse_dur, parse_gpu, parse_hours, parse_usd};

/// Arguments of `gpufleet place`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet place --gpu H100:8 --gpu A100-80GB:8 --hours 20 --deadline 48h\n  gpufleet place --job train.toml -o json"
)]
pub struct PlaceArgs {
    /// A job file (TOML or JSON) instead of the flags below.
    // Every flag that describes the job conflicts: beside a file they were
    // silently ignored (`--budget 1` or `--cloud gcp` changed nothing).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "gpu", "hours", "checkpoint_interval", "checkpoint_cost", "restart_overhead",
            "deadline", "not_interruptible", "budget", "cloud", "region"
        ],
        allow_hyphen_values = true
    )]
    pub(crate) job: Option<PathBuf>,

    /// An acceptable GPU configuration, `MODEL:COUNT` (count 1 when left out);
    /// repeat for any of several. The first is the one `--hours` is measured on.
    #[arg(long, value_name = "MODEL:COUNT", value_parser = parse_gpu, allow_hyphen_values = true)]
    pub(crate) gpu: Vec<GpuRequirement>,

    /// Hours of work on the first `--gpu`.
    #[arg(long, value_parser = parse_hours, allow_hyphen_values = true)]
    pub(crate) hours: Option<f64>,

    /// Checkpoint interval (`30m`, `1h`) or `auto` for the Young/Daly optimum per pool.
    #[arg(
        long,
        value_name = "DUR|auto",
        default_value = "auto",
        allow_hyphen_values = true
    )]
    pub(crate) checkpoint_interval: String,

    /// Time one checkpoint takes.
    #[arg(long, value_name = "DUR", value_parser = parse_dur, default_value = "2m", allow_hyphen_values = true)]
    pub(crate) checkpoint_cost: Duration,

    /// Time from a (re)start to useful work.
    #[arg(long, value_name = "DUR", value_parser = parse_dur, default_value = "10m", allow_hyphen_values = true)]
    pub(crate) restart_overhead: Duration,

    /// The job must be done within this long.
    #[arg(long, value_name = "DUR", value_parser = parse_dur, allow_hyphen_values = true)]
    pub(crate) deadline: Option<Duration>,

    /// The job cannot survive interruption: on-demand only.
    #[arg(long)]
    pub(crate) not_interruptible: bool,

    /// At most this expected cost, in USD.
    #[arg(long, value_name = "USD", value_parser = parse_usd, allow_hyphen_values = true)]
    pub(crate) budget: Option<Money>,

    /// Clouds to consider (comma-separated; default: the enabled ones,
    /// `clouds` in the config; with --job, the file's `clouds`).
    #[arg(long, value_delimiter = ',', value_parser = parse_cloud, allow_hyphen_values = true)]
    pub(crate) cloud: Vec<Cloud>,

    /// Regions to consider (comma-separated).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub(crate) region: Vec<String>,

    /// Show at most this many plans (0 for all).
    #[arg(long, default_value_t = 10, allow_hyphen_values = true)]
    pub(crate) limit: usize,

    /// Ignore the local ledger of observed interruptions.
    #[arg(long)]
    pub(crate) no_ledger: bool,

    /// Ask the enabled clouds (the fake cloud with `--provider fake`) for
    /// their offers and stability signals (placement scores, eviction bands,
    /// price history), as `run` does, instead of the cached or embedded
    /// catalog: `place --live` chooses where `run` would start.
    #[arg(long)]
    pub(crate) live: bool,
}

impl PlaceArgs {
    /// Whether no job was described (no --job, --gpu or --hours).
    pub fn is_empty(&self) -> bool {
        self.job.is_none() && self.gpu.is_empty() && self.hours.is_none()
    }
}

/// The job the flags describe: the file, or the flags themselves.
pub fn job_input(args: &PlaceArgs) -> Result<JobInput, Error> {
    if let Some(path) = &args.job {
        return Ok(JobInput::File(path.clone()));
    }
    if args.gpu.is_empty() || args.hours.is_none() {
        return Err(Error::invalid_input(
            "give --gpu MODEL:COUNT and --hours, or --job FILE",
        ));
    }
    let mut flags = JobFlags::new("cli", args.gpu.clone(), args.hours.unwrap_or_default());
    flags.checkpoint_cost = args.checkpoint_cost;
    flags.restart_overhead = args.restart_overhead;
    flags.checkpoint_interval =
        match args.checkpoint_interval.trim() {
            "auto" => CheckpointInterval::Auto,
            other => CheckpointInterval::Every(parse_dur(other).map_err(|e| {
                Error::invalid_input(format!("--checkpoint-interval: {e}, or 'auto'"))
            })?),
        };
    flags.deadline = args.deadline;
    flags.not_interruptible = args.not_interruptible;
    flags.budget = args.budget;
    flags.clouds = args.cloud.clone();
    flags.regions = args.region.clone();
    Ok(JobInput::Flags(flags))
}
