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

use async_trait::async_trait;
use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::ledger::{Claim, JobRecord, JobState, Lease};
use gpufleet_core::placer::{CheckpointInterval, JobFile, JobSpec, PoolEvent, PoolEventKind};
use gpufleet_core::usage::{GpuSummary, JobUsage};
use gpufleet_core::{
    fnv1a64, tags, Capacity, Cloud, EndCause, Error, ErrorKind, IdempotencyKey, Instance,
    InstanceId, InstanceState, Result, TagFilter,
};

use crate::executor::{sanitize, Executor, LaunchTemplate, NoCheckpoint, RunningJob};
use crate::lease::LeaseKeeper;

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// How often the instances are read (default 60 s: an interruption the
    /// node could not report is acted on within a minute).
    pub poll: Duration,
    /// A node whose last heartbeat is older than this is treated as failed
    /// (default 10 min).
    pub heartbeat_grace: Duration,
    /// How often the policy is asked whether moving pays (default 30 min).
    pub move_review: Duration,
    /// Placement keeps being retried (capacity, quota, outages) this long
    /// before the job fails (default 24 h).
    pub give_up_after: Duration,
    /// Polls between orphan sweeps while running (default 10).
    pub sweep_every: u64,
    /// How long a job's lease lasts unless renewed (default 30 s): another
    /// controller takes over a dead one's jobs this long after its last
    /// renewal. At least 3 s (renewed every third of it).
    pub lease_ttl: Duration,
    /// Who holds the leases: unique per process (default
    /// `host:pid:random`).
    pub holder: String,
}

/// A name for this process's leases: host, pid and a random part (a
/// restarted process never shares its predecessor's name).
pub fn default_holder() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
    let pid = std::process::id();
    let tag = fnv1a64(format!("{host}:{pid}:{nanos}").as_bytes()) as u32;
    format!("{}:{pid}:{tag:08x}", sanitize(&host, 32))
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            poll: Duration::from_secs(60),
            heartbeat_grace: Duration::from_secs(600),
            move_review: Duration::from_secs(1800),
            give_up_after: Duration::from_secs(24 * 3600),
            sweep_every: 10,
            lease_ttl: Duration::from_secs(30),
            holder: default_holder(),
        }
    }
}

/// How [`Controller::serve`] shares out jobs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// At most this many jobs driven at once (default 256).
    pub max_jobs: usize,
    /// How often free and expired leases are looked for (default: the poll
    /// interval, so a dead controller's jobs move within its lease time and
    /// one poll).
    pub claim_every: Duration,
    /// At most this many leases taken per look (default 16).
    pub claim_batch: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_jobs: 256,
            claim_every: Duration::from_secs(60),
            claim_batch: 16,
        }
    }
}

/// What a serving controller did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServeReport {
    /// Leases taken.
    pub claimed: u64,
    /// Of those, leases another controller held before (taken over).
    pub taken_over: u64,
    /// Jobs driven to their end.
    pub ended: u64,
    /// Jobs whose lease was lost to another controller.
    pub lost: u64,
    /// Jobs whose driving stopped on an error (their leases lapse and a
    /// later claim retries them).
    pub errors: u64,
    /// Leases given up on stopping.
    pub released: u64,
}

/// How the controller waits between polls: real time, or a fake cloud's
/// clock moved forward (tests and `--provider fake`).
#[async_trait]
pub trait Pacer: Send + Sync + std::fmt::Debug {
    /// Waits `d`.
    async fn pause(&self, d: Duration);
}

/// Waits in real time.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealTime;

#[async_trait]
impl Pacer for RealTime {
    async fn pause(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

/// How a job ended (or stands, for [`Controller::status`]).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The job.
    pub job_id: String,
    /// Its state.
    pub state: JobState,
    /// Why, in a line.
    pub detail: String,
    /// Reference hours of work done.
    pub progress_hours: f64,
    /// Reference hours of work in all.
    pub total_hours: f64,
}

/// Records a managed job in `ledger` (its file and a `placing` record at
/// `now`) for a controller to drive, or finds it there: the same file under
/// the same id again is a no-op, a different one is refused.
pub async fn submit_to(
    ledger: &dyn gpufleet_core::ledger::Ledger,
    job_id: &str,
    file: &JobFile,
    now: OffsetDateTime,
) -> Result<JobSpec> {
    check_job_id(job_id)?;
    let spec = file.clone().into_spec()?;
    let doc = serde_json::to_string(file)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("job file: {e}")))?;
    ledger.save_job_spec(job_id, &doc).await?;
    if ledger.job_latest(job_id).await?.is_none() {
        let mut rec = JobRecord::new(job_id, &spec.name, JobState::Placing, now);
        rec.detail = format!("submitted: {:.2} hours of work", spec.hours);
        ledger.record_job(&rec).await?;
    }
    Ok(spec)
}

/// The job's id for a job file: its name and a hash of its contents, so the
/// same command run again drives the same job.
pub fn job_id_for(file: &JobFile) -> Result<String> {
    let doc = serde_json::to_string(file)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("job file: {e}")))?;
    let name = file.name.as_deref().unwrap_or("job");
    Ok(format!(
        "{}-{:08x}",
        readable_prefix(name, 32),
        fnv1a64(doc.as_bytes()) as u32
    ))
}

/// The readable start of an id made from `name`: at most `max` lower-case
/// letters, digits and `-`, or `job` when nothing of the name survives.
fn readable_prefix(name: &str, max: usize) -> String {
    let prefix = sanitize(name, max);
    if prefix.trim_matches('-').is_empty() {
        "job".into()
    } else {
        prefix
    }
}

/// The job id for a name given on the command line: the name itself when it
/// is a valid id, else a readable prefix of it and a 64-bit hash of all of
/// it (`训练🚀…` and names longer than 64 bytes get an id, never a panic, and
/// two names that share a prefix never share an id).
pub fn job_id_for_name(name: &str) -> String {
    if IdempotencyKey::is_valid(name) {
        return name.to_string();
    }
    format!(
        "{}-{:016x}",
        readable_prefix(name, 40),
        fnv1a64(name.as_bytes())
    )
}

