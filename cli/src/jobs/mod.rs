//! `gpufleet run` and `gpufleet jobs`: managed jobs, driven by the runtime's
//! job controller. This module parses and prints; the runtime acts.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use gpufleet::ledger::JobState;
use gpufleet::placer::format_duration;
use gpufleet::runtime::controller::{self, Controller, ControllerConfig};
use gpufleet::runtime::jobs::{cost_per_completed_job, JobSummary, Submission};
use gpufleet::{Error, ErrorKind};

use crate::args::parse_dur;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags, ProviderKind};
use gpufleet::runtime::fleet::Fleet;

mod args;
mod print;
pub use self::args::*;
use self::print::*;

/// A controller over the configured clouds and ledger, driving as `drive` says.
async fn controller(
    cfg: &Config,
    fleet: &Fleet,
    job_id: &str,
    drive: &DriveArgs,
) -> Result<Controller, Error> {
    fleet.controller(cfg, job_id, drive.config()).await
}

/// Runs `gpufleet run`.
pub fn run(args: RunArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    check_drive(&args.drive)?;
    let file = crate::job::read_job_file(&args.job)?;
    let cfg = Config::load(&flags)?;
    // Checked before anything is recorded or launched.
    let (catalog, _) = gpufleet::runtime::live::cache::current(&cfg);
    let spec = crate::job::job_file_spec(&file, &args.job, &catalog)?;
    let id = match &args.id {
        Some(id) => {
            controller::check_job_id(id)?;
            id.clone()
        }
        None => controller::job_id_for(&file)?,
    };
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        // Each cloud checked first, within its budget: one that does not
        // answer is said once and left out of what is told now (whether a
        // pool can run the job), not of the drive (which places the job on
        // it once it answers).
        // The local provider: the fake clouds, each instance's boot script
        // a process on this machine, for as long as this command runs.
        let fleet = if cfg.provider == ProviderKind::Local {
            Fleet::open_local(&cfg).await?
        } else {
            crate::shared::open_checking_fleet(&cfg).await?
        };
        let ctl = controller(&cfg, &fleet, &id, &args.drive).await?;
        fleet.check_images(&cfg, &spec, &args.job.display().to_string())?;
        // A new job no pool can run as it stands (its deadline, its budget)
        // is refused as `place` would refuse it, before it is recorded: the
        // controller would only wait for capacity until the deadline passed.
        let unread: Vec<gpufleet::Cloud> = fleet.unread.iter().map(|u| u.cloud).collect();
        let known = match gpufleet::runtime::jobs::submit(&ctl, &id, &file, &spec, &unread).await? {
            Submission::Refused(why) => return Err(Failure::NothingMatched(why)),
            Submission::Recorded { known, warnings } => {
                for w in warnings {
                    eprintln!("warning: {w}");
                }
                known.map(|k| *k)
            }
        };
        if args.detach {
            // The same file under the same id finds the job: it may be
            // running or over already (a new one is placing).
            let state = known.as_ref().map_or(JobState::Placing, |r| r.state);
            match format {
                OutputFormat::Table if state.is_terminal() => eprintln!(
                    "job {id} already {state}: {}; nothing to drive",
                    known.as_ref().map_or("", |r| r.detail.as_str())
                ),
                OutputFormat::Table if state != JobState::Placing => eprintln!(
                    "job {id} is already in the ledger ({state}); `gpufleet jobs serve` drives it"
                ),
                OutputFormat::Table => eprintln!(
                    "job {id}: {} ({:.2} hours of work) recorded; `gpufleet jobs serve` drives it",
                    spec.name, spec.hours
                ),
                _ => json(
                    &mut std::io::stdout().lock(),
                    &serde_json::json!({"id": id, "state": state, "detached": true}),
                )?,
            }
            return Ok(());
        }
        match known.as_ref().filter(|r| r.state.is_terminal()) {
            // The same file names the same job: said plainly, not as a run.
            Some(r) => eprintln!(
                "job {id} already ended ({} at {}); nothing was launched. The same file under another id runs it again: --id {}-2",
                r.state,
                gpufleet::report::to_the_second(&gpufleet::report::rfc3339(r.at)),
                spec.name
            ),
            None => eprintln!(
                "job {id}: {} ({:.2} hours of work); `gpufleet jobs show {id}` from another shell",
                spec.name, spec.hours
            ),
        }
        if fleet.unread.is_empty() {
            return drive(&ctl, &id, args.down_on_exit, format, &fleet).await;
        }
        // The drive asks every enabled cloud again at each placement.
        drop(ctl);
        fleet.save()?;
        let fleet = crate::shared::open_fleet(&cfg).await?;
        let ctl = controller(&cfg, &fleet, &id, &args.drive).await?;
        drive(&ctl, &id, args.down_on_exit, format, &fleet).await
    })
}

