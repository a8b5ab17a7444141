//! `run` and `jobs resume`: a managed job submitted (checked, refused when
//! no pool can run it, recorded), then driven to its end, or until the
//! caller says stop (detached, or cancelled).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::ledger::{JobRecord, Lease, Ledger};
use gpufleet_core::placer::{JobFile, JobSpec};
use gpufleet_core::{Cloud, Error};

use super::{Opening, Site};
use crate::config::{Config, ProviderKind};
use crate::controller::{self, Controller, ControllerConfig, Outcome};
use crate::executor::LaunchTemplate;
use crate::fake_script::ScriptLine;
use crate::fleet::{Fleet, Unread};
use crate::jobs::JobSummary;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The job file, recorded with the job.
    pub file: JobFile,
    /// The spec read and checked from it
    /// ([`super::input::JobInput::read`]).
    pub spec: JobSpec,
    /// What errors call the file.
    pub source: String,
    /// The job's id (default: derived from the file).
    pub id: Option<String>,
    /// How the controller drives.
    pub drive: ControllerConfig,
    /// The fake cloud's script (fake sites only).
    pub script: Option<Vec<ScriptLine>>,
}

/// What a submission came to.
pub enum Submitted {
    /// Not recorded: no pool can run it as it stands (its deadline, its
    /// budget), as `place` would say.
    Refused(String),
    /// Recorded (or found under its id), ready to drive.
    Recorded(Box<Run>),
}

/// A job recorded, and what drives it.
pub struct Run {
    /// Its id.
    pub id: String,
    /// Its spec.
    pub spec: JobSpec,
    /// Its newest record from before this submission (`None` for a new
    /// job).
    pub known: Option<JobRecord>,
    /// What could not be told now (a cloud that did not answer), one line
    /// each.
    pub warnings: Vec<String>,
    /// How many records its history held before the drive: a follower
    /// tells those after.
    pub seen: usize,
    /// The clouds left out at submission (each also a warning line).
    pub unread: Vec<Unread>,
    driver: Driver,
}

/// The job id a request gives: its own, checked, or the file's.
pub fn job_id(id: Option<&str>, file: &JobFile) -> Result<String, Error> {
    match id {
        Some(id) => {
            controller::check_job_id(id)?;
            Ok(id.to_string())
        }
        None => controller::job_id_for(file),
    }
}

/// Submits a job: each cloud checked first within its budget (one that
/// does not answer is left out of what is told now, not of the drive), the
/// images checked, the job refused when no pool can run it, else recorded.
pub async fn submit(site: &Site, req: RunRequest) -> Result<Submitted, Error> {
    if req.script.is_some() && !site.is_fake() {
        return Err(Error::invalid_input(
            "a script plays on the fake cloud only (--provider fake, or a FakeCloud)",
        ));
    }
    let id = job_id(req.id.as_deref(), &req.file)?;
    let fleet = site
        .open_for_jobs(Opening::Checking, req.script.clone())
        .await?;
    let ctl = site.controller(&fleet, &id, req.drive.clone()).await?;
    check_images(&fleet, site.config(), &req.spec, &req.source)?;
    let unread: Vec<Cloud> = fleet.unread.iter().map(|u| u.cloud).collect();
    let seen = ctl.executor().ledger().job_history(&id).await?.len();
    let (known, warnings) = match record(&ctl, &id, &req.file, &req.spec, &unread).await? {
        Submission::Refused(why) => return Ok(Submitted::Refused(why)),
        Submission::Recorded { known, warnings } => (known.map(|k| *k), warnings),
    };
    let left_out = fleet.unread.clone();
    let driver = if left_out.is_empty() {
        Driver {
            id: id.clone(),
            fleet,
            ctl,
        }
    } else {
        // The drive asks every enabled cloud again at each placement.
        drop(ctl);
        fleet.save()?;
        let fleet = site.open_for_jobs(Opening::Every, req.script).await?;
        let ctl = site.controller(&fleet, &id, req.drive).await?;
        Driver {
            id: id.clone(),
            fleet,
            ctl,
        }
    };
    Ok(Submitted::Recorded(Box::new(Run {
        id,
        spec: req.spec,
        known,
        warnings,
        seen,
        unread: left_out,
        driver,
    })))
}

impl Run {
    /// What drives it.
    pub fn into_driver(self) -> Driver {
        self.driver
    }

    /// The ledger it is recorded in.
    pub fn ledger(&self) -> Arc<dyn Ledger> {
        self.driver.ledger()
    }
}

/// Opens the job `id` to be driven again (`jobs resume`): known, and the
/// caller's own unless `any_owner`; with its newest record.
pub async fn resume(
    site: &Site,
    id: &str,
    drive: ControllerConfig,
    any_owner: bool,
) -> Result<(Driver, JobRecord), Error> {
    let ledger = site.ledger().await?;
    let last = crate::jobs::known(ledger.as_ref(), id).await?;
    crate::jobs::check_owner(
        ledger.as_ref(),
        id,
        &site.config().owner,
        any_owner,
        "gpufleet jobs resume",
    )
    .await?;
    let fleet = site.open_for_jobs(Opening::Every, None).await?;
    let ctl = site.controller(&fleet, id, drive).await?;
    Ok((
        Driver {
            id: id.to_string(),
            fleet,
            ctl,
        },
        last,
    ))
}