/// When the placement of `attempt` started running, from the job's records.
fn placement_started(history: &[JobRecord], attempt: u32) -> Option<OffsetDateTime> {
    history
        .iter()
        .find(|r| r.state == JobState::Running && r.attempt == attempt)
        .map(|r| r.at)
}

/// Checks a job id: 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
pub fn check_job_id(id: &str) -> Result<()> {
    if !IdempotencyKey::is_valid(id) {
        let shown: String = id.chars().take(64).collect();
        return Err(Error::invalid_input(format!(
            "invalid job id '{shown}': use 1 to 64 ASCII letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}

/// The state of one job as the controller drives it.
struct Driven {
    job_id: String,
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

    /// The rest of the job: hours left and the deadline from now.
    fn left(&self, now: OffsetDateTime, done: f64) -> Result<JobSpec> {
        let mut spec = self.spec.clone();
        spec.hours = (self.total - done).max(1e-6);
        if let Some(at) = self.deadline_at {
            let secs = (at - now).as_seconds_f64();
            if secs <= 0.0 {
                return Err(Error::invalid_input(format!(
                    "job {} is past its deadline with {:.2} of {:.2} hours of work done",
                    self.job_id, done, self.total
                )));
            }
            spec.deadline = Some(Duration::from_secs_f64(secs));
        }
        Ok(spec)
    }
}

/// What one poll saw of a running placement.
enum Seen {
    /// Working; `saved` reference hours of this placement would survive a
    /// restart; `live` have been done.
    Working {
        saved: f64,
        live: f64,
        reported: bool,
    },
    /// Interrupted, as the controller or the node saw it.
    Interrupted {
        why: String,
        saved: f64,
        from_node: bool,
        /// Whether it counts against the pool (see [`counts_against_pool`]).
        against_pool: bool,
    },
    /// The job's command exited.
    Exited { code: String, live: f64 },
    /// The instances could not be read this time.
    Unknown(String),
}

/// Drives managed jobs. Cheap to share: one controller can drive many jobs
/// concurrently (each [`Controller::drive`] future is one job).
#[derive(Debug, Clone)]
pub struct Controller {
    exec: Arc<Executor>,
    config: ControllerConfig,
    pacer: Arc<dyn Pacer>,
    base: LaunchTemplate,
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
        }
    }

    /// Sets the configuration.
    pub fn with_config(mut self, config: ControllerConfig) -> Self {
        self.config = config;
        self
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
            self.exec.clock().now(),
        )
        .await
    }

    /// The job's file and spec from the ledger.
    pub async fn spec(&self, job_id: &str) -> Result<(JobFile, JobSpec)> {
        let doc = self.exec.ledger().job_spec(job_id).await?.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "no job '{job_id}' in the ledger; start one with `gpufleet run --job FILE`"
                ),
            )
        })?;
        let file: JobFile = serde_json::from_str(&doc).map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("job {job_id}: stored job file unreadable: {e}"),
            )
        })?;
        let spec = file.clone().into_spec()?;
        Ok((file, spec))
    }

    /// The launch template for `spec`: the base, with the job file's images
    /// and workload.
    fn template(&self, spec: &JobSpec) -> LaunchTemplate {
        let mut t = self.base.clone();
        for (cloud, image) in &spec.workload.images {
            t.images.insert(*cloud, image.clone());
        }
        if !spec.workload.is_empty() || !spec.workload.access.is_empty() {
            t.workload = Some(spec.workload.clone());
        }
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
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no job '{job_id}' in the ledger"),
                )
            })?;
        Ok(Outcome {
            job_id: job_id.to_string(),
            state: last.state,
            detail: last.detail,
            progress_hours: last.progress_hours,
            total_hours: spec.hours,
        })
    }

    /// Cancels a job: records `cancelled` (a controller driving it stops at
    /// its next poll) and terminates everything tagged with it.
    pub async fn cancel(&self, job_id: &str) -> Result<Outcome> {
        let (_, spec) = self.spec(job_id).await?;
        let ledger = self.exec.ledger();
        let last = ledger.job_latest(job_id).await?.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("no job '{job_id}' in the ledger"),
            )
        })?;
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
        ledger.record_job(&rec).await?;
        let n = self.sweep(job_id, &[]).await?;
        if let Some(pool) = &last.pool {
            if matches!(last.state, JobState::Running | JobState::Moving) {
                let history = ledger.job_history(job_id).await?;
                if let Some(started) = placement_started(&history, last.attempt) {
                    ledger
                        .record_exposure(pool, started, self.exec.clock().now())
                        .await?;
                }
            }
        }
        tracing::info!(job = job_id, terminated = n, "job cancelled");
        Ok(Outcome {
            job_id: job_id.to_string(),
            state: JobState::Cancelled,
            detail: format!("cancelled; {n} instance(s) terminated"),
            progress_hours: last.progress_hours,
            total_hours: spec.hours,
        })
    }

    /// Drives the job until it ends, under its lease: takes the lease (a job
    /// another live controller holds is [`ErrorKind::Conflict`], naming the
    /// holder), rebuilds the job from the ledger (so this is also how a job
    /// is resumed or taken over), then polls. The lease is renewed while the
    /// job is driven and given up when it ends; if it is lost the driving
    /// stops at once with [`ErrorKind::Conflict`].
    pub async fn drive(&self, job_id: &str) -> Result<Outcome> {
        let ledger = self.exec.ledger();
        match ledger
            .acquire_lease(job_id, &self.config.holder, self.config.lease_ttl)
            .await?
        {
            Claim::Acquired(lease) => self.drive_leased(lease).await,
            Claim::Held(l) => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "job {job_id} is driven by controller {} (lease token {}, until {}); it resumes from there if that controller stops",
                    l.holder,
                    l.token,
                    l.expires_at
                        .format(&time::format_description::well_known::Rfc3339)
                        .unwrap_or_default()
                ),
            )),
        }
    }

    /// Gives up this controller's lease on `job_id`, if it holds one (a
    /// `run` that detaches, so `jobs resume` or another controller can
    /// continue at once).
    pub async fn let_go(&self, job_id: &str) -> Result<()> {
        let Some(token) = self.exec.fences().get(job_id) else {
            return Ok(());
        };
        // What release needs of the lease: job, holder, token.
        let now = OffsetDateTime::now_utc();
        let lease = Lease {
            job_id: job_id.to_string(),
            holder: self.config.holder.clone(),
            token,
            acquired_at: now,
            expires_at: now,
        };
        self.exec.fences().clear(job_id, token);
        self.exec.ledger().release_lease(&lease).await
    }

    /// Drives the job under `lease` (this controller's, just acquired).
    pub async fn drive_leased(&self, lease: Lease) -> Result<Outcome> {
        let keeper = Arc::new(LeaseKeeper::new(
            self.exec.ledger().clone(),
            lease.clone(),
            self.config.lease_ttl,
        ));
        let fences = self.exec.fences();
        fences.set(&lease.job_id, lease.token);
        let out = tokio::select! {
            r = self.drive_unleased(&lease.job_id, Some(keeper.clone())) => r,
            lost = keeper.keep() => Err(lost),
        };
        fences.clear(&lease.job_id, lease.token);
        match &out {
            Err(e) if e.kind() == ErrorKind::Conflict => {
                tracing::warn!(job = %lease.job_id, error = %e, "lost the job's lease; stopped driving it");
            }
            _ => {
                if let Err(e) = self.exec.ledger().release_lease(&keeper.lease()).await {
                    tracing::warn!(job = %lease.job_id, error = %e, "could not release the lease; it expires by itself");
                }
            }
        }
        out
    }

    async fn drive_unleased(
        &self,
        job_id: &str,
        keeper: Option<Arc<LeaseKeeper>>,
    ) -> Result<Outcome> {
        let mut d = match self.resume(job_id, &keeper).await? {
            Ok(d) => d,
            Err(outcome) => return Ok(outcome),
        };
        let mut errors = 0u32;
        loop {
            match self.step(&mut d).await {
                Ok(Some(outcome)) => return Ok(outcome),
                Ok(None) => errors = 0,
                Err(e) if e.kind() == ErrorKind::Conflict => return Err(e),
                Err(e) if is_fatal(&e) => return self.give_up(&mut d, &e.to_string()).await,
                Err(e) => {
                    errors += 1;
                    tracing::warn!(job = job_id, error = %e, errors, "poll failed; rebuilding the job from the ledger");
                    self.pacer.pause(self.config.poll).await;
                    match self.resume(job_id, &keeper).await {
                        Ok(Ok(fresh)) => d = fresh,
                        Ok(Err(outcome)) => return Ok(outcome),
                        Err(e) if e.kind() == ErrorKind::Conflict || is_fatal(&e) => return Err(e),
                        Err(e) => tracing::warn!(job = job_id, error = %e, "cannot rebuild yet"),
                    }
                    continue;
                }
            }
            self.pacer.pause(self.config.poll).await;
        }
    }

    /// Shares out the ledger's unfinished managed jobs with every other
    /// controller serving the same ledger, and drives those it wins, until
    /// `stop` resolves. Every `claim_every` it takes up to `claim_batch` more
    /// free or expired leases (so controllers started together split the
    /// work), up to `max_jobs` at once; a dead controller's jobs are taken
    /// over once their leases expire, continuing from the recorded state. On
    /// `stop` it gives its leases up, so others take its jobs at once.
    pub async fn serve(
        &self,
        config: ServeConfig,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<ServeReport> {
        if config.max_jobs == 0 || config.claim_batch == 0 {
            return Err(Error::invalid_input(format!(
                "invalid serve limits (max jobs {}, claim batch {}): both must be at least 1",
                config.max_jobs, config.claim_batch
            )));
        }
        let ledger = self.exec.ledger().clone();
        let holder = self.config.holder.clone();
        let mut report = ServeReport::default();
        let mut tasks: tokio::task::JoinSet<(String, Result<Outcome>)> =
            tokio::task::JoinSet::new();
        let mut driving: std::collections::HashSet<String> = Default::default();
        tokio::pin!(stop);
        tracing::info!(holder = %holder, ledger = %ledger.location(), "serving managed jobs");
        loop {
            if driving.len() < config.max_jobs {
                match self
                    .claim(&config, &mut driving, &mut tasks, &mut report)
                    .await
                {
                    Ok(()) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot read the ledger's jobs"),
                }
            }
            tokio::select! {
                _ = &mut stop => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    match done {
                        Ok((job, out)) => {
                            driving.remove(&job);
                            match out {
                                Ok(o) => {
                                    report.ended += 1;
                                    tracing::info!(job = %job, state = %o.state, detail = %o.detail, "job ended");
                                }
                                Err(e) if e.kind() == ErrorKind::Conflict => report.lost += 1,
                                Err(e) => {
                                    report.errors += 1;
                                    tracing::warn!(job = %job, error = %e, "stopped driving the job; another claim retries it");
                                }
                            }
                        }
                        Err(e) => {
                            report.errors += 1;
                            tracing::error!(error = %e, "a job's task failed");
                        }
                    }
                }
                _ = tokio::time::sleep(config.claim_every) => {}
            }
        }
        // Stopping: drop the driving (as if the process ended) and give the
        // leases up so others continue at once.
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        for job in self.exec.fences().jobs() {
            if let Err(e) = self.let_go(&job).await {
                tracing::warn!(job = %job, error = %e, "could not release the lease; it expires by itself");
            }
            report.released += 1;
        }
        Ok(report)
    }

    /// One look for jobs to drive: expired leases (a dead controller's jobs)
    /// are all taken at once, up to `max_jobs`; jobs never leased, up to
    /// `claim_batch` a look.
    async fn claim(
        &self,
        config: &ServeConfig,
        driving: &mut std::collections::HashSet<String>,
        tasks: &mut tokio::task::JoinSet<(String, Result<Outcome>)>,
        report: &mut ServeReport,
    ) -> Result<()> {
        let ledger = self.exec.ledger().clone();
        let holder = &self.config.holder;
        let active = ledger.active_jobs().await?;
        let now = ledger.now().await?;
        let leases: std::collections::HashMap<String, Lease> = ledger
            .leases()
            .await?
            .into_iter()
            .map(|l| (l.job_id.clone(), l))
            .collect();
        let mut free: Vec<(bool, String)> = active
            .into_iter()
            .filter(|j| !driving.contains(j))
            .filter_map(|j| match leases.get(&j) {
                Some(l) if l.is_live(now) => None,
                Some(_) => Some((true, j)),
                None => Some((false, j)),
            })
            .collect();
        // Taken-over jobs first; each controller tries the rest in its own
        // order, so they rarely race for the same lease.
        free.sort_by_key(|(expired, j)| (!expired, fnv1a64(format!("{holder}/{j}").as_bytes())));
        let mut fresh = 0;
        for (expired, job) in free {
            if driving.len() >= config.max_jobs {
                break;
            }
            if !expired && fresh >= config.claim_batch {
                break;
            }
            match ledger
                .acquire_lease(&job, holder, self.config.lease_ttl)
                .await?
            {
                Claim::Acquired(lease) => {
                    report.claimed += 1;
                    if lease.token > 1 {
                        report.taken_over += 1;
                        tracing::info!(job = %job, token = lease.token, "took the job over");
                    } else {
                        fresh += 1;
                    }
                    driving.insert(job.clone());
                    let me = self.clone();
                    tasks.spawn(async move {
                        let out = me.drive_leased(lease).await;
                        (job, out)
                    });
                }
                Claim::Held(_) => {}
            }
        }
        Ok(())
    }

    /// Rebuilds the job from the ledger: `Err(outcome)` when it already
    /// ended.
    async fn resume(
        &self,
        job_id: &str,
        keeper: &Option<Arc<LeaseKeeper>>,
    ) -> Result<std::result::Result<Driven, Outcome>> {
        let (_, spec) = self.spec(job_id).await?;
        let history = self.exec.ledger().job_history(job_id).await?;
        let (Some(first), Some(last)) = (history.first(), history.last()) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("job {job_id} has a file but no record; submit it again"),
            ));
        };
        let now = self.exec.clock().now();
        let total = spec.hours;
        if last.state.is_terminal() {
            // Whatever a dead controller left after the end goes now.
            self.sweep(job_id, &[]).await?;
            return Ok(Err(Outcome {
                job_id: job_id.into(),
                state: last.state,
                detail: last.detail.clone(),
                progress_hours: last.progress_hours,
                total_hours: total,
            }));
        }
        let deadline_at = spec
            .deadline
            .and_then(|d| time::Duration::try_from(d).ok())
            .map(|d| first.at + d);
        // The placement that runs (the last `running` record not followed
        // by an interruption) and a launch in flight (a `launching` record
        // not followed by `running`), and whether that launch is a move's.
        let (mut current, mut pending, mut moving): (Option<&JobRecord>, Option<&JobRecord>, bool) =
            (None, None, false);
        for r in &history {
            match r.state {
                JobState::Placing | JobState::Interrupted => {
                    current = None;
                    pending = None;
                    moving = false;
                }
                JobState::Launching => pending = Some(r),
                JobState::Running => {
                    current = Some(r);
                    pending = None;
                    moving = false;
                }
                JobState::Moving => {
                    moving = true;
                    pending = None;
                }
                JobState::Moved => moving = false,
                _ => {}
            }
        }
        let attempts = history.iter().map(|r| r.attempt).max().unwrap_or(0);
        let mut d = Driven {
            job_id: job_id.into(),
            template: self.template(&spec),
            spec,
            total,
            deadline_at,
            running: None,
            done: last.progress_hours,
            attempts,
            last_review: now,
            placing_since: None,
            last_placing_detail: String::new(),
            polls: 0,
            keeper: keeper.clone(),
            usage: None,
            usage_seen: HashMap::new(),
            usage_from: None,
        };
        match self.exec.ledger().job_usage(job_id).await {
            Ok(u) => {
                d.usage_from = u.as_ref().map(|u| u.updated_at);
                d.usage = u;
            }
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "cannot read the job's GPU use; measuring afresh")
            }
        }
        if let Some(k) = &keeper {
            k.check()?;
        }
        let current = current.cloned();
        let pending = pending.cloned();
        if let Some(rec) = &current {
            d.done = rec.progress_hours;
            d.running = self.rebuild(&d, rec, &history).await?;
            if moving || pending.is_some() {
                // A move was in flight: abandon it (the sweep below removes
                // what it may have made) and stay.
                if let Some(r) = &d.running {
                    let mut again = self.exec.record(r, JobState::Running);
                    again.detail = "a move in flight was abandoned after a restart".into();
                    self.exec.ledger().record_job(&again).await?;
                }
            }
        } else if let Some(rec) = &pending {
            d.done = rec.progress_hours;
            d.running = self.relaunch(&d, rec).await?;
        }
        let keep: Vec<InstanceId> = d
            .running
            .iter()
            .flat_map(|r| r.instances.iter().map(|i| i.id.clone()))
            .collect();
        let swept = self.sweep(job_id, &keep).await?;
        if swept > 0 {
            tracing::warn!(
                job = job_id,
                swept,
                "terminated instances the ledger does not hold"
            );
        }
        if let Some(r) = &d.running {
            d.done = r.done_before;
        }
        Ok(Ok(d))
    }

    /// Rebuilds the placement a `running` record names; `None` when none of
    /// it is left (it is then placed again).
    async fn rebuild(
        &self,
        d: &Driven,
        rec: &JobRecord,
        history: &[JobRecord],
    ) -> Result<Option<RunningJob>> {
        let Some(pool) = rec.pool.clone() else {
            return Ok(None);
        };
        let now = self.exec.clock().now();
        let left = match d.left(now, rec.progress_hours) {
            Ok(s) => s,
            Err(_) => return Ok(None),
        };
        let Some(provider) = self.exec.provider(pool.cloud).cloned() else {
            return Ok(None);
        };
        let Some(plan) = self.exec.plan_for(&left, &pool).await? else {
            tracing::warn!(job = %d.job_id, %pool, "the pool it ran in is no longer offered; placing it again");
            return Ok(None);
        };
        let mut instances = Vec::new();
        for id in &rec.instances {
            match provider.instance(id).await {
                Ok(i) => instances.push(i),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if instances.is_empty() {
            return Ok(None);
        }
        let started_at = placement_started(history, rec.attempt).unwrap_or(rec.at);
        let placement_group = if d.template.wants_group(&left) {
            crate::executor::group_of(&provider, &d.job_id, rec.attempt).await?
        } else {
            None
        };
        Ok(Some(RunningJob {
            job_id: d.job_id.clone(),
            spec: left,
            plan,
            instances,
            placement_group,
            started_at,
            attempts: rec.attempt,
            deadline_at: d.deadline_at,
            done_before: rec.progress_hours,
        }))
    }

    /// Re-sends the launch a `launching` record announced, with its key: the
    /// cloud returns what a first send made, or launches now.
    async fn relaunch(&self, d: &Driven, rec: &JobRecord) -> Result<Option<RunningJob>> {
        let Some(pool) = rec.pool.clone() else {
            return Ok(None);
        };
        let now = self.exec.clock().now();
        let Ok(left) = d.left(now, rec.progress_hours) else {
            return Ok(None);
        };
        let (Some(provider), Some(image)) = (
            self.exec.provider(pool.cloud).cloned(),
            d.template.images.get(&pool.cloud).cloned(),
        ) else {
            return Ok(None);
        };
        let Some(plan) = self.exec.plan_for(&left, &pool).await? else {
            return Ok(None);
        };
        let pending = RunningJob {
            job_id: d.job_id.clone(),
            spec: left,
            plan,
            instances: Vec::new(),
            placement_group: None,
            started_at: now,
            attempts: rec.attempt,
            deadline_at: d.deadline_at,
            done_before: rec.progress_hours,
        };
        match self
            .exec
            .launch_plan(
                &provider,
                &pending,
                &image,
                &d.template,
                "re-sent after a restart",
            )
            .await
        {
            Ok(made) => Ok(Some(
                self.exec.record_running(&provider, pending, made).await?,
            )),
            Err(e) if is_fatal(&e) && e.kind() != ErrorKind::InvalidInput => Err(e),
            Err(e) => {
                tracing::warn!(job = %d.job_id, error = %e, "the re-sent launch failed; placing again");
                if e.kind() == ErrorKind::InsufficientCapacity {
                    self.exec
                        .ledger()
                        .record_event(
                            &pool,
                            PoolEvent {
                                at: self.exec.clock().now(),
                                kind: PoolEventKind::CapacityFailure,
                            },
                        )
                        .await?;
                }
                Ok(None)
            }
        }
    }

    /// Terminates every live instance tagged with the job that is not in
    /// `keep`; returns how many.
    async fn sweep(&self, job_id: &str, keep: &[InstanceId]) -> Result<usize> {
        let filter = TagFilter::managed().with(tags::JOB, job_id);
        let mut n = 0;
        for p in self.exec.providers() {
            let found = match p.list_instances(&filter).await {
                Ok(v) => v,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Unauthenticated | ErrorKind::PermissionDenied
                    ) =>
                {
                    tracing::warn!(provider = p.name(), error = %e, "cannot sweep this cloud");
                    continue;
                }
                Err(e) => return Err(e),
            };
            for i in found {
                if keep.contains(&i.id) || !i.state.is_live() {
                    continue;
                }
                match p.terminate(&i.id).await {
                    Ok(()) => n += 1,
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                tracing::warn!(job = job_id, instance = %i.id, "terminated an instance the job does not hold");
            }
        }
        Ok(n)
    }

    /// Ends the job in `state` with `progress` hours done: releases its
    /// placement, sweeps anything else tagged with it, records the end.
    async fn finish(
        &self,
        d: &Driven,
        running: RunningJob,
        state: JobState,
        progress: f64,
        detail: String,
    ) -> Result<Outcome> {
        self.exec.end(running, state, progress, &detail).await?;
        self.sweep(&d.job_id, &[]).await?;
        Ok(d.outcome(state, detail, progress))
    }

    /// One poll.
    async fn step(&self, d: &mut Driven) -> Result<Option<Outcome>> {
        d.polls += 1;
        if let Some(k) = &d.keeper {
            k.check()?;
        }
        let ledger = self.exec.ledger().clone();
        // Cancelled (or ended) by someone else.
        if let Some(last) = ledger.job_latest(&d.job_id).await? {
            if last.state.is_terminal() {
                if let Some(r) = d.running.take() {
                    self.exec.release(&r).await?;
                }
                self.sweep(&d.job_id, &[]).await?;
                return Ok(Some(d.outcome(
                    last.state,
                    last.detail,
                    last.progress_hours,
                )));
            }
        }
        let now = self.exec.clock().now();
        let Some(running) = d.running.take() else {
            return self.place(d).await;
        };
        let mut summaries = Vec::new();
        let seen = self.observe(d, &running, now, &mut summaries).await;
        self.fold_usage(d, &running, &summaries).await;
        match seen {
            Seen::Unknown(why) => {
                tracing::warn!(job = %d.job_id, why, "could not read the instances this poll");
                d.running = Some(running);
                Ok(None)
            }
            Seen::Exited { code, live } => {
                let failed = code.trim() != "0";
                let left = if failed {
                    self.restarts_left(d).await?
                } else {
                    0
                };
                if left > 0 {
                    // The job's own error, with restarts left: start it again
                    // from what it saved, elsewhere if the policy says so.
                    // Not counted against the pool: the cloud did nothing
                    // wrong.
                    let most = d.spec.workload.max_restarts_on_errors;
                    let why = format!(
                        "run exited with {code}; restart {} of {most}",
                        most - left + 1
                    );
                    self.interrupt(d, running, &why, live, true, false).await?;
                    return self.place(d).await;
                }
                let done = running.done_before + live;
                let (state, detail, progress) = if failed {
                    (JobState::Failed, format!("run exited with {code}"), done)
                } else {
                    (
                        JobState::Succeeded,
                        "run exited with 0".to_string(),
                        d.total,
                    )
                };
                Ok(Some(
                    self.finish(d, running, state, progress, detail).await?,
                ))
            }
            Seen::Interrupted {
                why,
                saved,
                from_node,
                against_pool,
            } => {
                self.interrupt(d, running, &why, saved, from_node, against_pool)
                    .await?;
                // Place again in this same poll.
                self.place(d).await
            }
            Seen::Working {
                saved,
                live,
                reported,
            } => {
                let bare = d.spec.workload.run.is_none();
                if (bare || !reported) && running.done_before + live >= d.total - 1e-9 {
                    let detail = if bare {
                        "the work is done (estimated from run time)".to_string()
                    } else {
                        "the work is done (estimated: the node never reported)".to_string()
                    };
                    let total = d.total;
                    let done = self.finish(d, running, JobState::Succeeded, total, detail);
                    return Ok(Some(done.await?));
                }
                if self.config.sweep_every > 0 && d.polls.is_multiple_of(self.config.sweep_every) {
                    let keep: Vec<InstanceId> =
                        running.instances.iter().map(|i| i.id.clone()).collect();
                    self.sweep(&d.job_id, &keep).await?;
                }
                let review = time::Duration::try_from(self.config.move_review)
                    .unwrap_or(time::Duration::HOUR);
                if now - d.last_review >= review && running.spec.hours - saved > 1e-6 {
                    d.last_review = now;
                    match self
                        .exec
                        .consider_move(running, saved, &NoCheckpoint, &d.template)
                        .await?
                    {
                        Ok(moved) => {
                            tracing::info!(job = %d.job_id, to = %moved.plan.offer.pool, "moved");
                            d.done = moved.done_before;
                            d.attempts = moved.attempts;
                            d.running = Some(moved);
                        }
                        Err(stay) => d.running = Some(stay),
                    }
                } else {
                    d.running = Some(running);
                }
                Ok(None)
            }
        }
    }

    /// Places the rest of the work (no placement now).
    async fn place(&self, d: &mut Driven) -> Result<Option<Outcome>> {
        let now = self.exec.clock().now();
        if d.done >= d.total - 1e-9 {
            let detail = "the work is done".to_string();
            self.exec
                .ledger()
                .record_job(&d.record(JobState::Succeeded, now, d.total, &detail))
                .await?;
            return Ok(Some(d.outcome(JobState::Succeeded, detail, d.total)));
        }
        let left = d.left(now, d.done)?;
        let since = *d.placing_since.get_or_insert(now);
        match self
            .exec
            .start_excluding(
                &d.job_id,
                &left,
                &d.template,
                d.attempts,
                None,
                d.deadline_at,
                d.done,
            )
            .await
        {
            Ok(r) => {
                d.attempts = r.attempts;
                d.placing_since = None;
                d.last_placing_detail.clear();
                d.last_review = now;
                let keep: Vec<InstanceId> = r.instances.iter().map(|i| i.id.clone()).collect();
                d.running = Some(r);
                self.sweep(&d.job_id, &keep).await?;
                Ok(None)
            }
            Err(e) if retry_placement(&e) => {
                d.attempts = self
                    .exec
                    .ledger()
                    .job_history(&d.job_id)
                    .await?
                    .iter()
                    .map(|r| r.attempt)
                    .max()
                    .unwrap_or(d.attempts)
                    .max(d.attempts);
                let waited = Duration::from_secs((now - since).whole_seconds().max(0) as u64);
                if waited >= self.config.give_up_after {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "no placement for {}: {e}",
                            gpufleet_core::placer::format_duration(waited)
                        ),
                    ));
                }
                let detail = format!("waiting for capacity: {e}");
                if detail != d.last_placing_detail {
                    self.exec
                        .ledger()
                        .record_job(&d.record(JobState::Placing, now, d.done, &detail))
                        .await?;
                    d.last_placing_detail = detail;
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Records an interruption and releases the placement.
    /// Restarts on errors the job has left: its `max_restarts_on_errors`
    /// less the restarts its records show.
    async fn restarts_left(&self, d: &Driven) -> Result<u32> {
        let used = self
            .exec
            .ledger()
            .job_history(&d.job_id)
            .await?
            .iter()
            .filter(|r| crate::jobs::is_restart_on_error(r))
            .count();
        Ok(d.spec
            .workload
            .max_restarts_on_errors
            .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX)))
    }

    async fn interrupt(
        &self,
        d: &mut Driven,
        running: RunningJob,
        why: &str,
        saved: f64,
        from_node: bool,
        against_pool: bool,
    ) -> Result<()> {
        tracing::warn!(job = %d.job_id, pool = %running.plan.offer.pool, why, against_pool, "interrupted");
        let detail = format!("{} {why}", if from_node { "node:" } else { "controller:" });
        self.exec
            .interrupted(&running, saved, detail, against_pool)
            .await?;
        d.done = running.done_before + saved.max(0.0);
        d.attempts = d.attempts.max(running.attempts);
        Ok(())
    }

    /// Reads the placement's instances.
    /// Folds the nodes' GPU summaries into the job's usage and keeps it in
    /// the ledger when it grew. A failure to record is logged, not fatal:
    /// measurement never stops a job.
    async fn fold_usage(&self, d: &mut Driven, r: &RunningJob, seen: &[(InstanceId, GpuSummary)]) {
        let mut changed = false;
        let instances = r.instances.len() as u32;
        for (id, s) in seen {
            let since = d
                .usage_seen
                .get(id)
                .copied()
                .unwrap_or_else(|| r.started_at.max(d.usage_from.unwrap_or(r.started_at)));
            if JobUsage::fold(
                &mut d.usage,
                s,
                Some(since),
                &r.plan.offer.instance_type.name,
                instances,
            ) {
                d.usage_seen.insert(id.clone(), s.at);
                changed = true;
            }
        }
        if let (true, Some(u)) = (changed, &d.usage) {
            if let Err(e) = self.exec.ledger().record_usage(&d.job_id, u).await {
                tracing::warn!(job = %d.job_id, error = %e, "cannot record the job's GPU use");
            }
        }
    }

    async fn observe(
        &self,
        d: &Driven,
        r: &RunningJob,
        now: OffsetDateTime,
        summaries: &mut Vec<(InstanceId, GpuSummary)>,
    ) -> Seen {
        let pool = &r.plan.offer.pool;
        let Some(provider) = self.exec.provider(pool.cloud) else {
            return Seen::Unknown(format!("no provider for {}", pool.cloud));
        };
        let mut seen: Vec<Instance> = Vec::with_capacity(r.instances.len());
        for i in &r.instances {
            match provider.instance(&i.id).await {
                Ok(now_i) => seen.push(now_i),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    let (saved, _) = estimate_progress(r, now);
                    // The instance is gone; some clouds still say why (GCE's
                    // zone operations outlive a spot VM deleted on
                    // preemption).
                    let reason = match provider.end_reason(&i.id).await {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::debug!(instance = %i.id, error = %e, "no end reason");
                            None
                        }
                    };
                    let why = match &reason {
                        Some(r) => format!(
                            "instance {} no longer exists: {}",
                            i.id,
                            describe_end(pool.cloud, r)
                        ),
                        None => format!("instance {} no longer exists", i.id),
                    };
                    return Seen::Interrupted {
                        why,
                        saved,
                        from_node: false,
                        against_pool: counts_against_pool(
                            pool.capacity,
                            reason.as_ref().map(|r| r.cause),
                        ),
                    };
                }
                Err(e) => return Seen::Unknown(e.to_string()),
            }
        }
        summaries.extend(
            seen.iter()
                .filter_map(|i| GpuSummary::from_tags(&i.tags).map(|s| (i.id.clone(), s))),
        );
        // What the node reports.
        let mut reported: Option<f64> = None;
        let mut beat: Option<OffsetDateTime> = None;
        for i in &seen {
            if let Some(code) = i.tags.get(tags::EXIT) {
                let (_, live) = estimate_progress(r, now);
                let live = self.reported(d, r, i).unwrap_or(live);
                return Seen::Exited {
                    code: code.clone(),
                    live,
                };
            }
        }
        for i in &seen {
            if let Some(p) = self.reported(d, r, i) {
                reported = Some(reported.map_or(p, |q: f64| q.min(p)));
            }
            if let Some(b) = i
                .tags
                .get(tags::HEARTBEAT)
                .and_then(|v| tags::parse_time(v))
            {
                beat = Some(beat.map_or(b, |c: OffsetDateTime| c.min(b)));
            }
        }
        let (est_saved, est_live) = estimate_progress(r, now);
        let saved = reported.unwrap_or(est_saved);
        let live = reported.unwrap_or(est_live);
        for i in &seen {
            let gone = match i.state {
                InstanceState::Terminated | InstanceState::ShuttingDown => Some("terminated"),
                InstanceState::Stopped | InstanceState::Stopping => Some("stopped"),
                InstanceState::Pending | InstanceState::Running => None,
            };
            if let Some(state) = gone {
                let by = match &i.end_reason {
                    Some(r) => describe_end(pool.cloud, r),
                    None => format!(
                        "{} reclaimed it or it was ended out of band; the cloud gave no reason",
                        pool.cloud
                    ),
                };
                return Seen::Interrupted {
                    why: format!("instance {} is {state} ({by})", i.id),
                    saved,
                    from_node: false,
                    against_pool: counts_against_pool(
                        pool.capacity,
                        i.end_reason.as_ref().map(|r| r.cause),
                    ),
                };
            }
            if let Some(at) = i.tags.get(tags::NOTICE).and_then(|v| tags::parse_time(v)) {
                if at >= r.started_at {
                    return Seen::Interrupted {
                        why: format!("interruption notice on {} at {at}", i.id),
                        // The watch agent ran the checkpoint hook.
                        saved: live,
                        from_node: true,
                        against_pool: true,
                    };
                }
            }
        }
        if let Some(b) = beat {
            let quiet = (now - b).whole_seconds().max(0) as u64;
            if quiet >= self.config.heartbeat_grace.as_secs() {
                return Seen::Interrupted {
                    why: format!(
                        "no heartbeat for {} (grace {}); the node is treated as failed",
                        gpufleet_core::placer::format_duration(Duration::from_secs(quiet)),
                        gpufleet_core::placer::format_duration(self.config.heartbeat_grace)
                    ),
                    saved,
                    from_node: false,
                    // A silent node says nothing about its pool.
                    against_pool: false,
                };
            }
        }
        Seen::Working {
            saved,
            live,
            reported: reported.is_some() || beat.is_some(),
        }
    }

    /// The reference hours of this placement the node says are saved.
    fn reported(&self, d: &Driven, r: &RunningJob, i: &Instance) -> Option<f64> {
        let permille: f64 = i
            .tags
            .get(tags::PROGRESS)?
            .trim()
            .parse::<u32>()
            .ok()?
            .min(1000)
            .into();
        let total_done = permille / 1000.0 * d.total;
        Some((total_done - r.done_before).clamp(0.0, r.spec.hours))
    }

    /// Fails the job: releases and sweeps everything, records the reason.
    async fn give_up(&self, d: &mut Driven, why: &str) -> Result<Outcome> {
        tracing::error!(job = %d.job_id, why, "job failed");
        if let Some(r) = d.running.take() {
            let done = r.done_before;
            return self
                .finish(d, r, JobState::Failed, done, why.to_string())
                .await;
        }
        let now = self.exec.clock().now();
        self.exec
            .ledger()
            .record_job(&d.record(JobState::Failed, now, d.done, why))
            .await?;
        self.sweep(&d.job_id, &[]).await?;
        Ok(d.outcome(JobState::Failed, why.to_string(), d.done))
    }
}

