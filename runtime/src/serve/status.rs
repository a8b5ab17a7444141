//! A service controller's settings (`ServiceConfig`, how replicas are
//! reached), the tags on its replicas, and the status it publishes (each
//! replica's, each rollout's, the service's): what the ledger's book keeps
//! and `serve status` shows.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use gpufleet_core::serve::{LoadSample, Mix, ReplicaState, ScaleDecision};
use gpufleet_core::tags;
use gpufleet_core::{Addresses, Capacity, Cloud, Error, InstanceId, Pool, Price, Result};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

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
