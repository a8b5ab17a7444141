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
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::sync::mpsc;

use super::book::{Book, ServiceRequest};
use super::proxy::{Proxy, Route};
use crate::workload::{quote, Node};

/// The tag naming the service a replica serves.
pub const SERVICE_TAG: &str = tags::SERVICE;
/// The tag naming the replica.
pub const REPLICA_TAG: &str = "gpufleet:replica";
/// The tag holding the port the replica listens on.
pub const PORT_TAG: &str = "gpufleet:port";
/// The tag holding the version of the service the replica runs.
pub const VERSION_TAG: &str = "gpufleet:service-version";

/// How the controller runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// Time between steps.
    pub tick: Duration,
    /// Replicas run on this machine (the `local` provider): each gets a
    /// free port of its own (the service file's `port` is for replicas on
    /// machines of their own).
    pub local: bool,
    /// Which of an instance's addresses the proxy sends requests to.
    pub reach: Reach,
    /// The launch-to-ready time assumed until one is measured.
    pub cold_start: Duration,
    /// Failed readiness checks in a row that end a ready replica.
    pub probe_failures: u32,
    /// How long a pool that refused capacity or lost a replica is set aside.
    pub set_aside: Duration,
    /// How often offers are read again.
    pub offers_every: Duration,
    /// The image per cloud where the service file gives none.
    pub images: HashMap<Cloud, String>,
    /// The owner tag.
    pub owner: String,
    /// Tags on every replica's instance (the config's resource tags: team,
    /// project, ...); the service's own tags take precedence.
    pub tags: gpufleet_core::Tags,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            tick: Duration::from_secs(1),
            local: false,
            reach: Reach::Private,
            cold_start: Duration::from_secs(300),
            probe_failures: 3,
            set_aside: Duration::from_secs(600),
            offers_every: Duration::from_secs(600),
            images: HashMap::new(),
            owner: whoami::username().unwrap_or_else(|_| "unknown".into()),
            tags: gpufleet_core::Tags::new(),
        }
    }
}

/// Which of a replica's instance's addresses the proxy reaches it at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reach {
    /// Its private address: the proxy runs in the replicas' network (a
    /// controller on a VM in the same VPC or VNet, peered networks, a VPN).
    #[default]
    Private,
    /// Its public address, where the cloud gives one (an EC2 subnet that
    /// maps public addresses; Compute Engine and Azure instances launched by
    /// gpufleet have none).
    Public,
}

impl std::str::FromStr for Reach {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "private" => Ok(Reach::Private),
            "public" => Ok(Reach::Public),
            other => Err(Error::invalid_input(format!(
                "unknown address '{other}': use private or public"
            ))),
        }
    }
}

impl Reach {
    /// The address of `addresses` this names, with `port`; none where the
    /// cloud has not given it.
    pub fn endpoint(self, addresses: &Addresses, port: u16) -> Option<SocketAddr> {
        let ip = match self {
            Reach::Private => addresses.private,
            Reach::Public => addresses.public,
        }?;
        Some(SocketAddr::new(ip, port))
    }
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reach::Private => "private",
            Reach::Public => "public",
        })
    }
}

impl ServiceConfig {
    /// Replicas on the `local` provider: free ports on 127.0.0.1, checks
    /// every 200 ms, a 10-second cold start assumed, any image.
    pub fn local() -> Self {
        ServiceConfig {
            tick: Duration::from_millis(200),
            local: true,
            cold_start: Duration::from_secs(10),
            images: Cloud::REAL
                .iter()
                .map(|c| (*c, "local".to_string()))
                .collect(),
            ..ServiceConfig::default()
        }
    }

    /// With this time between steps.
    pub fn with_tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }
}

