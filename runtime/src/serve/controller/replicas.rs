//! The plan carried out: replicas launched, drained and ended (each
//! recorded), and a rollout started, promoted or rolled back.

use super::*;

pub(super) fn free_port() -> Result<u16> {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::new(ErrorKind::Unavailable, format!("no free local port: {e}")))
}

impl ServiceController {
    pub(super) async fn finish_draining(&mut self) {
        let done: Vec<String> = self
            .replicas
            .iter()
            .filter(|r| r.status.state == ReplicaState::Draining)
            .filter(|r| self.proxy.outstanding(&r.status.id) == 0)
            .map(|r| r.status.id.clone())
            .collect();
        for id in done {
            let why = self
                .replicas
                .iter()
                .find(|r| r.status.id == id)
                .and_then(|r| r.status.ended_because.clone())
                .unwrap_or_else(|| "drained".into());
            self.end(&id, &why, true).await;
        }
    }

    /// Terminates a replica's instance (when `terminate`) and records its end.
    pub(super) async fn end(&mut self, id: &str, why: &str, terminate: bool) {
        let Some(r) = self.replicas.iter().find(|r| r.status.id == id) else {
            return;
        };
        if let (true, Some(instance), Some(p)) = (
            terminate,
            r.status.instance.clone(),
            self.provider(r.status.pool.cloud),
        ) {
            match p.terminate(&instance).await {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    // Kept, to be tried again at the next step.
                    tracing::warn!(replica = %id, error = %e, "terminating a replica failed");
                    return;
                }
            }
        }
        self.mark_ended(id, why, EndedBy::Controller).await;
    }

    pub(super) async fn mark_ended(&mut self, id: &str, why: &str, by: EndedBy) {
        let Some(i) = self.replicas.iter().position(|r| r.status.id == id) else {
            return;
        };
        let mut r = self.replicas.remove(i);
        let now = OffsetDateTime::now_utc();
        r.status.state = ReplicaState::Ended;
        r.status.ended_at = Some(now);
        r.status.ended_because = Some(why.to_string());
        tracing::info!(replica = %id, why, "replica ended");
        if let (Some(ledger), Some(instance)) = (&self.ledger, &r.status.instance) {
            if let Some(ready) = r.status.ready_at {
                let exposure = ledger.record_exposure(&r.status.pool, ready..now);
                if let Err(e) = crate::serve::book::bounded("the replica's hours", exposure).await {
                    tracing::warn!(replica = %id, error = %e, "recording the replica's hours failed");
                }
            }
            let end = InstanceEnd::new(now, by, why);
            let ended = ledger.record_instance_end(r.status.pool.cloud, instance, &end);
            if let Err(e) = crate::serve::book::bounded("the replica's end", ended).await {
                // A later listing (`reconcile`, `jobs serve`, `ls`) records
                // the end the cloud shows.
                tracing::warn!(replica = %id, error = %e, "recording the replica's end failed");
            }
        }
        if let Some(ready) = r.status.ready_at {
            self.memory.served(&r.status.pool, ready, now);
        }
        self.ended.push_back(r.status);
        while self.ended.len() > 50 {
            self.ended.pop_front();
        }
    }

    pub(super) fn spec_of(&self, version: u32) -> &ServiceSpec {
        match &self.rollout {
            Some(r) if r.version == version => &r.spec,
            _ => &self.spec,
        }
    }

    pub(super) fn pools(&self, spec: &ServiceSpec) -> Vec<ReplicaPool> {
        let mut pools = replica_pools(
            spec,
            &self.offers,
            &self.hazard,
            self.memory.evidence(),
            OffsetDateTime::now_utc(),
            self.cold_start,
        );
        pools.retain(|p| {
            spec.replica
                .workload
                .images
                .get(&p.offer.pool.cloud)
                .or_else(|| self.config.images.get(&p.offer.pool.cloud))
                .is_some()
                && self.provider(p.offer.pool.cloud).is_some()
        });
        pools
    }

    pub(super) async fn reconcile(&mut self, now: OffsetDateTime) {
        let why_now = self
            .decisions
            .back()
            .filter(|d| d.at == now)
            .map(|d| d.to_string());
        let target = self.autoscaler.target();
        // The serving version, then the one rolling out beside it.
        let mut versions = vec![(self.version, self.spec.clone(), why_now.clone())];
        if let Some(r) = &self.rollout {
            versions.push((
                r.version,
                r.spec.clone(),
                Some(format!("rolling out version {}", r.version)),
            ));
        }
        for (version, spec, why) in versions {
            let pools = self.pools(&spec);
            let views: Vec<ReplicaView> = self
                .replicas
                .iter()
                .filter(|r| r.status.version == version)
                .map(|r| ReplicaView {
                    id: r.status.id.clone(),
                    pool: r.status.pool.clone(),
                    price: r.status.price,
                    state: r.status.state,
                    // A pool no longer offered counts as the first option.
                    speed: pools
                        .iter()
                        .find(|p| p.offer.pool == r.status.pool)
                        .map_or(1.0, |p| p.speed),
                })
                .collect();
            let avoid = self.memory.avoid(now);
            let planned = plan(target, &spec.spot, &views, &pools, &avoid, why.as_deref());
            if version == self.version {
                self.last_mix = planned.mix;
            }
            for action in planned.actions {
                match action {
                    Action::Launch { pool, price, why } => {
                        if let Err(e) = self.launch(&spec, version, &pool, price, &why).await {
                            tracing::warn!(service = %self.spec.name, pool = %pool, error = %e, "replica launch failed; that pool is set aside");
                            self.memory.refused(
                                &pool,
                                now,
                                e.kind() == ErrorKind::InsufficientCapacity,
                            );
                        }
                    }
                    Action::Drain { replica, why } => self.drain(&replica, why),
                }
            }
        }
        self.promote_when_ready(now);
    }

    pub(super) fn drain(&mut self, replica: &str, why: String) {
        if let Some(r) = self.replicas.iter_mut().find(|r| r.status.id == replica) {
            if matches!(r.status.state, ReplicaState::Starting | ReplicaState::Ready) {
                tracing::info!(replica = %replica, why = %why, "draining");
                r.status.state = ReplicaState::Draining;
                r.status.ended_because = Some(why);
            }
        }
    }

    /// Starts rolling out a new version sent on [`Self::updates`].
    pub(super) async fn take_update(&mut self, now: OffsetDateTime) {
        let mut newest = None;
        if let Some(rx) = self.updates.as_mut() {
            while let Ok(spec) = rx.try_recv() {
                newest = Some(spec);
            }
        }
        if let Some(spec) = newest {
            self.start_rollout(spec, None, now, "sent to the controller")
                .await;
        }
    }

    /// Starts rolling out `spec` as the next version (`how`: who asked),
    /// rolling back an update under way; one of another service is refused.
    pub(super) async fn start_rollout(
        &mut self,
        spec: ServiceSpec,
        source: Option<String>,
        now: OffsetDateTime,
        how: &str,
    ) {
        if spec.name != self.spec.name {
            tracing::warn!(service = %self.spec.name, other = %spec.name, "an update of another service was refused");
            return;
        }
        if let Err(e) = check_replica_script(&spec) {
            tracing::warn!(service = %self.spec.name, error = %e.message(), "an update whose replicas could not boot was refused");
            return;
        }
        if self.rollout.is_some() {
            self.roll_back("replaced by a newer update").await;
        }
        let version = self
            .version
            .max(self.rollouts.iter().map(|r| r.version).max().unwrap_or(0))
            + 1;
        tracing::info!(service = %self.spec.name, version, "rolling out");
        self.rollout = Some(Rollout {
            spec,
            source,
            version,
            status: RolloutStatus {
                version,
                outcome: "rolling-out".into(),
                began_at: now,
                ended_at: None,
                why: format!(
                    "new version {version} ({how}): its replicas start beside version {}",
                    self.version
                ),
            },
        });
        // Its GPU options may differ: read offers again.
        self.offers_at = None;
    }

    pub(super) fn finish_rollout(&mut self, outcome: &str, why: String) {
        if let Some(mut r) = self.rollout.take() {
            r.status.outcome = outcome.into();
            r.status.ended_at = Some(OffsetDateTime::now_utc());
            r.status.why = why;
            tracing::info!(service = %self.spec.name, version = r.version, outcome, why = %r.status.why, "rollout ended");
            self.rollouts.push_back(r.status);
            while self.rollouts.len() > 20 {
                self.rollouts.pop_front();
            }
        }
    }

    /// Ends every replica of the version rolling out; the serving version
    /// was never touched.
    pub(super) async fn roll_back(&mut self, why: &str) {
        let Some(version) = self.rollout.as_ref().map(|r| r.version) else {
            return;
        };
        let ids: Vec<String> = self
            .replicas
            .iter()
            .filter(|r| r.status.version == version)
            .map(|r| r.status.id.clone())
            .collect();
        for id in ids {
            self.end(&id, &format!("rolled back: {why}"), true).await;
        }
        self.finish_rollout("rolled-back", why.to_string());
    }

    /// Once as many replicas of the new version are ready as the target,
    /// traffic moves to them and the old version drains.
    pub(super) fn promote_when_ready(&mut self, _now: OffsetDateTime) {
        let Some((version, spec, source)) = self
            .rollout
            .as_ref()
            .map(|r| (r.version, r.spec.clone(), r.source.clone()))
        else {
            return;
        };
        let ready =
            self.count(|r| r.status.version == version && r.status.state == ReplicaState::Ready);
        if ready < self.autoscaler.target() {
            return;
        }
        let old: Vec<String> = self
            .replicas
            .iter()
            .filter(|r| r.status.version != version)
            .map(|r| r.status.id.clone())
            .collect();
        let from = self.version;
        for id in old {
            self.drain(&id, format!("replaced by version {version}"));
        }
        // Every table of the new file from now on: its bounds and scaling
        // settings (the autoscaler's), its spot mix and pools (the plan
        // reads the spec), its proxy's queue, retries and timeouts.
        self.autoscaler.reconfigure(spec.autoscale, spec.replicas);
        self.proxy.set_settings(spec.proxy);
        self.spec = spec;
        self.version = version;
        if let Some(text) = source {
            self.source = Some(text.clone());
            if let Some(book) = self.book.as_mut() {
                book.set_service_file(Some(text));
            }
        }
        self.finish_rollout(
            "promoted",
            format!("{ready} replica(s) of version {version} ready: traffic moved from version {from}, which drains"),
        );
    }

    pub(super) async fn launch(
        &mut self,
        spec: &ServiceSpec,
        version: u32,
        pool: &Pool,
        price: Price,
        why: &str,
    ) -> Result<()> {
        let Some(provider) = self.provider(pool.cloud).cloned() else {
            return Err(Error::invalid_input(format!(
                "no provider for {}",
                pool.cloud
            )));
        };
        let image = spec
            .replica
            .workload
            .images
            .get(&pool.cloud)
            .or_else(|| self.config.images.get(&pool.cloud))
            .cloned()
            .ok_or_else(|| Error::invalid_input(format!("no image for {}", pool.cloud)))?;
        self.seq += 1;
        let id = format!("{}-r{}", self.spec.name, self.seq);
        let port = if self.config.local {
            free_port()?
        } else {
            spec.port
        };
        // Unique to this controller's run: a retried launch gets the same
        // instance, and a replica number used by an earlier run (whose
        // replica has ended) never replays that run's launch.
        let key = IdempotencyKey::new(format!("svc-{id}-{:08x}", self.run_id))?;
        let mut req = LaunchRequest::new(pool.clone(), image, key);
        req.tags = self.config.tags.clone();
        let mut req = req
            .with_tag(tags::MANAGED, "true")
            .with_tag(tags::OWNER, self.config.owner.as_str())
            .with_tag(SERVICE_TAG, self.spec.name.as_str())
            .with_tag(REPLICA_TAG, id.as_str())
            .with_tag(PORT_TAG, port.to_string())
            .with_tag(VERSION_TAG, version.to_string());
        let node = if self.config.local {
            Node::Local
        } else {
            Node::Cloud
        };
        req.boot_script = Some(replica_script(spec, port, node, pool.cloud)?);
        if let Some(access) = spec.replica.workload.access.get(&pool.cloud) {
            req.access = access.clone();
        }
        let instances = provider.launch(&req).await?;
        let Some(instance) = instances.into_iter().next() else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "the launch returned no instance",
            ));
        };
        tracing::info!(replica = %id, pool = %pool, instance = %instance.id, why, "replica launched");
        if let Some(ledger) = &self.ledger {
            let spend = InstanceSpend::started(&instance, &self.spend_id(), price);
            let started = ledger.record_instance_start(&spend);
            if let Err(e) = crate::serve::book::bounded("the replica's start", started).await {
                tracing::warn!(replica = %id, error = %e, "recording the replica's start failed");
            }
        }
        self.replicas.push(Replica {
            status: ReplicaStatus {
                id,
                state: ReplicaState::Starting,
                capacity: pool.capacity,
                pool: pool.clone(),
                instance: Some(instance.id.clone()),
                endpoint: self.endpoint(&instance.addresses, port),
                price,
                started_at: instance.launched_at,
                ready_at: None,
                ended_at: None,
                started_because: why.to_string(),
                ended_because: None,
                version,
            },
            started: Instant::now(),
            failed_checks: 0,
            port,
        });
        Ok(())
    }
}