/// What the caller's stop signal asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Leave the job its instances and give its lease up: it can be
    /// resumed.
    Detach,
    /// Cancel the job (its instances ended), then give the lease up.
    Cancel,
}

/// How a drive ended.
#[derive(Debug)]
pub enum Driven {
    /// The job reached an end (or was cancelled on the caller's stop).
    Ended {
        /// The outcome.
        outcome: Outcome,
        /// The job's summary after it.
        summary: Box<JobSummary>,
        /// What to say beside it (clouds placed without, a lease not given
        /// up), one line each.
        warnings: Vec<String>,
    },
    /// Stopped by the caller and detached: the job keeps its instances.
    Detached {
        /// What to say beside it, one line each.
        warnings: Vec<String>,
    },
}

/// Drives one job.
pub struct Driver {
    id: String,
    fleet: Fleet,
    ctl: Controller,
}

impl Driver {
    /// The ledger the job is recorded in.
    pub fn ledger(&self) -> Arc<dyn Ledger> {
        self.ctl.executor().ledger().clone()
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Drives the job until it ends, or `stop` resolves (then as it asks).
    /// A lease another controller holds is waited for until it lapses;
    /// `waiting` is told once, with the lease and the wait. The fake
    /// cloud's state is saved however it ends.
    pub async fn drive(
        &self,
        stop: impl Future<Output = Stop>,
        waiting: impl FnOnce(&Lease, Duration) + Send,
    ) -> Result<Driven, Error> {
        let id = self.id.as_str();
        let mut warnings = Vec::new();
        let outcome = tokio::select! {
            r = self.ctl.drive_when_free(id, waiting) => r,
            how = stop => {
                let out = match how {
                    Stop::Cancel => Some(self.ctl.cancel(id).await),
                    Stop::Detach => None,
                };
                self.fleet.save()?;
                // The drive that held the lease was dropped: give the lease
                // up, or `jobs ls` names this gone driver until it expires.
                if let Err(e) = self.ctl.let_go(id).await {
                    warnings.push(format!(
                        "could not give up the job's lease ({e}); it expires by itself"
                    ));
                }
                match out {
                    None => return Ok(Driven::Detached { warnings }),
                    Some(out) => out,
                }
            }
        };
        self.fleet.save()?;
        let outcome = outcome?;
        let summary = self.ctl.summary(id).await?;
        warnings.extend(crate::report::skipped_lines(self.ctl.executor()));
        Ok(Driven::Ended {
            outcome,
            summary: Box::new(summary),
            warnings,
        })
    }
}

/// Refuses a job (from `file`) that names an image for none of the
/// live clouds it could run on: nothing could be launched for it.
fn check_images(
    fleet: &Fleet,
    cfg: &Config,
    spec: &gpufleet_core::placer::JobSpec,
    file: &str,
) -> Result<(), Error> {
    if cfg.provider != ProviderKind::Live {
        return Ok(());
    }
    // Every enabled cloud, those that did not answer now included: the
    // job file names images for clouds, not for what answers today.
    let mut enabled = fleet.read_clouds();
    enabled.extend(fleet.unread.iter().map(|u| u.cloud));
    let bare = crate::controller::clouds_without_image(spec, &LaunchTemplate::default(), &enabled);
    if bare.len() == enabled.len() {
        return Err(Error::invalid_input(format!(
            "job file '{file}' has no image for {}: add image = \"…\" (one for all) or an [image] table with aws, gcp, azure",
            bare.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

/// What [`record`] did with a job.
#[derive(Debug, Clone)]
enum Submission {
    /// Recorded (or found under its id): `known` is the ledger's newest
    /// record from before, `None` for a new job. `warnings` say what could
    /// not be told now (a cloud that did not answer).
    Recorded {
        /// The job's record before this submission, if it had one.
        known: Option<Box<JobRecord>>,
        /// What could not be checked now, one line each.
        warnings: Vec<String>,
    },
    /// Not recorded: no pool can run it as it stands (its deadline, its
    /// budget), as `place` would say.
    Refused(String),
}

/// Submits the job in `file` under `id` as `gpufleet run` does, before it
/// drives it: each opened cloud has an image for it, a new job no pool
/// can run is refused unrecorded (unless a cloud in `unread` did not
/// answer, when the controller places it once they do), and the job is
/// recorded. The same file under the same id finds the job it made.
async fn record(
    ctl: &Controller,
    id: &str,
    file: &gpufleet_core::placer::JobFile,
    spec: &gpufleet_core::placer::JobSpec,
    unread: &[gpufleet_core::Cloud],
) -> Result<Submission, Error> {
    let mut warnings = Vec::new();
    let known = ctl.executor().ledger().job_latest(id).await?;
    if known.is_none() {
        let names: Vec<&str> = unread.iter().map(|c| c.as_str()).collect();
        match ctl.why_unplaceable(spec).await {
            Ok(Some(why)) if !names.is_empty() => warnings.push(format!(
                "cannot tell now whether a pool can run job {id} ({why}; {} not read); recording it for the controller to place",
                names.join(", ")
            )),
            Ok(Some(why)) => {
                return Ok(Submission::Refused(format!("job {id} was not recorded: {why}")))
            }
            Ok(None) => {}
            Err(e) => warnings.push(format!(
                "cannot tell now whether a pool can run job {id} ({e}); recording it for the controller to place"
            )),
        }
    }
    ctl.submit(id, file).await?;
    Ok(Submission::Recorded {
        known: known.map(Box::new),
        warnings,
    })
}
