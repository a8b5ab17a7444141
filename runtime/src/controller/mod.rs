//! The job controller behind `gpufleet run`: keeps one managed job going
//! until it ends, across interruptions, capacity errors and its own crashes.
//!
//! The ledger is the controller's only memory. Every transition is recorded
//! *before* the action it announces (a `launching` record names the pool and
//! the attempt whose idempotency key the launch uses), so a controller that
//! died at any point rebuilds the job from the ledger ([`Controller::drive`]
//! always starts that way): a launch in flight is re-sent with the same key
//! (the cloud returns what the first one made), a move in flight is
//! abandoned, and anything tagged with the job that is not its current
//! placement is terminated (the orphan sweep).
//!
//! Each poll (every 60 s by default) reads the placement's instances:
//! - an instance that is gone, terminated or stopped was interrupted (seen
//!   from the controller: a spot reclaim, a preemption, an eviction, or a
//!   person);
//! - a `gpufleet:notice` tag newer than the placement is the node's watch
//!   agent reporting an interruption notice;
//! - a `gpufleet:heartbeat` older than the grace period means the node
//!   stopped reporting: it is treated as failed and replaced;
//! - `gpufleet:progress` is the share of the work the job has saved;
//!   without it progress is estimated from run time, the restart overhead
//!   and the checkpoint interval (only whole checkpoints count);
//! - `gpufleet:exit` ends the job (0 succeeded, anything else failed).
//!
//! An interruption is recorded (as evidence against the pool, too) and the
//! rest of the work is placed again by the one placement policy; every
//! `move_review` the policy is asked whether moving beats staying.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::ledger::{Claim, JobDefinition, JobRecord, JobState, Lease};
use gpufleet_core::placer::{
    CheckpointInterval, JobFile, JobSpec, PoolEvent, PoolEventKind, Remaining,
};
use gpufleet_core::usage::{GpuSummary, JobUsage};
use gpufleet_core::{
    fnv1a64, tags, Capacity, Cloud, EndCause, Error, ErrorKind, IdempotencyKey, Instance,
    InstanceId, InstanceState, Result, TagFilter,
};

use crate::executor::{sanitize, Executor, LaunchTemplate, NoCheckpoint, RunningJob};
use crate::lease::LeaseKeeper;

mod board;
mod config;
mod heard;
#[cfg(feature = "serve")]
pub(crate) use heard::follow_feed;
mod ids;
mod observe;
mod recovery;
mod serve;
mod states;
mod step;
use self::recovery::*;
pub use self::{config::*, ids::*, observe::*, step::*};

/// Records a managed job in `ledger` (its file, who it belongs to, and a
/// `placing` record at `now`) for a controller to drive, or finds it there:
/// the same file under the same id again is a no-op, a different one is
/// refused, and so is a job of that id that another owner submitted.
pub async fn submit_to(
    ledger: &dyn gpufleet_core::ledger::Ledger,
    job_id: &str,
    file: &JobFile,
    owner: Option<&str>,
    now: OffsetDateTime,
) -> Result<JobSpec> {
    check_job_id(job_id)?;
    file.check_name()?;
    let spec = file.clone().into_spec()?;
    crate::workload::check_fits(&spec, job_id)?;
    if let (Some(who), Some(doc)) = (owner, ledger.job_spec(job_id).await?) {
        let known = JobDefinition::from_doc(job_id, &doc)?;
        if let Some(theirs) = known.owner.as_deref().filter(|o| *o != who) {
            return Err(Error::invalid_input(format!(
                "job {job_id} is {theirs}'s, not {who}'s: nothing was recorded; give your job an id of its own (--id; the default id is the job file's name and a hash of it, the same for everyone who runs that file)"
            )));
        }
    }
    let doc = match owner {
        Some(who) => JobDefinition::new(file.clone(), who).to_doc()?,
        None => serde_json::to_string(file)
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("job file: {e}")))?,
    };
    ledger.save_job_spec(job_id, &doc).await?;
    if ledger.job_latest(job_id).await?.is_none() {
        let mut rec = JobRecord::new(job_id, &spec.name, JobState::Placing, now);
        rec.detail = format!("submitted: {:.2} hours of work", spec.hours);
        ledger.record_job(&rec).await?;
    }
    Ok(spec)
}

