//! `launch`: place a job (or take a pool), create its placement group and
//! launch its instances under an idempotency key; a failed launch ends
//! the job failed, and a launch the caller stops is rolled back.

use std::future::Future;

use gpufleet_core::ledger::JobState;
use gpufleet_core::placer::JobSpec;
use gpufleet_core::{Error, PlacementStrategy, Pool};

use super::{Opening, Site};
use crate::executor::{LaunchTemplate, RolledBack};
use crate::fleet::Unread;
use crate::report::LaunchDoc;

/// The most instances one launch makes.
pub const MAX_LAUNCH_COUNT: u32 = 1000;

/// What to launch.
#[derive(Debug, Clone, Default)]
pub struct LaunchRequest {
    /// The job to place (none: `pool` alone says what to launch).
    pub job: Option<JobSpec>,
    /// Launch into this pool instead of the best-ranked one.
    pub pool: Option<Pool>,
    /// The job's name (default: the job's own, when it is not the flags'
    /// placeholder `cli`).
    pub name: Option<String>,
    /// The job id the idempotency keys derive from (default: the name's).
    pub key: Option<String>,
    /// The image for every cloud (default: the job's images).
    pub image: Option<String>,
    /// Instances to launch.
    pub count: u32,
    /// A placement group to create.
    pub placement_strategy: Option<PlacementStrategy>,
}

/// A request checked: nothing is opened or launched before this.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The job id every attempt's idempotency key derives from.
    pub job_id: String,
    job: JobSpec,
    pool: Option<Pool>,
    image: Option<String>,
    count: u32,
    placement_strategy: Option<PlacementStrategy>,
}

impl LaunchRequest {
    /// Checks the request: the count, the name and key, the boot script's
    /// size and that some image is named.
    pub fn check(self) -> Result<Checked, Error> {
        if self.count == 0 || self.count > MAX_LAUNCH_COUNT {
            return Err(Error::invalid_input(format!(
                "invalid --count {}: launch 1 to {MAX_LAUNCH_COUNT} instances",
                self.count
            )));
        }
        let name = match (&self.name, &self.job) {
            (Some(n), _) => n.clone(),
            (None, Some(j)) if j.name != "cli" => j.name.clone(),
            _ => {
                return Err(Error::invalid_input(
                    "give the job a --name (its job tag and idempotency key)",
                ))
            }
        };
        gpufleet_core::placer::check_job_name(&name)?;
        // The job id: the key when given, else the name (a name that is no
        // valid id gets a readable prefix and a hash of all of it).
        let job_id = match &self.key {
            Some(k) => {
                crate::controller::check_job_id(k).map_err(|_| {
                    Error::invalid_input(format!(
                        "invalid idempotency key '{}': use 1 to 64 ASCII letters, digits, '-', '_' or '.'",
                        k.chars().take(64).collect::<String>()
                    ))
                })?;
                k.clone()
            }
            None => crate::controller::job_id_for_name(&name),
        };
        let mut job = match (self.job, &self.pool) {
            (Some(j), _) => j,
            (None, Some(pool)) => {
                JobSpec::for_pool(pool, &name, gpufleet_core::Snapshot::embedded())?
            }
            (None, None) => {
                return Err(Error::invalid_input(
                    "give --pool, or --gpu and --hours, or --job FILE",
                ))
            }
        };
        job.name = name;
        // A boot script no cloud would take is refused now, not by each
        // launch.
        crate::workload::check_fits(&job, &job_id)?;
        let named = |i: &String| !i.trim().is_empty();
        if !self.image.as_ref().is_some_and(named) && !job.workload.images.values().any(named) {
            return Err(Error::invalid_input(
                "give --image IMAGE (an AMI id, a GCE image or an Azure image reference), or image in the job file",
            ));
        }
        Ok(Checked {
            job_id,
            job,
            pool: self.pool,
            image: self.image,
            count: self.count,
            placement_strategy: self.placement_strategy,
        })
    }
}

/// What a launch says while it works, for the caller to show.
#[derive(Debug, Clone)]
pub enum LaunchNote {
    /// The clouds are open: what opening them said, and those left out
    /// (not answering: the launch goes on without them).
    Opened {
        /// What opening the clouds said, one line each.
        warnings: Vec<String>,
        /// The clouds left out.
        unread: Vec<Unread>,
    },
    /// The clouds are open and the launch starts.
    Launching {
        /// The job id.
        job_id: String,
        /// Instances asked for.
        count: u32,
    },
    /// The caller said stop (by `signal`): the launch is being rolled back;
    /// saying stop again leaves it as it is.
    RollingBack {
        /// The job id.
        job_id: String,
        /// What stopped it.
        signal: String,
    },
}

