//! An in-memory cloud for tests: deterministic and programmable.
//!
//! It serves a catalog (by default one cloud's part of the embedded snapshot),
//! launches and terminates instances, keeps placement groups, and can be told to
//! fail the next calls, run out of capacity in a pool, slow calls down, or
//! interrupt an instance. Every call is recorded, and its clock moves only when
//! told to ([`FakeCloud::advance`]).
//!
//! ```
//! # tokio_test_block_on(async {
//! use gpufleet_core::{fake::FakeCloud, *};
//! let cloud = FakeCloud::from_snapshot(Cloud::Gcp);
//! let offer = cloud.cheapest_offers(&OfferQuery::new().capacity(Capacity::Spot), 1).await?.remove(0);
//! cloud.set_out_of_capacity(&offer.pool, true);
//! let req = LaunchRequest::new(offer.pool.clone(), "img", IdempotencyKey::new("job-1")?);
//! assert_eq!(cloud.launch(&req).await.unwrap_err().kind(), ErrorKind::InsufficientCapacity);
//! # Ok::<(), Error>(()) });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f) }
//! ```

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::sync::broadcast;

use crate::catalog::{OfferQuery, Snapshot};
use crate::clock::{Clock, ManualClock};
use crate::Price;
use crate::{
    Capabilities, Capability, Catalog, Compute, InterruptionSource, NoticeStream, Operation,
    Placement, Provider, SpotMarket,
};
use crate::{
    Cloud, EndCause, EndReason, Instance, InstanceId, InstanceState, InstanceType,
    InterruptionNotice, LaunchRequest, NoticeKind, Offer, PlacementGroup, PlacementGroupId,
    PlacementGroupRequest, Pool, PricePoint, PriceSource, SourceKind, Stability, TagFilter,
};
use crate::{Error, ErrorKind, Result};

mod control;
mod throttle;
mod traits;

pub use throttle::{RateLimit, RateLimits};

/// The time a new fake cloud's clock starts at: 2026-01-05 00:00 UTC, a Monday.
pub const FAKE_EPOCH: OffsetDateTime = time::macros::datetime!(2026-01-05 00:00 UTC);

/// The fake keeps at most this many recorded calls (the newest).
pub const MAX_RECORDED_CALLS: usize = 100_000;

/// A call the fake cloud received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The operation.
    pub operation: Operation,
    /// What it was about: a pool, an instance id, a group name.
    pub target: String,
}

#[derive(Debug)]
struct Fault {
    operation: Operation,
    error: Error,
    after_effect: bool,
}

#[derive(Debug, Default)]
struct State {
    offers: Vec<Offer>,
    types: Vec<Arc<InstanceType>>,
    instances: BTreeMap<InstanceId, Instance>,
    launches: HashMap<String, (LaunchRequest, Vec<InstanceId>)>,
    groups: BTreeMap<PlacementGroupId, PlacementGroup>,
    faults: VecDeque<Fault>,
    out_of_capacity: HashSet<Pool>,
    capacity_limits: HashMap<Pool, u32>,
    latency: HashMap<Operation, Duration>,
    stability: HashMap<Pool, Stability>,
    price_history: HashMap<Pool, Vec<(OffsetDateTime, Price)>>,
    pending_preemptions: Vec<(InstanceId, OffsetDateTime)>,
    calls: Vec<RecordedCall>,
    /// Calls received per operation, however many the log keeps.
    counts: HashMap<Operation, u64>,
    /// The request-rate limits, when set.
    throttle: Option<throttle::Throttle>,
    seq: u64,
    /// What each instance is billed per hour: its pool's price when it was
    /// launched.
    billing: HashMap<InstanceId, Price>,
}

/// The resources a fake cloud holds, to keep them between processes (the
/// CLI's `--provider fake` saves it to a file after every command).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FakeState {
    /// Every instance, terminated ones included.
    pub instances: Vec<Instance>,
    /// Launches by idempotency key: the request and the instances it made.
    pub launches: Vec<(String, LaunchRequest, Vec<InstanceId>)>,
    /// Placement groups.
    pub groups: Vec<PlacementGroup>,
    /// The id counter.
    pub seq: u64,
    /// What each instance is billed per hour (its pool's price at launch).
    #[serde(default)]
    pub billing: Vec<(InstanceId, Price)>,
}

/// The in-memory cloud. See the [module docs](self).
#[derive(Debug)]
pub struct FakeCloud {
    cloud: Cloud,
    name: String,
    clock: ManualClock,
    state: Mutex<State>,
    notices: broadcast::Sender<InterruptionNotice>,
    max_calls: usize,
    capabilities: Capabilities,
    /// What its instance ids start with (`fake-aws`: `fake-aws-000001`).
    id_prefix: String,
    /// The addresses it gives every instance it launches.
    addresses: crate::Addresses,
}