/// The state of one job as the controller drives it.
struct Driven {
    job_id: String,
    /// Whose instances the job's are (the owner its sweeps are scoped to).
    owner: Option<String>,
    /// The job as submitted.
    spec: JobSpec,
    template: LaunchTemplate,
    total: f64,
    deadline_at: Option<OffsetDateTime>,
    running: Option<RunningJob>,
    /// Reference hours done and saved (with no placement; with one, its
    /// `done_before`).
    done: f64,
    attempts: u32,
    last_review: OffsetDateTime,
    placing_since: Option<OffsetDateTime>,
    last_placing_detail: String,
    polls: u64,
    /// The job's lease, when driven under one.
    keeper: Option<Arc<LeaseKeeper>>,
    /// Its measured GPU use so far (read from the ledger when driving
    /// starts, folded from the nodes' summaries at each poll).
    usage: Option<JobUsage>,
    /// The newest summary folded per instance.
    usage_seen: HashMap<InstanceId, OffsetDateTime>,
    /// Where a resumed job's measurement stopped (summaries before it were
    /// folded by an earlier controller).
    usage_from: Option<OffsetDateTime>,
    /// When it last read its instances (a listing no newer says nothing
    /// new).
    observed_at: Option<OffsetDateTime>,
    /// When its last poll began (a ledger read no newer says nothing new).
    looked_at: Option<OffsetDateTime>,
}

impl Driven {
    /// A record of the job with no placement.
    fn record(
        &self,
        state: JobState,
        at: OffsetDateTime,
        progress: f64,
        detail: &str,
    ) -> JobRecord {
        let mut rec = JobRecord::new(&self.job_id, &self.spec.name, state, at);
        rec.progress_hours = progress;
        rec.attempt = self.attempts;
        rec.detail = detail.to_string();
        rec
    }

    /// The job's outcome in `state`.
    fn outcome(&self, state: JobState, detail: String, progress_hours: f64) -> Outcome {
        Outcome {
            job_id: self.job_id.clone(),
            state,
            detail,
            progress_hours,
            total_hours: self.total,
        }
    }

    /// The rest of the job: hours left and the deadline from now
    /// ([`Remaining::spec`]: an error of kind `Timeout` once the deadline
    /// has passed, which ends the job).
    fn left(&self, now: OffsetDateTime, done: f64) -> Result<JobSpec> {
        let remaining = Remaining {
            work_hours: (self.total - done).max(1e-6),
            deadline_at: self.deadline_at,
        };
        remaining.spec(&self.spec, now).map_err(|_| {
            // With what kept it from running, when it was waiting.
            let waiting = if self.last_placing_detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.last_placing_detail)
            };
            Remaining::deadline_passed(format!(
                "job {} is past its deadline with {:.2} of {:.2} hours of work done{waiting}",
                self.job_id, done, self.total
            ))
        })
    }
}

/// A job the ledger does not hold.
fn no_job(job_id: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!("no job '{job_id}' in the ledger"),
    )
}

/// Drives managed jobs. Cheap to share: one controller can drive many jobs
/// concurrently (each [`Controller::drive`] future is one job).
#[derive(Debug, Clone)]
pub struct Controller {
    exec: Arc<Executor>,
    config: ControllerConfig,
    pacer: Arc<dyn Pacer>,
    base: LaunchTemplate,
    /// The cloud reads shared by every job it drives.
    board: Arc<board::Board>,
    /// The clouds' event feeds it listens to while it drives jobs.
    events: Vec<Arc<dyn gpufleet_core::CloudEvents>>,
    /// What they said.
    heard: Arc<heard::Heard>,
    /// The ledger reads shared by every job it drives.
    states: Arc<states::States>,
}

impl Controller {
    /// A controller over an executor (its providers, ledger and clock), with
    /// `base` supplying what the job file does not (default images per
    /// cloud, tags, TTL, nodes).
    pub fn new(exec: Arc<Executor>, base: LaunchTemplate, pacer: Arc<dyn Pacer>) -> Self {
        Controller {
            exec,
            config: ControllerConfig::default(),
            pacer,
            base,
            board: Arc::default(),
            events: Vec::new(),
            heard: Arc::default(),
            states: Arc::default(),
        }
    }

