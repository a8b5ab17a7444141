//! The service controller: keeps a service's replicas on the cheapest
//! stable capacity, as many as its autoscaler asks, and tells the proxy
//! which of them to route to.
//!
//! Each [`ServiceController::step`]:
//! 1. reads interruption notices (each provider's notice stream) and one
//!    listing of the service's instances per cloud: a replica with a notice
//!    stops taking requests at once (it is *draining*, and a replacement is
//!    started in the same step); one whose instance is gone is *ended*, and
//!    a reclaim counts against its pool's hazard;
//! 2. checks readiness (`GET` of the service's readiness path): a
//!    *starting* replica that answers 200 becomes *ready* (and its cold start
//!    is measured); one not ready within `start_timeout`, or a ready one
//!    that fails three checks in a row, is ended and its pool set aside for
//!    a while;
//! 3. feeds the proxy's load sample to the autoscaler;
//! 4. compares the replicas with the target's [`mix`] (on-demand base, spot
//!    with `extra`, on-demand standing in for spot replicas not ready) and
//!    launches the missing ones in the pools [`spread`] chooses from the
//!    placer's per-pool price and hazard, or drains the surplus (dearest
//!    first, starting ones before ready ones): a draining replica takes no
//!    new request and is terminated when its last one has finished;
//! 5. gives the proxy the ready replicas and the gauges.
//!
//! Every replica is launched with an idempotency key of its own and tagged
//! with the service and replica, so a controller started again adopts the
//! replicas it finds; each start and end is recorded in the ledger of spend
//! under the job id `service:NAME`, so `gpufleet costs` counts a service's
//! spend. Once [claimed](ServiceController::claim), the controller holds
//! the service's lease in the ledger, keeps its row and log there (each
//! replica's transitions with why, scale decisions, rollouts) and acts on
//! the requests `serve down` and `serve update` leave there (`book.rs`).
//!
//! Here: the controller, its claim and resumption, its loop and step;
//! `observe.rs`: notices, listings and readiness; `replicas.rs`: the plan
//! carried out (launches, drains, ends) and rollouts; `script.rs`: a
//! replica's boot script. Its settings and status are `super::status`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gpufleet_core::ledger::{EndedBy, InstanceEnd, InstanceSpend, Ledger};
use gpufleet_core::placer::HazardModel;
pub use gpufleet_core::serve::ReplicaState;
use gpufleet_core::serve::{
    plan, replica_pools, Action, Autoscaler, LoadSample, Mix, PoolMemory, ReplicaPool, ReplicaView,
    ScaleDecision, ServiceSpec,
};
use gpufleet_core::tags;
use gpufleet_core::{
    Addresses, Capacity, Cloud, CloudEvents, EndCause, Error, ErrorKind, IdempotencyKey, Instance,
    InstanceId, LaunchRequest, Offer, Pool, Price, Provider, Result, TagFilter,
};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use time::OffsetDateTime;
use tokio::sync::mpsc;

use super::proxy::{Proxy, Route};
pub use super::status::*;
use crate::serve::book::{Book, ServiceRequest};
use crate::workload::{quote, Node};

mod observe;
mod replicas;
mod script;
pub use script::{check_replica_script, replica_script};

/// An update under way: the new version's replicas start beside the old
/// ones, which keep all the traffic until as many new ones are ready as the
/// target.
#[derive(Debug)]
struct Rollout {
    spec: ServiceSpec,
    /// Its service file, as given (kept in the ledger once promoted, so a
    /// controller that takes the service over serves this version).
    source: Option<String>,
    version: u32,
    status: RolloutStatus,
}

#[derive(Debug)]
struct Replica {
    status: ReplicaStatus,
    started: Instant,
    failed_checks: u32,
    /// The port its server listens on (its endpoint's, once its instance
    /// has an address).
    port: u16,
}

