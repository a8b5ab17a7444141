//! `gpufleet run` and `gpufleet jobs`: managed jobs, driven by the runtime's
//! job controller. This module parses and prints; the runtime acts.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clap::{Args, Subcommand};
use gpufleet::clock::ManualClock;
use gpufleet::fake::FakeCloud;
use gpufleet::ledger::{JobState, Ledger};
use gpufleet::placer::format_duration;
use gpufleet::runtime::controller::{self, Controller, ControllerConfig, Pacer, RealTime};
use gpufleet::runtime::jobs::{cost_per_completed_job, summarize, summarize_all, JobSummary};
use gpufleet::runtime::{Executor, LaunchTemplate};
use gpufleet::{tags, Cloud, Error, ErrorKind, NoticeKind, Price, Provider, TagFilter};
use serde::Serialize;

use crate::args::parse_dur;
use crate::config::{Config, Flags, ProviderKind};
use crate::fleet::{FakeStore, Fleet};
use crate::output::{csv_field, json, table, write_failed, OutputFormat};
use crate::Failure;

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
    job: PathBuf,

    /// The job's id (default: its name and a hash of the file, so the same
    /// command run again resumes the same job).
    #[arg(long, allow_hyphen_values = true)]
    id: Option<String>,

    /// Record the job and return: a controller (`gpufleet jobs serve`, on
    /// this or another machine sharing the ledger) drives it.
    #[arg(long)]
    detach: bool,

    #[command(flatten)]
    drive: DriveArgs,
}

/// How the controller drives a job.
#[derive(Debug, Clone, Args)]
pub struct DriveArgs {
    /// How often the instances are read.
    #[arg(long, value_parser = parse_dur, default_value = "60s", allow_hyphen_values = true)]
    poll: Duration,

    /// A node whose heartbeat is older than this is treated as failed.
    #[arg(long, value_parser = parse_dur, default_value = "10m", allow_hyphen_values = true)]
    heartbeat_grace: Duration,

    /// How often the policy is asked whether moving pays.
    #[arg(long, value_parser = parse_dur, default_value = "30m", allow_hyphen_values = true)]
    move_review: Duration,

    /// Give up after waiting this long for capacity.
    #[arg(long, value_parser = parse_dur, default_value = "24h", allow_hyphen_values = true)]
    give_up_after: Duration,

    /// How long the job's lease lasts unless renewed: another controller
    /// takes the job over this long after this one dies.
    #[arg(long, value_parser = parse_dur, default_value = "30s", allow_hyphen_values = true)]
    lease: Duration,

    /// On Ctrl-C, terminate the job's instances and cancel it (default:
    /// detach, leaving it to `gpufleet jobs resume`).
    #[arg(long)]
    down_on_exit: bool,
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
    },
    /// Drive a job again after its controller stopped or died.
    Resume {
        /// The job's id.
        id: String,
        #[command(flatten)]
        drive: DriveArgs,
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
    drive: DriveArgs,

    /// At most this many jobs driven at once.
    #[arg(long, default_value_t = 256, allow_hyphen_values = true)]
    max_jobs: usize,

    /// At most this many new jobs taken per poll (controllers started
    /// together share the work).
    #[arg(long, default_value_t = 16, allow_hyphen_values = true)]
    claim_batch: usize,

    /// Stop after this long (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_parser = parse_dur, allow_hyphen_values = true)]
    serve_for: Option<Duration>,
}

/// The configured ledger (`ledger`, `GPUFLEET_LEDGER`: a SQLite path or a
/// `postgres://` URL; else the data directory's SQLite file).
pub async fn ledger(cfg: &Config) -> Result<Arc<dyn Ledger>, Error> {
    gpufleet::runtime::ledgers::open(&cfg.ledger).await
}

