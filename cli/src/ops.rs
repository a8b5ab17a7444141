//! The operator commands: `launch`, `ls`, `terminate`, `reap`, `config show`.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::{Args, ValueEnum};
use gpufleet::{
    tags, Cloud, Error, ErrorKind, Instance, Money, PlacementStrategy, Pool, Price, Provider,
    Snapshot, TagFilter,
};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::args::parse_dur;
use crate::config::{Config, Flags};
use crate::fleet::Fleet;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::place::{job_from, PlaceArgs};
use crate::Failure;
use gpufleet::runtime::reap;

/// One instance as the operator commands print it (`--output json`: a stable schema).
#[derive(Debug, Clone, Serialize)]
pub struct InstanceRow {
    id: String,
    cloud: String,
    region: String,
    zone: Option<String>,
    instance_type: String,
    capacity: &'static str,
    state: String,
    launched_at: String,
    age_hours: f64,
    price_per_hour_usd: Option<f64>,
    cost_so_far_usd: Option<f64>,
    cost_per_day_usd: Option<f64>,
    job: Option<String>,
    owner: Option<String>,
    team: Option<String>,
    expires_at: Option<String>,
    placement_group: Option<String>,
    /// Mean GPU utilisation over the node's last summary window, percent.
    gpu_util_pct: Option<u8>,
    /// The most memory one GPU held in that window, MiB.
    gpu_memory_peak_mib: Option<u64>,
    /// Memory of one GPU, MiB.
    gpu_memory_total_mib: Option<u64>,
    /// When the node's agent last summarised its GPUs.
    gpu_summary_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl InstanceRow {
    fn new(i: &Instance, price: Option<Price>, now: OffsetDateTime) -> InstanceRow {
        let age = ((now - i.launched_at).whole_seconds().max(0)) as f64 / 3600.0;
        // A cost money cannot hold shows as unknown, with a warning.
        let known = |r: Result<Money, Error>| {
            r.map_err(|e| tracing::warn!(instance = %i.id, error = %e, "cost not shown"))
                .ok()
        };
        let secs = (now - i.launched_at).whole_seconds().max(0) as u64;
        let cost = price.and_then(|p| known(p.cost_for_seconds(secs)));
        let gpu = gpufleet::usage::GpuSummary::from_tags(&i.tags);
        InstanceRow {
            id: i.id.to_string(),
            cloud: i.pool.cloud.to_string(),
            region: i.pool.region.to_string(),
            zone: i.pool.zone.as_ref().map(ToString::to_string),
            instance_type: i.pool.instance_type.clone(),
            capacity: i.pool.capacity.as_str(),
            state: format!("{:?}", i.state).to_lowercase(),
            launched_at: i.launched_at.format(&Rfc3339).unwrap_or_default(),
            age_hours: (age * 100.0).round() / 100.0,
            price_per_hour_usd: price.map(Price::usd_per_hour_f64),
            cost_so_far_usd: cost.map(Money::as_usd_f64),
            cost_per_day_usd: price
                .and_then(|p| known(p.cost_for_seconds(86_400)))
                .map(Money::as_usd_f64),
            job: i.tags.get(tags::JOB).cloned(),
            owner: i.tags.get(tags::OWNER).cloned(),
            team: i.tags.get(tags::TEAM).cloned(),
            expires_at: i.expires_at.and_then(|t| t.format(&Rfc3339).ok()),
            placement_group: i.placement_group.as_ref().map(ToString::to_string),
            gpu_util_pct: gpu.as_ref().filter(|g| g.gpus > 0).map(|g| g.mean_util_pct),
            gpu_memory_peak_mib: gpu
                .as_ref()
                .filter(|g| g.gpus > 0)
                .map(|g| g.peak_memory_mib),
            gpu_memory_total_mib: gpu
                .as_ref()
                .filter(|g| g.gpus > 0)
                .map(|g| g.memory_total_mib),
            gpu_summary_at: gpu.as_ref().and_then(|g| g.at.format(&Rfc3339).ok()),
            reason: None,
        }
    }

    fn cells(&self) -> Vec<String> {
        let money = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
        vec![
            self.id.clone(),
            self.cloud.clone(),
            match &self.zone {
                Some(z) => format!("{}/{z}", self.region),
                None => self.region.clone(),
            },
            self.instance_type.clone(),
            self.capacity.to_string(),
            self.state.clone(),
            format!("{:.1}h", self.age_hours),
            self.price_per_hour_usd
                .map_or("-".into(), |x| format!("{x:.4}")),
            money(self.cost_so_far_usd),
            self.gpu_util_pct.map_or("-".into(), |u| format!("{u}%")),
            match (self.gpu_memory_peak_mib, self.gpu_memory_total_mib) {
                (Some(p), Some(t)) => {
                    format!("{:.1}/{:.0} GiB", p as f64 / 1024.0, t as f64 / 1024.0)
                }
                _ => "-".into(),
            },
            self.job.clone().unwrap_or_else(|| "-".into()),
            self.owner.clone().unwrap_or_else(|| "-".into()),
            self.team.clone().unwrap_or_else(|| "-".into()),
        ]
    }
}

const HEADERS: [&str; 14] = [
    "ID",
    "CLOUD",
    "LOCATION",
    "INSTANCE TYPE",
    "CAPACITY",
    "STATE",
    ">AGE",
    ">$/HOUR",
    ">COST SO FAR $",
    ">GPU%",
    ">GPU MEM PEAK",
    "JOB",
    "OWNER",
    "TEAM",
];

fn print_instances(
    rows: &[InstanceRow],
    format: OutputFormat,
    extra: Option<&str>,
) -> Result<(), Failure> {
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &rows)?,
        OutputFormat::Csv => crate::output::csv_rows(&mut out, rows)?,
        OutputFormat::Table => {
            let mut headers: Vec<&str> = HEADERS.to_vec();
            if let Some(h) = extra {
                headers.push(h);
            }
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    let mut c = r.cells();
                    if extra.is_some() {
                        c.push(r.reason.clone().unwrap_or_default());
                    }
                    c
                })
                .collect();
            table(&mut out, &headers, &cells).map_err(io)?;
        }
    }
    Ok(())
}