/// Why an instance ended, in words: who ended it and the cloud's code.
fn describe_end(cloud: Cloud, r: &gpufleet_core::EndReason) -> String {
    match r.cause {
        EndCause::Reclaimed => format!("{cloud} reclaimed it: {}", r.code),
        EndCause::Requested => format!("ended on request: {}", r.code),
        EndCause::Other => format!("{cloud} ended it: {}", r.code),
    }
}

/// Whether an instance that ended with `cause` is evidence against its pool:
/// a reclaim or a cloud-side failure is; an instance someone stopped or
/// terminated by hand is not. With no cause given, a spot instance that
/// vanished is counted (reclaims are what ends spot instances unasked), an
/// on-demand one is not.
pub fn counts_against_pool(capacity: Capacity, cause: Option<EndCause>) -> bool {
    match cause {
        Some(EndCause::Reclaimed | EndCause::Other) => true,
        Some(EndCause::Requested) => false,
        None => capacity == Capacity::Spot,
    }
}

/// Estimated reference hours of `r`'s placement at `now`: (saved at the last
/// checkpoint, done so far).
pub fn estimate_progress(r: &RunningJob, now: OffsetDateTime) -> (f64, f64) {
    let hours = |d: Duration| d.as_secs_f64() / 3600.0;
    let elapsed =
        ((now - r.started_at).as_seconds_f64() / 3600.0 - hours(r.spec.restart_overhead)).max(0.0);
    if r.plan.work_hours <= 0.0 {
        return (0.0, 0.0);
    }
    let rate = r.spec.hours / r.plan.work_hours;
    let interval = match r.spec.checkpoint_interval {
        CheckpointInterval::Every(d) => hours(d),
        CheckpointInterval::Auto => r.plan.checkpoint_interval_hours,
    };
    let cost = hours(r.spec.checkpoint_cost);
    let (saved, live) = if interval > 0.0 && interval.is_finite() {
        let cycle = interval + cost;
        let full = (elapsed / cycle).floor();
        let partial = elapsed - full * cycle;
        (full * interval, full * interval + partial.min(interval))
    } else {
        (0.0, elapsed)
    };
    let cap = r.spec.hours;
    ((saved * rate).min(cap), (live * rate).min(cap))
}

