//! Execution: at every decision point (start, capacity failure, interruption,
//! periodic review) ask the placement policy ([`super::policy::decide`], the
//! function the simulator measures) what to do, and do it: launch where it
//! says; on a capacity error record the failure, drop that pool for this
//! placement and ask again; on an interruption notice checkpoint before the
//! deadline, record the interruption and place the rest of the work again;
//! move a running job only when the policy says the move pays for its
//! changeover; and leave nothing running.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::hazard::{HazardModel, PoolEvent, PoolEventKind, PoolEvidence};
use super::job::JobSpec;
use super::policy::{self, plans, Action, Decision, PolicyConfig};
use super::rank::{rank, Plan, RankContext, Ranking};
use crate::catalog::{GpuRequirement, OfferQuery};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::ledger::{JobRecord, JobState, Ledger};
use crate::model::{
    tags, Capacity, Cloud, IdempotencyKey, Instance, InterruptionNotice, LaunchRequest, NoticeKind,
    Offer, PlacementGroup, PlacementGroupRequest, PlacementStrategy, Pool, Tags,
};
use crate::provider::Provider;

/// Runs the job's checkpoint before an interruption's deadline.
pub trait CheckpointHook: Send + Sync {
    /// Saves the job's state; it is cancelled at the deadline.
    fn checkpoint<'a>(
        &'a self,
        job: &'a RunningJob,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;
}

/// A hook that does nothing (jobs that checkpoint on their own schedule).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCheckpoint;

impl CheckpointHook for NoCheckpoint {
    fn checkpoint<'a>(
        &'a self,
        _job: &'a RunningJob,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(async { Ok(()) })
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
            cooldown: Duration::from_secs(30 * 60),
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
}