/// An `indicatif` spinner on stderr when it is a terminal (hidden
/// otherwise), cleared when dropped.
struct Spinner(indicatif::ProgressBar);

impl Spinner {
    fn start(message: String) -> Spinner {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Spinner(indicatif::ProgressBar::hidden());
        }
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        b.set_message(message);
        b.enable_steady_tick(std::time::Duration::from_millis(120));
        Spinner(b)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A sum of USD amounts for display: starts at +0.0 (`Iterator::sum` of no
/// floats is -0.0, which prints as `$-0.00`).
fn usd_sum(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(0.0, |a, b| a + b)
}

/// Managed instances across the fleet that match `filter`.
async fn managed(fleet: &Fleet, filter: &TagFilter) -> Result<Vec<Instance>, Error> {
    gpufleet::runtime::reap::managed(&fleet.providers, filter).await
}

async fn rows(fleet: &mut Fleet, instances: &[Instance]) -> Vec<InstanceRow> {
    let mut rows = Vec::new();
    for i in instances {
        let price = fleet.price(&i.pool).await;
        rows.push(InstanceRow::new(i, price, fleet.now));
    }
    rows
}

// ---------------------------------------------------------------- launch

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

    /// The image to boot (an AMI id, a GCE image, an Azure image reference).
    #[arg(long, allow_hyphen_values = true)]
    image: String,

    /// Instances to launch.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    count: u32,

    /// The job id every launch attempt's idempotency key derives from (1 to
    /// 64 ASCII letters, digits, '-', '_' or '.'); default: the name, or for
    /// a name that is not such an id, a prefix of it and a hash of all of it.
    /// Re-running with the same id returns what the first run launched.
    #[arg(long, allow_hyphen_values = true)]
    key: Option<String>,

    /// Time to live: the instances carry an expiry tag `gpufleet reap` honours.
    #[arg(long, value_parser = parse_dur, allow_hyphen_values = true)]
    ttl: Option<Duration>,

    /// Create a placement group: cluster, spread or partition:N.
    #[arg(long, value_name = "STRATEGY", allow_hyphen_values = true)]
    placement_group: Option<String>,

    /// Launch into this pool instead of the best-ranked one, as `offers` and
    /// `place` print it: `aws:us-east-1/use1-az4:p4d.24xlarge:spot`.
    #[arg(long, allow_hyphen_values = true)]
    pool: Option<String>,

    /// Owner tag (default: config `owner`, `GPUFLEET_OWNER`, `$USER`).
    #[arg(long, allow_hyphen_values = true)]
    owner: Option<String>,

    /// Team tag (default: config `tags.team`, `GPUFLEET_TEAM`).
    #[arg(long, allow_hyphen_values = true)]
    team: Option<String>,
}

fn parse_strategy(s: &str) -> Result<PlacementStrategy, Error> {
    match s.trim() {
        "cluster" => Ok(PlacementStrategy::Cluster),
        "spread" => Ok(PlacementStrategy::Spread),
        other => match other.strip_prefix("partition:").map(str::parse::<u8>) {
            Some(Ok(n)) if (1..=7).contains(&n) => Ok(PlacementStrategy::Partition(n)),
            _ => Err(Error::invalid_input(format!(
                "invalid --placement-group '{other}': expected cluster, spread or partition:N with N from 1 to 7"
            ))),
        },
    }
}

/// Parses `cloud:region[/zone]:type:capacity`.
pub fn parse_pool(s: &str) -> Result<Pool, Error> {
    let bad = || {
        Error::invalid_input(format!(
            "invalid --pool '{s}': expected CLOUD:REGION[/ZONE]:INSTANCE_TYPE:spot|on-demand, as offers and place print it"
        ))
    };
    let parts: Vec<&str> = s.trim().split(':').collect();
    let [cloud, location, itype, capacity] = parts[..] else {
        return Err(bad());
    };
    let cloud = match cloud.parse::<Cloud>() {
        Ok(c) if c != Cloud::Fake => c,
        _ => return Err(bad()),
    };
    let (region, zone) = match location.split_once('/') {
        Some((r, z)) => (r, Some(gpufleet::Zone::new(z))),
        None => (location, None),
    };
    let capacity = match capacity {
        "spot" => gpufleet::Capacity::Spot,
        "on-demand" => gpufleet::Capacity::OnDemand,
        _ => return Err(bad()),
    };
    if region.is_empty() || itype.is_empty() {
        return Err(bad());
    }
    Ok(Pool {
        cloud,
        region: gpufleet::Region::new(region),
        zone,
        instance_type: itype.to_string(),
        capacity,
    })
}

/// What `launch` printed (`--output json`).
#[derive(Debug, Serialize)]
struct Launched {
    already_launched: bool,
    idempotency_key: String,
    pool: String,
    placement_group: Option<String>,
    instances: Vec<InstanceRow>,
}

/// Runs `gpufleet launch`.
pub fn launch(args: LaunchArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&Flags {
        owner: args.owner.clone().or(flags.owner.clone()),
        team: args.team.clone().or(flags.team.clone()),
        ttl: args.ttl.or(flags.ttl),
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
        .map(parse_strategy)
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
        (None, Some(pool)) => job_for_pool(pool, &name, snapshot)?,
        (None, None) => return unreachable_pool().map(|_| ()),
    };
    job.name = name.clone();
    let rt = crate::runtime()?;
    rt.block_on(async {
        let fleet = Fleet::open(&cfg).await?;
        let ledger = crate::jobs::ledger(&cfg).await?;
        let exec =
            gpufleet::runtime::Executor::new(fleet.providers.clone(), ledger, fleet.clock.clone());
        let mut template = gpufleet::runtime::LaunchTemplate {
            nodes: args.count,
            ttl: cfg.launch_ttl(),
            placement_strategy: strategy,
            ..Default::default()
        };
        for p in &fleet.providers {
            template.images.insert(p.cloud(), args.image.clone());
        }
        template.tags = cfg.resource_tags();
        // A sign of life while the clouds work (a spinner with the time so
        // far, on a terminal only), cleared before anything else is said.
        let spinner = Spinner::start(format!(
            "launching {} instance(s) of job {job_id}",
            args.count
        ));
        // Ctrl-C during the launch rolls it back (a second Ctrl-C leaves it
        // for the next run with this name to resume) and says which.
        let result = tokio::select! {
            r = exec.launch_once(&job_id, &job, &template, explicit.as_ref()) => r,
            _ = tokio::signal::ctrl_c() => {
                drop(spinner);
                eprintln!("interrupted: rolling back the launch of job '{job_id}' (Ctrl-C again to leave it for the next run to resume)");
                let rolled = tokio::select! {
                    r = exec.roll_back_unfinished(&job_id) => r,
                    _ = tokio::signal::ctrl_c() => {
                        fleet.save()?;
                        eprintln!("left as it was: `gpufleet launch` with the same name resumes it; `gpufleet reap` finds what it made");
                        return Err(Failure::Interrupted);
                    }
                };
                fleet.save()?;
                match rolled {
                    Ok(Some(n)) => eprintln!("rolled back: {n} instance(s) terminated; nothing of job '{job_id}' is left running"),
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
        let (already, running) = match result {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::InsufficientCapacity && explicit.is_none() => {
                return Err(Failure::NothingMatched(e.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut fleet = fleet;
        let key = gpufleet::runtime::launch_key(&job_id, running.attempts)?;
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
        )
    })
}

/// A job of one hour on the GPUs of `pool`'s instance type, for `launch
/// --pool` without GPU options.
fn job_for_pool(
    pool: &Pool,
    name: &str,
    snapshot: &Snapshot,
) -> Result<gpufleet::placer::JobSpec, Error> {
    let t = snapshot
        .instance_types()
        .iter()
        .find(|t| t.cloud == pool.cloud && t.name.eq_ignore_ascii_case(&pool.instance_type))
        .ok_or_else(|| {
            Error::invalid_input(format!(
                "no pool {pool}: {} is not a {} instance type in the catalog",
                pool.instance_type, pool.cloud
            ))
        })?;
    let gpu = t.gpu.as_ref().ok_or_else(|| {
        Error::invalid_input(format!(
            "{} has no GPU; gpufleet launches GPU instances",
            t.name
        ))
    })?;
    let mut job =
        gpufleet::placer::JobSpec::builder(name, gpu.model.clone(), gpu.count, 1.0).build()?;
    job.clouds = vec![pool.cloud];
    job.regions = vec![pool.region.clone()];
    Ok(job)
}

fn unreachable_pool() -> Result<Vec<Pool>, Failure> {
    Err(Error::invalid_input("give --pool, or --gpu and --hours, or --job FILE").into())
}

fn print_launch(l: &Launched, format: OutputFormat) -> Result<(), Failure> {
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

// ---------------------------------------------------------------- ls

/// How `ls --cost-by` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CostBy {
    /// The job tag.
    Job,
    /// The team tag.
    Team,
    /// The owner tag.
    Owner,
}

/// Arguments of `gpufleet ls`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet ls\n  gpufleet ls --job train-42 -o json\n  gpufleet ls --cost-by team"
)]
pub struct LsArgs {
    /// Only this job's instances.
    #[arg(long, allow_hyphen_values = true)]
    job: Option<String>,

    /// Sum cost by a tag instead of listing instances (showback).
    #[arg(long, value_enum, allow_hyphen_values = true)]
    cost_by: Option<CostBy>,
}

/// Runs `gpufleet ls`.
pub fn ls(args: LsArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        let mut fleet = Fleet::open(&cfg).await?;
        let mut filter = TagFilter::default();
        if let Some(j) = &args.job {
            filter = filter.with(tags::JOB, j.clone());
        }
        let instances = managed(&fleet, &filter).await?;
        match args.cost_by {
            None => {
                let rows = rows(&mut fleet, &instances).await;
                print_instances(&rows, format, None)?;
                if format == OutputFormat::Table {
                    let total = usd_sum(rows.iter().filter_map(|r| r.cost_so_far_usd));
                    let hourly = usd_sum(rows.iter().filter_map(|r| r.price_per_hour_usd));
                    eprintln!(
                        "{} managed instance(s); ${hourly:.2}/hour, ${total:.2} so far",
                        rows.len()
                    );
                }
            }
            Some(by) => {
                let mut priced = Vec::with_capacity(instances.len());
                for i in &instances {
                    priced.push((i.clone(), fleet.price(&i.pool).await));
                }
                let tag = match by {
                    CostBy::Job => reap::CostBy::Job,
                    CostBy::Team => reap::CostBy::Team,
                    CostBy::Owner => reap::CostBy::Owner,
                };
                let list = reap::showback(&priced, tag, fleet.now)?;
                let mut out = std::io::stdout().lock();
                match format {
                    OutputFormat::Json => json(&mut out, &list)?,
                    OutputFormat::Csv => crate::output::csv_rows(&mut out, &list)?,
                    OutputFormat::Table => {
                        let by_name = match by {
                            CostBy::Job => "JOB",
                            CostBy::Team => "TEAM",
                            CostBy::Owner => "OWNER",
                        };
                        let cells: Vec<Vec<String>> = list
                            .iter()
                            .map(|g| {
                                vec![
                                    g.key.clone(),
                                    g.instances.to_string(),
                                    format!("{:.4}", g.per_hour_usd),
                                    format!("{:.2}", g.cost_so_far_usd),
                                    format!("{:.2}", g.per_day_usd),
                                ]
                            })
                            .collect();
                        table(
                            &mut out,
                            &[by_name, ">INSTANCES", ">$/HOUR", ">COST SO FAR $", ">$/DAY"],
                            &cells,
                        )
                        .map_err(write_failed)?;
                    }
                }
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------- terminate

/// Arguments of `gpufleet terminate`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet terminate --job train-42\n  gpufleet terminate i-0123456789abcdef0 --yes"
)]
pub struct TerminateArgs {
    /// Instance ids, as `ls` prints them.
    ids: Vec<String>,

    /// Every managed instance of this job.
    #[arg(long, allow_hyphen_values = true)]
    job: Option<String>,

    /// Every managed instance with this tag (`KEY=VALUE`, repeatable).
    #[arg(long, value_name = "KEY=VALUE", allow_hyphen_values = true)]
    tag: Vec<String>,

    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

fn confirm(what: &str) -> Result<bool, Error> {
    if !std::io::stdin().is_terminal() {
        return Err(Error::invalid_input(format!(
            "refusing to {what} without --yes: stdin is not a terminal to confirm on"
        )));
    }
    eprint!("{what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

async fn terminate_all(
    fleet: &Fleet,
    victims: &[Instance],
) -> Result<(Vec<String>, Vec<(String, Error)>), Error> {
    let out = gpufleet::runtime::reap::terminate_each(&fleet.providers, victims).await;
    Ok((out.terminated, out.failed))
}

#[derive(Debug, Serialize)]
struct Terminated {
    terminated: Vec<String>,
    failed: Vec<(String, String)>,
    /// Placement groups deleted because their last instance went.
    groups_deleted: Vec<String>,
    /// Placement groups left (the cloud refused, e.g. while their instances
    /// shut down; `reap --yes` deletes them later).
    groups_left: Vec<(String, String)>,
    dry_run: bool,
    candidates: Vec<InstanceRow>,
    /// `reap --below`: instances with no recent GPU summary, never reaped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unknown: Vec<InstanceRow>,
}

/// Deletes the managed placement groups matching `filter` that no live
/// instance is in once `victims` are gone (with `theirs`, only groups one of
/// the victims was in); `busy` names jobs launching now, whose groups stay.
async fn drop_groups(
    fleet: &Fleet,
    filter: &TagFilter,
    victims: &[Instance],
    theirs: bool,
    busy: &(dyn Fn(&str) -> bool + Sync),
) -> Result<gpufleet::runtime::reap::TerminateOutcome, Error> {
    let ending: Vec<gpufleet::InstanceId> = victims.iter().map(|i| i.id.clone()).collect();
    let mut groups =
        gpufleet::runtime::reap::empty_groups(&fleet.providers, filter, &ending, busy).await?;
    if theirs {
        groups.retain(|g| {
            victims
                .iter()
                .any(|i| i.placement_group.as_ref() == Some(&g.id))
        });
    }
    Ok(gpufleet::runtime::reap::delete_groups(&fleet.providers, &groups).await)
}

fn finish_terminate(
    result: (Vec<String>, Vec<(String, Error)>),
    groups: gpufleet::runtime::reap::TerminateOutcome,
    candidates: Vec<InstanceRow>,
    unknown: Vec<InstanceRow>,
    format: OutputFormat,
) -> Result<(), Failure> {
    let (done, failed) = result;
    let report = Terminated {
        terminated: done.clone(),
        failed: failed
            .iter()
            .map(|(id, e)| (id.clone(), e.to_string()))
            .collect(),
        groups_deleted: groups.terminated.clone(),
        groups_left: groups
            .failed
            .iter()
            .map(|(id, e)| (id.clone(), e.to_string()))
            .collect(),
        dry_run: false,
        candidates,
        unknown,
    };
    if format == OutputFormat::Table {
        for id in &done {
            println!("terminated {id}");
        }
        for id in &groups.terminated {
            println!("deleted placement group {id}");
        }
        for (id, e) in &failed {
            eprintln!("failed to terminate {id}: {e}");
        }
        for (id, e) in &groups.failed {
            eprintln!("placement group {id} left for a later `gpufleet reap --yes`: {e}");
        }
    } else {
        json(&mut std::io::stdout().lock(), &report)?;
    }
    match failed.into_iter().next() {
        Some((_, e)) => Err(Error::new(
            e.kind(),
            format!("some instances were not terminated: {e}"),
        )
        .with_retryable(false)
        .into()),
        None => Ok(()),
    }
}

/// Runs `gpufleet terminate`.
pub fn terminate(args: TerminateArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    if args.ids.is_empty() && args.job.is_none() && args.tag.is_empty() {
        return Err(Error::invalid_input(
            "say what to terminate: instance ids, --job NAME or --tag KEY=VALUE",
        )
        .into());
    }
    let mut filter = TagFilter::default();
    for t in &args.tag {
        let Some((k, v)) = t.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(
                Error::invalid_input(format!("invalid --tag '{t}': expected KEY=VALUE")).into(),
            );
        };
        filter = filter.with(k, v);
    }
    if let Some(j) = &args.job {
        filter = filter.with(tags::JOB, j.clone());
    }
    let cfg = Config::load(&flags)?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        let mut fleet = Fleet::open(&cfg).await?;
        let mut victims: Vec<Instance> = Vec::new();
        for id in &args.ids {
            let id = gpufleet::InstanceId::new(id.clone());
            let mut found = None;
            for p in &fleet.providers {
                match p.instance(&id).await {
                    Ok(i) => {
                        found = Some(i);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let Some(i) = found else {
                return Err(Error::new(ErrorKind::NotFound, format!("no instance {id} in any enabled cloud")).into());
            };
            if i.tags.get(tags::MANAGED).map(String::as_str) != Some("true") {
                return Err(Error::invalid_input(format!(
                    "instance {id} is not managed by gpufleet (no {} tag); refusing to terminate it",
                    tags::MANAGED
                ))
                .into());
            }
            if i.state.is_live() {
                victims.push(i);
            }
        }
        if args.job.is_some() || !args.tag.is_empty() {
            victims.extend(managed(&fleet, &filter).await?);
        }
        victims.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        victims.dedup_by(|a, b| a.id == b.id);
        if victims.is_empty() {
            return Err(Failure::NothingMatched("no managed instance matches".into()));
        }
        let rows = rows(&mut fleet, &victims).await;
        if format == OutputFormat::Table {
            print_instances(&rows, format, None)?;
        }
        if !args.yes && !confirm(&format!("terminate these {} instance(s)", victims.len()))? {
            return Err(Error::invalid_input("not confirmed; nothing was terminated").into());
        }
        let result = terminate_all(&fleet, &victims).await?;
        let theirs = args.job.is_none() && args.tag.is_empty();
        let groups = drop_groups(&fleet, &filter, &victims, theirs, &|_| false).await?;
        fleet.save()?;
        finish_terminate(result, groups, rows, Vec::new(), format)
    })
}

// ---------------------------------------------------------------- reap

/// Arguments of `gpufleet reap`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet reap --idle 2h --below 5%      GPUs under 5% for two hours (dry run)\n  gpufleet reap --idle 12h --yes          no heartbeat for 12 hours: terminate"
)]
pub struct ReapArgs {
    /// Also reap instances idle this long: with --below, whose GPUs stayed
    /// under that utilisation (from the summary the node agent publishes);
    /// without it, whose job sent no heartbeat (instances without one count
    /// from their launch).
    #[arg(long, value_parser = parse_dur, allow_hyphen_values = true)]
    idle: Option<Duration>,

    /// With --idle: idle means GPUs under this utilisation, in percent
    /// (1 to 100, e.g. 5 or 5%). Instances whose agent published nothing
    /// for longer than --grace are listed as unknown and never reaped.
    #[arg(long, value_name = "PCT", requires = "idle", value_parser = parse_pct, allow_hyphen_values = true)]
    below: Option<u8>,

    /// How old a GPU summary may be before the instance counts as unknown
    /// (also how long a new instance has to publish its first).
    #[arg(long, value_parser = parse_dur, default_value = "15m", requires = "below", allow_hyphen_values = true)]
    grace: Duration,

    /// Terminate them (without it, a dry run that only shows them).
    #[arg(long)]
    yes: bool,
}

pub use gpufleet::runtime::reap::{forgotten, idle_by_use, UseVerdict};

/// A utilisation threshold in percent: `5` or `5%`, 1 to 100.
fn parse_pct(s: &str) -> Result<u8, String> {
    let t = s.trim().trim_end_matches('%').trim();
    match t.parse::<u8>() {
        Ok(v) if (1..=100).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid utilisation '{s}': expected a whole percent from 1 to 100, such as 5 or 5%"
        )),
    }
}

/// Runs `gpufleet reap`.
pub fn reap(args: ReapArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        let mut fleet = Fleet::open(&cfg).await?;
        let all = managed(&fleet, &TagFilter::default()).await?;
        let mut victims = Vec::new();
        let mut reasons = Vec::new();
        let mut unknown = Vec::new();
        let mut unknown_why = Vec::new();
        // With --below, idleness is judged by what the GPUs did, not by the
        // heartbeat; expiry counts either way.
        let by_heartbeat = if args.below.is_some() { None } else { args.idle };
        for i in all {
            if let Some(why) = forgotten(&i, fleet.now, by_heartbeat) {
                victims.push(i);
                reasons.push(why);
                continue;
            }
            let (Some(idle), Some(below)) = (args.idle, args.below) else {
                continue;
            };
            match idle_by_use(&i, fleet.now, idle, below, args.grace) {
                UseVerdict::Idle(why) => {
                    victims.push(i);
                    reasons.push(why);
                }
                UseVerdict::Unknown(why) => {
                    unknown.push(i);
                    unknown_why.push(why);
                }
                UseVerdict::Busy | UseVerdict::TooEarly => {}
            }
        }
        let mut rows = rows(&mut fleet, &victims).await;
        for (r, why) in rows.iter_mut().zip(reasons) {
            r.reason = Some(why);
        }
        let mut unknown_rows = self::rows(&mut fleet, &unknown).await;
        for (r, why) in unknown_rows.iter_mut().zip(unknown_why) {
            r.reason = Some(why);
        }
        if format == OutputFormat::Table && !unknown_rows.is_empty() {
            eprintln!(
                "{} instance(s) with no recent GPU summary (unknown, never reaped):",
                unknown_rows.len()
            );
            print_instances(&unknown_rows, format, Some("WHY"))?;
            eprintln!();
        }
        let so_far = usd_sum(rows.iter().filter_map(|r| r.cost_so_far_usd));
        let per_day = usd_sum(rows.iter().filter_map(|r| r.cost_per_day_usd));
        if !args.yes {
            match format {
                OutputFormat::Table => {
                    if !rows.is_empty() {
                        print_instances(&rows, format, Some("WHY"))?;
                    }
                    eprintln!(
                        "dry run: {} forgotten instance(s), ${so_far:.2} so far, ${per_day:.2} a day; re-run with --yes to terminate them",
                        rows.len()
                    );
                }
                _ => json(
                    &mut std::io::stdout().lock(),
                    &Terminated {
                        terminated: Vec::new(),
                        failed: Vec::new(),
                        groups_deleted: Vec::new(),
                        groups_left: Vec::new(),
                        dry_run: true,
                        candidates: rows,
                        unknown: unknown_rows,
                    },
                )?,
            }
            return Ok(());
        }
        if format == OutputFormat::Table && !rows.is_empty() {
            print_instances(&rows, format, Some("WHY"))?;
        }
        let result = terminate_all(&fleet, &victims).await?;
        // Groups whose last instance went (now or earlier), except those of
        // jobs the ledger says are launching right now.
        // `None`: the ledger cannot say, so every group is kept this time.
        let records = match crate::jobs::ledger(&cfg).await {
            Ok(l) => l.jobs().await,
            Err(e) => Err(e),
        };
        let launching: Option<Vec<String>> = match records
            .and_then(|records| gpufleet::runtime::jobs::summarize_all(records, fleet.now))
        {
            Ok(jobs) => Some(
                jobs.into_iter()
                    .filter(|j| {
                        matches!(
                            j.state,
                            gpufleet::ledger::JobState::Launching | gpufleet::ledger::JobState::Moving
                        )
                    })
                    .map(|j| j.id)
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ledger; placement groups are kept this time");
                None
            }
        };
        let busy = |job: &str| launching.as_ref().is_none_or(|l| l.iter().any(|j| j == job));
        let groups = drop_groups(&fleet, &TagFilter::default(), &victims, false, &busy).await?;
        fleet.save()?;
        if format == OutputFormat::Table {
            eprintln!(
                "reaped {} instance(s) that had cost ${so_far:.2} and were costing ${per_day:.2} a day",
                result.0.len()
            );
        }
        finish_terminate(result, groups, rows, unknown_rows, format)
    })
}

// ---------------------------------------------------------------- config

/// Runs `gpufleet config show`.
pub fn config_show(flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rows = cfg.rows();
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => {
            #[derive(Serialize)]
            struct Setting<'a> {
                key: &'a str,
                value: &'a str,
                from: &'a str,
            }
            let doc: Vec<Setting<'_>> = rows
                .iter()
                .map(|(k, v, o)| Setting {
                    key: k,
                    value: v,
                    from: o,
                })
                .collect();
            if format == OutputFormat::Csv {
                crate::output::csv_rows(&mut out, &doc)?;
            } else {
                json(&mut out, &doc)?;
            }
        }
        OutputFormat::Table => {
            let cells: Vec<Vec<String>> = rows.into_iter().map(|(k, v, o)| vec![k, v, o]).collect();
            table(&mut out, &["KEY", "VALUE", "FROM"], &cells).map_err(write_failed)?;
        }
    }
    Ok(())
}