/// One replica, as `serve status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// The replica's id (`NAME-rN`).
    pub id: String,
    /// Where it stands.
    pub state: ReplicaState,
    /// Spot or on-demand.
    pub capacity: Capacity,
    /// Its pool.
    pub pool: Pool,
    /// Its instance.
    pub instance: Option<InstanceId>,
    /// Where it serves.
    pub endpoint: Option<SocketAddr>,
    /// Its price per hour.
    pub price: Price,
    /// When it was launched.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it became ready.
    #[serde(with = "time::serde::rfc3339::option")]
    pub ready_at: Option<OffsetDateTime>,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339::option")]
    pub ended_at: Option<OffsetDateTime>,
    /// Why it was started.
    pub started_because: String,
    /// Why it is draining or ended.
    pub ended_because: Option<String>,
    /// The version of the service it runs (1, then one more per update).
    pub version: u32,
}

/// How an update ended, or that it is under way.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RolloutStatus {
    /// The version it rolls out.
    pub version: u32,
    /// `rolling-out`, `promoted` or `rolled-back`.
    pub outcome: String,
    /// When it began.
    #[serde(with = "time::serde::rfc3339")]
    pub began_at: OffsetDateTime,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339::option")]
    pub ended_at: Option<OffsetDateTime>,
    /// Why, in a line.
    pub why: String,
}

/// A service as `serve status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// The service's name.
    pub name: String,
    /// Replicas the autoscaler asks for.
    pub target: u32,
    /// Replicas ready.
    pub ready: u32,
    /// What the target needs of each capacity type now.
    pub mix: Mix,
    /// What the live replicas cost an hour (`None` when the sum passes what
    /// a price can hold).
    pub cost_per_hour: Option<Price>,
    /// The last load sample.
    pub load: Option<LoadSample>,
    /// Live replicas, then the latest ended ones.
    pub replicas: Vec<ReplicaStatus>,
    /// The latest scale decisions, oldest first.
    pub decisions: Vec<ScaleDecision>,
    /// The version serving.
    pub version: u32,
    /// Updates: the one under way last, the latest ones before it.
    pub rollouts: Vec<RolloutStatus>,
}

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

/// The boot script of a replica on `node` of `cloud`: the environment,
/// `PORT`, a watcher that reports the node's interruption notice as the
/// `gpufleet:notice` tag (as a job's node does: the cloud's metadata
/// service and API on a cloud, the notice and report files on the local
/// provider; the controller drains and replaces the replica when it sees
/// it), `setup`, then `run` in its place.
pub fn replica_script(spec: &ServiceSpec, port: u16, node: Node, cloud: Cloud) -> String {
    let w = &spec.replica.workload;
    let mut s = String::from("#!/usr/bin/env bash\nset -e\n");
    s.push_str(&crate::workload::env_exports(&w.env));
    s.push_str(&format!("export PORT={port}\n"));
    let (dir, report, notice) = match node {
        Node::Local => (
            "\"$HOME/node\"",
            crate::workload::LOCAL_REPORTER,
            crate::workload::LOCAL_NOTICE,
        ),
        Node::Cloud => (
            "/var/tmp/gpufleet",
            crate::workload::reporter(cloud),
            crate::workload::notice_check(cloud),
        ),
    };
    s.push_str(&format!(
        "_gf_d={dir}\nmkdir -p \"$_gf_d\"\n{report}\n{notice}\n"
    ));
    s.push_str(
        "( set +e; while sleep 2; do notice_pending && { report gpufleet:notice \"$(date +%s)\"; break; }; done ) >/dev/null 2>&1 &\n",
    );
    if let Some(setup) = &w.setup {
        s.push_str(&format!("bash -c {}\n", quote(setup)));
    }
    if let Some(run) = &w.run {
        s.push_str(&format!("exec bash -c {}\n", quote(run)));
    }
    s
}

/// Checks that a replica's boot script fits every cloud's user data on
/// each cloud the service may run on ([`replica_script`]): refused when the
/// service starts or an update is asked for, not by every launch (which
/// would set each pool aside).
pub fn check_replica_script(spec: &ServiceSpec) -> Result<()> {
    let clouds: &[Cloud] = if spec.replica.clouds.is_empty() {
        &Cloud::REAL
    } else {
        &spec.replica.clouds
    };
    for cloud in clouds {
        let len = replica_script(spec, spec.port, Node::Cloud, *cloud).len();
        crate::workload::check_size(
            &format!(
                "the boot script of service {}'s replicas on {cloud}",
                spec.name
            ),
            len,
        )?;
    }
    Ok(())
}