/// The fake cloud's script (`GPUFLEET_FAKE_SCRIPT`): lines of `OFFSET
/// ACTION [ARGS]`, the offset from when the controller started, carried out
/// as the fake clock passes them. Actions: `preempt` (the job's instances end
/// with no notice), `notice` (the watch agent reports a notice; the instances
/// end 2 minutes later), `capacity-error` (the next launch is refused),
/// `price POOL USD_PER_HOUR`, `exit CODE` (the node reports the job's exit),
/// `gpu UTIL_PCT USED_MIB` (from then on every GPU of the job's nodes is
/// that busy and holds that much; the node agent publishes its summary).
#[derive(Debug, Clone)]
struct ScriptLine {
    at: Duration,
    action: String,
    args: Vec<String>,
}

fn read_script() -> Result<Vec<ScriptLine>, Error> {
    let Some(path) = std::env::var_os("GPUFLEET_FAKE_SCRIPT") else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::invalid_input(format!(
            "GPUFLEET_FAKE_SCRIPT '{}': {e}",
            PathBuf::from(&path).display()
        ))
    })?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(at), Some(action)) = (words.next(), words.next()) else {
            return Err(Error::invalid_input(format!(
                "fake script line {}: expected OFFSET ACTION",
                n + 1
            )));
        };
        let at = parse_dur(at)
            .map_err(|e| Error::invalid_input(format!("fake script line {}: {e}", n + 1)))?;
        if ![
            "preempt",
            "notice",
            "capacity-error",
            "price",
            "exit",
            "gpu",
        ]
        .contains(&action)
        {
            return Err(Error::invalid_input(format!(
                "fake script line {}: unknown action '{action}'; valid: preempt, notice, capacity-error, price, exit, gpu",
                n + 1
            )));
        }
        out.push(ScriptLine {
            at,
            action: action.to_string(),
            args: words.map(str::to_string).collect(),
        });
    }
    out.sort_by_key(|l| l.at);
    Ok(out)
}

/// Fake time: each pause moves the fake cloud's clock, carries out the
/// script and saves the fake cloud's state (so other commands see it).
#[derive(Debug)]
struct FakeTime {
    clock: ManualClock,
    fakes: Vec<Arc<FakeCloud>>,
    store: FakeStore,
    start: time::OffsetDateTime,
    script: Mutex<Vec<ScriptLine>>,
    job_id: String,
    /// `gpu UTIL USED`: what the nodes' GPUs do, and each node's agent.
    gpu: Mutex<Option<(u8, u64)>>,
    agents: Mutex<std::collections::HashMap<gpufleet::InstanceId, gpufleet::usage::UsageWindow>>,
}

impl FakeTime {
    /// Each live node of the job samples its GPUs and writes its summary
    /// on its own tags, as `gpufleet watch` and the boot script do.
    fn publish_gpu(&self, now: time::OffsetDateTime) {
        let Some((util, used)) = *self.gpu.lock().unwrap_or_else(|p| p.into_inner()) else {
            return;
        };
        let filter = TagFilter::managed().with(tags::JOB, self.job_id.as_str());
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        for f in &self.fakes {
            for i in f
                .live_instances()
                .into_iter()
                .filter(|i| filter.matches(&i.tags))
            {
                let gpu = gpufleet::Snapshot::embedded()
                    .instance_types()
                    .iter()
                    .find(|t| t.cloud == i.pool.cloud && t.name == i.pool.instance_type)
                    .and_then(|t| t.gpu.clone());
                let Some(gpu) = gpu else { continue };
                let total = u64::from(gpu.memory_gib) * 1024;
                let w = agents.entry(i.id.clone()).or_default();
                let readings = gpufleet::usage::uniform(gpu.count, util, used.min(total), total);
                if w.add(now, &readings).is_err() {
                    continue;
                }
                if let Some(s) = w.summary() {
                    let _ = f.set_tag(&i.id, tags::GPU, &s.tag_value());
                    let _ = f.set_tag(&i.id, tags::GPU_QUIET, &s.quiet_tag_value());
                }
            }
        }
    }

