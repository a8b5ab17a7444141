//! What the controller sees at each step: interruption notices, one
//! listing of the service's instances per cloud, and readiness checks.

use super::*;

/// Whether `e` (a client request's failure) is this machine's own: a
/// socket it could not open or bind for want of descriptors, buffers,
/// memory or local ports, not anything the peer did.
pub(super) fn local_resource_error(e: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(unix)]
    const LOCAL: [i32; 5] = {
        use nix::libc;
        [
            libc::EMFILE,        // this process's descriptors
            libc::ENFILE,        // the system's
            libc::ENOBUFS,       // socket buffers
            libc::ENOMEM,        // memory
            libc::EADDRNOTAVAIL, // no local port left
        ]
    };
    #[cfg(not(unix))]
    const LOCAL: [i32; 0] = [];
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.raw_os_error().is_some_and(|n| LOCAL.contains(&n)) {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

impl ServiceController {
    /// Listens to each provider's interruption notices (where it has them)
    /// and to the event feeds given to [`Self::with_events`], so that a
    /// replica given notice, or whose instance a feed says is ending, is
    /// drained and replaced at the next step.
    pub async fn listen_for_notices(&mut self) {
        let (tx, rx) = mpsc::unbounded_channel();
        for p in &self.providers {
            // A cloud provider's notices are its node's own (the metadata
            // service of the machine this controller runs on), never a
            // replica's: only the local provider's fakes tell of their
            // instances' notices. Replicas on a cloud report theirs on
            // their tags, and the event feeds tell the rest.
            if !self.config.local || !p.capabilities().interruptions {
                continue;
            }
            let Ok(mut stream) = p.interruptions().await else {
                continue;
            };
            let (tx, cloud) = (tx.clone(), p.cloud());
            self.listeners.push(tokio::spawn(async move {
                while let Some(notice) = stream.next().await {
                    if let Ok(n) = notice {
                        if let Some(id) = n.instance {
                            if tx.send((cloud, id)).is_err() {
                                break;
                            }
                        }
                    }
                }
            }));
        }
        for feed in &self.feeds {
            let (tx, cloud, feed) = (tx.clone(), feed.cloud(), feed.clone());
            let (mine, watched) = (self.watched.clone(), self.watched.clone());
            self.listeners
                .push(tokio::spawn(crate::controller::follow_feed(
                    feed,
                    move |e: &gpufleet_core::CloudEvent| {
                        mine.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .contains_key(&e.instance)
                    },
                    move |e| {
                        let capacity = watched
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get(&e.instance)
                            .copied();
                        if let Some(why) = capacity.and_then(|c| e.mismatch(c)) {
                            tracing::warn!(instance = %e.instance, why, "an instance event not obeyed");
                            return true;
                        }
                        !e.ends_instance() || tx.send((cloud, e.instance)).is_ok()
                    },
                )));
        }
        self.notices = Some(rx);
    }

    pub(super) async fn refresh_offers(&mut self) {
        if self
            .offers_at
            .is_some_and(|at| at.elapsed() < self.config.offers_every)
        {
            return;
        }
        let mut specs = vec![&self.spec];
        specs.extend(self.rollout.as_ref().map(|r| &r.spec));
        let mut offers: Vec<Offer> = Vec::new();
        let mut failed = None;
        for spec in specs {
            match crate::live::job_offers(&self.providers, &spec.replica).await {
                Ok(o) => {
                    for offer in o.offers {
                        if !offers.iter().any(|x| x.pool == offer.pool) {
                            offers.push(offer);
                        }
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            None => {
                self.offers = offers;
                self.offers_at = Some(Instant::now());
            }
            Some(e) => {
                tracing::warn!(service = %self.spec.name, error = %e, "offers failed; keeping the last ones")
            }
        }
    }

    pub(super) async fn read_notices(&mut self) {
        let mut heard = Vec::new();
        if let Some(rx) = self.notices.as_mut() {
            while let Ok(n) = rx.try_recv() {
                heard.push(n);
            }
        }
        for (cloud, id) in heard {
            self.noticed(cloud, &id, "interruption notice");
        }
    }

    /// A replica whose instance was given notice stops taking requests
    /// (those in flight finish) and is replaced; its pool is set aside.
    pub(super) fn noticed(&mut self, cloud: Cloud, id: &InstanceId, why: &str) {
        let Some(r) = self
            .replicas
            .iter_mut()
            .find(|r| r.status.pool.cloud == cloud && r.status.instance.as_ref() == Some(id))
        else {
            return;
        };
        if matches!(r.status.state, ReplicaState::Starting | ReplicaState::Ready) {
            r.status.state = ReplicaState::Draining;
            r.status.ended_because = Some(why.into());
            let pool = r.status.pool.clone();
            tracing::info!(replica = %r.status.id, why, "draining, replacing");
            self.memory.set_aside(&pool, OffsetDateTime::now_utc());
        }
    }

    pub(super) async fn observe_instances(&mut self, now: OffsetDateTime) {
        // This owner's replicas of this service: another person's service of
        // the same name in the same account is not ours to adopt or end.
        let filter = TagFilter::managed()
            .with(SERVICE_TAG, self.spec.name.as_str())
            .with(tags::OWNER, self.config.owner.as_str());
        let mut seen: Vec<(Cloud, Instance)> = Vec::new();
        let mut unread: Vec<Cloud> = Vec::new();
        for p in &self.providers {
            match p.list_instances(&filter).await {
                Ok(list) => seen.extend(list.into_iter().map(|i| (p.cloud(), i))),
                Err(e) => {
                    tracing::warn!(cloud = %p.cloud(), error = %e, "listing the service's instances failed");
                    unread.push(p.cloud());
                }
            }
        }
        // Replicas whose instance is gone.
        let mut gone = Vec::new();
        for r in &self.replicas {
            let Some(id) = &r.status.instance else {
                continue;
            };
            let cloud = r.status.pool.cloud;
            if unread.contains(&cloud) {
                continue;
            }
            let live = seen
                .iter()
                .any(|(c, i)| *c == cloud && i.id == *id && i.state.is_live());
            if !live {
                gone.push(r.status.id.clone());
            }
        }
        for id in gone {
            let (pool, instance, capacity) = match self.replicas.iter().find(|r| r.status.id == id)
            {
                Some(r) => (
                    r.status.pool.clone(),
                    r.status.instance.clone(),
                    r.status.capacity,
                ),
                None => continue,
            };
            // Why: the ended instance's own record where the cloud keeps it,
            // or what the cloud says of an instance it no longer shows.
            let cause = match (instance, self.provider(pool.cloud)) {
                (Some(i), Some(p)) => match p.instance(&i).await {
                    Ok(found) if found.end_reason.is_some() => found.end_reason,
                    _ => p.end_reason(&i).await.ok().flatten(),
                },
                _ => None,
            };
            let why = match &cause {
                Some(r) => format!("instance ended by the cloud ({})", r.code),
                None => "instance gone".to_string(),
            };
            if crate::controller::counts_against_pool(capacity, cause.as_ref().map(|c| c.cause)) {
                self.memory.interrupted(&pool, now);
            }
            let by = match cause.as_ref().map(|c| c.cause) {
                Some(EndCause::Requested) => EndedBy::Controller,
                _ => EndedBy::Cloud,
            };
            self.mark_ended(&id, &why, by).await;
        }
        // Notices the replicas' nodes reported on their instances.
        let reported: Vec<(Cloud, InstanceId)> = seen
            .iter()
            .filter(|(_, i)| i.state.is_live() && i.tags.contains_key(tags::NOTICE))
            .map(|(c, i)| (*c, i.id.clone()))
            .collect();
        for (cloud, id) in reported {
            self.noticed(cloud, &id, "interruption notice (reported by its node)");
        }
        // Addresses the cloud gave since the launch (Compute Engine and Azure
        // give them once the instance exists; an EC2 public address once it
        // runs).
        let reach = self.config.reach;
        for r in &mut self.replicas {
            let (Some(id), None) = (&r.status.instance, r.status.endpoint) else {
                continue;
            };
            let cloud = r.status.pool.cloud;
            let found = seen.iter().find(|(c, i)| *c == cloud && i.id == *id);
            if let Some(endpoint) = found.and_then(|(_, i)| reach.endpoint(&i.addresses, r.port)) {
                r.status.endpoint = Some(endpoint);
                tracing::info!(replica = %r.status.id, %endpoint, "replica's address known");
            }
        }
        // Instances of the service no replica holds: a controller started
        // again adopts its replicas.
        for (cloud, i) in seen {
            if !i.state.is_live()
                || self.replicas.iter().any(|r| {
                    r.status.pool.cloud == cloud && r.status.instance.as_ref() == Some(&i.id)
                })
            {
                continue;
            }
            let (Some(replica), Some(port)) = (
                i.tags.get(REPLICA_TAG).cloned(),
                i.tags.get(PORT_TAG).and_then(|p| p.parse::<u16>().ok()),
            ) else {
                continue;
            };
            if let Some(n) = replica
                .rsplit_once("-r")
                .and_then(|(_, n)| n.parse::<u32>().ok())
            {
                self.seq = self.seq.max(n);
            }
            let price = self
                .offers
                .iter()
                .find(|o| o.pool == i.pool)
                .map_or(Price::ZERO, |o| o.price);
            tracing::info!(replica = %replica, instance = %i.id, "adopted a running replica");
            self.replicas.push(Replica {
                status: ReplicaStatus {
                    id: replica,
                    state: ReplicaState::Starting,
                    capacity: i.pool.capacity,
                    endpoint: self.endpoint(&i.addresses, port),
                    pool: i.pool.clone(),
                    instance: Some(i.id.clone()),
                    price,
                    started_at: i.launched_at,
                    ready_at: None,
                    ended_at: None,
                    started_because: "adopted: found running".into(),
                    ended_because: None,
                    version: i
                        .tags
                        .get(VERSION_TAG)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(self.version),
                },
                started: Instant::now(),
                failed_checks: 0,
                port,
            });
        }
    }

    /// Where a replica on an instance with `addresses` is reached: the
    /// address [`ServiceConfig::reach`] names, none until the cloud gives
    /// it.
    pub(super) fn endpoint(&self, addresses: &Addresses, port: u16) -> Option<SocketAddr> {
        self.config.reach.endpoint(addresses, port)
    }

    /// One readiness check: `Some(ready)`, or `None` when the check could
    /// not be made for a reason of this machine's own (out of file
    /// descriptors, buffers or ports: the replica was never asked), which
    /// must not count against the replica or its pool.
    pub(super) async fn probe_one(
        client: Client<HttpConnector, Empty<Bytes>>,
        addr: SocketAddr,
        path: String,
        timeout: Duration,
    ) -> Option<bool> {
        let Ok(uri) = format!("http://{addr}{path}").parse::<hyper::Uri>() else {
            return Some(false);
        };
        let Ok(req) = hyper::Request::get(uri).body(Empty::new()) else {
            return Some(false);
        };
        match tokio::time::timeout(timeout, client.request(req)).await {
            Ok(Ok(resp)) => {
                let ok = resp.status() == hyper::StatusCode::OK;
                let _ = tokio::time::timeout(timeout, resp.into_body().collect()).await;
                Some(ok)
            }
            Ok(Err(e)) if local_resource_error(&e) => {
                tracing::warn!(%addr, error = %e, "a readiness check could not be made here (a local resource is exhausted); not counted against the replica");
                None
            }
            _ => Some(false),
        }
    }

    pub(super) async fn check_readiness(&mut self, now: OffsetDateTime) {
        let checks: Vec<_> = self
            .replicas
            .iter()
            .filter(|r| matches!(r.status.state, ReplicaState::Starting | ReplicaState::Ready))
            .map(|r| (r.status.id.clone(), r.status.endpoint, r.status.version))
            .map(|(id, addr, version)| {
                let readiness = &self.spec_of(version).readiness;
                let (client, path, timeout) = (
                    self.probe.clone(),
                    readiness.path.clone(),
                    readiness.timeout,
                );
                // A replica whose instance has no address yet is not
                // ready: its start timeout runs all the same.
                async move {
                    let ok = match addr {
                        Some(addr) => Self::probe_one(client, addr, path, timeout).await,
                        None => Some(false),
                    };
                    (id, ok)
                }
            })
            .collect();
        let results = futures::future::join_all(checks).await;
        let mut to_end = Vec::new();
        let start_timeout: HashMap<u32, Duration> = self
            .replicas
            .iter()
            .map(|r| {
                (
                    r.status.version,
                    self.spec_of(r.status.version).readiness.start_timeout,
                )
            })
            .collect();
        for (id, ok) in results {
            // A check this machine could not make says nothing of the
            // replica: as if it was not made.
            let Some(ok) = ok else { continue };
            let Some(r) = self.replicas.iter_mut().find(|r| r.status.id == id) else {
                continue;
            };
            let start_timeout = start_timeout
                .get(&r.status.version)
                .copied()
                .unwrap_or(self.spec.readiness.start_timeout);
            match (r.status.state, ok) {
                (ReplicaState::Starting, true) => {
                    r.status.state = ReplicaState::Ready;
                    r.status.ready_at = Some(now);
                    r.failed_checks = 0;
                    let took = r.started.elapsed();
                    // The cold start, smoothed (what Retry-After says, and what
                    // an interruption costs a pool).
                    self.cold_start = Duration::from_secs_f64(
                        0.7 * self.cold_start.as_secs_f64() + 0.3 * took.as_secs_f64(),
                    );
                    tracing::info!(replica = %id, cold_start = ?took, "replica ready");
                }
                (ReplicaState::Starting, false) if r.started.elapsed() > start_timeout => {
                    let why = match r.status.endpoint {
                        Some(_) => "not ready within readiness.start_timeout".to_string(),
                        None => format!(
                            "its instance had no {} address within readiness.start_timeout",
                            self.config.reach
                        ),
                    };
                    to_end.push((id, r.status.pool.clone(), why));
                }
                (ReplicaState::Ready, true) => r.failed_checks = 0,
                (ReplicaState::Ready, false) => {
                    r.failed_checks += 1;
                    if r.failed_checks >= self.config.probe_failures {
                        to_end.push((
                            id,
                            r.status.pool.clone(),
                            format!("failed {} readiness checks in a row", r.failed_checks),
                        ));
                    }
                }
                _ => {}
            }
        }
        for (id, pool, why) in to_end {
            let version = self
                .replicas
                .iter()
                .find(|r| r.status.id == id)
                .map(|r| r.status.version);
            match (&self.rollout, version) {
                // Ended already (a roll-back took it).
                (_, None) => {}
                // A new version that does not become ready is the version's
                // fault, not the pool's: the update is rolled back.
                (Some(rollout), Some(v)) if v == rollout.version => {
                    self.roll_back(&format!("replica {id} of version {v}: {why}"))
                        .await;
                }
                _ => {
                    self.memory.set_aside(&pool, OffsetDateTime::now_utc());
                    self.end(&id, &why, true).await;
                }
            }
        }
        self.proxy.set_retry_after(self.cold_start);
    }
}
