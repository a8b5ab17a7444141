//! A running job's life: recorded running, a notice (checkpoint then
//! release), an interruption, the periodic move review, and its end.

use super::*;

impl Executor {
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
        let mut running = RunningJob {
            instances,
            placement_group,
            started_at: self.clock.now(),
            ..pending
        };
        // Recorded where the instances are, as their cloud says (a subnet
        // in another zone than the plan's decides the zone): the pool
        // recorded is the instance's.
        if let Some(actual) = running.instances.first().map(|i| i.pool.clone()) {
            let plan = &running.plan.offer.pool;
            let same_pool_elsewhere = actual != *plan
                && actual.cloud == plan.cloud
                && actual.region == plan.region
                && actual.instance_type == plan.instance_type
                && actual.capacity == plan.capacity
                && actual.zone.is_some();
            if same_pool_elsewhere && running.instances.iter().all(|i| i.pool == actual) {
                tracing::info!(job = %running.job_id, planned = %plan, actual = %actual, "the instances are in another zone than planned (their subnet's): recorded where they are");
                running.plan.offer.pool = actual;
            }
        }
        // Its spend first (idempotent: a resumed launch records the same
        // instances again), then the job's record.
        let recorded = match crate::spend::record_started(
            self.ledger.as_ref(),
            &running.instances,
            &running.job_id,
            &running.plan.offer,
        )
        .await
        {
            Ok(()) => {
                self.ledger
                    .record_job(&self.record(&running, JobState::Running))
                    .await
            }
            Err(e) => Err(e),
        };
        match recorded {
            Ok(()) => Ok(running),
            Err(e) => {
                tracing::error!(job = %running.job_id, error = %e, "cannot record a launch; terminating what it made");
                for i in &running.instances {
                    if provider.terminate(&i.id).await.is_ok() {
                        self.ended(
                            running.plan.offer.pool.cloud,
                            &i.id,
                            EndedBy::Controller,
                            format!("job {}: its launch could not be recorded", running.job_id),
                        )
                        .await;
                    }
                }
                if let Some(g) = &running.placement_group {
                    let _ = provider.delete_placement_group(&g.id).await;
                }
                Err(e)
            }
        }
    }

    /// Records that `id` (in `cloud`) ended now, by
    /// `by`: logged, never failing the caller (see [`crate::spend::record_end`]).
    pub async fn ended(
        &self,
        cloud: Cloud,
        id: &gpufleet_core::InstanceId,
        by: EndedBy,
        detail: impl Into<String>,
    ) {
        crate::spend::record_end(
            self.ledger.as_ref(),
            cloud,
            id,
            self.clock.now(),
            by,
            detail,
        )
        .await;
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
                Ok(()) => {
                    n += 1;
                    self.ended(
                        pool.cloud,
                        &i.id,
                        EndedBy::Controller,
                        format!("job {}: its placement was released", running.job_id),
                    )
                    .await;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    n += 1;
                    self.ended(
                        pool.cloud,
                        &i.id,
                        EndedBy::Cloud,
                        crate::spend::gone_detail(None),
                    )
                    .await;
                }
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
            .record_exposure(pool, running.started_at..self.clock.now())
            .await?;
        Ok(())
    }

    /// What is left of the job after `progress` reference hours of this
    /// placement ([`Remaining`]).
    pub fn remaining(&self, running: &RunningJob, progress: f64) -> Result<Remaining> {
        Remaining::after(running.spec.hours, progress, running.deadline_at)
    }

    /// The job with the work and time left after `progress` reference hours
    /// of this placement: [`Remaining::spec`] at the executor's now (an
    /// error of kind `Timeout` once the deadline has passed).
    pub fn remaining_spec(&self, running: &RunningJob, progress: f64) -> Result<JobSpec> {
        self.remaining(running, progress)?
            .spec(&running.spec, self.clock.now())
            .map_err(|e| e.with_context("job", running.job_id.clone()))
    }

    pub(super) async fn run_hook(
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
        let spec = self.remaining_spec(&running, progress)?;
        self.start_excluding(
            &running.job_id,
            &spec,
            template,
            running.keys_used,
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
    pub(super) async fn record_job_retrying(&self, rec: &JobRecord) -> Result<()> {
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
        let spec = self.remaining_spec(&running, progress)?;
        let remaining = self.remaining(&running, progress)?;
        let placement = self
            .place(&spec, remaining, template, Some(&running.plan), None)
            .await?;
        let (Some(decision), Some(cur)) = (placement.decision().cloned(), placement.current) else {
            return Ok(Err(running));
        };
        let plans = placement.plans;
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
        let pending = RunningJob::pending(
            running.job_id.clone(),
            spec.clone(),
            plan.clone(),
            self.clock.now(),
            running.keys_used + 1,
        )
        .with_deadline(running.deadline_at)
        .with_done_before(done);
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
            from: running.plan.offer.pool.clone(),
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
