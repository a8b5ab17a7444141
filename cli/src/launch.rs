//! `gpufleet launch`: place (or take a pool), create the placement group, launch under an idempotency key, roll back on failure or Ctrl-C.

use clap::Args;
use gpufleet::runtime::report::LaunchDoc;
use gpufleet::runtime::verbs::{
    self,
    launch::{LaunchNote, LaunchRequest, Launched},
};
use gpufleet::{Error, ErrorKind, PlacementStrategy, Pool};

use crate::instances::{print_instances, Spinner};
use crate::job::{job_input, PlaceArgs};
use crate::output::{json, OutputFormat};
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags};

/// Arguments of `gpufleet launch`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet launch --gpu A100:8 --hours 20 --deadline 48h --name train-42 --image ami-0abc --count 4 --placement-group cluster\n  gpufleet launch --pool aws:us-east-1/use1-az4:p4d.24xlarge:spot --image ami-0abc --name debug"
)]
pub struct LaunchArgs {
    #[command(flatten)]
    place: PlaceArgs,

    /// The job's name: its `gpufleet:job` tag, and the default idempotency key.
    #[arg(long, allow_hyphen_values = true)]
    name: Option<String>,

    /// The image to boot (an AMI id, a GCE image, an Azure image reference)
    /// on every cloud; with --job, the job file's `image` / `[image]` when
    /// left out.
    #[arg(long, allow_hyphen_values = true)]
    image: Option<String>,

    /// Instances to launch.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    count: u32,

    /// The job id every launch attempt's idempotency key derives from (1 to
    /// 64 ASCII letters, digits, '-', '_' or '.'); default: the name, or for
    /// a name that is not such an id, a prefix of it and a hash of all of it.
    /// Re-running with the same id returns what the first run launched.
    #[arg(long, allow_hyphen_values = true)]
    key: Option<String>,

    /// Time to live: the instances carry an expiry tag `gpufleet reap`
    /// honours (default 24h; `none` for no expiry, as `ttl = "none"`).
    #[arg(long, value_parser = gpufleet::runtime::config::parse_ttl, allow_hyphen_values = true)]
    ttl: Option<String>,

    /// Create a placement group: cluster, spread or partition:N.
    #[arg(long, value_name = "STRATEGY", allow_hyphen_values = true)]
    placement_group: Option<String>,

    /// Launch into this pool instead of the best-ranked one, as `offers` and
    /// `place` print it: `aws:us-east-1/use1-az4:p4d.24xlarge:spot`.
    #[arg(long, allow_hyphen_values = true)]
    pool: Option<String>,

    /// Owner tag (default: config `owner`, `GPUFLEET_OWNER`, `$USER`,
    /// `$LOGNAME`, else the account this runs as).
    #[arg(long, allow_hyphen_values = true)]
    owner: Option<String>,

    /// Team tag (default: config `tags.team`, `GPUFLEET_TEAM`).
    #[arg(long, allow_hyphen_values = true)]
    team: Option<String>,
}

/// Parses `cloud:region[/zone]:type:capacity`.
pub fn parse_pool(s: &str) -> Result<Pool, Error> {
    s.parse::<Pool>().map_err(|_| {
        Error::invalid_input(format!(
            "invalid --pool '{s}': expected CLOUD:REGION[/ZONE]:INSTANCE_TYPE:spot|on-demand, as offers and place print it"
        ))
    })
}

/// Runs `gpufleet launch`.
pub fn launch(args: LaunchArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let flags = match &args.ttl {
        Some(t) => flags.with(gpufleet::runtime::config::ConfigKey::Ttl, t),
        None => flags,
    };
    let cfg = Config::load(&Flags {
        owner: args.owner.clone().or(flags.owner.clone()),
        team: args.team.clone().or(flags.team.clone()),
        ..flags
    })?;
    let placement_strategy = args
        .placement_group
        .as_deref()
        .map(|s| {
            s.parse::<PlacementStrategy>()
                .map_err(|e| Error::invalid_input(format!("--placement-group: {e}")))
        })
        .transpose()?;
    let pool = args.pool.as_deref().map(parse_pool).transpose()?;
    let job = if pool.is_some() && args.place.is_empty() {
        None
    } else {
        Some(job_input(&args.place)?.read(&cfg)?.spec)
    };
    let explicit = pool.is_some();
    let req = LaunchRequest {
        job,
        pool,
        name: args.name,
        key: args.key,
        image: args.image,
        count: args.count,
        placement_strategy,
    }
    .check()?;
    let job_id = req.job_id.clone();
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        // A sign of life while the clouds work (a spinner with the time so
        // far, on a terminal only), cleared before anything else is said.
        let mut spinner = None;
        let mut warned = 0;
        let launched = verbs::launch::launch(
            &crate::shared::site(&cfg),
            req,
            gpufleet::runtime::stopped,
            |note| match note {
                LaunchNote::Opened { warnings, unread } => {
                    crate::shared::warn_all(&warnings);
                    crate::shared::warn_unread(&unread);
                    warned = unread.len();
                }
                LaunchNote::Launching { job_id, count } => {
                    spinner = Some(Spinner::start(format!(
                        "launching {count} instance(s) of job {job_id}"
                    )))
                }
                LaunchNote::RollingBack { job_id, signal } => {
                    spinner = None;
                    eprintln!("interrupted ({signal}): rolling back the launch of job '{job_id}' (Ctrl-C again to leave it for the next run to resume)");
                }
            },
        )
        .await;
        drop(spinner);
        match launched {
            Ok(Launched::Done { doc, unread }) => {
                if doc.already_launched {
                    eprintln!(
                        "already launched as job '{job_id}': {} instance(s); nothing new was created",
                        doc.instances.len()
                    );
                }
                print_launch(&doc, format)?;
                // Placed without a cloud that did not answer: exit 4.
                crate::shared::partial_of(&unread, warned)
            }
            Ok(Launched::RolledBack { rolled, .. }) => {
                match rolled {
                    Some(r) => eprintln!("rolled back: {} instance(s) terminated; nothing of job '{job_id}' is left running{}", r.terminated, r.left.map(|l| format!(" (but {l})")).unwrap_or_default()),
                    None => eprintln!("the launch had already finished: `gpufleet ls --job {job_id}` shows its instances"),
                }
                Err(Failure::Interrupted)
            }
            Ok(Launched::LeftAsItWas) => {
                eprintln!("left as it was: `gpufleet launch` with the same name resumes it; `gpufleet reap` finds what it made");
                Err(Failure::Interrupted)
            }
            Err(e) if e.kind() == ErrorKind::InsufficientCapacity && !explicit => {
                Err(Failure::NothingMatched(e.to_string()))
            }
            Err(e) => Err(e.into()),
        }
    })
}

pub(crate) fn print_launch(l: &LaunchDoc, format: OutputFormat) -> Result<(), Failure> {
    match format {
        OutputFormat::Json | OutputFormat::Csv => {
            json(&mut std::io::stdout().lock(), l)?;
            Ok(())
        }
        OutputFormat::Table => {
            print_instances(&l.instances, format, None)?;
            eprintln!(
                "{} {} instance(s) in {} (idempotency key '{}'{})",
                if l.already_launched {
                    "found"
                } else {
                    "launched"
                },
                l.instances.len(),
                l.pool,
                l.idempotency_key,
                l.placement_group
                    .as_ref()
                    .map(|g| format!(", placement group {g}"))
                    .unwrap_or_default()
            );
            Ok(())
        }
    }
}