    fn act(&self, line: &ScriptLine) -> Result<(), Error> {
        let filter = TagFilter::managed().with(tags::JOB, self.job_id.as_str());
        let live: Vec<(Arc<FakeCloud>, gpufleet::Instance)> = self
            .fakes
            .iter()
            .flat_map(|f| {
                f.live_instances()
                    .into_iter()
                    .filter(|i| filter.matches(&i.tags))
                    .map(|i| (f.clone(), i))
                    .collect::<Vec<_>>()
            })
            .collect();
        match line.action.as_str() {
            "preempt" => {
                for (f, i) in &live {
                    f.preempt(&i.id)?;
                }
            }
            "notice" => {
                let now = gpufleet::clock::Clock::now(&self.clock).unix_timestamp();
                for (f, i) in &live {
                    f.set_tag(&i.id, tags::NOTICE, &now.to_string())?;
                    f.inject_interruption(&i.id, NoticeKind::Preemption, Duration::from_secs(120))?;
                }
            }
            "capacity-error" => {
                for f in &self.fakes {
                    f.fail_next(
                        "launch",
                        Error::new(
                            ErrorKind::InsufficientCapacity,
                            "InsufficientInstanceCapacity (scripted)",
                        ),
                    );
                }
            }
            "gpu" => {
                let parsed = match (line.args.first(), line.args.get(1)) {
                    (Some(u), Some(m)) => u
                        .parse::<u8>()
                        .ok()
                        .filter(|u| *u <= 100)
                        .zip(m.parse::<u64>().ok()),
                    _ => None,
                };
                let Some(g) = parsed else {
                    return Err(Error::invalid_input(
                        "fake script: gpu UTIL_PCT USED_MIB (0-100, whole MiB)",
                    ));
                };
                *self.gpu.lock().unwrap_or_else(|p| p.into_inner()) = Some(g);
            }
            "exit" => {
                let code = line.args.first().cloned().unwrap_or_else(|| "0".into());
                for (f, i) in &live {
                    f.set_tag(&i.id, tags::EXIT, &code)?;
                }
            }
            "price" => {
                let (Some(pool), Some(usd)) = (line.args.first(), line.args.get(1)) else {
                    return Err(Error::invalid_input("fake script: price POOL USD_PER_HOUR"));
                };
                let pool = crate::launch::parse_pool(pool)?;
                let usd: f64 = usd.parse().map_err(|_| {
                    Error::invalid_input(format!("fake script: invalid price '{usd}'"))
                })?;
                for f in &self.fakes {
                    if f.cloud() == pool.cloud {
                        f.set_price(&pool, Price::from_usd_per_hour_f64(usd));
                    }
                }
            }
            _ => {}
        }
        eprintln!(
            "fake: {} {} {}",
            format_duration(line.at),
            line.action,
            line.args.join(" ")
        );
        Ok(())
    }
}

#[async_trait]
impl Pacer for FakeTime {
    async fn pause(&self, d: Duration) {
        self.clock.advance(d);
        for f in &self.fakes {
            f.settle();
        }
        let now = gpufleet::clock::Clock::now(&self.clock);
        let due: Vec<ScriptLine> = {
            let mut script = self.script.lock().unwrap_or_else(|p| p.into_inner());
            let split = script
                .iter()
                .position(|l| {
                    self.start + time::Duration::try_from(l.at).unwrap_or(time::Duration::MAX) > now
                })
                .unwrap_or(script.len());
            script.drain(..split).collect()
        };
        for line in &due {
            if let Err(e) = self.act(line) {
                eprintln!("fake: {} failed: {e}", line.action);
            }
        }
        self.publish_gpu(now);
        if let Err(e) = self.store.save() {
            eprintln!("warning: cannot save the fake cloud's state: {e}");
        }
        // Let other tasks (Ctrl-C) run.
        tokio::task::yield_now().await;
    }
}

