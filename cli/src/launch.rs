//! `gpufleet launch`: place (or take a pool), create the placement group, launch under an idempotency key, roll back on failure or Ctrl-C.

use clap::Args;
use gpufleet::{Error, ErrorKind, PlacementStrategy, Pool, Provider, Snapshot};
use serde::Serialize;

use crate::instances::{print_instances, rows, InstanceRow, Spinner};
use crate::job::{job_from, PlaceArgs};
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

/// What `launch` printed (`--output json`).
#[derive(Debug, Serialize)]
pub(crate) struct Launched {
    already_launched: bool,
    idempotency_key: String,
    pool: String,
    placement_group: Option<String>,
    instances: Vec<InstanceRow>,
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
    if args.count == 0 || args.count > 1000 {
        return Err(Error::invalid_input(format!(
            "invalid --count {}: launch 1 to 1000 instances",
            args.count
        ))
        .into());
    }
    let strategy = args
        .placement_group
        .as_deref()
        .map(|s| {
            s.parse::<PlacementStrategy>()
                .map_err(|e| Error::invalid_input(format!("--placement-group: {e}")))
        })
        .transpose()?;
    let explicit = args.pool.as_deref().map(parse_pool).transpose()?;
    let snapshot = Snapshot::embedded();
    let job = if explicit.is_some() && args.place.is_empty() {
        None
    } else {
        Some(job_from(&args.place, snapshot)?)
    };
    let name = match (&args.name, &job) {
        (Some(n), _) => n.clone(),
        (None, Some(j)) if j.name != "cli" => j.name.clone(),
        _ => {
            return Err(Error::invalid_input(
                "give the job a --name (its job tag and idempotency key)",
            )
            .into())
        }
    };
    gpufleet::placer::check_job_name(&name)?;
    if let Some(k) = &args.key {
        gpufleet::runtime::controller::check_job_id(k).map_err(|_| {
            Error::invalid_input(format!(
                "invalid idempotency key '{}': use 1 to 64 ASCII letters, digits, '-', '_' or '.'",
                k.chars().take(64).collect::<String>()
            ))
        })?;
    }
    // The job id: the key when given, else the name (a name that is no valid
    // id, such as a long or non-ASCII one, gets a readable prefix and a hash
    // of all of it); every launch attempt's idempotency key derives from it
    // (hashed, so similar names never share one).
    let job_id = match &args.key {
        Some(k) => k.clone(),
        None => gpufleet::runtime::controller::job_id_for_name(&name),
    };
    let snapshot = Snapshot::embedded();
    let mut job = match (job, &explicit) {
        (Some(j), _) => j,
        (None, Some(pool)) => gpufleet::placer::JobSpec::for_pool(pool, &name, snapshot)?,
        (None, None) => return unreachable_pool().map(|_| ()),
    };
    job.name = name.clone();
    // A boot script no cloud would take is refused now, not by each launch.
    gpufleet::runtime::workload::check_fits(&job, &job_id)?;
    let image = |i: &String| !i.trim().is_empty();
    if !args.image.as_ref().is_some_and(image) && !job.workload.images.values().any(image) {
        return Err(Error::invalid_input(
            "give --image IMAGE (an AMI id, a GCE image or an Azure image reference), or image in the job file",
        )
        .into());
    }
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        // Each cloud checked first, within its budget: one that does not
        // answer is left out of the candidates, said once (exit 4).
        let fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let exec = fleet.launcher(&cfg).await?;
        // A job file brings its images and what its instances run; --image
        // stands for every cloud.
        let mut template = gpufleet::runtime::LaunchTemplate {
            nodes: args.count,
            ttl: cfg.launch_ttl(),
            placement_strategy: strategy,
            ..Default::default()
        }
        .for_job(&job);
        if let Some(image) = &args.image {
            for p in &fleet.providers {
                template.images.insert(p.cloud(), image.clone());
            }
        }
        template.tags = cfg.resource_tags();
        // A sign of life while the clouds work (a spinner with the time so
        // far, on a terminal only), cleared before anything else is said.
        let spinner = Spinner::start(format!(
            "launching {} instance(s) of job {job_id}",
            args.count
        ));
        // Ctrl-C, SIGTERM or SIGHUP during the launch rolls it back (a second
        // signal leaves it for the next run to resume) and says which.
        let result = tokio::select! {
            r = exec.launch_once(&job_id, &job, &template, explicit.as_ref()) => r,
            sig = gpufleet::runtime::stopped() => {
                drop(spinner);
                eprintln!("interrupted ({sig}): rolling back the launch of job '{job_id}' (Ctrl-C again to leave it for the next run to resume)");
                let rolled = tokio::select! {
                    r = exec.roll_back_unfinished(&job_id) => r,
                    _ = gpufleet::runtime::stopped() => {
                        fleet.save()?;
                        eprintln!("left as it was: `gpufleet launch` with the same name resumes it; `gpufleet reap` finds what it made");
                        return Err(Failure::Interrupted);
                    }
                };
                fleet.save()?;
                if matches!(rolled, Ok(Some(_))) {
                    let why = format!("launch interrupted and rolled back ({sig}): nothing of it runs");
                    gpufleet::runtime::spend::end_unfinished_launch(exec.ledger().as_ref(), &job_id, gpufleet::ledger::JobState::Cancelled, &why, fleet.clock.now()).await?;
                }
                match rolled {
                    Ok(Some(r)) => eprintln!("rolled back: {} instance(s) terminated; nothing of job '{job_id}' is left running{}", r.terminated, r.left.map(|l| format!(" (but {l})")).unwrap_or_default()),
                    Ok(None) => eprintln!("the launch had already finished: `gpufleet ls --job {job_id}` shows its instances"),
                    Err(e) => {
                        eprintln!("the roll-back failed: {e}; `gpufleet launch` with the same name resumes the launch, `gpufleet reap` finds what it made");
                        return Err(e.into());
                    }
                }
                return Err(Failure::Interrupted);
            }
        };
        drop(spinner);
        fleet.save()?;
        if let Err(e) = &result {
            // Nothing of it runs: the job ends failed, saying why (it used
            // to stay placing for ever). The same name launches it again.
            let why = format!("launch failed: {e}");
            gpufleet::runtime::spend::end_unfinished_launch(exec.ledger().as_ref(), &job_id, gpufleet::ledger::JobState::Failed, &why, fleet.clock.now()).await?;
        }
        let (already, running) = match result {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::InsufficientCapacity && explicit.is_none() => {
                return Err(Failure::NothingMatched(e.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut fleet = fleet;
        let key = exec.launch_key(&job_id, running.attempts)?;
        if already {
            eprintln!(
                "already launched as job '{job_id}': {} instance(s); nothing new was created",
                running.instances.len()
            );
        }
        let rows = rows(&mut fleet, &running.instances).await;
        print_launch(
            &Launched {
                already_launched: already,
                idempotency_key: key.to_string(),
                pool: running.plan.offer.pool.to_string(),
                placement_group: running.placement_group.as_ref().map(|g| g.id.to_string()),
                instances: rows,
            },
            format,
        )?;
        fleet.left_out_by(&exec); // placed without a cloud that did not answer: exit 4
        crate::shared::partial(&fleet, warned)
    })
}

pub(crate) fn unreachable_pool() -> Result<Vec<Pool>, Failure> {
    Err(Error::invalid_input("give --pool, or --gpu and --hours, or --job FILE").into())
}

pub(crate) fn print_launch(l: &Launched, format: OutputFormat) -> Result<(), Failure> {
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