/// The controller of one service: at each [`ServiceController::step`],
/// interruption notices and one listing per cloud, readiness checks, the
/// autoscaler, the plan (`gpufleet_core::serve::plan`: what to launch and
/// drain), a rollout's progress and the proxy's routes (docs/serving.md,
/// "What the controller does").
pub struct ServiceController {
    spec: ServiceSpec,
    providers: Vec<Arc<dyn Provider>>,
    proxy: Proxy,
    config: ServiceConfig,
    ledger: Option<Arc<dyn Ledger>>,
    autoscaler: Autoscaler,
    replicas: Vec<Replica>,
    ended: VecDeque<ReplicaStatus>,
    decisions: VecDeque<ScaleDecision>,
    seq: u32,
    offers: Vec<Offer>,
    offers_at: Option<Instant>,
    hazard: HazardModel,
    memory: PoolMemory,
    cold_start: Duration,
    load: Option<LoadSample>,
    last_mix: Mix,
    notices: Option<mpsc::UnboundedReceiver<(Cloud, InstanceId)>>,
    feeds: Vec<Arc<dyn CloudEvents>>,
    /// The replicas' instances and their capacity types, for the feeds'
    /// listeners: an event about another instance is left for the other
    /// readers of the feed, and one that cannot be about its instance (a
    /// spot warning for an on-demand replica) is not obeyed.
    watched: Arc<std::sync::Mutex<HashMap<InstanceId, Capacity>>>,
    /// The notice and feed listeners, stopped with the controller.
    listeners: Vec<tokio::task::JoinHandle<()>>,
    probe: Client<HttpConnector, Empty<Bytes>>,
    watchers: Option<tokio::sync::watch::Sender<ServiceStatus>>,
    version: u32,
    rollout: Option<Rollout>,
    rollouts: VecDeque<RolloutStatus>,
    updates: Option<mpsc::UnboundedReceiver<ServiceSpec>>,
    run_id: u32,
    /// The service's lease, row and log in the ledger (once claimed).
    book: Option<Book>,
    /// Where the proxy listens, for the ledger's record.
    listen: Option<SocketAddr>,
    /// Why the controller stops at the end of this step (a `serve down`, a
    /// lost lease).
    stop_because: Option<Stopping>,
    /// The service file the current version was read from, when known: kept
    /// in the service's row, so a controller that takes over serves it.
    source: Option<String>,
    /// Since when it has not been able to vouch for the service's lease
    /// (the ledger cut off): it routes nothing and changes nothing until it
    /// holds the lease again.
    suspended_since: Option<std::time::Instant>,
}

/// Why the controller stops, and whether its replicas go with it.
#[derive(Debug, Clone)]
struct Stopping {
    why: String,
    /// End every replica (the service is taken down); false when they are
    /// another controller's now (it took the service over) or may be.
    end_replicas: bool,
}

impl Stopping {
    fn down(why: impl Into<String>) -> Self {
        Stopping {
            why: why.into(),
            end_replicas: true,
        }
    }

    fn leaving(why: impl Into<String>) -> Self {
        Stopping {
            why: why.into(),
            end_replicas: false,
        }
    }
}

impl std::fmt::Debug for ServiceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceController")
            .field("service", &self.spec.name)
            .field("replicas", &self.replicas.len())
            .finish_non_exhaustive()
    }
}

