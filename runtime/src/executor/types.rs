//! What the executor is given and gives back: the checkpoint hook, its
//! events, the launch template, its settings, a running job, and the keys
//! and group names derived from a job's id and attempt.

use super::*;

/// Runs the job's checkpoint before an interruption's deadline.
#[async_trait]
pub trait CheckpointHook: Send + Sync {
    /// Saves the job's state; it is cancelled at the deadline.
    async fn checkpoint(&self, job: &RunningJob) -> Result<()>;
}

/// A hook that does nothing (jobs that checkpoint on their own schedule).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCheckpoint;

#[async_trait]
impl CheckpointHook for NoCheckpoint {
    async fn checkpoint(&self, _job: &RunningJob) -> Result<()> {
        Ok(())
    }
}

/// What the executor did, in order (also logged with `tracing`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum ExecEvent {
    /// A cloud did not answer for offers: placed without it.
    CloudSkipped {
        /// Which.
        cloud: Cloud,
        /// Why, in one line.
        error: String,
    },
    /// A launch was refused; the next plan is tried.
    LaunchFailed {
        /// Where.
        pool: Pool,
        /// Why.
        kind: String,
    },
    /// Instances were launched.
    Launched {
        /// Where.
        pool: Pool,
        /// How many.
        instances: usize,
    },
    /// A placement group was created.
    PlacementGroupCreated {
        /// Its name.
        name: String,
    },
    /// A placement group was deleted.
    PlacementGroupDeleted {
        /// Its name.
        name: String,
    },
    /// The checkpoint hook finished before the deadline.
    Checkpointed {
        /// Where the job ran.
        pool: Pool,
    },
    /// The checkpoint hook failed or outlived the deadline.
    CheckpointFailed {
        /// Where the job ran.
        pool: Pool,
        /// Why.
        reason: String,
    },
    /// The job was interrupted.
    Interrupted {
        /// Where.
        pool: Pool,
    },
    /// The policy decided (one line per decision point).
    Decided {
        /// What it said and why.
        explanation: String,
    },
    /// The job moved to a cheaper pool.
    Moved {
        /// From.
        from: Pool,
        /// To.
        to: Pool,
        /// Expected saving, USD.
        saving_usd: f64,
    },
    /// Instances were terminated.
    Terminated {
        /// Where.
        pool: Pool,
        /// How many.
        instances: usize,
    },
}

/// What the launch uses besides the plan.
#[derive(Debug, Clone, Default)]
pub struct LaunchTemplate {
    /// Image per cloud; a cloud without one is skipped.
    pub images: HashMap<Cloud, String>,
    /// Tags for cost attribution on everything created.
    pub tags: Tags,
    /// Time to live of the instances: a hard limit from their launch.
    pub ttl: Option<Duration>,
    /// The expiry a controller gives the instances it launches and then
    /// extends while it drives them (see the controller's
    /// `ControllerConfig::expiry_window`): at launch,
    /// this long from the request (within `ttl`, when set), on the clouds in
    /// `expiry_clouds` only.
    pub driven_expiry: Option<Duration>,
    /// The clouds where the controller has extended an expiry already (one
    /// set shared by every copy of the template): only a launch there
    /// carries `driven_expiry`. On a cloud that refuses the controller the
    /// tag write (an identity allowed to tag only at launch), an expiry
    /// nobody can extend would end a live job's instances; there the first
    /// poll sets it, if it can.
    pub expiry_clouds: Arc<std::sync::Mutex<std::collections::HashSet<Cloud>>>,
    /// Instances per launch (nodes of a multi-node job).
    pub nodes: u32,
    /// What the instances run, and how they are reached (boot script,
    /// network, disk, identity); none launches bare instances.
    pub workload: Option<Workload>,
    /// A placement group strategy: every launch gets a group of its own
    /// (a job whose spec asks for a placement group gets `cluster` when
    /// this is unset).
    pub placement_strategy: Option<PlacementStrategy>,
    /// Where the workload's boot script runs: a cloud's instance, or a
    /// process of the `local` provider (which reports through a file).
    pub node: crate::workload::Node,
}

impl LaunchTemplate {
    /// This template with what `spec`'s job file says its instances run:
    /// its images (one per cloud) and its workload (`run`, `setup`, `env`,
    /// `checkpoint`, `[access]`), when it has one.
    pub fn for_job(mut self, spec: &JobSpec) -> Self {
        for (cloud, image) in &spec.workload.images {
            self.images.insert(*cloud, image.clone());
        }
        if !spec.workload.is_empty() || !spec.workload.access.is_empty() {
            self.workload = Some(spec.workload.clone());
        }
        self
    }

    /// Whether a launch of `spec` gets a placement group of its own.
    pub fn wants_group(&self, spec: &JobSpec) -> bool {
        spec.placement_group || self.placement_strategy.is_some()
    }
}

/// The name of the placement group launch `attempt` of `job_id` creates:
/// `gpufleet-` and that launch's idempotency key (a resumed controller finds
/// it by this name; at most 62 lower-case letters, digits and `-`, valid on
/// all three clouds).
pub fn placement_group_name(job_id: &str, attempt: u32) -> String {
    format!("gpufleet-{}", key_text(job_id, attempt))
}

