//! Execution: at every decision point (start, capacity failure, interruption,
//! periodic review) ask the placement policy ([`super::policy::decide`], the
//! function the simulator measures) what to do, and do it: launch where it
//! says; on a capacity error record the failure, drop that pool for this
//! placement and ask again; on an interruption notice checkpoint before the
//! deadline, record the interruption and place the rest of the work again;
//! move a running job only when the policy says the move pays for its
//! changeover; and leave nothing running.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::catalog::{GpuRequirement, OfferQuery};
use gpufleet_core::clock::Clock;
use gpufleet_core::ledger::{JobRecord, JobState, Ledger};
use gpufleet_core::placer::policy::{self, plans, Action, Decision, PolicyConfig};
use gpufleet_core::placer::{
    rank, HazardModel, JobSpec, Plan, PoolEvent, PoolEventKind, PoolEvidence, RankContext, Ranking,
};
use gpufleet_core::{
    fnv1a64, tags, Capacity, Cloud, Error, ErrorKind, IdempotencyKey, Instance, InterruptionNotice,
    LaunchRequest, NoticeKind, Offer, PlacementGroup, PlacementGroupRequest, PlacementStrategy,
    Pool, Provider, Result, Tags,
};

use gpufleet_core::placer::Workload;

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
    /// Time to live of the instances.
    pub ttl: Option<Duration>,
    /// Instances per launch (nodes of a multi-node job).
    pub nodes: u32,
    /// What the instances run, and how they are reached (boot script,
    /// network, disk, identity); none launches bare instances.
    pub workload: Option<Workload>,
    /// A placement group strategy: every launch gets a group of its own
    /// (a job whose spec asks for a placement group gets `cluster` when
    /// this is unset).
    pub placement_strategy: Option<PlacementStrategy>,
}

impl LaunchTemplate {
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

/// The placement group launch `attempt` of `job_id` made, if it exists:
/// found by its name among the job's groups (a resumed controller, a
/// roll-back and a lost creation answer all find it this way).
pub async fn group_of(
    provider: &Arc<dyn Provider>,
    job_id: &str,
    attempt: u32,
) -> Result<Option<PlacementGroup>> {
    let name = placement_group_name(job_id, attempt);
    Ok(provider
        .list_placement_groups(&gpufleet_core::TagFilter::default().with(tags::JOB, job_id))
        .await?
        .into_iter()
        .find(|g| g.name == name))
}

/// How many times a launch whose key the cloud still binds to an ended launch
/// (`AlreadyExists`) moves on to the next attempt's key.
const STALE_KEY_RETRIES: u32 = 2;

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
    /// How far back the ledger's evidence is read (default 14 days).
    pub evidence_window: Duration,
    /// A pool that interrupted or refused capacity this recently is tried only
    /// after every other feasible plan (default 30 min: in the 2022 traces a
    /// pool that preempted stayed unavailable for a mean of 1 h).
    pub cooldown: Duration,
    /// The placement policy's settings.
    pub policy: PolicyConfig,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            move_margin: 0.0,
            policy: PolicyConfig::default(),
            max_launch_attempts: 8,
            evidence_window: Duration::from_secs(14 * 86_400),
            cooldown: plans::DEFAULT_COOLDOWN,
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
    /// Launch attempts so far (part of each idempotency key).
    pub attempts: u32,
    /// When the job must be done.
    pub deadline_at: Option<OffsetDateTime>,
    /// Reference work-hours the job had done when this placement started.
    pub done_before: f64,
}

/// At most this many events are kept in memory (older ones are in the log
/// and, for managed jobs, in the ledger): a long-lived controller's memory
/// stays flat.
const MAX_EVENTS: usize = 256;

/// The idempotency key of launch `attempt` of `job_id`: a readable prefix of
/// the id and a 64-bit hash of all of it, so ids that share a prefix (or
/// differ only in characters a key cannot hold) never share a key.
pub fn launch_key(job_id: &str, attempt: u32) -> Result<IdempotencyKey> {
    IdempotencyKey::new(key_text(job_id, attempt))
}

fn key_text(job_id: &str, attempt: u32) -> String {
    format!(
        "{}-{:016x}-a{attempt}",
        sanitize(job_id, 24),
        fnv1a64(job_id.as_bytes())
    )
}

/// Places and runs jobs over several providers.
#[derive(Debug)]
pub struct Executor {
    providers: Vec<Arc<dyn Provider>>,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    model: HazardModel,
    config: ExecutorConfig,
    events: Mutex<Vec<ExecEvent>>,
    totals: Totals,
    fences: Arc<crate::lease::Fences>,
}

/// Running totals over the executor's life (the event list keeps only the
/// newest [`MAX_EVENTS`]).
#[derive(Debug, Default)]
struct Totals {
    launched: AtomicU64,
    terminated: AtomicU64,
}

impl Executor {
    /// An executor over `providers` (one per cloud). Its records of a job
    /// this process holds a lease on carry the lease's fencing token (see
    /// [`crate::lease`]).
    pub fn new(
        providers: Vec<Arc<dyn Provider>>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let fences = Arc::new(crate::lease::Fences::default());
        Executor {
            providers,
            ledger: Arc::new(crate::lease::FencedLedger::new(ledger, fences.clone())),
            fences,
            clock,
            model: HazardModel::default(),
            config: ExecutorConfig::default(),
            events: Mutex::new(Vec::new()),
            totals: Totals::default(),
        }
    }

    /// The fencing tokens of the leases this process holds.
    pub fn fences(&self) -> &Arc<crate::lease::Fences> {
        &self.fences
    }

    /// Sets the hazard model.
    pub fn with_model(mut self, model: HazardModel) -> Self {
        self.model = model;
        self
    }