/// Errors that end the job rather than being retried.
fn is_fatal(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InvalidInput
            | ErrorKind::Unauthenticated
            | ErrorKind::PermissionDenied
            | ErrorKind::Unsupported
    )
}

/// Placement failures that are waited out.
fn retry_placement(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InsufficientCapacity
            | ErrorKind::QuotaExceeded
            | ErrorKind::Unavailable
            | ErrorKind::Timeout
            | ErrorKind::RateLimited
    )
}

/// The clouds a job may use that have no image, for a clear error.
pub fn clouds_without_image(
    spec: &JobSpec,
    template: &LaunchTemplate,
    enabled: &[Cloud],
) -> Vec<Cloud> {
    enabled
        .iter()
        .filter(|c| spec.clouds.is_empty() || spec.clouds.contains(c))
        .filter(|c| !template.images.contains_key(c) && !spec.workload.images.contains_key(c))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1,000 random names, long, unicode, sharing prefixes: every one gets a
    /// valid job id and valid keys, no two alike, and nothing panics.
    #[test]
    fn a_thousand_hostile_names_never_share_a_key() {
        let alphabet: Vec<char> = "aZ09-_.训练🚀éß \u{202e}\u{0}/:#%ǅ".chars().collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut names = std::collections::BTreeSet::new();
        let shared = "a-very-long-common-prefix-that-fills-sixty-four-bytes-of-the-name";
        while names.len() < 1_000 {
            let len = (next() % 120) as usize;
            let mut name: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if next() % 3 == 0 {
                name = format!("{shared}{name}");
            }
            if !name.is_empty() {
                names.insert(name);
            }
        }
        let mut ids = std::collections::HashSet::new();
        let mut keys = std::collections::HashSet::new();
        for name in &names {
            let id = job_id_for_name(name);
            check_job_id(&id).unwrap_or_else(|e| panic!("{name:?} -> {id:?}: {e}"));
            assert!(ids.insert(id.clone()), "two names share the id {id}");
            for attempt in [1, 2, 17, u32::MAX] {
                let key = crate::executor::launch_key(&id, attempt).unwrap();
                // Its placement group's name holds the key and is valid on
                // GCP (the strictest: 63 characters, [a-z0-9-]).
                let group = crate::executor::placement_group_name(&id, attempt);
                assert_eq!(group, format!("gpufleet-{key}"));
                assert!(group.len() <= 63, "{group}");
                assert!(
                    group
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                    "{group}"
                );
                assert!(
                    keys.insert(key.to_string()),
                    "two names share the key {key}"
                );
            }
        }
        assert_eq!(keys.len(), 4_000);
    }
}