/// A controller over the configured clouds and ledger.
async fn controller(
    cfg: &Config,
    fleet: &Fleet,
    job_id: &str,
    drive: &DriveArgs,
) -> Result<Controller, Error> {
    let exec = Arc::new(Executor::new(
        fleet.providers.clone(),
        ledger(cfg).await?,
        fleet.clock.clone(),
    ));
    let mut base = LaunchTemplate {
        nodes: 1,
        ttl: cfg.ttl,
        ..LaunchTemplate::default()
    };
    base.tags = cfg.resource_tags();
    let pacer: Arc<dyn Pacer> = match (&fleet.fake_clock, cfg.provider) {
        (Some(_), ProviderKind::Fake) if job_id.is_empty() => {
            // `jobs serve`: the shared fake cloud runs in real time.
            for p in &fleet.providers {
                base.images.insert(p.cloud(), "fake-image".into());
            }
            Arc::new(RealTime)
        }
        (Some(clock), ProviderKind::Fake) => {
            for p in &fleet.providers {
                base.images.insert(p.cloud(), "fake-image".into());
            }
            Arc::new(FakeTime {
                clock: clock.clone(),
                fakes: fleet.fakes().cloned().collect(),
                store: fleet.store(),
                start: fleet.now,
                script: Mutex::new(read_script()?),
                job_id: job_id.to_string(),
                gpu: Mutex::new(None),
                agents: Mutex::new(Default::default()),
            })
        }
        _ => Arc::new(RealTime),
    };
    Ok(
        Controller::new(exec, base, pacer).with_config(ControllerConfig {
            poll: drive.poll,
            heartbeat_grace: drive.heartbeat_grace,
            move_review: drive.move_review,
            give_up_after: drive.give_up_after,
            lease_ttl: drive.lease,
            ..ControllerConfig::default()
        }),
    )
}

fn check_drive(d: &DriveArgs) -> Result<(), Error> {
    if d.poll < Duration::from_secs(1) || d.poll > Duration::from_secs(3600) {
        return Err(Error::invalid_input(format!(
            "invalid --poll {}: poll every 1s to 1h (an interruption is acted on within one poll)",
            format_duration(d.poll)
        )));
    }
    if d.heartbeat_grace < d.poll {
        return Err(Error::invalid_input(format!(
            "invalid --heartbeat-grace {}: it must be at least the poll interval ({})",
            format_duration(d.heartbeat_grace),
            format_duration(d.poll)
        )));
    }
    if d.lease < Duration::from_secs(3) || d.lease > Duration::from_secs(3600) {
        return Err(Error::invalid_input(format!(
            "invalid --lease {}: a lease lasts 3s to 1h (renewed every third of it)",
            format_duration(d.lease)
        )));
    }
    Ok(())
}

/// Runs `gpufleet run`.
pub fn run(args: RunArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    check_drive(&args.drive)?;
    let file = crate::place::read_job_file(&args.job)?;
    // Checked before anything is recorded or launched.
    let spec = file
        .clone()
        .into_spec()
        .map_err(|e| Error::invalid_input(format!("{}: {}", args.job.display(), e.message())))?;
    let id = match &args.id {
        Some(id) => {
            controller::check_job_id(id)?;
            id.clone()
        }
        None => controller::job_id_for(&file)?,
    };
    let cfg = Config::load(&flags)?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        let fleet = Fleet::open(&cfg).await?;
        let ctl = controller(&cfg, &fleet, &id, &args.drive).await?;
        if cfg.provider == ProviderKind::Live {
            let enabled: Vec<Cloud> = fleet.providers.iter().map(|p| p.cloud()).collect();
            let bare = controller::clouds_without_image(&spec, &LaunchTemplate::default(), &enabled);
            if bare.len() == enabled.len() {
                return Err(Error::invalid_input(format!(
                    "job file '{}' has no image for {}: add image = \"…\" (one for all) or an [image] table with aws, gcp, azure",
                    args.job.display(),
                    bare.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
                ))
                .into());
            }
        }
        ctl.submit(&id, &file).await?;
        if args.detach {
            match format {
                OutputFormat::Table => eprintln!(
                    "job {id}: {} ({:.2} hours of work) recorded; `gpufleet jobs serve` drives it",
                    spec.name, spec.hours
                ),
                _ => json(
                    &mut std::io::stdout().lock(),
                    &serde_json::json!({"id": id, "state": "placing", "detached": true}),
                )?,
            }
            return Ok(());
        }
        eprintln!("job {id}: {} ({:.2} hours of work); `gpufleet jobs show {id}` from another shell", spec.name, spec.hours);
        drive(&ctl, &id, args.drive.down_on_exit, format, &fleet).await
    })
}