    /// Listens to `feeds` (AWS: the interruption queue) while it drives
    /// jobs: an event that ends an instance a job drives wakes the job at
    /// once, which then acts on it as on an interruption it saw at a poll.
    pub fn with_events(mut self, feeds: Vec<Arc<dyn gpufleet_core::CloudEvents>>) -> Self {
        self.events = feeds;
        self
    }

    /// Sets the configuration.
    pub fn with_config(mut self, config: ControllerConfig) -> Self {
        self.config = config;
        self
    }

    /// The configuration it drives with.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// The executor.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.exec
    }

    /// Records a job in the ledger (its file and a `placing` record), or
    /// finds it there: submitting the same file under the same id again is
    /// a no-op, a different file under an existing id is refused.
    pub async fn submit(&self, job_id: &str, file: &JobFile) -> Result<JobSpec> {
        submit_to(
            self.exec.ledger().as_ref(),
            job_id,
            file,
            self.owner(),
            self.exec.clock().now(),
        )
        .await
    }

    /// The owner this controller acts as: its base template's
    /// [`tags::OWNER`], when it has one.
    pub fn owner(&self) -> Option<&str> {
        self.base.tags.get(tags::OWNER).map(String::as_str)
    }

    /// Why no pool can run `spec` as it stands (its deadline or budget
    /// against every offer of its GPU options, as `place` ranks them), or
    /// `None` when some plan can: a job no plan can run would only wait for
    /// capacity until its deadline passed.
    pub async fn why_unplaceable(&self, spec: &JobSpec) -> Result<Option<String>> {
        let ranking = self.exec.rank(spec, 8).await?;
        if ranking.feasible().next().is_none() {
            return Ok(Some(ranking.why_nothing()));
        }
        // A budget bounds what the policy expects to spend to finish, not
        // one plan's cost alone: asked of the policy itself.
        if spec.budget.is_some() {
            let placement = self
                .exec
                .place(
                    spec,
                    gpufleet_core::placer::Remaining::of(spec, self.exec.clock().now()),
                    &self.template(spec, self.owner()),
                    None,
                    None,
                )
                .await?;
            if let Some((budget, cheapest)) = placement.over_budget() {
                return Ok(Some(format!(
                    "no plan is expected to finish within the ${} budget: the cheapest the placement policy found expects ${} to finish",
                    budget.display(2),
                    cheapest.display(2)
                )));
            }
        }
        Ok(None)
    }

    /// The job's definition from the ledger: its file and its owner.
    pub async fn definition(&self, job_id: &str) -> Result<JobDefinition> {
        let doc = self.exec.ledger().job_spec(job_id).await?.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "no job '{job_id}' in the ledger; start one with `gpufleet run --job FILE`"
                ),
            )
        })?;
        JobDefinition::from_doc(job_id, &doc)
    }

    /// The job's file and spec from the ledger.
    pub async fn spec(&self, job_id: &str) -> Result<(JobFile, JobSpec)> {
        let file = self.definition(job_id).await?.file;
        let spec = file.clone().into_spec()?;
        Ok((file, spec))
    }

    /// Whose instances the job's are: its recorded owner, else (a job kept
    /// before owners were recorded) this controller's.
    fn owner_of(&self, definition: &JobDefinition) -> Option<String> {
        definition
            .owner
            .clone()
            .or_else(|| self.owner().map(str::to_string))
    }

    /// The launch template for `spec` of `owner`'s: the base, with the job
    /// file's images and workload, the job's owner on every instance (a
    /// shared `jobs serve` launches another owner's job as theirs), and the
    /// expiry this controller extends while it drives the instances (the
    /// launch's own allowance on top: a launch can take that long before
    /// the first poll extends it).
    fn template(&self, spec: &JobSpec, owner: Option<&str>) -> LaunchTemplate {
        let mut t = self.base.clone().for_job(spec);
        if let Some(o) = owner {
            t.tags.insert(tags::OWNER.into(), o.to_string());
        }
        t.driven_expiry = Some(self.config.expiry_window() + LAUNCH_ALLOWANCE);
        t
    }

    /// Where the job stands, from the ledger.
    pub async fn status(&self, job_id: &str) -> Result<Outcome> {
        let (_, spec) = self.spec(job_id).await?;
        let last = self
            .exec
            .ledger()
            .job_latest(job_id)
            .await?
            .ok_or_else(|| no_job(job_id))?;
        Ok(Outcome {
            job_id: job_id.to_string(),
            state: last.state,
            detail: last.detail,
            progress_hours: last.progress_hours,
            total_hours: spec.hours,
        })
    }

    /// The job summed up from its ledger records: where it ran, its
    /// preemptions, restarts and moves, and what its instances have cost so
    /// far (all of it, once the job has ended).
    pub async fn summary(&self, job_id: &str) -> Result<crate::jobs::JobSummary> {
        let history = self.exec.ledger().job_history(job_id).await?;
        if history.is_empty() {
            return Err(no_job(job_id));
        }
        let now = self.exec.clock().now();
        let mut s = [crate::jobs::summarize(&history, now)?];
        let spend = self.exec.ledger().spend(None).await?;
        let mine: Vec<_> = spend.into_iter().filter(|x| x.job_id == job_id).collect();
        crate::jobs::apply_spend(&mut s, &mine, now)?;
        let [s] = s;
        Ok(s)
    }

    /// Cancels a job of this controller's owner (its base template's
    /// [`tags::OWNER`], when it has one): records `cancelled` (a controller
    /// driving it stops at its next poll) and terminates everything tagged
    /// with it and with its owner (another owner's launch under the same
    /// name is not this job's).
    pub async fn cancel(&self, job_id: &str) -> Result<Outcome> {
        let owner = self.owner().map(str::to_string);
        self.cancel_as(job_id, owner.as_deref()).await
    }

    /// [`Controller::cancel`] as `owner`: a job another owner submitted is
    /// refused ([`ErrorKind::InvalidInput`] naming its owner), nothing
    /// recorded or ended. `None` acts on any owner's job (`jobs cancel
    /// --any-owner`). Either way the instances ended are those of the
    /// job's owner (for a job kept before owners were recorded: `owner`'s,
    /// or every owner's with `None`).
    pub async fn cancel_as(&self, job_id: &str, owner: Option<&str>) -> Result<Outcome> {
        let definition = self.definition(job_id).await?;
        if let (Some(who), Some(theirs)) = (owner, definition.owner.as_deref()) {
            if who != theirs {
                return Err(gpufleet_core::ledger::not_your_job(
                    job_id,
                    theirs,
                    who,
                    "gpufleet jobs cancel",
                ));
            }
        }
        let owner = definition.owner.as_deref().or(owner);
        let spec = definition.file.clone().into_spec()?;
        let ledger = self.exec.ledger();
        let last = ledger
            .job_latest(job_id)
            .await?
            .ok_or_else(|| no_job(job_id))?;
        if last.state.is_terminal() {
            return Err(Error::invalid_input(format!(
                "job {job_id} already ended ({}); nothing to cancel",
                last.state
            )));
        }
        let mut rec = last.clone();
        rec.state = JobState::Cancelled;
        rec.at = self.exec.clock().now();
        rec.detail = "cancelled".into();
        rec.instances.clear();
        // A person's cancel holds no lease: recorded without a token, which
        // the ledger takes whoever holds the lease (the token the last
        // record carried is refused once its lease was given up or expired).
        rec.fence = None;
        ledger.record_job(&rec).await?;
        // The cancel is recorded (final); a cloud that cannot be swept now
        // is said, not a reason to fail it: its instances of the job lose
        // their expiry's extension and `reap` ends them.
        let (n, failed) = self.sweep_clouds(job_id, &[], &last.instances, owner).await;
        if let Some(pool) = &last.pool {
            if matches!(last.state, JobState::Running | JobState::Moving) {
                let history = ledger.job_history(job_id).await?;
                if let Some(started) = placement_started(&history, last.attempt) {
                    ledger
                        .record_exposure(pool, started..self.exec.clock().now())
                        .await?;
                }
            }
        }
        tracing::info!(job = job_id, terminated = n, "job cancelled");
        let mut detail = format!("cancelled; {n} instance(s) terminated");
        for (cloud, e) in &failed {
            detail.push_str(&format!(
                "; {cloud} could not be swept ({e}): `gpufleet terminate --job {job_id}` when it answers (its instances of the job also expire, and `reap` ends them)"
            ));
        }
        Ok(Outcome {
            job_id: job_id.to_string(),
            state: JobState::Cancelled,
            detail,
            progress_hours: last.progress_hours,
            total_hours: spec.hours,
        })
    }
}

#[cfg(test)]
mod tests;
