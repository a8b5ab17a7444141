//! Launching a decision: the plan's instances under one idempotency key
//! (all or none: a partial launch is rolled back), failover to the next
//! plan, and resuming a launch that was in flight when a process died
//! (`launch_once` and the roll-back are `once.rs`).

use super::*;

/// What a failed launch sets aside for the rest of its placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetAside {
    /// Its pool: no capacity or quota there, or the cloud did not answer
    /// for it (a lack of capacity is also recorded against the pool).
    Pool,
    /// Every pool of its cloud and region: the cloud throttles the account
    /// there (EC2 per account and region), so its other pools there would be
    /// refused too, and trying them only spends more of its rate. Not
    /// evidence against the pool.
    Region,
    /// Every pool of its cloud: the cloud refuses the credentials.
    Cloud,
}

impl SetAside {
    /// What a launch that failed with `kind` sets aside; `None` when the
    /// error ends the search.
    fn after(kind: ErrorKind) -> Option<SetAside> {
        match kind {
            ErrorKind::InsufficientCapacity
            | ErrorKind::QuotaExceeded
            | ErrorKind::Unavailable
            | ErrorKind::Timeout => Some(SetAside::Pool),
            ErrorKind::RateLimited => Some(SetAside::Region),
            ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => Some(SetAside::Cloud),
            _ => None,
        }
    }

    /// Whether setting aside after a failure in `failed` covers `pool`.
    fn covers(self, failed: &Pool, pool: &Pool) -> bool {
        match self {
            SetAside::Pool => pool == failed,
            SetAside::Region => pool.cloud == failed.cloud && pool.region == failed.region,
            SetAside::Cloud => pool.cloud == failed.cloud,
        }
    }
}

/// What a placement's launches have spent so far: the attempts (each its
/// own key), the failures in words, and how many were throttled.
struct Tried {
    attempts: u32,
    failures: Vec<String>,
    throttled: usize,
}