/// Runs `gpufleet jobs …`.
pub fn jobs(cmd: JobsCommand, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    match cmd {
        JobsCommand::Ls => {
            let cfg = Config::load(&flags)?;
            let now = crate::fleet::now(&cfg)?;
            let rt = crate::runtime()?;
            let (records, leases) = rt.block_on(async {
                let l = ledger(&cfg).await?;
                Ok::<_, Error>((l.jobs().await?, l.leases().await?))
            })?;
            let list = summarize_all(records, now)?;
            print_list(&list, &leases, format)
        }
        JobsCommand::Show { id } => {
            let cfg = Config::load(&flags)?;
            let now = crate::fleet::now(&cfg)?;
            let rt = crate::runtime()?;
            let (history, usage) = rt.block_on(async {
                let l = ledger(&cfg).await?;
                Ok::<_, Error>((l.job_history(&id).await?, l.job_usage(&id).await?))
            })?;
            if history.is_empty() {
                return Err(Error::invalid_input(format!(
                    "no job '{id}' in the ledger; `gpufleet jobs ls` lists them"
                ))
                .into());
            }
            let s = summarize(&history, now)?;
            print_show(&s, &history, usage.as_ref(), format)
        }
        JobsCommand::Logs { id } => {
            let cfg = Config::load(&flags)?;
            let rt = crate::runtime()?;
            rt.block_on(async {
                let fleet = Fleet::open(&cfg).await?;
                let l = ledger(&cfg).await?;
                let last = l.job_latest(&id).await?.ok_or_else(|| {
                    Error::invalid_input(format!(
                        "no job '{id}' in the ledger; `gpufleet jobs ls` lists them"
                    ))
                })?;
                let pool = last.pool.clone().ok_or_else(|| {
                    Error::invalid_input(format!(
                        "job {id} has not been launched yet ({})",
                        last.state
                    ))
                })?;
                let p = fleet.provider(pool.cloud)?;
                if last.instances.is_empty() {
                    return Err(Error::invalid_input(format!(
                        "job {id} holds no instance now ({})",
                        last.state
                    ))
                    .into());
                }
                for i in &last.instances {
                    let text = p.console_output(i).await?;
                    if format == OutputFormat::Table {
                        println!("==> {i} ({pool}) <==");
                        print!("{text}");
                    } else {
                        json(
                            &mut std::io::stdout().lock(),
                            &serde_json::json!({"instance": i.to_string(), "output": text}),
                        )?;
                    }
                }
                Ok(())
            })
        }
        JobsCommand::Cancel { id } => {
            let cfg = Config::load(&flags)?;
            let rt = crate::runtime()?;
            rt.block_on(async {
                known(&cfg, &id).await?;
                let fleet = Fleet::open(&cfg).await?;
                let ctl = controller(&cfg, &fleet, &id, &default_drive()).await?;
                let out = ctl.cancel(&id).await?;
                fleet.save()?;
                match format {
                    OutputFormat::Table => eprintln!("job {id}: {}", out.detail),
                    _ => json(&mut std::io::stdout().lock(), &out)?,
                }
                Ok(())
            })
        }
        JobsCommand::Resume { id, drive: d } => {
            check_drive(&d)?;
            let cfg = Config::load(&flags)?;
            let rt = crate::runtime()?;
            rt.block_on(async {
                known(&cfg, &id).await?;
                let fleet = Fleet::open(&cfg).await?;
                let ctl = controller(&cfg, &fleet, &id, &d).await?;
                drive(&ctl, &id, d.down_on_exit, format, &fleet).await
            })
        }
        JobsCommand::Serve(args) => serve(args, flags, format),
    }
}

