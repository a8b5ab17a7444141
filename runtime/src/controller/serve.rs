//! Driving jobs under a lease: one job (`drive`, or `drive_when_free`,
//! which waits for a dead controller's lease to lapse), or every job in the
//! ledger a free controller can claim (`serve`), handing a job back
//! (`let_go`) when asked to stop.

use super::*;

impl Controller {
    /// Drives the job until it ends, under its lease: takes the lease (a job
    /// another live controller holds is [`ErrorKind::Conflict`], naming the
    /// holder), rebuilds the job from the ledger (so this is also how a job
    /// is resumed or taken over), then polls. The lease is renewed while the
    /// job is driven and given up when it ends; if it is lost the driving
    /// stops at once with [`ErrorKind::Conflict`].
    pub async fn drive(&self, job_id: &str) -> Result<Outcome> {
        match self
            .exec
            .ledger()
            .acquire_lease(job_id, &self.config.holder, self.config.lease_ttl)
            .await?
        {
            Claim::Acquired(lease) => self.drive_leased(lease).await,
            Claim::Held(l) => Err(held_by(&l, false)),
        }
    }

    /// [`drive`](Self::drive), for a person resuming a job right after its
    /// controller died: a lease that another controller holds is waited for
    /// until it lapses, if it lapses within two of this controller's lease
    /// periods. A dead controller (killed, its machine gone) stops renewing,
    /// so its lease lapses and this one takes over; a live one renews, and
    /// that is [`ErrorKind::Conflict`] naming it, as `drive` says at once.
    /// `waiting` is called once, with the lease and the wait, before it.
    pub async fn drive_when_free(
        &self,
        job_id: &str,
        waiting: impl FnOnce(&Lease, Duration) + Send,
    ) -> Result<Outcome> {
        let ledger = self.exec.ledger();
        let held = match ledger
            .acquire_lease(job_id, &self.config.holder, self.config.lease_ttl)
            .await?
        {
            Claim::Acquired(lease) => return self.drive_leased(lease).await,
            Claim::Held(l) => l,
        };
        // A job that has ended has nothing to drive: its outcome now, not
        // after waiting out a (dead) controller's lease.
        if ledger
            .job_latest(job_id)
            .await?
            .is_some_and(|r| r.state.is_terminal())
        {
            return self.status(job_id).await;
        }
        let left = held.expires_at - ledger.now().await?;
        let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
        if left > self.config.lease_ttl * 2 {
            return Err(held_by(&held, false));
        }
        waiting(&held, left);
        // A little past the lapse, so the ledger's clock has passed it too.
        tokio::time::sleep(left + Duration::from_millis(250)).await;
        match ledger
            .acquire_lease(job_id, &self.config.holder, self.config.lease_ttl)
            .await?
        {
            Claim::Acquired(lease) => self.drive_leased(lease).await,
            Claim::Held(l) => Err(held_by(
                &l,
                l.holder == held.holder && l.token == held.token,
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
        // Refused because the job was cancelled meanwhile (a launch that
        // answered after the cancel): a cancel is final. What the job still
        // holds, whatever answered late, is terminated, and the drive ends
        // cancelled.
        let out = match out {
            Err(e) if e.kind() == ErrorKind::Conflict => {
                match self.after_cancel(&lease.job_id).await {
                    Ok(Some(outcome)) => Ok(outcome),
                    Ok(None) => Err(e),
                    Err(other) => {
                        tracing::warn!(job = %lease.job_id, error = %other, "cannot tell whether the job was cancelled");
                        Err(e)
                    }
                }
            }
            other => other,
        };
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

    /// If job `job_id` was cancelled: every instance tagged with it
    /// terminated (and its end recorded), and the drive's outcome.
    async fn after_cancel(&self, job_id: &str) -> Result<Option<Outcome>> {
        let Some(last) = self.exec.ledger().job_latest(job_id).await? else {
            return Ok(None);
        };
        if last.state != JobState::Cancelled {
            return Ok(None);
        }
        let definition = self.definition(job_id).await?;
        let owner = self.owner_of(&definition);
        let n = self.sweep(job_id, owner.as_deref(), &[]).await?;
        let spec = definition.file.into_spec()?;
        tracing::info!(
            job = job_id,
            terminated = n,
            "the job was cancelled while it was driven"
        );
        Ok(Some(Outcome {
            job_id: job_id.to_string(),
            state: JobState::Cancelled,
            detail: format!("cancelled; {n} instance(s) that answered after the cancel terminated"),
            progress_hours: last.progress_hours,
            total_hours: spec.hours,
        }))
    }

    pub(super) async fn drive_unleased(
        &self,
        job_id: &str,
        keeper: Option<Arc<LeaseKeeper>>,
    ) -> Result<Outcome> {
        // The event feeds, unless this controller listens already (`serve`).
        let _listening = self.listen();
        let waker = self.heard.waker(job_id);
        let out = self.drive_awake(job_id, keeper, &waker).await;
        self.heard.forget(job_id);
        out
    }

    /// [`Self::drive_unleased`]'s loop: a step each poll, or as soon as
    /// `waker` says an event ended one of the job's instances.
    async fn drive_awake(
        &self,
        job_id: &str,
        keeper: Option<Arc<LeaseKeeper>>,
        waker: &tokio::sync::Notify,
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
            if !self.events.is_empty() {
                let ids = d
                    .running
                    .iter()
                    .flat_map(|r| r.instances.iter().map(|i| i.id.clone()));
                let capacity = d
                    .running
                    .as_ref()
                    .map_or(Capacity::OnDemand, |r| r.plan.offer.pool.capacity);
                self.heard.watch(job_id, ids.collect(), capacity);
            }
            tokio::select! {
                () = self.pacer.pause(self.config.poll) => {}
                () = waker.notified() => {
                    tracing::info!(job = job_id, "woken by an instance event");
                }
            }
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
        // Each job's owner, read once (a job's owner never changes).
        let mut owners: std::collections::HashMap<String, Option<String>> = Default::default();
        tokio::pin!(stop);
        tracing::info!(holder = %holder, ledger = %ledger.location(), "serving managed jobs");
        let mut reconciled_at: Option<tokio::time::Instant> = None;
        loop {
            if let Some(every) = config.reconcile_every {
                if reconciled_at.is_none_or(|t| t.elapsed() >= every) {
                    reconciled_at = Some(tokio::time::Instant::now());
                    let owner = (!config.any_owner && !config.owner.is_empty())
                        .then_some(config.owner.as_str());
                    match self.reconcile(owner).await {
                        Ok(r) => {
                            report.reconciliations += 1;
                            report.reconciled_ends += r.ended.len() as u64;
                            report.reconciled_stuck += r.stuck.len() as u64;
                            if !r.unknown.is_empty() {
                                tracing::warn!(instances = r.unknown.len(), "managed instances of this owner the ledger does not know; `gpufleet reconcile --yes` adopts them");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot reconcile the ledger this time")
                        }
                    }
                }
            }
            if driving.len() < config.max_jobs {
                match self
                    .claim(&config, &mut driving, &mut owners, &mut tasks, &mut report)
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

    /// Reconciles the ledger with every cloud that answers now
    /// ([`crate::spend::Apply::SERVE`]): one listing per cloud; a cloud that
    /// does not answer is left as it is.
    pub async fn reconcile(&self, owner: Option<&str>) -> Result<crate::spend::Reconciliation> {
        let providers = self.exec.providers().to_vec();
        let lists =
            crate::reap::list_managed(&providers, &gpufleet_core::TagFilter::default()).await;
        let (mut read, mut listed) = (Vec::new(), Vec::new());
        for (cloud, got) in lists {
            match got {
                Ok(v) => {
                    read.push(cloud);
                    listed.extend(v);
                }
                Err(e) => tracing::warn!(%cloud, error = %e, "not reconciled this time"),
            }
        }
        let seen = crate::spend::Observed {
            providers: &providers,
            read,
            listed: &listed,
            now: self.exec.clock().now(),
        };
        crate::spend::reconcile(
            self.exec.ledger().as_ref(),
            &seen,
            owner,
            &Default::default(),
            crate::spend::Apply::SERVE,
        )
        .await
    }

    /// One look for jobs to drive: expired leases (a dead controller's jobs)
    /// are all taken at once, up to `max_jobs`; jobs never leased, up to
    /// `claim_batch` a look. Only the jobs of `config.owner` (and those with
    /// no recorded owner), unless `config.any_owner`; `owners` remembers
    /// each job's owner once read.
    pub(super) async fn claim(
        &self,
        config: &ServeConfig,
        driving: &mut std::collections::HashSet<String>,
        owners: &mut std::collections::HashMap<String, Option<String>>,
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
            if !config.any_owner && !config.owner.is_empty() {
                let theirs = match owners.get(&job) {
                    Some(o) => o.clone(),
                    None => {
                        let o = match ledger.job_spec(&job).await? {
                            Some(doc) => JobDefinition::from_doc(&job, &doc)?.owner,
                            None => None,
                        };
                        owners.insert(job.clone(), o.clone());
                        o
                    }
                };
                if theirs.is_some_and(|o| o != config.owner) {
                    continue;
                }
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
}

/// The refusal for a job whose lease `l` another controller holds;
/// `renewed` when it was renewed while this one waited for it to lapse.
fn held_by(l: &Lease, renewed: bool) -> Error {
    let until = l
        .expires_at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let job_id = &l.job_id;
    Error::new(
        ErrorKind::Conflict,
        if renewed {
            format!(
                "job {job_id} is driven by controller {}, which renewed its lease (token {}, now until {until}) while this one waited for it to lapse: that controller is alive. Stop it first, or `gpufleet jobs cancel {job_id}` ends the job",
                l.holder, l.token
            )
        } else {
            format!(
                "job {job_id} is driven by controller {} (lease token {}, until {until}); it resumes from there if that controller stops",
                l.holder, l.token
            )
        },
    )
}
