//! Rebuilding a job from the ledger after a crash: a launch in flight is
//! re-sent with its key, a move in flight is abandoned, and anything tagged
//! with the job that is not its placement is terminated (the orphan sweep).

use super::*;

/// When the placement of `attempt` started running, from the job's records.
pub(super) fn placement_started(history: &[JobRecord], attempt: u32) -> Option<OffsetDateTime> {
    history
        .iter()
        .find(|r| r.state == JobState::Running && r.attempt == attempt)
        .map(|r| r.at)
}

impl Controller {
    /// Rebuilds the job from the ledger: `Err(outcome)` when it already
    /// ended.
    pub(super) async fn resume(
        &self,
        job_id: &str,
        keeper: &Option<Arc<LeaseKeeper>>,
    ) -> Result<std::result::Result<Driven, Outcome>> {
        let definition = self.definition(job_id).await?;
        let spec = definition.file.clone().into_spec()?;
        let owner = self.owner_of(&definition);
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
            self.sweep(job_id, owner.as_deref(), &[]).await?;
            return Ok(Err(Outcome {
                job_id: job_id.into(),
                state: last.state,
                detail: last.detail.clone(),
                progress_hours: last.progress_hours,
                total_hours: total,
            }));
        }
        // Due from the job's first record, as when it was placed first.
        let deadline_at = Remaining::of(&spec, first.at).deadline_at;
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
            template: self.template(&spec, owner.as_deref()),
            owner,
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
            observed_at: None,
            looked_at: None,
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
        let swept = self.sweep(job_id, d.owner.as_deref(), &keep).await?;
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
    pub(super) async fn rebuild(
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
            crate::executor::group_of(
                &provider,
                &d.job_id,
                &self.exec.group_name(&d.job_id, rec.attempt),
            )
            .await?
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
            keys_used: d.attempts.max(rec.attempt),
            deadline_at: d.deadline_at,
            done_before: rec.progress_hours,
        }))
    }

    /// Re-sends the launch a `launching` record announced, with its key: the
    /// cloud returns what a first send made, or launches now.
    pub(super) async fn relaunch(&self, d: &Driven, rec: &JobRecord) -> Result<Option<RunningJob>> {
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
        let pending = RunningJob::pending(d.job_id.clone(), left, plan, now, rec.attempt)
            .with_deadline(d.deadline_at)
            .with_done_before(rec.progress_hours);
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

    /// Terminates every live instance tagged with the job (and with its
    /// owner `owner`, when known: another owner's launch under the same name
    /// is not this job's) that is not in `keep`; returns how many. A cloud
    /// that fails is left for the next sweep after the others are swept;
    /// its error is returned then.
    pub(super) async fn sweep(
        &self,
        job_id: &str,
        owner: Option<&str>,
        keep: &[InstanceId],
    ) -> Result<usize> {
        let (n, failed) = self.sweep_clouds(job_id, keep, &[], owner).await;
        match failed.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(n),
        }
    }

    /// Sweeps every cloud of the executor: the instances terminated, and
    /// the clouds that could not be swept, with why.
    pub(super) async fn sweep_clouds(
        &self,
        job_id: &str,
        keep: &[InstanceId],
        expected: &[InstanceId],
        owner: Option<&str>,
    ) -> (usize, Vec<(Cloud, Error)>) {
        let mut filter = TagFilter::managed().with(tags::JOB, job_id);
        if let Some(o) = owner {
            filter = filter.with(tags::OWNER, o);
        }
        let mut n = 0;
        let mut failed = Vec::new();
        'clouds: for p in self.exec.providers() {
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
                Err(e) => {
                    failed.push((p.cloud(), e));
                    continue;
                }
            };
            for i in found {
                if keep.contains(&i.id) || !i.state.is_live() {
                    continue;
                }
                match self.end_stray(p.as_ref(), job_id, &i.id, expected).await {
                    Ok(ended) => n += usize::from(ended),
                    Err(e) => {
                        failed.push((p.cloud(), e));
                        continue 'clouds;
                    }
                }
            }
        }
        (n, failed)
    }

    /// The running job's periodic orphan sweep, from the listing of its
    /// region this poll already took (no call of its own, so that a
    /// controller's calls per poll grow with regions, not with jobs): every
    /// live instance tagged with the job that is not one of its placement's
    /// is ended. A stray in another region is found by the sweep at the
    /// job's end and by `gpufleet reconcile`.
    pub(super) async fn sweep_listed(
        &self,
        job_id: &str,
        owner: Option<&str>,
        running: &RunningJob,
        listed: &super::board::Listed,
    ) -> Result<usize> {
        let Some(p) = self.exec.provider(running.plan.offer.pool.cloud) else {
            return Ok(0);
        };
        let mut n = 0;
        for i in listed.of_job(job_id) {
            let theirs =
                owner.is_some_and(|o| i.tags.get(tags::OWNER).map(String::as_str) != Some(o));
            let strays =
                i.state.is_live() && !theirs && !running.instances.iter().any(|r| r.id == i.id);
            if strays && self.end_stray(p.as_ref(), job_id, &i.id, &[]).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Ends `id`, an instance of `job_id`'s that the job does not hold
    /// (or, when in `expected`, one of its own being ended), and records
    /// the end: whether it was ended here (not already gone).
    async fn end_stray(
        &self,
        p: &dyn gpufleet_core::Provider,
        job_id: &str,
        id: &InstanceId,
        expected: &[InstanceId],
    ) -> Result<bool> {
        match p.terminate(id).await {
            Ok(()) => {
                self.exec
                    .ended(
                        p.cloud(),
                        id,
                        gpufleet_core::ledger::EndedBy::Controller,
                        format!("job {job_id}: orphan sweep"),
                    )
                    .await;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        }
        if expected.contains(id) {
            tracing::info!(job = job_id, instance = %id, "terminated");
        } else {
            tracing::warn!(job = job_id, instance = %id, "terminated an instance the job does not hold");
        }
        Ok(true)
    }
}