/// Runs `gpufleet jobs serve`.
fn serve(args: ServeArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    check_drive(&args.drive)?;
    for (flag, v) in [
        ("--max-jobs", args.max_jobs),
        ("--claim-batch", args.claim_batch),
    ] {
        if v == 0 || v > 100_000 {
            return Err(
                Error::invalid_input(format!("invalid {flag} {v}: use 1 to 100000")).into(),
            );
        }
    }
    let cfg = Config::load(&flags)?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        let fleet = Fleet::open_shared(&cfg).await?;
        let ctl = controller(&cfg, &fleet, "", &args.drive).await?;
        let holder = ControllerConfig::default().holder;
        let ctl = ctl.with_config(ControllerConfig {
            poll: args.drive.poll,
            heartbeat_grace: args.drive.heartbeat_grace,
            move_review: args.drive.move_review,
            give_up_after: args.drive.give_up_after,
            lease_ttl: args.drive.lease,
            holder: holder.clone(),
            ..ControllerConfig::default()
        });
        eprintln!(
            "serving the jobs of ledger {} as {holder} (lease {}, poll {})",
            ctl.executor().ledger().location(),
            format_duration(args.drive.lease),
            format_duration(args.drive.poll)
        );
        let serve_for = args.serve_for;
        let stop = async move {
            let term = crate::terminated();
            let timer = async {
                match serve_for {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term => {}
                _ = timer => {}
            }
        };
        let report = ctl
            .serve(
                gpufleet::runtime::ServeConfig {
                    max_jobs: args.max_jobs,
                    claim_every: args.drive.poll,
                    claim_batch: args.claim_batch,
                },
                stop,
            )
            .await?;
        match format {
            OutputFormat::Table => eprintln!(
                "stopped: {} job(s) taken ({} taken over), {} ended, {} lost to another controller, {} stopped on errors, {} lease(s) given up",
                report.claimed, report.taken_over, report.ended, report.lost, report.errors, report.released
            ),
            _ => json(&mut std::io::stdout().lock(), &report)?,
        }
        Ok(())
    })
}

/// Refuses an id the ledger does not hold.
async fn known(cfg: &Config, id: &str) -> Result<(), Error> {
    if ledger(cfg).await?.job_latest(id).await?.is_none() {
        return Err(Error::invalid_input(format!(
            "no job '{id}' in the ledger; `gpufleet jobs ls` lists them"
        )));
    }
    Ok(())
}

fn default_drive() -> DriveArgs {
    DriveArgs {
        poll: Duration::from_secs(60),
        heartbeat_grace: Duration::from_secs(600),
        move_review: Duration::from_secs(1800),
        give_up_after: Duration::from_secs(86_400),
        lease: Duration::from_secs(30),
        down_on_exit: false,
    }
}

async fn drive(
    ctl: &Controller,
    id: &str,
    down_on_exit: bool,
    format: OutputFormat,
    fleet: &Fleet,
) -> Result<(), Failure> {
    let outcome = tokio::select! {
        r = ctl.drive(id) => r,
        _ = tokio::signal::ctrl_c() => {
            if down_on_exit {
                eprintln!("interrupted: cancelling job {id} (--down-on-exit)");
                let out = ctl.cancel(id).await;
                fleet.save()?;
                out
            } else {
                fleet.save()?;
                if let Err(e) = ctl.let_go(id).await {
                    eprintln!("warning: could not give up the job's lease ({e}); it expires by itself");
                }
                eprintln!("detached: job {id} keeps its instances; `gpufleet jobs resume {id}` drives it again, `gpufleet jobs cancel {id}` ends it");
                return Ok(());
            }
        }
    };
    fleet.save()?;
    let outcome = outcome?;
    let history = ctl.executor().ledger().job_history(id).await?;
    let s = summarize(&history, ctl.executor().clock().now())?;
    match format {
        OutputFormat::Table => {
            eprintln!(
                "job {id} {}: {} ({} preemption(s), {} restart(s) on error, {} move(s), {} pool(s)); cost ${:.2}",
                outcome.state,
                outcome.detail,
                s.preemptions,
                s.restarts,
                s.moves,
                s.pools.len(),
                s.cost_so_far_usd()
            );
        }
        _ => json(&mut std::io::stdout().lock(), &row(&s))?,
    }
    match outcome.state {
        JobState::Succeeded => Ok(()),
        JobState::Cancelled => Ok(()),
        _ => Err(Error::new(
            ErrorKind::Unexpected,
            format!("job {id} {}: {}", outcome.state, outcome.detail),
        )
        .with_retryable(false)
        .into()),
    }
}