impl Executor {
    /// An executor over `providers` (one per cloud).
    pub fn new(
        providers: Vec<Arc<dyn Provider>>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Executor {
            providers,
            ledger,
            clock,
            model: HazardModel::default(),
            config: ExecutorConfig::default(),
            events: Mutex::new(Vec::new()),
        }
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
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    fn provider(&self, cloud: Cloud) -> Option<&Arc<dyn Provider>> {
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
        let evidence = self.ledger.evidence(since)?;
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
        self.start_excluding(job_id, job, template, 0, None, None)
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

    async fn start_excluding(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
        attempts_before: u32,
        exclude: Option<&Pool>,
        deadline_at: Option<OffsetDateTime>,
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
            let pool = &plan.offer.pool;
            let (Some(provider), Some(image)) =
                (self.provider(pool.cloud), template.images.get(&pool.cloud))
            else {
                drop_plans(&mut plans, &mut cands, |j, _| j == i);
                continue;
            };
            attempts += 1;
            match self
                .launch_plan(provider, job_id, job, &plan, image, template, attempts)
                .await
            {
                Ok((instances, group)) => {
                    let running = RunningJob {
                        job_id: job_id.to_string(),
                        spec: job.clone(),
                        plan,
                        instances,
                        placement_group: group,
                        started_at: self.clock.now(),
                        attempts,
                        deadline_at,
                    };
                    self.ledger
                        .record_job(&self.record(&running, JobState::Running))?;
                    return Ok(running);
                }
                Err(e) => {
                    self.emit(ExecEvent::LaunchFailed {
                        pool: pool.clone(),
                        kind: e.kind().to_string(),
                    });
                    match e.kind() {
                        ErrorKind::InsufficientCapacity => {
                            self.ledger.record_event(
                                pool,
                                PoolEvent {
                                    at: self.clock.now(),
                                    kind: PoolEventKind::CapacityFailure,
                                },
                            )?;
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

    #[allow(clippy::too_many_arguments)]
    async fn launch_plan(
        &self,
        provider: &Arc<dyn Provider>,
        job_id: &str,
        job: &JobSpec,
        plan: &Plan,
        image: &str,
        template: &LaunchTemplate,
        attempt: u32,
    ) -> Result<(Vec<Instance>, Option<PlacementGroup>)> {
        let pool = &plan.offer.pool;
        let key = IdempotencyKey::new(format!("{}-a{attempt}", sanitize(job_id)))?;
        let mut tags = template.tags.clone();
        tags.insert(tags::MANAGED.into(), "true".into());
        tags.insert(tags::JOB.into(), job_id.to_string());
        let group = if job.placement_group {
            let req = PlacementGroupRequest {
                name: format!("gpufleet-{}-a{attempt}", sanitize(job_id)),
                strategy: PlacementStrategy::Cluster,
                region: pool.region.clone(),
                zone: pool.zone.clone(),
                tags: tags.clone(),
            };
            let g = provider.create_placement_group(&req).await?;
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
        match provider.launch(&req).await {
            Ok(instances) => {
                self.emit(ExecEvent::Launched {
                    pool: pool.clone(),
                    instances: instances.len(),
                });
                Ok((instances, group))
            }
            Err(e) => {
                // Nothing half-created: remove the group made for this attempt.
                if let Some(g) = &group {
                    if provider.delete_placement_group(&g.id).await.is_ok() {
                        self.emit(ExecEvent::PlacementGroupDeleted {
                            name: g.name.clone(),
                        });
                    }
                }
                Err(e)
            }
        }
    }

    fn record(&self, running: &RunningJob, state: JobState) -> JobRecord {
        JobRecord {
            job_id: running.job_id.clone(),
            name: running.spec.name.clone(),
            pool: running.plan.offer.pool.clone(),
            instances: running.instances.iter().map(|i| i.id.clone()).collect(),
            state,
            at: self.clock.now(),
        }
    }

    /// Terminates a placement's instances and group (already-gone is fine) and
    /// records how long it ran.
    async fn release(&self, running: &RunningJob) -> Result<()> {
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
            .record_exposure(pool, running.started_at, self.clock.now())?;
        Ok(())
    }

    /// The job with the work and time left after `progress` reference hours.
    fn remaining(&self, running: &RunningJob, progress: f64) -> Result<JobSpec> {
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
        let pool = running.plan.offer.pool.clone();
        self.emit(ExecEvent::Interrupted { pool: pool.clone() });
        self.ledger.record_event(
            &pool,
            PoolEvent {
                at: self.clock.now(),
                kind: PoolEventKind::Interruption,
            },
        )?;
        self.ledger
            .record_job(&self.record(&running, JobState::Interrupted))?;
        self.release(&running).await?;
        let spec = self.remaining(&running, progress)?;
        self.start_excluding(
            &running.job_id,
            &spec,
            template,
            running.attempts,
            None,
            running.deadline_at,
        )
        .await
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
        let attempts = running.attempts + 1;
        let launched = self
            .launch_plan(
                provider,
                &running.job_id,
                &spec,
                &plan,
                image,
                template,
                attempts,
            )
            .await;
        let (instances, group) = match launched {
            Ok(x) => x,
            Err(e) => {
                self.emit(ExecEvent::LaunchFailed {
                    pool: pool.clone(),
                    kind: e.kind().to_string(),
                });
                if e.kind() == ErrorKind::InsufficientCapacity {
                    self.ledger.record_event(
                        &pool,
                        PoolEvent {
                            at: self.clock.now(),
                            kind: PoolEventKind::CapacityFailure,
                        },
                    )?;
                }
                return Ok(Err(running));
            }
        };
        let next = RunningJob {
            job_id: running.job_id.clone(),
            spec: spec.clone(),
            plan,
            instances,
            placement_group: group,
            started_at: self.clock.now(),
            attempts,
            deadline_at: running.deadline_at,
        };
        self.ledger
            .record_job(&self.record(&next, JobState::Running))?;
        self.emit(ExecEvent::Moved {
            from: current_pool,
            to: pool,
            saving_usd: saving,
        });
        self.ledger
            .record_job(&self.record(&running, JobState::Moved))?;
        self.release(&running).await?;
        Ok(Ok(next))
    }

    /// Finishes a job: terminates everything it holds.
    pub async fn complete(&self, running: RunningJob) -> Result<()> {
        self.release(&running).await?;
        self.ledger
            .record_job(&self.record(&running, JobState::Completed))
    }

    /// Gives up a job: terminates everything it holds and records the reason.
    pub async fn fail(&self, running: RunningJob, reason: &str) -> Result<()> {
        tracing::warn!(job = %running.job_id, reason, "job failed");
        self.release(&running).await?;
        self.ledger
            .record_job(&self.record(&running, JobState::Failed))
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

/// Keeps the characters idempotency keys and resource names allow.
fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(48)
        .collect();
    if out.is_empty() {
        out.push_str("job");
    }
    out
}