/// How a launch ended.
#[derive(Debug)]
pub enum Launched {
    /// Launched (or found launched under the same key).
    Done {
        /// What was launched.
        doc: LaunchDoc,
        /// The clouds left out (not read, or placed without): a partial
        /// answer.
        unread: Vec<Unread>,
    },
    /// Stopped by the caller and rolled back (`None`: the launch had
    /// finished already).
    RolledBack {
        /// What stopped it.
        signal: String,
        /// What the roll-back ended.
        rolled: Option<RolledBack>,
    },
    /// Stopped twice: left as it was, for the next launch of the same key
    /// to resume.
    LeftAsItWas,
}

/// Launches `req`: each cloud checked first (one that does not answer is
/// left out, in `unread`), placed with the config's placer unless a pool is
/// given, launched under the job id's idempotency key. `stop` is called for
/// the caller's stop signal (once during the launch, again during a
/// roll-back); `note` is told what is happening.
pub async fn launch<F>(
    site: &Site,
    req: Checked,
    mut stop: impl FnMut() -> F,
    mut note: impl FnMut(LaunchNote),
) -> Result<Launched, Error>
where
    F: Future<Output = &'static str>,
{
    let cfg = site.config();
    let mut fleet = site.open(Opening::Checked).await?;
    note(LaunchNote::Opened {
        warnings: fleet.warnings.clone(),
        unread: fleet.unread.clone(),
    });
    let exec = site.launcher(&fleet).await?;
    let job_id = req.job_id.as_str();
    // A job file brings its images and what its instances run; an image
    // given stands for every cloud.
    let mut template = LaunchTemplate {
        nodes: req.count,
        ttl: cfg.launch_ttl(),
        placement_strategy: req.placement_strategy,
        ..Default::default()
    }
    .for_job(&req.job);
    if let Some(image) = &req.image {
        for p in &fleet.providers {
            template.images.insert(p.cloud(), image.clone());
        }
    }
    template.tags = cfg.resource_tags();
    note(LaunchNote::Launching {
        job_id: job_id.to_string(),
        count: req.count,
    });
    let result = tokio::select! {
        r = exec.launch_once(job_id, &req.job, &template, req.pool.as_ref()) => r,
        signal = stop() => {
            note(LaunchNote::RollingBack { job_id: job_id.to_string(), signal: signal.to_string() });
            let rolled = tokio::select! {
                r = exec.roll_back_unfinished(job_id) => r,
                _ = stop() => {
                    fleet.save()?;
                    return Ok(Launched::LeftAsItWas);
                }
            };
            fleet.save()?;
            let rolled = rolled.map_err(|e| Error::new(e.kind(), format!(
                "the roll-back failed: {}; a launch with the same name resumes the launch, reap finds what it made",
                e.message()
            )))?;
            if rolled.is_some() {
                let why = format!("launch interrupted and rolled back ({signal}): nothing of it runs");
                crate::spend::end_unfinished_launch(exec.ledger().as_ref(), job_id, JobState::Cancelled, &why, fleet.clock.now()).await?;
            }
            return Ok(Launched::RolledBack { signal: signal.to_string(), rolled });
        }
    };
    fleet.save()?;
    if let Err(e) = &result {
        // Nothing of it runs: the job ends failed, saying why. The same
        // name launches it again.
        let why = format!("launch failed: {e}");
        crate::spend::end_unfinished_launch(
            exec.ledger().as_ref(),
            job_id,
            JobState::Failed,
            &why,
            fleet.clock.now(),
        )
        .await?;
    }
    let (already, running) = result?;
    let key = exec.launch_key(job_id, running.attempts)?;
    let instances = super::instances::rows(&mut fleet, &running.instances).await;
    // A decision made without the clouds the executor skipped while
    // gathering offers is a partial answer.
    for (cloud, problem) in exec.skipped_clouds() {
        fleet.leave_out(crate::fleet::Unread {
            cloud,
            problem,
            advice: "placed without it; `gpufleet check` says whether it answers".into(),
        });
    }
    Ok(Launched::Done {
        doc: LaunchDoc {
            already_launched: already,
            idempotency_key: key.to_string(),
            pool: running.plan.offer.pool.to_string(),
            placement_group: running.placement_group.as_ref().map(|g| g.id.to_string()),
            instances,
        },
        unread: fleet.unread.clone(),
    })
}