/// The fakes as providers (for an executor, a controller or a layer stack).
pub fn providers(fakes: &[Arc<FakeCloud>]) -> Vec<Arc<dyn Provider>> {
    fakes
        .iter()
        .map(|f| f.clone() as Arc<dyn Provider>)
        .collect()
}

impl FakeCloud {
    /// A fake of `cloud` serving that cloud's part of the embedded snapshot
    /// (all three real clouds for [`Cloud::Fake`]).
    pub fn from_snapshot(cloud: Cloud) -> Self {
        let snapshot = if cloud == Cloud::Fake {
            Snapshot::embedded().clone()
        } else {
            Snapshot::embedded().for_cloud(cloud)
        };
        Self::with_catalog(cloud, &snapshot)
    }

    /// A fake of `cloud` serving a catalog built in code.
    pub fn with_catalog(cloud: Cloud, snapshot: &Snapshot) -> Self {
        let (notices, _) = broadcast::channel(1024);
        FakeCloud {
            cloud,
            name: format!("fake-{cloud}"),
            id_prefix: format!("fake-{cloud}"),
            addresses: crate::Addresses::default(),
            clock: ManualClock::new(FAKE_EPOCH),
            state: Mutex::new(State {
                offers: snapshot.offers().to_vec(),
                types: snapshot.instance_types().to_vec(),
                ..State::default()
            }),
            notices,
            max_calls: MAX_RECORDED_CALLS,
            // It keeps a launch's boot script (its console shows it) and
            // runs nothing: its nodes report only what a test writes on them.
            capabilities: Self::capabilities_of(cloud),
        }
    }

    /// What a fake of `cloud` declares by default: everything but live
    /// prices and running boot scripts, and the placement strategies the
    /// real cloud has (Compute Engine: no partition; Azure's proximity
    /// placement groups: neither spread nor partition), so that a request
    /// the real provider refuses is refused here too.
    pub fn capabilities_of(cloud: Cloud) -> Capabilities {
        let all = Capabilities::ALL
            .without_live_prices()
            .without_boot_script();
        match cloud {
            Cloud::Gcp => all.without_partition(),
            Cloud::Azure => all.without_partition().without_spread(),
            _ => all,
        }
    }

    /// Declares (and behaves as) a provider with only these capabilities: an
    /// operation outside them answers [`ErrorKind::Unsupported`], as a cloud
    /// without the feature would. For testing code against a provider that
    /// cannot do everything.
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// `Unsupported` unless the declared capabilities hold `need`.
    fn require(&self, need: Capability, operation: Operation) -> Result<()> {
        if self.capabilities.has(need) {
            Ok(())
        } else {
            Err(Error::unsupported(operation.as_str()).with_provider(self.cloud))
        }
    }

    /// Keeps at most the newest `limit` (at least 2) recorded calls instead
    /// of [`MAX_RECORDED_CALLS`]: for long runs that read few of them.
    pub fn with_call_log(mut self, limit: usize) -> Self {
        self.max_calls = limit.max(2);
        self
    }

    /// Names its instances `PREFIX-000001`, ... instead of
    /// `fake-CLOUD-000001`: fakes that start afresh in each process (the
    /// `local` provider) give each run ids of its own, so that the ledger,
    /// which keeps one record per instance id, never takes a new instance
    /// for an old one.
    pub fn with_instance_prefix(mut self, prefix: &str) -> Self {
        self.id_prefix = prefix.to_string();
        self
    }

    /// What its instance ids start with.
    pub fn instance_prefix(&self) -> &str {
        &self.id_prefix
    }

    /// Gives every instance it launches `addresses` (none by default): the
    /// `local` provider's instances are on 127.0.0.1, where their
    /// processes listen.
    pub fn with_addresses(mut self, addresses: crate::Addresses) -> Self {
        self.addresses = addresses;
        self
    }

    /// Uses `clock` (shared with the test or other fakes) instead of its own.
    pub fn with_clock(mut self, clock: ManualClock) -> Self {
        self.clock = clock;
        self
    }

    /// One fake per real cloud (AWS, GCP, Azure), each serving its part of
    /// the embedded snapshot, all on `clock`: three clouds for one executor,
    /// with [`providers`] to hand them over.
    pub fn every_cloud(clock: &ManualClock) -> Vec<Arc<FakeCloud>> {
        Cloud::REAL
            .iter()
            .map(|c| Arc::new(FakeCloud::from_snapshot(*c).with_clock(clock.clone())))
            .collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fake's clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }
}