/// Whether `e` (a client request's failure) is this machine's own: a
/// socket it could not open or bind for want of descriptors, buffers,
/// memory or local ports, not anything the peer did.
fn local_resource_error(e: &(dyn std::error::Error + 'static)) -> bool {
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

fn free_port() -> Result<u16> {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::new(ErrorKind::Unavailable, format!("no free local port: {e}")))
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
        if let Ok(view) = super::book::service(ledger.as_ref(), &self.spec.name).await {
            super::book::check_owner(&view, Some(&self.config.owner), "gpufleet serve")?;
        }
        book.claim().await?;
        book.set_service_file(self.source.clone());
        // A service its previous controller left up (it died, or a standby
        // takes over): served on from where the ledger says it stood, its
        // version (and that version's file), target and replica numbering.
        if let Ok(view) = super::book::service(ledger.as_ref(), &self.spec.name).await {
            if view.doc.up {
                self.resume_from(&view.doc);
                book.set_service_file(self.source.clone());
            }
        }
        if let Some(since) = since {
            let taken_down = super::book::service(ledger.as_ref(), &self.spec.name)
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
    fn resume_from(&mut self, doc: &super::book::ServiceDoc) {
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
    /// ([`super::book::LEDGER_CALL`]), so it stops in bounded time whatever the
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
                        Some(l) => super::book::service(l.as_ref(), &self.spec.name)
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

    async fn refresh_offers(&mut self) {
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

    async fn read_notices(&mut self) {
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
    fn noticed(&mut self, cloud: Cloud, id: &InstanceId, why: &str) {
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

    async fn observe_instances(&mut self, now: OffsetDateTime) {
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
    fn endpoint(&self, addresses: &Addresses, port: u16) -> Option<SocketAddr> {
        self.config.reach.endpoint(addresses, port)
    }

    /// One readiness check: `Some(ready)`, or `None` when the check could
    /// not be made for a reason of this machine's own (out of file
    /// descriptors, buffers or ports: the replica was never asked), which
    /// must not count against the replica or its pool.
    async fn probe_one(
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

    async fn check_readiness(&mut self, now: OffsetDateTime) {
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

    async fn finish_draining(&mut self) {
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
    async fn end(&mut self, id: &str, why: &str, terminate: bool) {
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

    async fn mark_ended(&mut self, id: &str, why: &str, by: EndedBy) {
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
                if let Err(e) = super::book::bounded("the replica's hours", exposure).await {
                    tracing::warn!(replica = %id, error = %e, "recording the replica's hours failed");
                }
            }
            let end = InstanceEnd::new(now, by, why);
            let ended = ledger.record_instance_end(r.status.pool.cloud, instance, &end);
            if let Err(e) = super::book::bounded("the replica's end", ended).await {
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

    fn spec_of(&self, version: u32) -> &ServiceSpec {
        match &self.rollout {
            Some(r) if r.version == version => &r.spec,
            _ => &self.spec,
        }
    }

    fn pools(&self, spec: &ServiceSpec) -> Vec<ReplicaPool> {
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

    async fn reconcile(&mut self, now: OffsetDateTime) {
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

    fn drain(&mut self, replica: &str, why: String) {
        if let Some(r) = self.replicas.iter_mut().find(|r| r.status.id == replica) {
            if matches!(r.status.state, ReplicaState::Starting | ReplicaState::Ready) {
                tracing::info!(replica = %replica, why = %why, "draining");
                r.status.state = ReplicaState::Draining;
                r.status.ended_because = Some(why);
            }
        }
    }

    /// Starts rolling out a new version sent on [`Self::updates`].
    async fn take_update(&mut self, now: OffsetDateTime) {
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
    async fn start_rollout(
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

    fn finish_rollout(&mut self, outcome: &str, why: String) {
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
    async fn roll_back(&mut self, why: &str) {
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
    fn promote_when_ready(&mut self, _now: OffsetDateTime) {
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

    async fn launch(
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
        req.boot_script = Some(replica_script(spec, port, node, pool.cloud));
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
            if let Err(e) = super::book::bounded("the replica's start", started).await {
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