/// One job as `jobs ls -o json` prints it (a stable schema).
#[derive(Debug, Serialize)]
struct JobRow {
    id: String,
    name: String,
    state: String,
    pool: Option<String>,
    started_at: String,
    updated_at: String,
    attempts: u32,
    preemptions: usize,
    restarts: usize,
    moves: usize,
    progress_hours: f64,
    cost_so_far_usd: f64,
    detail: String,
    /// The controller holding the job's lease now, if any.
    driven_by: Option<String>,
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn row(s: &JobSummary) -> JobRow {
    JobRow {
        id: s.id.clone(),
        name: s.name.clone(),
        state: s.state.to_string(),
        pool: s.pool.as_ref().map(ToString::to_string),
        started_at: rfc3339(s.started_at),
        updated_at: rfc3339(s.updated_at),
        attempts: s.attempts,
        preemptions: s.preemptions,
        restarts: s.restarts,
        moves: s.moves,
        progress_hours: s.progress_hours,
        cost_so_far_usd: s.cost_so_far_usd(),
        detail: s.detail.clone(),
        driven_by: None,
    }
}

fn print_list(
    list: &[JobSummary],
    leases: &[gpufleet::ledger::Lease],
    format: OutputFormat,
) -> Result<(), Failure> {
    let now = time::OffsetDateTime::now_utc();
    let rows: Vec<JobRow> = list
        .iter()
        .map(|s| {
            let mut r = row(s);
            r.driven_by = leases
                .iter()
                .find(|l| l.job_id == s.id && l.is_live(now))
                .map(|l| l.holder.clone());
            r
        })
        .collect();
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &rows)?,
        OutputFormat::Csv => {
            use std::io::Write;
            writeln!(out, "id,name,state,pool,started_at,attempts,preemptions,moves,progress_hours,cost_so_far_usd,driven_by")
                .map_err(write_failed)?;
            for r in &rows {
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{:.3},{:.2},{}",
                    csv_field(&r.id),
                    csv_field(&r.name),
                    r.state,
                    csv_field(r.pool.as_deref().unwrap_or("")),
                    r.started_at,
                    r.attempts,
                    r.preemptions,
                    r.moves,
                    r.progress_hours,
                    r.cost_so_far_usd,
                    csv_field(r.driven_by.as_deref().unwrap_or(""))
                )
                .map_err(write_failed)?;
            }
        }
        OutputFormat::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.id.clone(),
                        r.state.clone(),
                        r.pool.clone().unwrap_or_else(|| "-".into()),
                        r.started_at.clone(),
                        r.preemptions.to_string(),
                        r.moves.to_string(),
                        format!("{:.2}", r.cost_so_far_usd),
                        r.driven_by.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            table(
                &mut out,
                &[
                    "JOB",
                    "STATE",
                    "POOL",
                    "STARTED",
                    ">PREEMPTIONS",
                    ">MOVES",
                    ">COST $",
                    "DRIVEN BY",
                ],
                &cells,
            )
            .map_err(write_failed)?;
            drop(out);
            match cost_per_completed_job(list)? {
                Some(per) => eprintln!(
                    "{} job(s); ${:.2} per completed job (every job's cost over the {} that succeeded)",
                    list.len(),
                    per.as_usd_f64(),
                    list.iter().filter(|j| j.state == JobState::Succeeded).count()
                ),
                None => eprintln!("{} job(s); none has completed yet", list.len()),
            }
        }
    }
    Ok(())
}

/// One event of `jobs show`'s timeline.
#[derive(Debug, Serialize)]
struct Event {
    at: String,
    state: String,
    pool: Option<String>,
    attempt: u32,
    instances: Vec<String>,
    progress_hours: f64,
    detail: String,
}

/// A job's measured GPU use, for output.
#[derive(Debug, Serialize)]
struct UsageView {
    instance_type: String,
    instances: u32,
    gpus_per_instance: u32,
    measured_hours: f64,
    mean_util_pct: Option<f64>,
    max_util_pct: u8,
    peak_memory_mib: u64,
    memory_total_mib: u64,
    updated_at: String,
}