    /// Sets the configuration.
    pub fn with_config(mut self, config: ExecutorConfig) -> Self {
        self.config = config;
        self
    }

    /// What happened so far.
    pub fn events(&self) -> Vec<ExecEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn emit(&self, event: ExecEvent) {
        tracing::info!(?event, "gpufleet executor");
        match &event {
            ExecEvent::Launched { instances, .. } => {
                self.totals
                    .launched
                    .fetch_add(*instances as u64, Ordering::Relaxed);
            }
            ExecEvent::Terminated { instances, .. } => {
                self.totals
                    .terminated
                    .fetch_add(*instances as u64, Ordering::Relaxed);
            }
            _ => {}
        }
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() >= MAX_EVENTS {
            events.drain(..MAX_EVENTS / 2);
        }
        events.push(event);
    }

    /// Instances launched and terminated over the executor's life.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.totals.launched.load(Ordering::Relaxed),
            self.totals.terminated.load(Ordering::Relaxed),
        )
    }

    /// The providers, one per cloud.
    pub fn providers(&self) -> &[Arc<dyn Provider>] {
        &self.providers
    }

    /// The executor's settings.
    pub fn settings(&self) -> &ExecutorConfig {
        &self.config
    }

    /// The ledger it records to.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// The clock it reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The provider of `cloud`, if it has one.
    pub fn provider(&self, cloud: Cloud) -> Option<&Arc<dyn Provider>> {
        self.providers.iter().find(|p| p.cloud() == cloud)
    }

    /// Offers for the job from every allowed provider, with the providers'
    /// stability signals merged in. A provider that fails is skipped (and
    /// logged); if all fail, the last error is returned.
    pub async fn offers(&self, job: &JobSpec) -> Result<Vec<Offer>> {
        let mut q = OfferQuery::new();
        q.gpus = job
            .gpus
            .iter()
            .map(|g| GpuRequirement {
                model: g.model.clone(),
                count: Some(g.count),
            })
            .collect();
        q.regions = job.regions.clone();
        q.zones = job.zones.clone();
        let (mut all, mut last_err, mut asked) = (Vec::new(), None, 0);
        for p in &self.providers {
            if !job.clouds.is_empty() && !job.clouds.contains(&p.cloud()) {
                continue;
            }
            asked += 1;
            match p.offers(&q).await {
                Ok(mut offers) => {
                    let spot: Vec<Pool> = offers
                        .iter()
                        .filter(|o| o.pool.capacity == Capacity::Spot)
                        .map(|o| o.pool.clone())
                        .collect();
                    if !spot.is_empty() && p.capabilities().stability {
                        if let Ok(stab) = p.stability(&spot).await {
                            let by_pool: HashMap<Pool, _> = spot.into_iter().zip(stab).collect();
                            for o in offers.iter_mut() {
                                if let Some(s) = by_pool.get(&o.pool) {
                                    if s.bucket.is_some()
                                        || s.placement_score.is_some()
                                        || s.interruption_rate_per_hour.is_some()
                                    {
                                        o.stability = s.clone();
                                    }
                                }
                            }
                        }
                    }
                    all.extend(offers);
                }
                Err(e) => {
                    tracing::warn!(provider = p.name(), error = %e, "offers failed; placing without this provider");
                    last_err = Some(e);
                }
            }
        }
        match (all.is_empty(), last_err) {
            (true, Some(e)) => Err(e),
            (true, None) if asked == 0 => Err(Error::invalid_input(
                "no provider for the job's allowed clouds",
            )),
            _ => Ok(all),
        }
    }

    /// The providers' offers for the job, the ledger's evidence (covering at
    /// least the cooldown) and now: what ranking and the policy read.
    async fn inputs(
        &self,
        job: &JobSpec,
    ) -> Result<(Vec<Offer>, HashMap<Pool, PoolEvidence>, OffsetDateTime)> {
        let offers = self.offers(job).await?;
        let now = self.clock.now();
        let window = self.config.evidence_window.max(self.config.cooldown);
        let since = now - time::Duration::try_from(window).unwrap_or(time::Duration::days(14));
        let evidence = self.ledger.evidence(since).await?;
        Ok((offers, evidence, now))
    }

    /// Ranks the job over the providers' offers and the ledger's evidence.
    pub async fn rank(&self, job: &JobSpec, limit: usize) -> Result<Ranking> {
        let (offers, evidence, now) = self.inputs(job).await?;
        Ok(rank(
            job,
            &offers,
            &RankContext {
                now,
                model: &self.model,
                evidence: &evidence,
                limit,
            },
        ))
    }

    /// Ranks for the policy ([`plans::rank_for_policy`]): the ranking, the
    /// usable plans with an on-demand fallback, and the evidence read.
    async fn rank_for_policy(
        &self,
        job: &JobSpec,
        limit: usize,
    ) -> Result<(Ranking, Vec<Plan>, HashMap<Pool, PoolEvidence>)> {
        let (offers, evidence, now) = self.inputs(job).await?;
        let (ranking, plans) = plans::rank_for_policy(
            job,
            &offers,
            &RankContext {
                now,
                model: &self.model,
                evidence: &evidence,
                limit,
            },
        );
        Ok((ranking, plans, evidence))
    }

    /// What turning plans into the policy's candidates reads, now.
    fn policy_context<'a>(
        &'a self,
        nodes: u32,
        evidence: &'a HashMap<Pool, PoolEvidence>,
    ) -> plans::Context<'a> {
        plans::Context {
            nodes,
            model: &self.model,
            evidence,
            now: self.clock.now(),
            cooldown: self.config.cooldown,
            config: &self.config.policy,
        }
    }

    /// Places the job and launches it on the best plan that has capacity.
    pub async fn start(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
    ) -> Result<RunningJob> {
        self.start_excluding(job_id, job, template, 0, None, None, 0.0)
            .await
    }

    /// The plans the policy may choose from ([`plans::usable`]) on a cloud
    /// with a provider and an image, not in `exclude`.
    fn usable(
        &self,
        plans: Vec<Plan>,
        template: &LaunchTemplate,
        exclude: Option<&Pool>,
    ) -> Vec<Plan> {
        plans
            .into_iter()
            .filter(|p| Some(&p.offer.pool) != exclude)
            .filter(|p| {
                self.provider(p.offer.pool.cloud).is_some()
                    && template.images.contains_key(&p.offer.pool.cloud)
            })
            .collect()
    }

    /// What the placement policy would do for `job` now, from nowhere: the
    /// decision [`Executor::start`] acts on, with the plans its candidates
    /// index (`decision.action` is `Run(i)` for `plans[i]`, or `Wait`).
    pub async fn decide(
        &self,
        job: &JobSpec,
        template: &LaunchTemplate,
    ) -> Result<(Decision, Vec<Plan>)> {
        job.validate()?;
        let (_, plans, evidence) = self
            .rank_for_policy(job, self.config.max_launch_attempts * 4)
            .await?;
        let plans = self.usable(plans, template, None);
        if plans.is_empty() {
            return Err(Error::new(
                ErrorKind::InsufficientCapacity,
                "no feasible plan on a cloud with an image and a provider",
            ));
        }
        let decision = plans::decide_from_nowhere(
            job,
            &plans,
            &self.policy_context(template.nodes, &evidence),
        )?;
        Ok((decision, plans))
    }

    /// Places the rest of a job (`job.hours` left, `done_before` reference
    /// hours done) after `attempts_before` launch attempts, never in
    /// `exclude`: what [`Executor::start`] does for a new job and the job
    /// controller does after an interruption.
    #[allow(clippy::too_many_arguments)]
    pub async fn start_excluding(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
        attempts_before: u32,
        exclude: Option<&Pool>,
        deadline_at: Option<OffsetDateTime>,
        done_before: f64,
    ) -> Result<RunningJob> {
        job.validate()?;
        let (ranking, plans, evidence) = self
            .rank_for_policy(job, self.config.max_launch_attempts * 4)
            .await?;
        if ranking.considered == 0 {
            let gpus: Vec<String> = job
                .gpus
                .iter()
                .map(|g| format!("{}x{}", g.count, g.model))
                .collect();
            return Err(Error::new(
                ErrorKind::InsufficientCapacity,
                format!("no offer matches the job's GPU options ({}) in the allowed clouds, regions and zones", gpus.join(" or ")),
            ));
        }
        if ranking.feasible().next().is_none() {
            return Err(Error::new(
                ErrorKind::InsufficientCapacity,
                ranking.why_nothing(),
            ));
        }
        let now = self.clock.now();
        let mut plans = self.usable(plans, template, exclude);
        let mut cands =
            plans::candidates(job, &plans, &self.policy_context(template.nodes, &evidence))?;
        let deadline_at = deadline_at.or_else(|| {
            job.deadline
                .and_then(|d| time::Duration::try_from(d).ok())
                .map(|d| now + d)
        });
        let mut attempts = attempts_before;
        let mut failures = Vec::new();
        let mut stale_keys: u32 = 0;
        while !plans.is_empty() && failures.len() < self.config.max_launch_attempts {
            let state = plans::job_state(job, &plans, None);
            let decision = policy::decide(&state, &cands, &self.config.policy)?;
            self.emit(ExecEvent::Decided {
                explanation: decision.explanation.clone(),
            });
            let i = match decision.action {
                Action::Run(i) => i,
                Action::Wait => {
                    return Err(Error::new(
                        ErrorKind::InsufficientCapacity,
                        format!(
                            "the placement policy waits for spot capacity: {}",
                            decision.explanation
                        ),
                    ))
                }
            };
            let plan = plans[i].clone();
            let pool = &plans[i].offer.pool.clone();
            let (Some(provider), Some(image)) =
                (self.provider(pool.cloud), template.images.get(&pool.cloud))
            else {
                drop_plans(&mut plans, &mut cands, |j, _| j == i);
                continue;
            };
            attempts += 1;
            let pending = RunningJob {
                job_id: job_id.to_string(),
                spec: job.clone(),
                plan,
                instances: Vec::new(),
                placement_group: None,
                started_at: self.clock.now(),
                attempts,
                deadline_at,
                done_before,
            };
            match self
                .launch_plan(provider, &pending, image, template, &decision.explanation)
                .await
            {
                Ok(made) => return self.record_running(provider, pending, made).await,
                Err(e) => {
                    self.emit(ExecEvent::LaunchFailed {
                        pool: pool.clone(),
                        kind: e.kind().to_string(),
                    });
                    match e.kind() {
                        // The key was used by a launch whose instances have
                        // ended (a cloud keeps it bound for a while): the same
                        // plan again under the next attempt's key.
                        ErrorKind::AlreadyExists if stale_keys < STALE_KEY_RETRIES => {
                            stale_keys += 1;
                            continue;
                        }
                        ErrorKind::InsufficientCapacity => {
                            self.ledger
                                .record_event(
                                    pool,
                                    PoolEvent {
                                        at: self.clock.now(),
                                        kind: PoolEventKind::CapacityFailure,
                                    },
                                )
                                .await?;
                        }
                        ErrorKind::QuotaExceeded
                        | ErrorKind::Unavailable
                        | ErrorKind::Timeout
                        | ErrorKind::RateLimited => {}
                        ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => {
                            // The whole cloud refuses: drop its plans.
                            let cloud = pool.cloud;
                            failures.push(format!("{pool}: {e}"));
                            drop_plans(&mut plans, &mut cands, |_, p| p.offer.pool.cloud == cloud);
                            continue;
                        }
                        _ => return Err(e),
                    }
                    failures.push(format!("{pool}: {e}"));
                    // (The timeline shows the failure: launch_plan recorded
                    // it when it rolled the launch back.)
                    // Not again in this placement; the ledger keeps it in
                    // cooldown for the next.
                    drop_plans(&mut plans, &mut cands, |j, _| j == i);
                }
            }
        }
        Err(Error::new(
            ErrorKind::InsufficientCapacity,
            if failures.is_empty() {
                "no feasible plan on a cloud with an image and a provider".to_string()
            } else {
                format!("every plan tried failed: {}", failures.join("; "))
            },
        ))
    }

    /// Launches `pending` (its plan's pool and attempt; no instances yet),
    /// writing the `launching` record first so that a controller that dies
    /// during the call re-sends the same key instead of launching again.
    /// Re-sending is safe: a group of the same name is adopted and the launch
    /// is idempotent per key.
    pub async fn launch_plan(
        &self,
        provider: &Arc<dyn Provider>,
        pending: &RunningJob,
        image: &str,
        template: &LaunchTemplate,
        why: &str,
    ) -> Result<(Vec<Instance>, Option<PlacementGroup>)> {
        let pool = &pending.plan.offer.pool;
        let attempt = pending.attempts;
        let job_id = pending.job_id.as_str();
        let key = launch_key(job_id, attempt)?;
        let mut record = self.record(pending, JobState::Launching);
        record.detail = format!("key {key}: {why}");
        self.ledger.record_job(&record).await?;
        let mut tags = template.tags.clone();
        tags.insert(tags::MANAGED.into(), "true".into());
        tags.insert(tags::JOB.into(), job_id.to_string());
        let group = if template.wants_group(&pending.spec) {
            let name = placement_group_name(job_id, attempt);
            // The group carries the launch's key, as its instances do: a
            // roll-back or sweep finds it by the key, not by memory.
            let mut group_tags = tags.clone();
            group_tags.insert(tags::IDEMPOTENCY_KEY.into(), key.to_string());
            let req = PlacementGroupRequest {
                name: name.clone(),
                strategy: template
                    .placement_strategy
                    .unwrap_or(PlacementStrategy::Cluster),
                region: pool.region.clone(),
                zone: pool.zone.clone(),
                tags: group_tags,
            };
            let g = match provider.create_placement_group(&req).await {
                Ok(g) => g,
                Err(e) => {
                    // Made by this attempt before a restart (AlreadyExists),
                    // or made by this call though its answer was lost (a
                    // timeout): adopt it by its name. Else the error stands.
                    let found = group_of(provider, job_id, attempt).await.ok().flatten();
                    match found {
                        Some(g) => g,
                        None => {
                            self.record_failed_launch(pending, &key, &e).await;
                            return Err(e);
                        }
                    }
                }
            };
            self.emit(ExecEvent::PlacementGroupCreated {
                name: g.name.clone(),
            });
            Some(g)
        } else {
            None
        };
        let mut req =
            LaunchRequest::new(pool.clone(), image, key).with_count(template.nodes.max(1));
        req.tags = tags;
        req.ttl = template.ttl;
        req.placement_group = group.as_ref().map(|g| g.id.clone());
        if let Some(w) = &template.workload {
            crate::workload::apply(w, &mut req, job_id, attempt)?;
        }
        match provider.launch(&req).await {
            Ok(instances) => {
                self.emit(ExecEvent::Launched {
                    pool: pool.clone(),
                    instances: instances.len(),
                });
                Ok((instances, group))
            }
            Err(e) => {
                // Nothing half-created: whatever the provider's own clean-up
                // managed (it may have been cut off by a timeout), remove
                // every instance carrying this attempt's key and its group.
                match self
                    .roll_back(provider, &req.idempotency_key, group.as_ref())
                    .await
                {
                    Ok(_) => {
                        self.record_failed_launch(pending, &req.idempotency_key, &e)
                            .await;
                        Err(e)
                    }
                    Err(left) => Err(e.with_context("rollback", left.to_string())),
                }
            }
        }
    }

    /// Records that the launch of `pending` under `key` failed and nothing
    /// of it is left: the job is placing again, and the next launch takes a
    /// new key (a cloud may keep this one bound to what it ended).
    async fn record_failed_launch(&self, pending: &RunningJob, key: &IdempotencyKey, e: &Error) {
        let mut placing = self.record(pending, JobState::Placing);
        placing.instances.clear();
        placing.detail = format!(
            "launch {key} failed ({}) and was rolled back: {e}",
            e.kind()
        );
        if let Err(le) = self.ledger.record_job(&placing).await {
            tracing::warn!(error = %le, "could not record a rolled-back launch");
        }
    }

    /// Removes what a launch under `key` made: every live instance carrying
    /// the key (found by listing, not by what this process remembers), then
    /// `group`. Returns how many instances were terminated; an error names the
    /// instances or group left behind (the orphan sweep and `reap` find them
    /// by their tags).
    pub async fn roll_back(
        &self,
        provider: &Arc<dyn Provider>,
        key: &IdempotencyKey,
        group: Option<&PlacementGroup>,
    ) -> Result<usize> {
        let filter = gpufleet_core::TagFilter::default().with(tags::IDEMPOTENCY_KEY, key.as_str());
        let found = provider.list_instances(&filter).await?;
        let mut left = Vec::new();
        let mut n = 0;
        for i in found.iter().filter(|i| i.state.is_live()) {
            match provider.terminate(&i.id).await {
                Ok(()) => n += 1,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => left.push(format!("{} ({e})", i.id)),
            }
        }
        if n > 0 {
            self.emit(ExecEvent::Terminated {
                pool: found[0].pool.clone(),
                instances: n,
            });
        }
        if let Some(g) = group {
            match provider.delete_placement_group(&g.id).await {
                Ok(()) => self.emit(ExecEvent::PlacementGroupDeleted {
                    name: g.name.clone(),
                }),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => left.push(format!("placement group {} ({e})", g.id)),
            }
        }
        if left.is_empty() {
            Ok(n)
        } else {
            tracing::error!(key = %key, left = ?left, "a failed launch could not be rolled back entirely");
            Err(Error::new(
                ErrorKind::Unexpected,
                format!("left behind by launch {key}: {}", left.join(", ")),
            ))
        }
    }

    /// The plan for `job` in `pool` (feasible or not), from the providers'
    /// offers now: how a resumed controller rebuilds a placement it recorded.
    pub async fn plan_for(&self, job: &JobSpec, pool: &Pool) -> Result<Option<Plan>> {
        let mut narrow = job.clone();
        narrow.clouds = vec![pool.cloud];
        narrow.regions = vec![pool.region.clone()];
        narrow.zones = pool.zone.iter().cloned().collect();
        let ranking = self.rank(&narrow, 1000).await?;
        Ok(ranking.plans.into_iter().find(|p| p.offer.pool == *pool))
    }

    /// Launches `job` once under the id `job_id` (`gpufleet launch`): into
    /// `pool` when given, else where [`Executor::start`] places it. A
    /// re-run whose recorded placement still has live instances returns them
    /// (`true`: nothing new was made) when it asks for the same thing, and is
    /// refused when it asks for something else; a placement whose instances
    /// are gone is launched afresh under the next attempt's key (a cloud may
    /// keep an idempotency token bound after its instances end).
    pub async fn launch_once(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
        pool: Option<&Pool>,
    ) -> Result<(bool, RunningJob)> {
        job.validate()?;
        let history = self.ledger.job_history(job_id).await?;
        let attempts = history.iter().map(|r| r.attempt).max().unwrap_or(0);
        if let Some(last) = history.iter().rev().find(|r| r.state == JobState::Running) {
            if let (Some(rec_pool), Some(provider)) = (
                &last.pool,
                last.pool.as_ref().and_then(|p| self.provider(p.cloud)),
            ) {
                let mut live = Vec::new();
                for id in &last.instances {
                    match provider.instance(id).await {
                        Ok(i) if i.state.is_live() => live.push(i),
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
                if !live.is_empty() {
                    let same = live.len() == template.nodes.max(1) as usize
                        && pool.is_none_or(|p| p == rec_pool);
                    if !same {
                        return Err(Error::invalid_input(format!(
                            "job '{job_id}' already holds {} instance(s) in {rec_pool}; terminate them (`gpufleet terminate --job {job_id}`) or launch under another name",
                            live.len()
                        )));
                    }
                    let plan = self.plan_for(job, rec_pool).await?.ok_or_else(|| {
                        Error::new(
                            ErrorKind::NotFound,
                            format!("{rec_pool} is no longer offered"),
                        )
                    })?;
                    let group = match live[0].placement_group.clone() {
                        Some(id) => provider.placement_group(&id).await.ok(),
                        None => None,
                    };
                    return Ok((
                        true,
                        RunningJob {
                            job_id: job_id.to_string(),
                            spec: job.clone(),
                            plan,
                            started_at: live[0].launched_at,
                            instances: live,
                            placement_group: group,
                            attempts: last.attempt,
                            deadline_at: None,
                            done_before: 0.0,
                        },
                    ));
                }
            }
        }
        // A launch this job began and never recorded as running (the process
        // died, or was interrupted, during it): finish it under its own key
        // when this run asks for the same pool; otherwise remove what it made.
        if let Some(rec) = history.last().filter(|r| r.state == JobState::Launching) {
            if let Some(done) = self.resume_launch(job_id, job, template, rec, pool).await? {
                return Ok((false, done));
            }
        }
        let Some(pool) = pool else {
            let r = self
                .start_excluding(job_id, job, template, attempts, None, None, 0.0)
                .await?;
            return Ok((false, r));
        };
        let plan = self.plan_for(job, pool).await?.ok_or_else(|| {
            Error::invalid_input(format!(
                "no pool {pool} among the offers for this job; `gpufleet offers` lists what is sold"
            ))
        })?;
        let provider = self
            .provider(pool.cloud)
            .cloned()
            .ok_or_else(|| Error::invalid_input(format!("{} is not enabled", pool.cloud)))?;
        let image = template
            .images
            .get(&pool.cloud)
            .cloned()
            .ok_or_else(|| Error::invalid_input(format!("no image for {}", pool.cloud)))?;
        let mut pending = RunningJob {
            job_id: job_id.to_string(),
            spec: job.clone(),
            plan,
            instances: Vec::new(),
            placement_group: None,
            started_at: self.clock.now(),
            attempts,
            deadline_at: None,
            done_before: 0.0,
        };
        let mut stale_keys: u32 = 0;
        loop {
            pending.attempts += 1;
            match self
                .launch_plan(&provider, &pending, &image, template, "the pool asked for")
                .await
            {
                Ok(made) => {
                    return Ok((false, self.record_running(&provider, pending, made).await?))
                }
                // A key still bound to an ended launch: the next one.
                Err(e)
                    if e.kind() == ErrorKind::AlreadyExists && stale_keys < STALE_KEY_RETRIES =>
                {
                    stale_keys += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Finishes the launch `rec` (a `launching` record with no `running`
    /// after it) under its own key when `pool` is unset or the same; else, or
    /// when its pool is no longer offered, removes whatever it made and
    /// returns `None` (the caller launches afresh under the next key).
    async fn resume_launch(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
        rec: &JobRecord,
        pool: Option<&Pool>,
    ) -> Result<Option<RunningJob>> {
        let Some(rec_pool) = rec.pool.as_ref() else {
            return Ok(None);
        };
        let Some(provider) = self.provider(rec_pool.cloud).cloned() else {
            return Ok(None);
        };
        let image = template.images.get(&rec_pool.cloud).cloned();
        let plan = if pool.is_none_or(|p| p == rec_pool) {
            self.plan_for(job, rec_pool).await?
        } else {
            None
        };
        if let (Some(plan), Some(image)) = (plan, image) {
            tracing::info!(
                job = job_id,
                attempt = rec.attempt,
                "resuming an unfinished launch under its key"
            );
            let pending = RunningJob {
                job_id: job_id.to_string(),
                spec: job.clone(),
                plan,
                instances: Vec::new(),
                placement_group: None,
                started_at: self.clock.now(),
                attempts: rec.attempt,
                deadline_at: None,
                done_before: 0.0,
            };
            let made = self
                .launch_plan(
                    &provider,
                    &pending,
                    &image,
                    template,
                    "resumed after an unfinished launch",
                )
                .await?;
            return Ok(Some(self.record_running(&provider, pending, made).await?));
        }
        self.abandon(&provider, rec, "was not finished and was abandoned")
            .await?;
        Ok(None)
    }

    /// Rolls back the launch `rec` names (instances by its key, its group by
    /// name) and records the job as placing again, saying `why`; returns how
    /// many instances were terminated.
    async fn abandon(
        &self,
        provider: &Arc<dyn Provider>,
        rec: &JobRecord,
        why: &str,
    ) -> Result<usize> {
        let key = launch_key(&rec.job_id, rec.attempt)?;
        let group = group_of(provider, &rec.job_id, rec.attempt).await?;
        let n = self.roll_back(provider, &key, group.as_ref()).await?;
        let mut placing = rec.clone();
        placing.state = JobState::Placing;
        placing.at = self.clock.now();
        placing.detail = format!("launch {key} {why}; {n} instance(s) terminated");
        self.ledger.record_job(&placing).await?;
        Ok(n)
    }

    /// After a launch of `job_id` was cut off (Ctrl-C): when the ledger's
    /// last record is its `launching` record, removes whatever that attempt
    /// made (instances by key, its group by name) and records the job as
    /// placing again; returns how many instances were terminated. `None`
    /// when no launch was in flight (it finished and was recorded, or never
    /// began).
    pub async fn roll_back_unfinished(&self, job_id: &str) -> Result<Option<usize>> {
        let history = self.ledger.job_history(job_id).await?;
        let Some(rec) = history.last().filter(|r| r.state == JobState::Launching) else {
            return Ok(None);
        };
        let Some(provider) = rec
            .pool
            .as_ref()
            .and_then(|p| self.provider(p.cloud))
            .cloned()
        else {
            return Ok(None);
        };
        let rec = rec.clone();
        let n = self
            .abandon(&provider, &rec, "interrupted and rolled back")
            .await?;
        Ok(Some(n))
    }

    /// Records what [`Executor::launch_plan`] made for `pending` as its
    /// placement, running from now; if the ledger refuses, the instances are
    /// terminated (nothing runs that the ledger does not know) and the
    /// ledger's error is returned.
    pub async fn record_running(
        &self,
        provider: &Arc<dyn Provider>,
        pending: RunningJob,
        (instances, placement_group): (Vec<Instance>, Option<PlacementGroup>),
    ) -> Result<RunningJob> {
        let running = RunningJob {
            instances,
            placement_group,
            started_at: self.clock.now(),
            ..pending
        };
        match self
            .ledger
            .record_job(&self.record(&running, JobState::Running))
            .await
        {
            Ok(()) => Ok(running),
            Err(e) => {
                tracing::error!(job = %running.job_id, error = %e, "cannot record a launch; terminating what it made");
                for i in &running.instances {
                    let _ = provider.terminate(&i.id).await;
                }
                if let Some(g) = &running.placement_group {
                    let _ = provider.delete_placement_group(&g.id).await;
                }
                Err(e)
            }
        }
    }

    /// The ledger record of `running` in `state`, now.
    pub fn record(&self, running: &RunningJob, state: JobState) -> JobRecord {
        JobRecord {
            job_id: running.job_id.clone(),
            name: running.spec.name.clone(),
            pool: Some(running.plan.offer.pool.clone()),
            instances: running.instances.iter().map(|i| i.id.clone()).collect(),
            state,
            at: self.clock.now(),
            attempt: running.attempts,
            progress_hours: running.done_before,
            price: Some(running.plan.offer.price),
            detail: String::new(),
            fence: None,
        }
    }

    /// Terminates a placement's instances and group (already-gone is fine) and
    /// records how long it ran.
    pub async fn release(&self, running: &RunningJob) -> Result<()> {
        let pool = &running.plan.offer.pool;
        let provider = self.provider(pool.cloud).ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                format!("no provider for {}", pool.cloud),
            )
        })?;
        let mut n = 0;
        for i in &running.instances {
            match provider.terminate(&i.id).await {
                Ok(()) => n += 1,
                Err(e) if e.kind() == ErrorKind::NotFound => n += 1,
                Err(e) => return Err(e),
            }
        }
        self.emit(ExecEvent::Terminated {
            pool: pool.clone(),
            instances: n,
        });
        if let Some(g) = &running.placement_group {
            match provider.delete_placement_group(&g.id).await {
                Ok(()) => self.emit(ExecEvent::PlacementGroupDeleted {
                    name: g.name.clone(),
                }),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.ledger
            .record_exposure(pool, running.started_at, self.clock.now())
            .await?;
        Ok(())
    }

    /// The job with the work and time left after `progress` reference hours
    /// of this placement.
    pub fn remaining(&self, running: &RunningJob, progress: f64) -> Result<JobSpec> {
        let mut spec = running.spec.clone();
        let left = spec.hours - progress.clamp(0.0, spec.hours);
        if left <= 1e-9 {
            return Err(Error::invalid_input(
                "no work left: complete the job instead",
            ));
        }
        spec.hours = left;
        if let Some(at) = running.deadline_at {
            let secs = (at - self.clock.now()).as_seconds_f64();
            if secs <= 0.0 {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("job {} is past its deadline", running.job_id),
                ));
            }
            spec.deadline = Some(Duration::from_secs_f64(secs));
        }
        Ok(spec)
    }

    async fn run_hook(
        &self,
        running: &RunningJob,
        hook: &dyn CheckpointHook,
        deadline: Option<OffsetDateTime>,
    ) -> bool {
        let pool = running.plan.offer.pool.clone();
        let budget = deadline
            .map(|d| Duration::from_secs_f64((d - self.clock.now()).as_seconds_f64().max(0.0)))
            .unwrap_or(Duration::from_secs(3600));
        match tokio::time::timeout(budget, hook.checkpoint(running)).await {
            Ok(Ok(())) => {
                self.emit(ExecEvent::Checkpointed { pool });
                true
            }
            Ok(Err(e)) => {
                self.emit(ExecEvent::CheckpointFailed {
                    pool,
                    reason: e.to_string(),
                });
                false
            }
            Err(_) => {
                self.emit(ExecEvent::CheckpointFailed {
                    pool,
                    reason: "outlived the notice's deadline".into(),
                });
                false
            }
        }
    }

    /// Handles an interruption notice for a running job that has done
    /// `progress` hours of (reference) work since this placement started
    /// (`running.spec.hours` is what was left then): checkpoint before the deadline,
    /// record the interruption, release the old placement and place the rest.
    /// A rebalance recommendation or maintenance only moves the job when the
    /// move pays (see [`Executor::consider_move`]).
    pub async fn on_notice(
        &self,
        running: RunningJob,
        notice: &InterruptionNotice,
        hook: &dyn CheckpointHook,
        progress: f64,
        template: &LaunchTemplate,
    ) -> Result<RunningJob> {
        if notice.kind != NoticeKind::Preemption {
            return Ok(self
                .consider_move(running, progress, hook, template)
                .await?
                .unwrap_or_else(|r| r));
        }
        self.run_hook(&running, hook, notice.deadline).await;
        self.interrupted(
            &running,
            progress,
            format!("{:?} notice from {}", notice.kind, notice.source),
            true,
        )
        .await?;
        let spec = self.remaining(&running, progress)?;
        self.start_excluding(
            &running.job_id,
            &spec,
            template,
            running.attempts,
            None,
            running.deadline_at,
            running.done_before + progress.max(0.0),
        )
        .await
    }

    /// Records that `running` was interrupted with `progress` reference
    /// hours of this placement saved (the job's `interrupted` record with
    /// `detail`, and, when `against_pool`, an interruption against its pool:
    /// a reclaim is, an instance someone terminated by hand is not), then
    /// releases it.
    pub async fn interrupted(
        &self,
        running: &RunningJob,
        progress: f64,
        detail: String,
        against_pool: bool,
    ) -> Result<()> {
        let pool = running.plan.offer.pool.clone();
        self.emit(ExecEvent::Interrupted { pool: pool.clone() });
        // Release first, record after: a ledger that is busy, full or
        // read-only must not keep an interrupted placement running (and
        // billed) with nothing holding it.
        let released = self.release(running).await;
        let mut rec = self.record(running, JobState::Interrupted);
        rec.progress_hours = running.done_before + progress.max(0.0);
        rec.detail = detail;
        let mut recorded = self.record_job_retrying(&rec).await;
        if against_pool && recorded.is_ok() {
            let event = PoolEvent {
                at: self.clock.now(),
                kind: PoolEventKind::Interruption,
            };
            recorded = self.ledger.record_event(&pool, event).await;
        }
        released?;
        recorded.map_err(|e| {
            let ids: Vec<String> = running.instances.iter().map(|i| i.id.to_string()).collect();
            tracing::error!(job = %running.job_id, instances = ?ids, error = %e, "released an interrupted placement but could not record it");
            e.with_context("released", ids.join(","))
        })
    }

    /// Records `rec`, trying again twice (after 100 and 400 ms) when the
    /// ledger is busy.
    async fn record_job_retrying(&self, rec: &JobRecord) -> Result<()> {
        let mut wait = Duration::from_millis(100);
        for _ in 0..2 {
            match self.ledger.record_job(rec).await {
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    tracing::warn!(job = %rec.job_id, error = %e, "the ledger is busy; recording again");
                    tokio::time::sleep(wait).await;
                    wait *= 4;
                }
                other => return other,
            }
        }
        self.ledger.record_job(rec).await
    }

    /// Asks the policy about the rest of the job (`progress` as in
    /// [`Executor::on_notice`]) with the job where it runs, and moves it when
    /// the policy says another pool finishes it cheaper after paying the
    /// move's changeover (and by `move_margin` more, when set). A launch that
    /// fails leaves the job where it was. Returns `Ok(Ok(moved))` or
    /// `Ok(Err(unchanged))`.
    pub async fn consider_move(
        &self,
        running: RunningJob,
        progress: f64,
        hook: &dyn CheckpointHook,
        template: &LaunchTemplate,
    ) -> Result<std::result::Result<RunningJob, RunningJob>> {
        let spec = self.remaining(&running, progress)?;
        let (_, plans, evidence) = self.rank_for_policy(&spec, 64).await?;
        let current_pool = running.plan.offer.pool.clone();
        let mut plans = self.usable(plans, template, None);
        let cur = match plans.iter().position(|p| p.offer.pool == current_pool) {
            Some(i) => i,
            None => {
                plans.push(running.plan.clone());
                plans.len() - 1
            }
        };
        let mut cands = plans::candidates(
            &spec,
            &plans,
            &self.policy_context(template.nodes, &evidence),
        )?;
        // It is running there, so capacity is there.
        cands[cur].availability.state = policy::AvailState::Up;
        let state = plans::job_state(&spec, &plans, Some(cur));
        let decision = policy::decide(&state, &cands, &self.config.policy)?;
        self.emit(ExecEvent::Decided {
            explanation: decision.explanation.clone(),
        });
        let Action::Run(to) = decision.action else {
            // Stopping to wait for spot needs a controller that resumes the
            // job later; the executor keeps it running.
            return Ok(Err(running));
        };
        if to == cur {
            return Ok(Err(running));
        }
        let cost = |a: Action| {
            decision
                .options
                .iter()
                .find(|o| o.action == a)
                .map(|o| o.expected_cost.as_usd_f64())
        };
        let saving = match (cost(Action::Run(cur)), cost(Action::Run(to))) {
            (Some(stay), Some(go)) => {
                if go > stay * (1.0 - self.config.move_margin) {
                    return Ok(Err(running));
                }
                stay - go
            }
            _ => 0.0,
        };
        let plan = plans[to].clone();
        let pool = plan.offer.pool.clone();
        let (Some(provider), Some(image)) =
            (self.provider(pool.cloud), template.images.get(&pool.cloud))
        else {
            return Ok(Err(running));
        };
        self.run_hook(&running, hook, None).await;
        let done = running.done_before + progress.max(0.0);
        let mut moving = self.record(&running, JobState::Moving);
        moving.progress_hours = done;
        moving.detail = format!("to {pool}: {}", decision.explanation);
        self.ledger.record_job(&moving).await?;
        let pending = RunningJob {
            job_id: running.job_id.clone(),
            spec: spec.clone(),
            plan: plan.clone(),
            instances: Vec::new(),
            placement_group: None,
            started_at: self.clock.now(),
            attempts: running.attempts + 1,
            deadline_at: running.deadline_at,
            done_before: done,
        };
        let launched = self
            .launch_plan(provider, &pending, image, template, &decision.explanation)
            .await;
        let made = match launched {
            Ok(x) => x,
            Err(e) => {
                self.emit(ExecEvent::LaunchFailed {
                    pool: pool.clone(),
                    kind: e.kind().to_string(),
                });
                if e.kind() == ErrorKind::InsufficientCapacity {
                    self.ledger
                        .record_event(
                            &pool,
                            PoolEvent {
                                at: self.clock.now(),
                                kind: PoolEventKind::CapacityFailure,
                            },
                        )
                        .await?;
                }
                // Still where it was.
                self.ledger
                    .record_job(&self.record(&running, JobState::Running))
                    .await?;
                return Ok(Err(running));
            }
        };
        let next = self.record_running(provider, pending, made).await?;
        self.emit(ExecEvent::Moved {
            from: current_pool,
            to: pool,
            saving_usd: saving,
        });
        self.release(&running).await?;
        self.ledger
            .record_job(&self.record(&running, JobState::Moved))
            .await?;
        Ok(Ok(next))
    }

    /// Finishes a job: terminates everything it holds.
    pub async fn complete(&self, running: RunningJob) -> Result<()> {
        let done = running.done_before + running.spec.hours;
        self.end(running, JobState::Succeeded, done, "").await
    }

    /// Gives up a job: terminates everything it holds and records the reason.
    pub async fn fail(&self, running: RunningJob, reason: &str) -> Result<()> {
        tracing::warn!(job = %running.job_id, reason, "job failed");
        let done = running.done_before;
        self.end(running, JobState::Failed, done, reason).await
    }

    /// Ends a job in `state` (succeeded, failed, cancelled) with `progress`
    /// reference hours done in total: releases everything it holds, then
    /// records the end.
    pub async fn end(
        &self,
        running: RunningJob,
        state: JobState,
        progress: f64,
        detail: &str,
    ) -> Result<()> {
        self.release(&running).await?;
        let mut rec = self.record(&running, state);
        rec.progress_hours = progress;
        rec.detail = detail.to_string();
        self.ledger.record_job(&rec).await
    }
}

/// Drops the plans `drop` names, with their candidates (the two lists stay
/// index for index).
fn drop_plans(
    plans: &mut Vec<Plan>,
    cands: &mut Vec<policy::Candidate>,
    drop: impl Fn(usize, &Plan) -> bool,
) {
    for i in (0..plans.len()).rev() {
        if drop(i, &plans[i]) {
            plans.remove(i);
            cands.remove(i);
        }
    }
}

/// Keeps the characters idempotency keys and resource names allow, at most
/// `max` of them.
pub(crate) fn sanitize(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    if out.is_empty() {
        out.push_str("job");
    }
    out
}
