//! One step of a running job: placing the rest of its work with the one
//! policy, interruptions and the restarts they cost, usage, and the end.

use super::*;

/// Errors that end the job rather than being retried: bad input, refused
/// credentials, an unsupported operation, and a deadline that has passed
/// ([`Remaining::is_deadline_passed`]; a call that timed out is retried).
pub(super) fn is_fatal(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InvalidInput
            | ErrorKind::Unauthenticated
            | ErrorKind::PermissionDenied
            | ErrorKind::Unsupported
    ) || Remaining::is_deadline_passed(e)
}

/// Placement failures that are waited out.
pub(super) fn retry_placement(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InsufficientCapacity
            | ErrorKind::QuotaExceeded
            | ErrorKind::Unavailable
            | ErrorKind::Timeout
            | ErrorKind::RateLimited
    )
}

/// Where a newly placed job's first move review falls: between half and
/// one and a half `every` after the placement, by its id (FNV-1a), so
/// that jobs placed in the same poll (a controller's start, a fleet
/// submitted at once) do not all solve the policy in one later poll: the
/// reviews of a fleet spread over the period, and so does their CPU. Read
/// as how far before the placement the job's last review counts as having
/// been (negative: after it).
pub(super) fn review_phase(job_id: &str, every: Duration) -> time::Duration {
    let hash = job_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
    let offset_ms = i64::try_from(hash % every_ms).unwrap_or(0);
    let half_ms = i64::try_from(every_ms / 2).unwrap_or(0);
    time::Duration::milliseconds(offset_ms - half_ms)
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

impl Controller {
    /// Ends the job in `state` with `progress` hours done: releases its
    /// placement, sweeps anything else tagged with it, records the end.
    pub(super) async fn finish(
        &self,
        d: &Driven,
        running: RunningJob,
        state: JobState,
        progress: f64,
        detail: String,
    ) -> Result<Outcome> {
        self.exec.end(running, state, progress, &detail).await?;
        self.sweep(&d.job_id, d.owner.as_deref(), &[]).await?;
        Ok(d.outcome(state, detail, progress))
    }

    /// One poll.
    pub(super) async fn step(&self, d: &mut Driven) -> Result<Option<Outcome>> {
        d.polls += 1;
        if let Some(k) = &d.keeper {
            k.check()?;
        }
        // Cancelled (or ended) by someone else: from the poll's one read of
        // every job this controller drives.
        let looked = self.exec.clock().now();
        let latest = self
            .states
            .latest(
                self.exec.ledger().as_ref(),
                &self.config,
                &d.job_id,
                d.looked_at,
                looked,
            )
            .await?;
        d.looked_at = Some(looked);
        if let Some(last) = latest {
            if last.state.is_terminal() {
                if let Some(r) = d.running.take() {
                    self.exec.release(&r).await?;
                }
                self.sweep(&d.job_id, d.owner.as_deref(), &[]).await?;
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
        d.observed_at = Some(now);
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
                    let what = if code.trim() == crate::workload::SECRETS_EXIT {
                        "the node could not read the job's secrets".to_string()
                    } else {
                        format!("run exited with {code}")
                    };
                    let why = format!("{what}; restart {} of {most}", most - left + 1);
                    self.interrupt(d, running, &why, live, true, false).await?;
                    return self.place(d).await;
                }
                let done = running.done_before + live;
                let (state, detail, progress) = if code.trim() == crate::workload::SECRETS_EXIT {
                    (
                        JobState::Failed,
                        format!("the node could not read the job's secrets (`gpufleet jobs logs {}` names which)", d.job_id),
                        done,
                    )
                } else if failed {
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
            Seen::NeverStarted { why } => {
                // Nothing ran here. Like the job's own error: started again
                // while restarts are left (a boot that failed once may not
                // fail twice), else the job fails saying why. Not counted
                // against the pool.
                let left = self.restarts_left(d).await?;
                if left > 0 {
                    let most = d.spec.workload.max_restarts_on_errors;
                    let why = format!("{why}; restart {} of {most}", most - left + 1);
                    self.interrupt(d, running, &why, 0.0, true, false).await?;
                    return self.place(d).await;
                }
                let done = running.done_before;
                Ok(Some(
                    self.finish(d, running, JobState::Failed, done, why).await?,
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
                listed,
            } => {
                let bare = d.spec.workload.run.is_none();
                let done = running.done_before + live >= d.total - 1e-9;
                // A node that is heard from ends the job with the exit it
                // reports (a silent one fails the boot grace); where it is
                // not, run time says when the work is done.
                if done && (bare || !reported) {
                    let unheard = self
                        .exec
                        .provider(running.plan.offer.pool.cloud)
                        .and_then(|p| self.unheard(p.as_ref()));
                    let detail = match (bare, unheard) {
                        (true, _) => Some("the work is done (estimated from run time)".to_string()),
                        (false, Some(why)) => {
                            Some(format!("the work is done (estimated from run time: {why})"))
                        }
                        (false, None) => None,
                    };
                    if let Some(detail) = detail {
                        let total = d.total;
                        let done = self.finish(d, running, JobState::Succeeded, total, detail);
                        return Ok(Some(done.await?));
                    }
                }
                if self.config.sweep_every > 0 && d.polls.is_multiple_of(self.config.sweep_every) {
                    self.sweep_listed(&d.job_id, d.owner.as_deref(), &running, &listed)
                        .await?;
                }
                // Longer than `time` holds: never, not hourly.
                let review = time::Duration::try_from(self.config.move_review)
                    .unwrap_or(time::Duration::MAX);
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
                            d.attempts = moved.keys_used;
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
    pub(super) async fn place(&self, d: &mut Driven) -> Result<Option<Outcome>> {
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
                d.attempts = r.keys_used;
                d.placing_since = None;
                d.last_placing_detail.clear();
                d.last_review = now - review_phase(&d.job_id, self.config.move_review);
                let keep: Vec<InstanceId> = r.instances.iter().map(|i| i.id.clone()).collect();
                d.running = Some(r);
                self.sweep(&d.job_id, d.owner.as_deref(), &keep).await?;
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
    pub(super) async fn restarts_left(&self, d: &Driven) -> Result<u32> {
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

    pub(super) async fn interrupt(
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
        d.attempts = d.attempts.max(running.keys_used);
        Ok(())
    }

    /// Reads the placement's instances.
    /// Folds the nodes' GPU summaries into the job's usage and keeps it in
    /// the ledger when it grew. A failure to record is logged, not fatal:
    /// measurement never stops a job.
    pub(super) async fn fold_usage(
        &self,
        d: &mut Driven,
        r: &RunningJob,
        seen: &[(InstanceId, GpuSummary)],
    ) {
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

    /// Fails the job: releases and sweeps everything, records the reason.
    pub(super) async fn give_up(&self, d: &mut Driven, why: &str) -> Result<Outcome> {
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
        self.sweep(&d.job_id, d.owner.as_deref(), &[]).await?;
        Ok(d.outcome(JobState::Failed, why.to_string(), d.done))
    }
}
