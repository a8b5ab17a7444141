//! `launch_once` for `gpufleet launch` (one placement, no failover, under
//! the caller's key), and rolling a launch back: what a key made removed,
//! by listing, and recorded.

use super::*;

impl Executor {
    /// Removes what a launch under `key` made: every live instance carrying
    /// the key (found by listing, not by what this process remembers), then
    /// `group`. Returns how many instances were terminated; an error names the
    /// instances or group left behind (the orphan sweep and `reap` find them
    /// by their tags).
    ///
    /// With `price` (what the launch was placed at), an instance the ledger
    /// of spend does not know yet (the launch was cut off before it was
    /// recorded) is recorded from its launch first: what lived for seconds
    /// was paid for, and `costs` shows it.
    pub async fn roll_back(
        &self,
        provider: &Arc<dyn Provider>,
        key: &IdempotencyKey,
        group: Option<&PlacementGroup>,
        price: Option<gpufleet_core::Price>,
    ) -> Result<usize> {
        let filter = gpufleet_core::TagFilter::default().with(tags::IDEMPOTENCY_KEY, key.as_str());
        let found = provider.list_instances(&filter).await?;
        let mut left = Vec::new();
        let mut n = 0;
        for i in found.iter().filter(|i| i.state.is_live()) {
            if let Some(price) = price {
                let job = i.tags.get(tags::JOB).map_or("", String::as_str);
                let s = gpufleet_core::ledger::InstanceSpend::started(i, job, price);
                if let Err(e) = self.ledger.record_instance_start(&s).await {
                    tracing::warn!(instance = %i.id, error = %e, "could not record the start of an instance being rolled back");
                }
            }
            match provider.terminate(&i.id).await {
                Ok(()) => {
                    n += 1;
                    self.ended(
                        provider.cloud(),
                        &i.id,
                        EndedBy::Rollback,
                        format!("launch {key} rolled back"),
                    )
                    .await;
                }
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
            if let Err(e) = self.delete_group(provider, g).await {
                left.push(e);
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

    /// Deletes a launch's placement group (one already gone is fine); what
    /// was left, in words, when the cloud refused.
    pub(super) async fn delete_group(
        &self,
        provider: &Arc<dyn Provider>,
        g: &PlacementGroup,
    ) -> std::result::Result<(), String> {
        match provider.delete_placement_group(&g.id).await {
            Ok(()) => {
                self.emit(ExecEvent::PlacementGroupDeleted {
                    name: g.name.clone(),
                });
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("placement group {} ({e})", g.id)),
        }
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
        if let Some(at) = history.iter().rposition(|r| r.state == JobState::Running) {
            let last = &history[at];
            // The other launches of a hedge this one won, which a process
            // that died before it settled them may have left running.
            for lost in unfinished_launches(&history[..at])
                .iter()
                .filter(|r| r.attempt != last.attempt)
            {
                if let Some(provider) = lost.pool.as_ref().and_then(|p| self.provider(p.cloud)) {
                    let (n, left) = self
                        .remove_launch(provider, job_id, lost.attempt, lost.price)
                        .await?;
                    if n > 0 || left.is_some() {
                        tracing::warn!(job = job_id, attempt = lost.attempt, terminated = n, left = ?left, "removed what a hedged launch that lost had left");
                    }
                }
            }
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
                    if let Some(why) = adopt_mismatch(&live, template, rec_pool, pool) {
                        return Err(Error::invalid_input(format!(
                            "job '{job_id}' already holds {} instance(s) in {rec_pool}, {why}; terminate them (`gpufleet terminate --job {job_id}`) or launch under another name",
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
                            keys_used: attempts,
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
        // Several (a hedged launch in flight) are all removed: which would
        // have won is not known.
        let unfinished = unfinished_launches(&history);
        if let [rec] = unfinished {
            if let Some(done) = self.resume_launch(job_id, job, template, rec, pool).await? {
                return Ok((false, done));
            }
        } else {
            for rec in unfinished {
                let Some(provider) = rec.pool.as_ref().and_then(|p| self.provider(p.cloud)) else {
                    continue;
                };
                self.abandon(
                    provider,
                    rec,
                    "was one of a hedged launch cut off, and was abandoned",
                )
                .await?;
            }
        }
        let Some(pool) = pool else {
            let r = self
                .start_excluding(job_id, job, template, attempts, None, None, 0.0)
                .await?;
            return Ok((false, r));
        };
        let Some(plan) = self.plan_for(job, pool).await? else {
            return Err(self.no_plan_in(job, pool).await);
        };
        let provider = gpufleet_core::provider_for(&self.providers, pool.cloud)?.clone();
        let image = template
            .images
            .get(&pool.cloud)
            .cloned()
            .ok_or_else(|| Error::invalid_input(format!("no image for {}", pool.cloud)))?;
        let mut pending =
            RunningJob::pending(job_id, job.clone(), plan, self.clock.now(), attempts);
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
    pub(super) async fn resume_launch(
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
            let pending =
                RunningJob::pending(job_id, job.clone(), plan, self.clock.now(), rec.attempt);
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
    /// many instances were terminated and what was left (a group that could
    /// not be looked up or deleted).
    pub(super) async fn abandon(
        &self,
        provider: &Arc<dyn Provider>,
        rec: &JobRecord,
        why: &str,
    ) -> Result<RolledBack> {
        let key = self.launch_key(&rec.job_id, rec.attempt)?;
        let (n, group_left) = self
            .remove_launch(provider, &rec.job_id, rec.attempt, rec.price)
            .await?;
        let mut placing = rec.clone();
        placing.state = JobState::Placing;
        placing.at = self.clock.now();
        placing.detail = format!("launch {key} {why}; {n} instance(s) terminated");
        if let Some(left) = &group_left {
            placing.detail.push_str(&format!(
                "; {left}: `reap --yes` deletes it once it is empty"
            ));
        }
        self.ledger.record_job(&placing).await?;
        if let Some(left) = &group_left {
            tracing::warn!(key = %key, "{left}");
        }
        Ok(RolledBack {
            terminated: n,
            left: group_left,
        })
    }

    /// Removes what launch `attempt` of `job_id` made: its instances by its
    /// key (they cost money, and finding them needs nothing else), then its
    /// group by name, if it made one (a failed lookup, from a cloud whose
    /// group API is down or a launch that asked for no group, stops nothing
    /// and is returned in words). Returns how many instances were terminated.
    pub(super) async fn remove_launch(
        &self,
        provider: &Arc<dyn Provider>,
        job_id: &str,
        attempt: u32,
        price: Option<gpufleet_core::Price>,
    ) -> Result<(usize, Option<String>)> {
        let key = self.launch_key(job_id, attempt)?;
        let n = self.roll_back(provider, &key, None, price).await?;
        let name = self.group_name(job_id, attempt);
        let group_left = match group_of(provider, job_id, &name).await {
            Ok(None) => None,
            Ok(Some(g)) => self.delete_group(provider, &g).await.err(),
            Err(e) if e.kind() == ErrorKind::Unsupported => None,
            Err(e) => Some(format!("placement group {name} not looked up ({e})")),
        };
        Ok((n, group_left))
    }

    /// After a launch of `job_id` was cut off (Ctrl-C): when the ledger's
    /// last record is its `launching` record, removes whatever that attempt
    /// made (instances by key, its group by name) and records the job as
    /// placing again; returns how many instances were terminated. `None`
    /// when no launch was in flight (it finished and was recorded, or never
    /// began).
    pub async fn roll_back_unfinished(&self, job_id: &str) -> Result<Option<RolledBack>> {
        let history = self.ledger.job_history(job_id).await?;
        let mut done: Option<RolledBack> = None;
        // Every launch of a hedge in flight, the last one recorded last.
        for rec in unfinished_launches(&history) {
            let Some(provider) = rec.pool.as_ref().and_then(|p| self.provider(p.cloud)) else {
                continue;
            };
            let r = self
                .abandon(provider, rec, "interrupted and rolled back")
                .await?;
            done = Some(match done {
                None => r,
                Some(before) => RolledBack {
                    terminated: before.terminated + r.terminated,
                    left: before.left.or(r.left),
                },
            });
        }
        Ok(done)
    }
}

/// The `launching` records at the end of a job's history (none when its
/// last record is another state): the launches in flight when the process
/// that made them stopped, one, or several of a hedged launch.
pub(super) fn unfinished_launches(history: &[JobRecord]) -> &[JobRecord] {
    let from = history
        .iter()
        .rposition(|r| r.state != JobState::Launching)
        .map_or(0, |i| i + 1);
    &history[from..]
}

/// Why the live instances a job holds are not what this launch asks for,
/// if they are not: another count, pool, image or owner (the tags they were
/// launched with; an instance from before a tag existed is not judged by
/// it). `None` when they are, and a re-run may return them.
pub(super) fn adopt_mismatch(
    live: &[Instance],
    template: &LaunchTemplate,
    rec_pool: &Pool,
    pool: Option<&Pool>,
) -> Option<String> {
    let tag = |k: &str| live.first().and_then(|i| i.tags.get(k)).map(String::as_str);
    // Whose they are first: another owner's instances are never adopted,
    // and the count or pool they were launched with is theirs to say.
    if let (Some(had), Some(asked)) = (tag(tags::OWNER), template.tags.get(tags::OWNER)) {
        if had != asked {
            return Some(format!("owned by {had}, not {asked}"));
        }
    }
    let nodes = template.nodes.max(1) as usize;
    if live.len() != nodes {
        return Some(format!("not the {nodes} asked for"));
    }
    if let Some(p) = pool.filter(|p| *p != rec_pool) {
        return Some(format!("not in {p} as asked"));
    }
    if let (Some(had), Some(asked)) = (tag(tags::IMAGE), template.images.get(&rec_pool.cloud)) {
        if had != asked {
            return Some(format!("launched from image {had}, not {asked}"));
        }
    }
    None
}