impl ServiceController {
    /// A controller of `spec` over `providers`, routing through `proxy`.
    pub fn new(
        spec: ServiceSpec,
        providers: Vec<Arc<dyn Provider>>,
        proxy: Proxy,
        config: ServiceConfig,
    ) -> Self {
        let now = OffsetDateTime::now_utc();
        let memory = PoolMemory::new(config.set_aside);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(spec.readiness.timeout));
        let run_id = (gpufleet_core::fnv1a64(
            format!(
                "{}/{}/{}",
                spec.name,
                config.owner,
                now.unix_timestamp_nanos()
            )
            .as_bytes(),
        ) & 0xffff_ffff) as u32;
        ServiceController {
            run_id,
            autoscaler: Autoscaler::new(&spec, now),
            cold_start: config.cold_start,
            spec,
            providers,
            proxy,
            config,
            ledger: None,
            replicas: Vec::new(),
            ended: VecDeque::new(),
            decisions: VecDeque::new(),
            seq: 0,
            offers: Vec::new(),
            offers_at: None,
            hazard: HazardModel::default(),
            memory,
            load: None,
            last_mix: Mix::default(),
            notices: None,
            feeds: Vec::new(),
            watched: Arc::default(),
            listeners: Vec::new(),
            watchers: None,
            version: 1,
            rollout: None,
            rollouts: VecDeque::new(),
            updates: None,
            book: None,
            listen: None,
            stop_because: None,
            source: None,
            suspended_since: None,
            probe: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
        }
    }

    /// Records every replica's start and end in `ledger`'s ledger of spend,
    /// and, once [claimed](Self::claim), the service's row and log there.
    pub fn with_ledger(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The service file `spec` was read from (TOML), kept in the service's
    /// row so that a controller taking the service over serves the same
    /// version.
    pub fn with_service_file(mut self, text: impl Into<String>) -> Self {
        self.source = Some(text.into());
        self
    }

    /// Says where the proxy listens, for the service's record.
    pub fn listening_on(mut self, listen: SocketAddr) -> Self {
        self.listen = Some(listen);
        self
    }

    /// Takes the service's lease in the ledger given to
    /// [`Self::with_ledger`] (under `holder`): [`ErrorKind::Conflict`]
    /// naming the holder when another controller serves it. From then on
    /// the controller keeps the service's row and log, acts on the requests
    /// made of it (`serve down`, `serve update`) and stops if it loses the
    /// lease. Without a ledger, nothing happens. [`Self::run`] claims with a
    /// holder of its own when not claimed.
    pub async fn claim(&mut self, holder: &str) -> Result<()> {
        self.claim_since(holder, None).await.map(|_| ())
    }

    /// [`Self::claim`] for a controller that stood by since `since`: when
    /// the lease is taken but the service was taken down after `since`
    /// (`serve down` ended it, and its controller gave the lease up), the
    /// lease is given back untouched and the answer is `false`: down means
    /// down, not a cue for the standby. Conflict while another holds it.
    pub async fn take_over(&mut self, holder: &str, since: OffsetDateTime) -> Result<bool> {
        self.claim_since(holder, Some(since)).await
    }

    /// Takes the lease; with `since`, gives it back (`false`) when the
    /// service was taken down after then.
    async fn claim_since(&mut self, holder: &str, since: Option<OffsetDateTime>) -> Result<bool> {
        let Some(ledger) = self.ledger.clone() else {
            return Ok(true);
        };
        if self.book.is_some() {
            return Ok(true);
        }
        let mut book = Book::new(
            ledger.clone(),
            &self.spec.name,
            holder.to_string(),
            self.config.owner.clone(),
            self.listen.map(|a| a.to_string()),
        );
        // Another owner's service of this name is theirs: not taken over.
        if let Ok(view) = crate::serve::book::service(ledger.as_ref(), &self.spec.name).await {
            crate::serve::book::check_owner(&view, Some(&self.config.owner), "gpufleet serve")?;
        }
        book.claim().await?;
        book.set_service_file(self.source.clone());
        // A service its previous controller left up (it died, or a standby
        // takes over): served on from where the ledger says it stood, its
        // version (and that version's file), target and replica numbering.
        if let Ok(view) = crate::serve::book::service(ledger.as_ref(), &self.spec.name).await {
            if view.doc.up {
                self.resume_from(&view.doc);
                book.set_service_file(self.source.clone());
            }
        }
        if let Some(since) = since {
            let taken_down = crate::serve::book::service(ledger.as_ref(), &self.spec.name)
                .await
                .ok()
                .is_some_and(|v| !v.doc.up && v.updated_at > since);
            if taken_down {
                book.release().await;
                return Ok(false);
            }
        }
        book.lifecycle(if since.is_some() {
            "serving (took the service over)"
        } else {
            "serving"
        })
        .await;
        book.record(&self.status(), true, None).await;
        self.book = Some(book);
        Ok(true)
    }

    /// Takes up the service where `doc` (its row) says its last controller
    /// left it: a later version's service file (the one promoted) in place
    /// of this one's, the version, the target, and replica numbers after
    /// every one it used (a takeover used to start at the floor, report
    /// version 1 and reuse replica ids).
    fn resume_from(&mut self, doc: &crate::serve::book::ServiceDoc) {
        let recorded = &doc.status;
        if recorded.version > self.version {
            match doc.service_file.as_deref().map(ServiceSpec::from_toml) {
                Some(Ok(spec)) if spec.name == self.spec.name => {
                    self.proxy.set_settings(spec.proxy);
                    self.spec = spec;
                    self.source = doc.service_file.clone();
                }
                Some(Err(e)) => {
                    tracing::warn!(service = %self.spec.name, error = %e.message(), "the recorded version's service file does not read; serving this one's");
                }
                _ => {}
            }
            self.version = recorded.version;
        }
        let used = recorded
            .replicas
            .iter()
            .filter_map(|r| {
                r.id.rsplit_once("-r")
                    .and_then(|(_, n)| n.parse::<u32>().ok())
            })
            .max()
            .unwrap_or(0);
        self.seq = self.seq.max(used);
        self.autoscaler = Autoscaler::with(
            self.spec.autoscale,
            self.spec.replicas,
            recorded
                .target
                .max(self.spec.floor().min(self.spec.replicas.max)),
            OffsetDateTime::now_utc(),
        );
        tracing::info!(service = %self.spec.name, version = self.version, target = recorded.target, "taken up from the ledger's record");
    }

    /// Publishes the status after every step (and the last one when it
    /// stops) to the receivers of the returned channel.
    pub fn watch(&mut self) -> tokio::sync::watch::Receiver<ServiceStatus> {
        let (tx, rx) = tokio::sync::watch::channel(self.status());
        self.watchers = Some(tx);
        rx
    }

    /// A channel for new versions of the service: each spec sent starts a
    /// rollout at the next step (one with another name is refused).
    pub fn updates(&mut self) -> mpsc::UnboundedSender<ServiceSpec> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.updates = Some(rx);
        tx
    }

    /// The job id the service's spend is recorded under: `service:NAME`,
    /// the name of its lease too.
    pub fn spend_id(&self) -> String {
        gpufleet_core::ledger::service_lease(&self.spec.name)
    }

    /// With the clouds' event feeds (AWS: the interruption queue, see
    /// [`crate::fleet`]): an interruption warning or a state change that ends
    /// a replica's instance is heard within seconds, as a notice is.
    pub fn with_events(mut self, feeds: Vec<Arc<dyn CloudEvents>>) -> Self {
        self.feeds = feeds;
        self
    }

    /// The service now.
    pub fn status(&self) -> ServiceStatus {
        let mut replicas: Vec<ReplicaStatus> =
            self.replicas.iter().map(|r| r.status.clone()).collect();
        replicas.extend(self.ended.iter().rev().cloned());
        ServiceStatus {
            name: self.spec.name.clone(),
            target: self.autoscaler.target(),
            ready: self.count(|r| r.status.state == ReplicaState::Ready),
            mix: self.last_mix,
            cost_per_hour: self.cost_per_hour(),
            load: self.load,
            replicas,
            decisions: self.decisions.iter().cloned().collect(),
            version: self.version,
            rollouts: self
                .rollouts
                .iter()
                .cloned()
                .chain(self.rollout.as_ref().map(|r| r.status.clone()))
                .collect(),
        }
    }

    fn count(&self, f: impl Fn(&Replica) -> bool) -> u32 {
        self.replicas.iter().filter(|r| f(r)).count() as u32
    }

    fn cost_per_hour(&self) -> Option<Price> {
        self.replicas
            .iter()
            .try_fold(Price::ZERO, |a, r| a.checked_add(r.status.price))
    }

    fn provider(&self, cloud: Cloud) -> Option<&Arc<dyn Provider>> {
        self.providers.iter().find(|p| p.cloud() == cloud)
    }

    /// Runs steps every [`ServiceConfig::tick`] until `stop` resolves, then
    /// ends every replica (the service is taken down: nothing is left
    /// running) and returns the last status.
    ///
    /// With a ledger it first [claims](Self::claim) the service when not
    /// claimed yet (and returns at once, serving nothing, when another
    /// controller serves it); it also stops when someone runs `serve down`
    /// or the lease is lost. A controller that cannot renew its lease
    /// stops routing before the lease could pass to another (the proxy's
    /// deadline, [`Proxy::route_until`]) and changes nothing until it holds
    /// the lease again: then it serves on with its replicas, or, when
    /// another controller took the service meanwhile, returns leaving the
    /// replicas to it. Stopped (SIGTERM) while it cannot vouch for its
    /// lease, it leaves the replicas as they are (another may serve them
    /// now) and says so. Every ledger call is bounded
    /// ([`crate::serve::book::LEDGER_CALL`]), so it stops in bounded time whatever the
    /// ledger does.
    pub async fn run(mut self, stop: impl Future<Output = ()>) -> ServiceStatus {
        if self.ledger.is_some() && self.book.is_none() {
            let holder = crate::controller::default_holder();
            if let Err(e) = self.claim(&holder).await {
                tracing::error!(service = %self.spec.name, error = %e, "cannot serve");
                return self.status();
            }
        }
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(self.config.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stopping = loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = self.step().await {
                        tracing::warn!(service = %self.spec.name, error = %e, "service step failed");
                    }
                    if let Some(s) = self.stop_because.take() {
                        break s;
                    }
                }
                () = &mut stop => break match self.suspended_since {
                    None => Stopping::down("the service was taken down"),
                    Some(_) => Stopping::leaving(
                        "stopped while it could not renew the service's lease",
                    ),
                },
            }
        };
        let why = stopping.why.clone();
        if stopping.end_replicas {
            self.down(&why).await;
        } else {
            self.proxy.set_routes(&[]);
            let left = self
                .replicas
                .iter()
                .filter(|r| r.status.state != ReplicaState::Ended)
                .count();
            self.proxy.route_until(Some(std::time::Instant::now()));
            tracing::warn!(service = %self.spec.name, why, replicas = left, "stopped without ending the replicas: the controller that holds the service's lease serves them (`gpufleet serve` again adopts them; `gpufleet reap` finds them once no lease holds them)");
        }
        let status = self.status();
        if let Some(mut book) = self.book.take() {
            if stopping.end_replicas {
                book.record(&status, false, Some(&why)).await;
                book.lifecycle(&format!("down: {why}")).await;
                book.release().await;
            } else {
                book.lifecycle(&format!("stopped, replicas left: {why}"))
                    .await;
            }
        }
        if let Some(tx) = &self.watchers {
            tx.send_replace(status.clone());
        }
        status
    }

    /// Keeps the lease (or, cut off, stops routing, and takes it back when
    /// the ledger answers again), then acts on the requests made of the
    /// service in the ledger since the last step.
    async fn take_requests(&mut self, now: OffsetDateTime) {
        let Some(book) = self.book.as_mut() else {
            return;
        };
        if let Some(since) = self.suspended_since {
            match book.reclaim().await {
                Ok(false) => return,
                Ok(true) => {
                    let down = match self.ledger.as_ref() {
                        Some(l) => crate::serve::book::service(l.as_ref(), &self.spec.name)
                            .await
                            .ok()
                            .is_some_and(|v| !v.doc.up),
                        None => false,
                    };
                    if down {
                        self.stop_because = Some(Stopping::down(
                            "taken down while its controller could not reach the ledger",
                        ));
                        return;
                    }
                    self.suspended_since = None;
                    self.proxy.route_until(book.vouched_until());
                    book.lifecycle(&format!(
                        "serving again: the lease was taken back after {:.0} s without the ledger",
                        since.elapsed().as_secs_f64()
                    ))
                    .await;
                    tracing::warn!(service = %self.spec.name, after = ?since.elapsed(), "the ledger answers again: serving again");
                }
                Err(e) => {
                    book.lose();
                    tracing::error!(service = %self.spec.name, error = %e, "another controller serves the service now: stopping, its replicas left to it");
                    self.stop_because = Some(Stopping::leaving(e.message().to_string()));
                    return;
                }
            }
        }
        match book.renew().await {
            Ok(()) => self.proxy.route_until(book.vouched_until()),
            Err(e) if e.kind() == ErrorKind::Conflict => {
                book.lose();
                tracing::error!(service = %self.spec.name, error = %e, "lost the service's lease: stopping, its replicas left to the controller that holds it");
                self.stop_because = Some(Stopping::leaving(format!(
                    "its controller lost the service's lease: {e}"
                )));
                return;
            }
            Err(e) => {
                // Cut off from the ledger past what the lease vouches for:
                // another controller may take the service over at the
                // lease's end. Nothing is routed (the proxy's deadline had
                // already passed), launched or ended until the lease is
                // held again.
                tracing::error!(service = %self.spec.name, error = %e, "cannot vouch for the service's lease: not serving until the ledger answers");
                self.proxy.set_routes(&[]);
                self.proxy.route_until(Some(std::time::Instant::now()));
                self.suspended_since = Some(std::time::Instant::now());
                return;
            }
        }
        for (seq, request) in book.requests().await {
            match request {
                ServiceRequest::Down { by } => {
                    tracing::info!(service = %self.spec.name, seq, by, "taken down on request");
                    self.stop_because = Some(Stopping::down(format!(
                        "taken down by {by} (`gpufleet serve down`)"
                    )));
                }
                ServiceRequest::Update { service_file, by } => {
                    match ServiceSpec::from_toml(&service_file) {
                        Ok(spec) => {
                            tracing::info!(service = %self.spec.name, seq, by, "update requested");
                            self.start_rollout(
                                spec,
                                Some(service_file.clone()),
                                now,
                                &format!("requested by {by}"),
                            )
                            .await;
                        }
                        Err(e) => {
                            tracing::warn!(service = %self.spec.name, seq, error = %e.message(), "an update with a bad service file was refused");
                        }
                    }
                }
            }
        }
    }

    /// Ends every replica now (their instances terminated).
    pub async fn down(&mut self, why: &str) {
        self.proxy.set_routes(&[]);
        let ids: Vec<String> = self.replicas.iter().map(|r| r.status.id.clone()).collect();
        for id in ids {
            self.end(&id, why, true).await;
        }
        self.publish();
    }

    /// One step: notices and listings, readiness checks, the autoscaler,
    /// the plan carried out, the rollout's progress, the routes.
    pub async fn step(&mut self) -> Result<()> {
        let now = OffsetDateTime::now_utc();
        self.take_requests(now).await;
        if self.stop_because.is_some() || self.suspended_since.is_some() {
            // Taken down, the lease lost, or not vouched for: nothing is
            // launched, drained or routed here (`run` ends the replicas of
            // a service taken down).
            return Ok(());
        }
        self.take_update(now).await;
        self.refresh_offers().await;
        self.read_notices().await;
        self.observe_instances(now).await;
        self.check_readiness(now).await;
        self.finish_draining().await;
        let load = self.proxy.sample(now);
        self.load = Some(load);
        if let Some(d) = self.autoscaler.observe(&load) {
            tracing::info!(service = %self.spec.name, decision = %d, "scale");
            self.decisions.push_back(d);
            while self.decisions.len() > 50 {
                self.decisions.pop_front();
            }
        }
        self.reconcile(now).await;
        self.publish();
        *self.watched.lock().unwrap_or_else(|p| p.into_inner()) = self
            .replicas
            .iter()
            .filter_map(|r| Some((r.status.instance.clone()?, r.status.capacity)))
            .collect();
        let status = self.status();
        if let Some(book) = self.book.as_mut() {
            book.record(&status, true, None).await;
        }
        if let Some(tx) = &self.watchers {
            tx.send_replace(status);
        }
        Ok(())
    }

    fn publish(&self) {
        let routes: Vec<Route> = self
            .replicas
            .iter()
            .filter(|r| r.status.state == ReplicaState::Ready && r.status.version == self.version)
            .filter_map(|r| {
                r.status.endpoint.map(|address| Route {
                    replica: r.status.id.clone(),
                    address,
                    capacity: r.status.capacity,
                })
            })
            .collect();
        self.proxy.set_routes(&routes);
        let mut gauges: Vec<(&str, Capacity, u32)> = Vec::new();
        for state in [
            ReplicaState::Starting,
            ReplicaState::Ready,
            ReplicaState::Draining,
        ] {
            for capacity in [Capacity::Spot, Capacity::OnDemand] {
                let n = self.count(|r| r.status.state == state && r.status.capacity == capacity);
                gauges.push((state.as_str(), capacity, n));
            }
        }
        self.proxy.set_gauges(
            &gauges,
            self.cost_per_hour()
                .map_or(f64::NAN, Price::usd_per_hour_f64),
        );
    }
}

impl Drop for ServiceController {
    fn drop(&mut self) {
        // A feed's listener takes events off a queue: none is left reading
        // once its controller is gone.
        for t in &self.listeners {
            t.abort();
        }
    }
}
