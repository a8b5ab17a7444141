//! `gpufleet run` and `gpufleet jobs`: managed jobs, driven by the runtime's
//! job controller. This module parses and prints; the runtime acts.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use gpufleet::ledger::JobState;
use gpufleet::placer::format_duration;
use gpufleet::runtime::jobs::{cost_per_completed_job, JobSummary};
use gpufleet::runtime::report::DetachedDoc;
use gpufleet::runtime::verbs::{
    self,
    input::JobInput,
    jobs::{self, JobServer},
    run::{Driven, Driver, RunRequest, Stop, Submitted},
};
use gpufleet::{Error, ErrorKind};

use crate::args::parse_dur;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags};

mod args;
mod print;
pub use self::args::*;
use self::print::*;

/// Runs `gpufleet run`.
pub fn run(args: RunArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    check_drive(&args.drive)?;
    let cfg = Config::load(&flags)?;
    // Checked before anything is recorded or launched.
    let read = JobInput::File(args.job.clone()).read(&cfg)?;
    let Some(file) = read.file else {
        return Err(Error::invalid_input("run takes a job file: --job FILE").into());
    };
    let site = crate::shared::site(&cfg);
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        // A new job no pool can run as it stands (its deadline, its budget)
        // is refused as `place` would refuse it, before it is recorded.
        let req = RunRequest {
            file,
            spec: read.spec,
            source: read.source,
            id: args.id.clone(),
            drive: args.drive.config(),
            script: None,
        };
        let run = match verbs::run::submit(&site, req).await? {
            Submitted::Refused(why) => return Err(Failure::NothingMatched(why)),
            Submitted::Recorded(run) => run,
        };
        crate::shared::warn_unread(&run.unread);
        for w in &run.warnings {
            eprintln!("warning: {w}");
        }
        let id = run.id.clone();
        let known = run.known.clone();
        let spec = &run.spec;
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
                    &DetachedDoc { id: id.clone(), state, detached: true },
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
        drive(&run.into_driver(), args.down_on_exit, format).await
    })
}

/// Runs `gpufleet jobs …`.
pub fn jobs(cmd: JobsCommand, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    match cmd {
        JobsCommand::Ls => {
            let cfg = Config::load(&flags)?;
            let site = crate::shared::site(&cfg);
            let (list, rows) = crate::shared::runtime()?.block_on(jobs::list(&site))?;
            print_list(&list, &rows, format)
        }
        JobsCommand::Show { id } => {
            let cfg = Config::load(&flags)?;
            let site = crate::shared::site(&cfg);
            let (s, doc) = crate::shared::runtime()?.block_on(jobs::show(&site, &id))?;
            print_show(&s, &doc, format)
        }
        JobsCommand::Logs { id } => {
            let cfg = Config::load(&flags)?;
            let rt = crate::shared::runtime()?;
            let logs = rt.block_on(jobs::logs(&crate::shared::site(&cfg), &id))?;
            crate::shared::warn_all(&logs.warnings);
            if format != OutputFormat::Table {
                // One document: an array, one entry per instance.
                return json(&mut std::io::stdout().lock(), &logs.outputs);
            }
            for o in &logs.outputs {
                println!("==> {} ({}) <==", o.instance, logs.pool);
                print!("{}", o.output);
            }
            Ok(())
        }
        JobsCommand::Cancel { id, any_owner } => {
            let cfg = Config::load(&flags)?;
            let rt = crate::shared::runtime()?;
            rt.block_on(async {
                // Each cloud checked first: one that does not answer is not
                // swept (said, exit 4), and does not hold the cancel up.
                let out = verbs::jobs::cancel(&crate::shared::site(&cfg), &id, any_owner).await?;
                match format {
                    OutputFormat::Table => eprintln!("job {id}: {}", out.outcome.detail),
                    _ => json(&mut std::io::stdout().lock(), &out.outcome)?,
                }
                crate::shared::partial_of(&out.unread, 0)
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
                let site = crate::shared::site(&cfg);
                let (driver, last) = verbs::run::resume(&site, &id, d.config(), any_owner).await?;
                if last.state.is_terminal() && format == OutputFormat::Table {
                    // Said plainly, as `run` of an ended job says it; the
                    // outcome line and the exit code follow as for a drive.
                    eprintln!(
                        "job {id} already ended ({} at {}); nothing to resume",
                        last.state,
                        gpufleet::report::to_the_second(&gpufleet::report::rfc3339(last.at))
                    );
                }
                drive(&driver, down_on_exit, format).await
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
        let server = JobServer::open(&crate::shared::site(&cfg), args.drive.config()).await?;
        crate::shared::warn_all(server.warnings());
        eprintln!(
            "serving the jobs of ledger {} as {} (lease {}, poll {})",
            server.ledger_location(),
            server.holder(),
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
        let report = server
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

async fn drive(driver: &Driver, down_on_exit: bool, format: OutputFormat) -> Result<(), Failure> {
    // For a person, each transition as it is recorded (the ledger is the
    // record), and whatever the last look missed once the drive ends.
    let id = driver.id();
    let table = format == OutputFormat::Table;
    let ledger = driver.ledger();
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
    let stop = async {
        let sig = gpufleet::runtime::stopped().await;
        if down_on_exit {
            eprintln!("interrupted ({sig}): cancelling job {id} (--down-on-exit)");
            Stop::Cancel
        } else {
            Stop::Detach
        }
    };
    let driven = tokio::select! {
        _ = follow => unreachable!("following a job's records never ends"),
        r = driver.drive(stop, |l, wait| eprintln!(
            "job {id} is held by controller {} until {}: waiting {:.0} s for it to lapse, as it does when that controller is gone (a live one renews it)",
            l.holder,
            gpufleet::report::to_the_second(&gpufleet::report::rfc3339(l.expires_at)),
            wait.as_secs_f64().ceil(),
        )) => r?,
    };
    let (outcome, s, warnings) = match driven {
        Driven::Detached { warnings } => {
            crate::shared::warn_all(&warnings);
            eprintln!("detached: job {id} keeps its instances; `gpufleet jobs resume {id}` drives it again, `gpufleet jobs cancel {id}` ends it");
            return Ok(());
        }
        Driven::Ended {
            outcome,
            summary,
            warnings,
        } => (outcome, summary, warnings),
    };
    if table {
        print::new_events(ledger.as_ref(), id, &mut seen).await;
    }
    // Placed without a cloud that did not answer: said, while the exit
    // status stays the job's.
    crate::shared::warn_all(&warnings);
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