impl UsageView {
    fn new(u: &gpufleet::usage::JobUsage) -> Self {
        UsageView {
            instance_type: u.instance_type.clone(),
            instances: u.instances,
            gpus_per_instance: u.gpus,
            measured_hours: (u.observed_secs as f64 / 36.0).round() / 100.0,
            mean_util_pct: u.mean_util_pct().map(|m| (m * 10.0).round() / 10.0),
            max_util_pct: u.max_util_pct,
            peak_memory_mib: u.peak_memory_mib,
            memory_total_mib: u.memory_total_mib,
            updated_at: rfc3339(u.updated_at),
        }
    }

    /// One line for people.
    fn line(&self) -> String {
        format!(
            "{:.0}% mean, {}% busiest minute; peak {:.1} of {:.0} GiB per GPU; {:.1} h measured on {} x {} ({} GPU(s) each)",
            self.mean_util_pct.unwrap_or(0.0),
            self.max_util_pct,
            self.peak_memory_mib as f64 / 1024.0,
            self.memory_total_mib as f64 / 1024.0,
            self.measured_hours,
            self.instances,
            self.instance_type,
            self.gpus_per_instance
        )
    }
}

fn print_show(
    s: &JobSummary,
    history: &[gpufleet::ledger::JobRecord],
    usage: Option<&gpufleet::usage::JobUsage>,
    format: OutputFormat,
) -> Result<(), Failure> {
    let usage = usage.map(UsageView::new);
    let events: Vec<Event> = history
        .iter()
        .map(|r| Event {
            at: rfc3339(r.at),
            state: r.state.to_string(),
            pool: r.pool.as_ref().map(ToString::to_string),
            attempt: r.attempt,
            instances: r.instances.iter().map(ToString::to_string).collect(),
            progress_hours: r.progress_hours,
            detail: r.detail.clone(),
        })
        .collect();
    let per = cost_per_completed_job(std::slice::from_ref(s))?;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => json(
            &mut out,
            &serde_json::json!({
                "job": row(s),
                "pools": s.pools.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "cost_per_completed_job_usd": per.map(|m| m.as_usd_f64()),
                "gpu_usage": usage,
                "events": events,
            }),
        )?,
        OutputFormat::Table => {
            use std::io::Write;
            let w = |out: &mut std::io::StdoutLock<'_>, line: String| {
                writeln!(out, "{line}").map_err(write_failed)
            };
            w(&mut out, format!("job        {} ({})", s.id, s.name))?;
            w(&mut out, format!("state      {}: {}", s.state, s.detail))?;
            w(
                &mut out,
                format!("progress   {:.2} hours of work saved", s.progress_hours),
            )?;
            w(
                &mut out,
                format!(
                    "pools      {}",
                    s.pools
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ),
            )?;
            w(
                &mut out,
                format!(
                    "preempted  {} time(s); moved {} time(s); {} launch attempt(s)",
                    s.preemptions, s.moves, s.attempts
                ),
            )?;
            w(
                &mut out,
                format!("cost       ${:.2} so far", s.cost_so_far_usd()),
            )?;
            w(
                &mut out,
                match per {
                    Some(m) => format!("per job    ${:.2} per completed job", m.as_usd_f64()),
                    None => "per job    (not completed yet)".to_string(),
                },
            )?;
            w(
                &mut out,
                match &usage {
                    Some(u) => format!("gpu use    {}", u.line()),
                    None => "gpu use    not measured (no GPU summary from the node agent yet)"
                        .to_string(),
                },
            )?;
            w(&mut out, String::new())?;
            let cells: Vec<Vec<String>> = events
                .iter()
                .map(|e| {
                    vec![
                        e.at.clone(),
                        e.state.clone(),
                        e.pool.clone().unwrap_or_else(|| "-".into()),
                        e.attempt.to_string(),
                        format!("{:.2}", e.progress_hours),
                        e.detail.chars().take(100).collect(),
                    ]
                })
                .collect();
            table(
                &mut out,
                &["AT", "STATE", "POOL", ">ATTEMPT", ">DONE H", "DETAIL"],
                &cells,
            )
            .map_err(write_failed)?;
        }
    }
    Ok(())
}