/// Runs `gpufleet jobs …`.
pub fn jobs(cmd: JobsCommand, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    match cmd {
        JobsCommand::Ls => {
            let cfg = Config::load(&flags)?;
            let now = gpufleet::runtime::fleet::now(&cfg)?;
            let rt = crate::shared::runtime()?;
            let (list, rows) = rt.block_on(async {
                let l = cfg.open_ledger().await?;
                gpufleet::runtime::jobs::list(l.as_ref(), now).await
            })?;
            print_list(&list, &rows, format)
        }
        JobsCommand::Show { id } => {
            let cfg = Config::load(&flags)?;
            let now = gpufleet::runtime::fleet::now(&cfg)?;
            let rt = crate::shared::runtime()?;
            let (s, doc) = rt.block_on(async {
                let l = cfg.open_ledger().await?;
                gpufleet::runtime::jobs::show(l.as_ref(), &id, now).await
            })?;
            print_show(&s, &doc, format)
        }
        JobsCommand::Logs { id } => {
            let cfg = Config::load(&flags)?;
            let rt = crate::shared::runtime()?;
            rt.block_on(async {
                let l = cfg.open_ledger().await?;
                // The clouds are opened only for a job that has instances.
                let last = gpufleet::runtime::jobs::with_instances(l.as_ref(), &id).await?;
                let fleet = crate::shared::open_fleet(&cfg).await?;
                let logs = gpufleet::runtime::jobs::console_logs(&fleet.providers, &last).await?;
                let pool = last
                    .pool
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let mut outputs = Vec::new();
                for (i, text) in logs {
                    if format == OutputFormat::Table {
                        println!("==> {i} ({pool}) <==");
                        print!("{text}");
                    } else {
                        outputs
                            .push(serde_json::json!({"instance": i.to_string(), "output": text}));
                    }
                }
                if format != OutputFormat::Table {
                    // One document: an array, one entry per instance.
                    json(&mut std::io::stdout().lock(), &outputs)?;
                }
                Ok(())
            })
        }
        JobsCommand::Cancel { id, any_owner } => {
            let cfg = Config::load(&flags)?;
            let rt = crate::shared::runtime()?;
            rt.block_on(async {
                gpufleet::runtime::jobs::known(cfg.open_ledger().await?.as_ref(), &id).await?;
                // Each cloud checked first: one that does not answer is not
                // swept (said, exit 4), and does not hold the cancel up.
                let fleet = crate::shared::open_checking_fleet(&cfg).await?;
                let warned = fleet.unread.len();
                let ctl = fleet
                    .controller(&cfg, &id, ControllerConfig::default())
                    .await?;
                let out = ctl
                    .cancel_as(&id, (!any_owner).then_some(cfg.owner.as_str()))
                    .await?;
                fleet.save()?;
                match format {
                    OutputFormat::Table => eprintln!("job {id}: {}", out.detail),
                    _ => json(&mut std::io::stdout().lock(), &out)?,
                }
                crate::shared::partial(&fleet, warned)
            })
        }
        JobsCommand::Resume {
            id,
            any_owner,
            drive: d,
            down_on_exit,
        } => {
            check_drive(&d)?;
            let cfg = Config::load(&flags)?;
            let rt = crate::shared::runtime()?;
            rt.block_on(async {
                let ledger = cfg.open_ledger().await?;
                let last = gpufleet::runtime::jobs::known(ledger.as_ref(), &id).await?;
                gpufleet::runtime::jobs::check_owner(
                    ledger.as_ref(),
                    &id,
                    &cfg.owner,
                    any_owner,
                    "gpufleet jobs resume",
                )
                .await?;
                if last.state.is_terminal() && format == OutputFormat::Table {
                    // Said plainly, as `run` of an ended job says it; the
                    // outcome line and the exit code follow as for a drive.
                    eprintln!(
                        "job {id} already ended ({} at {}); nothing to resume",
                        last.state,
                        gpufleet::report::to_the_second(&gpufleet::report::rfc3339(last.at))
                    );
                }
                // On the local provider, a fresh run of its fakes (the
                // killed one's processes ended with it): the job is placed
                // again from its record.
                let fleet = if cfg.provider == ProviderKind::Local {
                    Fleet::open_local(&cfg).await?
                } else {
                    crate::shared::open_fleet(&cfg).await?
                };
                let ctl = controller(&cfg, &fleet, &id, &d).await?;
                drive(&ctl, &id, down_on_exit, format, &fleet).await
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
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let fleet = crate::shared::open_shared_fleet(&cfg).await?;
        let ctl = controller(&cfg, &fleet, "", &args.drive).await?;
        let holder = ctl.config().holder.clone();
        eprintln!(
            "serving the jobs of ledger {} as {holder} (lease {}, poll {})",
            ctl.executor().ledger().location(),
            format_duration(args.drive.lease),
            format_duration(args.drive.poll)
        );
        let serve_for = args.serve_for;
        let stop = async move {
            let timer = async {
                match serve_for {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = gpufleet::runtime::stopped() => {}
                _ = timer => {}
            }
        };
        let report = ctl
            .serve(
                gpufleet::runtime::ServeConfig {
                    max_jobs: args.max_jobs,
                    claim_every: args.drive.poll,
                    claim_batch: args.claim_batch,
                    owner: cfg.owner.clone(),
                    any_owner: args.any_owner,
                    ..Default::default()
                },
                stop,
            )
            .await?;
        match format {
            OutputFormat::Table => eprintln!(
                "stopped: {} job(s) taken ({} taken over), {} ended, {} lost to another controller, {} stopped on errors, {} lease(s) given up; {} reconciliation(s): {} instance end(s) recorded, {} unfinished launch(es) failed",
                report.claimed, report.taken_over, report.ended, report.lost, report.errors, report.released,
                report.reconciliations, report.reconciled_ends, report.reconciled_stuck
            ),
            _ => json(&mut std::io::stdout().lock(), &report)?,
        }
        Ok(())
    })
}

async fn drive(
    ctl: &Controller,
    id: &str,
    down_on_exit: bool,
    format: OutputFormat,
    fleet: &Fleet,
) -> Result<(), Failure> {
    // For a person, each transition as it is recorded (the ledger is the
    // record), and whatever the last look missed once the drive ends.
    let table = format == OutputFormat::Table;
    let ledger = ctl.executor().ledger().clone();
    let mut seen = if table {
        ledger.job_history(id).await?.len()
    } else {
        0
    };
    let follow = async {
        if !table {
            return std::future::pending::<()>().await;
        }
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            print::new_events(ledger.as_ref(), id, &mut seen).await;
        }
    };
    let outcome = tokio::select! {
        _ = follow => unreachable!("following a job's records never ends"),
        r = ctl.drive_when_free(id, |l, wait| eprintln!(
            "job {id} is held by controller {} until {}: waiting {:.0} s for it to lapse, as it does when that controller is gone (a live one renews it)",
            l.holder,
            l.expires_at
                .replace_nanosecond(0)
                .ok()
                .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
                .unwrap_or_default(),
            wait.as_secs_f64().ceil(),
        )) => r,
        sig = gpufleet::runtime::stopped() => {
            if down_on_exit {
                eprintln!("interrupted ({sig}): cancelling job {id} (--down-on-exit)");
                let out = ctl.cancel(id).await;
                fleet.save()?;
                // The drive that held the lease was dropped above: give the
                // lease up, or `jobs ls` names this gone process as the
                // cancelled job's driver until it expires.
                if let Err(e) = ctl.let_go(id).await {
                    eprintln!("warning: could not give up the job's lease ({e}); it expires by itself");
                }
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
    if table {
        print::new_events(ledger.as_ref(), id, &mut seen).await;
    }
    let s = ctl.summary(id).await?;
    // Placed without a cloud that did not answer: said, while the exit status stays the job's.
    gpufleet::runtime::report::skipped_lines(ctl.executor())
        .iter()
        .for_each(|l| eprintln!("warning: {l}"));
    match format {
        OutputFormat::Table => {
            // "cancelled: cancelled" said once.
            let detail = if outcome.detail == outcome.state.to_string() {
                String::new()
            } else {
                format!(": {}", outcome.detail)
            };
            eprintln!(
                "job {id} {}{detail} ({} preemption(s), {} restart(s) on error, {} move(s), {} pool(s)); cost ${:.2}",
                outcome.state,
                s.preemptions,
                s.restarts,
                s.moves,
                s.pools.len(),
                s.cost_so_far_usd()
            );
        }
        _ => json(
            &mut std::io::stdout().lock(),
            &gpufleet::runtime::report::JobRow::new(&s),
        )?,
    }
    match outcome.state {
        JobState::Succeeded => Ok(()),
        JobState::Cancelled => Ok(()),
        // The line above said why.
        _ if format == OutputFormat::Table => Err(Failure::Reported),
        _ => Err(Error::new(
            ErrorKind::Unexpected,
            format!("job {id} {}: {}", outcome.state, outcome.detail),
        )
        .with_retryable(false)
        .into()),
    }
}