impl Executor {
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
        let now = self.clock.now();
        let remaining = Remaining {
            work_hours: job.hours,
            deadline_at: deadline_at.or(Remaining::of(job, now).deadline_at),
        };
        let deadline_at = remaining.deadline_at;
        let mut placement = self.place(job, remaining, template, None, exclude).await?;
        let ranking = &placement.ranking;
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
        let placer = &self.config.placer;
        let mut attempts = attempts_before;
        let mut failures = Vec::new();
        let mut throttled = 0usize;
        // Failures for want of capacity or quota, and the kind of the last.
        let mut short = 0usize;
        let mut last_kind: Option<ErrorKind> = None;
        let mut stale_keys: u32 = 0;
        // Once the chosen pool has met no capacity, the next candidates are
        // tried several at once.
        let mut hedge = false;
        while let Some(decision) = placement.decision().cloned() {
            if failures.len() >= self.config.max_launch_attempts {
                break;
            }
            if let Some((budget, cheapest)) = placement.over_budget() {
                return Err(Error::invalid_input(format!(
                    "no plan is expected to finish within the ${} budget: the cheapest the placement policy found expects ${} to finish",
                    budget.display(2),
                    cheapest.display(2)
                )));
            }
            if hedge && self.config.hedge_width > 1 && matches!(decision.action, Action::Run(_)) {
                let mut tried = Tried {
                    attempts,
                    failures: std::mem::take(&mut failures),
                    throttled,
                };
                let won = self
                    .launch_hedged(
                        job_id,
                        job,
                        template,
                        &mut placement,
                        &mut tried,
                        (deadline_at, done_before),
                    )
                    .await;
                (attempts, failures, throttled) = (tried.attempts, tried.failures, tried.throttled);
                match won? {
                    Some(running) => return Ok(running),
                    None => continue,
                }
            }
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
            let plans = &placement.plans;
            let plan = plans[i].clone();
            let pool = &plans[i].offer.pool.clone();
            let (Some(provider), Some(image)) =
                (self.provider(pool.cloud), template.images.get(&pool.cloud))
            else {
                placement.drop_and_decide(placer, |j, _| j == i)?;
                continue;
            };
            attempts += 1;
            let pending =
                RunningJob::pending(job_id, job.clone(), plan, self.clock.now(), attempts)
                    .with_deadline(deadline_at)
                    .with_done_before(done_before);
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
                    // The key was used by a launch whose instances have
                    // ended (a cloud keeps it bound for a while): the same
                    // plan again under the next attempt's key.
                    if e.kind() == ErrorKind::AlreadyExists && stale_keys < STALE_KEY_RETRIES {
                        stale_keys += 1;
                        continue;
                    }
                    let Some(aside) = SetAside::after(e.kind()) else {
                        return Err(e);
                    };
                    match e.kind() {
                        ErrorKind::InsufficientCapacity => {
                            self.capacity_failure(pool).await?;
                            hedge = true;
                            short += 1;
                        }
                        ErrorKind::QuotaExceeded => short += 1,
                        ErrorKind::RateLimited => throttled += 1,
                        _ => {}
                    }
                    last_kind = Some(e.kind());
                    failures.push(format!("{pool}: {e}"));
                    // (The timeline shows the failure: launch_plan recorded
                    // it when it rolled the launch back.)
                    // Not again in this placement; the ledger keeps a pool
                    // in cooldown for the next.
                    placement.drop_and_decide(placer, |j, p| match aside {
                        SetAside::Pool => j == i,
                        _ => aside.covers(pool, &p.offer.pool),
                    })?;
                }
            }
        }
        // Refused only for the rate of calls: said so (the caller waits it
        // out), not as a lack of capacity; failed only for other reasons (a
        // cloud answering 500): that, not "nothing matched".
        let kind = if throttled > 0 && throttled == failures.len() {
            ErrorKind::RateLimited
        } else if short == 0 && throttled == 0 {
            last_kind.unwrap_or(ErrorKind::InsufficientCapacity)
        } else {
            ErrorKind::InsufficientCapacity
        };
        Err(Error::new(
            kind,
            if failures.is_empty() {
                "no feasible plan on a cloud with an image and a provider".to_string()
            } else {
                format!("every plan tried failed: {}", failures.join("; "))
            },
        ))
    }

    /// Records that `pool` refused a launch for lack of capacity.
    async fn capacity_failure(&self, pool: &Pool) -> Result<()> {
        self.ledger
            .record_event(
                pool,
                PoolEvent {
                    at: self.clock.now(),
                    kind: PoolEventKind::CapacityFailure,
                },
            )
            .await
    }

    /// Launches the placement's next [`ExecutorConfig::hedge_width`]
    /// choices at once (the decision's options by expected cost, from the
    /// same solve, while they are cheaper than waiting; each under its own
    /// attempt's key and `launching` record, all written before any launch
    /// begins). The first to run is recorded
    /// as the job's placement; any other that also ran is recorded in the
    /// spend ledger and rolled back; each that failed is dropped from the
    /// placement as in a one-at-a-time search (a lack of capacity recorded as
    /// evidence against its pool). Returns the winner, or `None` when every
    /// one failed for a reason the search goes on after (the job is then
    /// recorded as placing again); an error that ends the search is returned
    /// once every launch has settled.
    async fn launch_hedged(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
        placement: &mut Placement,
        tried: &mut Tried,
        (deadline_at, done_before): (Option<OffsetDateTime>, f64),
    ) -> Result<Option<RunningJob>> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let placer = &self.config.placer;
        // The choices, with no solve more (each would cost as much as the
        // decision did): the decision; then the other options it compared,
        // cheapest expected cost first, while they beat waiting; then the
        // other candidates by the index that chose its shortlist, best first
        // (the pools a one-at-a-time search would try next).
        let Some(decision) = placement.decision().cloned() else {
            return Ok(None);
        };
        let mut order: Vec<usize> = Vec::new();
        let compared = std::iter::once(decision.action).chain(
            decision
                .options
                .iter()
                .map(|o| o.action)
                .take_while(|a| *a != Action::Wait),
        );
        for a in compared {
            if let Action::Run(i) = a {
                if !order.contains(&i) {
                    order.push(i);
                }
            }
        }
        let mut by_index: Vec<(usize, f64)> = decision
            .index_usd_per_work_hour
            .iter()
            .copied()
            .enumerate()
            .filter(|(i, x)| x.is_finite() && !order.contains(i))
            .collect();
        by_index.sort_by(|a, b| a.1.total_cmp(&b.1));
        order.extend(by_index.into_iter().map(|(i, _)| i));
        let mut chosen: Vec<(Plan, Arc<dyn Provider>, String, String)> = Vec::new();
        let mut unusable: Vec<Pool> = Vec::new();
        for i in order {
            if chosen.len() >= self.config.hedge_width {
                break;
            }
            let Some(plan) = placement.plans.get(i).cloned() else {
                continue;
            };
            let cloud = plan.offer.pool.cloud;
            match (self.provider(cloud), template.images.get(&cloud)) {
                (Some(p), Some(image)) => {
                    let why = match decision.value_of(Action::Run(i)) {
                        _ if Action::Run(i) == decision.action => decision.explanation.clone(),
                        Some(v) => format!(
                            "{}: ${:.2} expected to finish, the policy's next choice",
                            plan.offer.pool,
                            v.as_usd_f64()
                        ),
                        None => {
                            format!("{}: next by the policy's shortlist index", plan.offer.pool)
                        }
                    };
                    chosen.push((plan, p.clone(), image.clone(), why))
                }
                _ => unusable.push(plan.offer.pool.clone()),
            }
        }
        if !unusable.is_empty() {
            placement.drop_and_decide(placer, |_, p| unusable.contains(&p.offer.pool))?;
        }
        if chosen.is_empty() {
            return Ok(None);
        }
        // Every `launching` record first, so that the job's last record is
        // never a launch's after the winner's `running` one.
        let mut launches = Vec::new();
        let mut hard: Option<Error> = None;
        let others = chosen.len() - 1;
        for (plan, provider, image, why) in chosen {
            tried.attempts += 1;
            let pending =
                RunningJob::pending(job_id, job.clone(), plan, self.clock.now(), tried.attempts)
                    .with_deadline(deadline_at)
                    .with_done_before(done_before);
            self.emit(ExecEvent::Decided {
                explanation: format!("{why} (tried beside {others} other pool(s))"),
            });
            let why = format!("{why}; a hedged launch, one of several at once");
            match self.prepare_launch(&pending, &image, template, &why).await {
                Ok(req) => launches.push((provider, pending, req)),
                Err(e) => {
                    hard.get_or_insert(e);
                }
            }
        }
        let mut running: FuturesUnordered<_> = launches
            .into_iter()
            .enumerate()
            .map(|(b, (provider, pending, req))| async move {
                let made = self
                    .launch_prepared(&provider, &pending, req, template, false)
                    .await;
                (b, provider, pending, made)
            })
            .collect();
        let mut winner: Option<RunningJob> = None;
        let mut last_failed: Option<(RunningJob, Error)> = None;
        let mut aside: Vec<(SetAside, Pool)> = Vec::new();
        let mut settled = Vec::new();
        loop {
            if settled.is_empty() {
                // Whatever has settled by now, in the policy's order: of
                // launches that ran together, its first choice wins.
                let Some(first) = running.next().await else {
                    break;
                };
                settled.push(first);
                while let Some(Some(more)) = futures::FutureExt::now_or_never(running.next()) {
                    settled.push(more);
                }
                settled.sort_by_key(|s| std::cmp::Reverse(s.0));
            }
            let Some((_, provider, pending, made)) = settled.pop() else {
                break;
            };
            let pool = pending.plan.offer.pool.clone();
            match made {
                Ok(made) if winner.is_none() && hard.is_none() => {
                    match self.record_running(&provider, pending, made).await {
                        // Every branch's key is spent, not only the winner's.
                        Ok(r) => {
                            winner = Some(RunningJob {
                                keys_used: tried.attempts,
                                ..r
                            })
                        }
                        Err(e) => {
                            hard.get_or_insert(e);
                        }
                    }
                }
                Ok((instances, group)) => {
                    // Capacity was there, but another launch ran first (or
                    // the search ends): what it made is paid for, so its
                    // spend is recorded before it is rolled back.
                    self.emit(ExecEvent::LaunchFailed {
                        pool: pool.clone(),
                        kind: "hedge-lost".into(),
                    });
                    if let Err(e) = crate::spend::record_started(
                        self.ledger.as_ref(),
                        &instances,
                        job_id,
                        &pending.plan.offer,
                    )
                    .await
                    {
                        tracing::warn!(job = job_id, error = %e, "could not record the spend of a hedged launch that lost");
                    }
                    let key = self.launch_key(job_id, pending.attempts)?;
                    if let Err(e) = self.roll_back(&provider, &key, group.as_ref(), None).await {
                        hard.get_or_insert(e);
                    }
                }
                Err(e) => {
                    self.emit(ExecEvent::LaunchFailed {
                        pool: pool.clone(),
                        kind: e.kind().to_string(),
                    });
                    // A key still bound elsewhere is not retried beside the
                    // others: its pool waits for the next placement.
                    let set = match e.kind() {
                        ErrorKind::AlreadyExists => Some(SetAside::Pool),
                        kind => SetAside::after(kind),
                    };
                    let Some(set) = set else {
                        hard.get_or_insert(e);
                        continue;
                    };
                    match e.kind() {
                        ErrorKind::InsufficientCapacity => self.capacity_failure(&pool).await?,
                        ErrorKind::RateLimited => tried.throttled += 1,
                        _ => {}
                    }
                    aside.push((set, pool.clone()));
                    tried.failures.push(format!("{pool}: {e}"));
                    last_failed = Some((pending, e));
                }
            }
        }
        if let Some(e) = hard {
            if let Some(w) = winner {
                // The job runs: what ended the search is logged, not lost.
                tracing::error!(job = job_id, error = %e, "a hedged launch failed beside the one that ran");
                return Ok(Some(w));
            }
            return Err(e);
        }
        if winner.is_some() {
            return Ok(winner);
        }
        if let Some((pending, e)) = &last_failed {
            let key = self.launch_key(job_id, pending.attempts)?;
            self.record_failed_launch(pending, &key, e).await;
        }
        placement.drop_and_decide(placer, |_, p| {
            aside
                .iter()
                .any(|(a, failed)| a.covers(failed, &p.offer.pool))
        })?;
        Ok(None)
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
        let req = self.prepare_launch(pending, image, template, why).await?;
        self.launch_prepared(provider, pending, req, template, true)
            .await
    }

    /// Builds and checks `pending`'s launch request and writes its
    /// `launching` record (nothing is made yet).
    async fn prepare_launch(
        &self,
        pending: &RunningJob,
        image: &str,
        template: &LaunchTemplate,
        why: &str,
    ) -> Result<LaunchRequest> {
        let pool = &pending.plan.offer.pool;
        let attempt = pending.attempts;
        let job_id = pending.job_id.as_str();
        let key = self.launch_key(job_id, attempt)?;
        let mut tags = template.tags.clone();
        tags.insert(tags::MANAGED.into(), "true".into());
        tags.insert(tags::JOB.into(), job_id.to_string());
        tags.insert(tags::IMAGE.into(), image.to_string());
        // The request is built and checked before anything is recorded or
        // made: a bad one (a zero time to live, a boot script over the
        // cloud's limit) is refused with nothing half-created and no attempt
        // spent. Only its placement group is filled in below.
        let mut req =
            LaunchRequest::new(pool.clone(), image, key.clone()).with_count(template.nodes.max(1));
        req.tags = tags;
        let proven = template
            .expiry_clouds
            .lock()
            .is_ok_and(|c| c.contains(&pool.cloud));
        req.ttl = match (template.ttl, template.driven_expiry.filter(|_| proven)) {
            (Some(hard), Some(driven)) => Some(hard.min(driven)),
            (hard, driven) => hard.or(driven),
        };
        if let Some(w) = &template.workload {
            crate::workload::apply(w, &mut req, job_id, attempt, template.node)?;
        }
        req.validate()?;
        let mut record = self.record(pending, JobState::Launching);
        record.detail = format!("key {key}: {why}");
        self.ledger.record_job(&record).await?;
        Ok(req)
    }

    /// Launches a prepared request (its placement group first, when the
    /// template wants one); on failure removes whatever it made and, when
    /// `record_failure`, records the job as placing again.
    async fn launch_prepared(
        &self,
        provider: &Arc<dyn Provider>,
        pending: &RunningJob,
        mut req: LaunchRequest,
        template: &LaunchTemplate,
        record_failure: bool,
    ) -> Result<(Vec<Instance>, Option<PlacementGroup>)> {
        let pool = &pending.plan.offer.pool;
        let job_id = pending.job_id.as_str();
        let key = req.idempotency_key.clone();
        let group = if template.wants_group(&pending.spec) {
            let name = self.group_name(job_id, pending.attempts);
            let mut group_tags = req.tags.clone();
            // The group carries the launch's key, as its instances do: a
            // roll-back or sweep finds it by the key, not by memory.
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
                    let found = group_of(provider, job_id, &name).await.ok().flatten();
                    match found {
                        Some(g) => g,
                        None => {
                            if record_failure {
                                self.record_failed_launch(pending, &key, &e).await;
                            }
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
                // Nothing half-created: whatever the provider's own clean-up
                // managed (it may have been cut off by a timeout), remove
                // every instance carrying this attempt's key and its group.
                match self
                    .roll_back(
                        provider,
                        &req.idempotency_key,
                        group.as_ref(),
                        Some(pending.plan.offer.price),
                    )
                    .await
                {
                    Ok(_) => {
                        if record_failure {
                            self.record_failed_launch(pending, &req.idempotency_key, &e)
                                .await;
                        }
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
    pub(super) async fn record_failed_launch(
        &self,
        pending: &RunningJob,
        key: &IdempotencyKey,
        e: &Error,
    ) {
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
}
