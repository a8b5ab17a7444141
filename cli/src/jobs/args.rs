//! The arguments of `gpufleet run` and `gpufleet jobs`, checked.

use super::*;
use gpufleet::runtime::controller::ControllerConfig;

/// Arguments of `gpufleet run`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet run --job train.toml\n  gpufleet run --job train.toml --detach\n  gpufleet --provider fake run --job train.toml"
)]
pub struct RunArgs {
    /// The job file (TOML, or JSON when it ends in `.json`): the work, GPU
    /// options, constraints, and `run`, `setup`, `image`, `env`,
    /// `checkpoint`, `[access]`.
    #[arg(long, value_name = "FILE", allow_hyphen_values = true)]
    pub(super) job: PathBuf,

    /// The job's id (default: its name and a hash of the file, so the same
    /// command run again resumes the same job).
    #[arg(long, allow_hyphen_values = true)]
    pub(super) id: Option<String>,

    /// Record the job and return: a controller (`gpufleet jobs serve`, on
    /// this or another machine sharing the ledger) drives it, with its own
    /// settings (so the flags of driving are refused beside this one).
    #[arg(
        long,
        conflicts_with_all = [
            "poll", "heartbeat_grace", "boot_grace", "move_review", "give_up_after", "lease",
            "down_on_exit"
        ]
    )]
    pub(super) detach: bool,

    #[command(flatten)]
    pub(super) drive: DriveArgs,

    /// On Ctrl-C, terminate the job's instances and cancel it (default:
    /// detach, leaving it to `gpufleet jobs resume`).
    #[arg(long)]
    pub(super) down_on_exit: bool,
}

/// How the controller drives a job.
#[derive(Debug, Clone, Args)]
pub struct DriveArgs {
    /// How often the instances are read.
    #[arg(long, value_parser = parse_dur, default_value = "60s", allow_hyphen_values = true)]
    pub(super) poll: Duration,

    /// A node whose heartbeat is older than this is treated as failed.
    #[arg(long, value_parser = parse_dur, default_value = "10m", allow_hyphen_values = true)]
    pub(super) heartbeat_grace: Duration,

    /// A node started with a workload that has not sent its first heartbeat
    /// this long after launch is treated as a job that failed to start (its
    /// boot script did not run or cannot tag the instance). `0s` turns the
    /// check off: a silent node's progress is then estimated from run time.
    #[arg(long, value_parser = parse_dur, default_value = "20m", allow_hyphen_values = true)]
    pub(super) boot_grace: Duration,

    /// How often the policy is asked whether moving pays (from the poll
    /// interval to 365d; a long one keeps a running job where it is).
    #[arg(long, value_parser = parse_dur, default_value = "30m", allow_hyphen_values = true)]
    pub(super) move_review: Duration,

    /// Give up after waiting this long for capacity.
    #[arg(long, value_parser = parse_dur, default_value = "24h", allow_hyphen_values = true)]
    pub(super) give_up_after: Duration,

    /// How long the job's lease lasts unless renewed: another controller
    /// takes the job over this long after this one dies.
    #[arg(long, value_parser = parse_dur, default_value = "30s", allow_hyphen_values = true)]
    pub(super) lease: Duration,
}

/// `gpufleet jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Every managed job: state, pool, cost so far.
    Ls,
    /// One job: its timeline, pools, preemptions, moves and cost.
    Show {
        /// The job's id.
        id: String,
    },
    /// The boot script's output, where the cloud exposes a console.
    Logs {
        /// The job's id.
        id: String,
    },
    /// Cancel a job: terminate its instances; a controller driving it stops.
    Cancel {
        /// The job's id.
        id: String,
        /// Cancel another owner's job (default: only yours; its instances
        /// are always its owner's).
        #[arg(long)]
        any_owner: bool,
    },
    /// Drive a job again after its controller stopped or died.
    Resume {
        /// The job's id.
        id: String,
        /// Drive another owner's job (default: yours only).
        #[arg(long)]
        any_owner: bool,
        #[command(flatten)]
        drive: DriveArgs,
        /// On Ctrl-C, terminate the job's instances and cancel it (default:
        /// stop driving, leaving it to another `gpufleet jobs resume`).
        #[arg(long)]
        down_on_exit: bool,
    },
    /// Be one of the controllers sharing the ledger's jobs: take free and
    /// expired leases, drive those jobs, take over a dead controller's.
    Serve(ServeArgs),
}

/// Arguments of `gpufleet jobs serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet jobs serve --lease 30s --poll 60s\n  gpufleet jobs serve --max-jobs 50 --serve-for 8h"
)]
pub struct ServeArgs {
    #[command(flatten)]
    pub(super) drive: DriveArgs,

    /// At most this many jobs driven at once.
    #[arg(long, default_value_t = 256, allow_hyphen_values = true)]
    pub(super) max_jobs: usize,

    /// Drive every owner's jobs (a shared controller; its launches carry
    /// each job's owner). Default: the jobs of this controller's owner.
    #[arg(long)]
    pub(super) any_owner: bool,

    /// At most this many new jobs taken per poll (controllers started
    /// together share the work).
    #[arg(long, default_value_t = 16, allow_hyphen_values = true)]
    pub(super) claim_batch: usize,

    /// Stop after this long (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_parser = parse_dur, allow_hyphen_values = true)]
    pub(super) serve_for: Option<Duration>,
}

/// Checks the drive flags, naming the flag that is out of range.
pub(super) fn check_drive(d: &DriveArgs) -> Result<(), Error> {
    d.config().check(|setting| match setting {
        "lease_ttl" => "--lease".to_string(),
        other => format!("--{}", other.replace('_', "-")),
    })
}

impl DriveArgs {
    /// The controller's settings these flags give.
    pub(super) fn config(&self) -> ControllerConfig {
        ControllerConfig {
            poll: self.poll,
            heartbeat_grace: self.heartbeat_grace,
            boot_grace: self.boot_grace,
            move_review: self.move_review,
            give_up_after: self.give_up_after,
            lease_ttl: self.lease,
            ..ControllerConfig::default()
        }
    }
}