/// The placement group named `name` ([`placement_group_name`]) of `job_id`,
/// if it exists: found by its name among the job's groups (a resumed controller, a
/// roll-back and a lost creation answer all find it this way).
pub async fn group_of(
    provider: &Arc<dyn Provider>,
    job_id: &str,
    name: &str,
) -> Result<Option<PlacementGroup>> {
    Ok(provider
        .list_placement_groups(&gpufleet_core::TagFilter::default().with(tags::JOB, job_id))
        .await?
        .into_iter()
        .find(|g| g.name == name))
}

/// What rolling back an unfinished launch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// Instances terminated (found by the launch's key).
    pub terminated: usize,
    /// What was left, in words: the launch's placement group, when it could
    /// not be looked up or deleted (`reap --yes` deletes it once empty).
    pub left: Option<String>,
}

/// The executor's settings.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Extra hysteresis on moves: move only when the policy's expected cost
    /// of moving is below staying's by this share (default 0: the policy's
    /// decision as it is, which already charges the move its changeover and
    /// is what the simulator measures).
    pub move_margin: f64,
    /// Plans tried per placement before giving up (default 8).
    pub max_launch_attempts: usize,
    /// Once the chosen pool has met no capacity, how many of the next
    /// candidates are launched at once (default 3; 1 tries them one after
    /// another). The first to run wins and the others are rolled back.
    pub hedge_width: usize,
    /// The placer every decision goes through: the hazard model, the
    /// policy's settings, the width, the evidence window and the cooldown
    /// (default [`Placer::default`], the one `gpufleet place` uses).
    pub placer: Placer,
    /// What launch keys and group names are scoped to beside the job id
    /// ([`launch_scope`]: the owner and the ledger), so that two owners'
    /// `launch --name shared` are two launches; `None` (managed jobs, whose
    /// ids are unique already and which any controller of the ledger may
    /// resume) derives them from the job id alone.
    pub key_scope: Option<String>,
}

/// The scope of `owner`'s launches recorded in the ledger at `ledger` (its
/// masked location; for a file, on this host): a hash, for
/// [`ExecutorConfig::key_scope`].
pub fn launch_scope(owner: &str, ledger: &str) -> String {
    let host = if crate::ledgers::is_postgres_url(ledger) {
        String::new()
    } else {
        crate::names::default_holder()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    format!(
        "{:016x}",
        fnv1a64(format!("{owner}\0{ledger}\0{host}").as_bytes())
    )
}

/// `job_id` with `scope` folded in, as keys and group names derive from it.
pub(crate) fn scoped_id(job_id: &str, scope: Option<&str>) -> String {
    match scope {
        Some(s) => format!("{job_id}\0{s}"),
        None => job_id.to_string(),
    }
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            move_margin: 0.0,
            max_launch_attempts: 8,
            hedge_width: 3,
            placer: Placer::default(),
            key_scope: None,
        }
    }
}

/// A job running in one pool.
#[derive(Debug, Clone)]
pub struct RunningJob {
    /// The job's id (idempotency keys derive from it).
    pub job_id: String,
    /// What it needs; `hours` is the work left when this placement started.
    pub spec: JobSpec,
    /// The plan it runs on.
    pub plan: Plan,
    /// Its instances.
    pub instances: Vec<Instance>,
    /// Its placement group.
    pub placement_group: Option<PlacementGroup>,
    /// When this placement started.
    pub started_at: OffsetDateTime,
    /// The launch attempt this placement was made by (part of its
    /// idempotency key and its placement group's name).
    pub attempts: u32,
    /// The launch attempts whose keys the job has spent so far: at least
    /// `attempts`, more after a hedged launch (its other launches spent
    /// theirs). The job's next launch takes the attempt after it.
    pub keys_used: u32,
    /// When the job must be done.
    pub deadline_at: Option<OffsetDateTime>,
    /// Reference work-hours the job had done when this placement started.
    pub done_before: f64,
}

impl RunningJob {
    /// A placement about to launch: no instances or group yet, no deadline,
    /// nothing done before it (set those with the `with_*` methods).
    pub fn pending(
        job_id: impl Into<String>,
        spec: JobSpec,
        plan: Plan,
        started_at: OffsetDateTime,
        attempts: u32,
    ) -> Self {
        RunningJob {
            job_id: job_id.into(),
            spec,
            plan,
            instances: Vec::new(),
            placement_group: None,
            started_at,
            attempts,
            keys_used: attempts,
            deadline_at: None,
            done_before: 0.0,
        }
    }

    /// When the job must be done.
    pub fn with_deadline(mut self, deadline_at: Option<OffsetDateTime>) -> Self {
        self.deadline_at = deadline_at;
        self
    }

    /// Reference work-hours done before this placement.
    pub fn with_done_before(mut self, hours: f64) -> Self {
        self.done_before = hours;
        self
    }
}

/// The idempotency key of launch `attempt` of `job_id`: a readable prefix of
/// the id and a 64-bit hash of all of it, so ids that share a prefix (or
/// differ only in characters a key cannot hold) never share a key.
pub fn launch_key(job_id: &str, attempt: u32) -> Result<IdempotencyKey> {
    IdempotencyKey::new(key_text(job_id, attempt))
}

pub(super) fn key_text(job_id: &str, attempt: u32) -> String {
    format!(
        "{}-{:016x}-a{attempt}",
        sanitize(job_id, 24),
        fnv1a64(job_id.as_bytes())
    )
}

pub(crate) use crate::names::sanitize;
