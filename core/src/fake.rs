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
use crate::error::{Error, ErrorKind, Result};
use crate::model::{
    Cloud, EndCause, EndReason, Instance, InstanceId, InstanceState, InstanceType,
    InterruptionNotice, LaunchRequest, NoticeKind, Offer, PlacementGroup, PlacementGroupId,
    PlacementGroupRequest, Pool, PricePoint, PriceSource, SourceKind, Stability, TagFilter,
};
use crate::money::Price;
use crate::provider::{
    Capabilities, Capability, Catalog, Compute, InterruptionSource, NoticeStream, Placement,
    Provider, SpotMarket,
};

/// The time a new fake cloud's clock starts at: 2026-01-05 00:00 UTC, a Monday.
pub const FAKE_EPOCH: OffsetDateTime = time::macros::datetime!(2026-01-05 00:00 UTC);

/// The fake keeps at most this many recorded calls (the newest).
pub const MAX_RECORDED_CALLS: usize = 100_000;

/// A call the fake cloud received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The operation (`launch`, `terminate`, …).
    pub operation: &'static str,
    /// What it was about: a pool, an instance id, a group name.
    pub target: String,
}

#[derive(Debug)]
struct Fault {
    operation: &'static str,
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
    latency: HashMap<&'static str, Duration>,
    stability: HashMap<Pool, Stability>,
    price_history: HashMap<Pool, Vec<(OffsetDateTime, Price)>>,
    pending_preemptions: Vec<(InstanceId, OffsetDateTime)>,
    calls: Vec<RecordedCall>,
    seq: u64,
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
            clock: ManualClock::new(FAKE_EPOCH),
            state: Mutex::new(State {
                offers: snapshot.offers().to_vec(),
                types: snapshot.instance_types().to_vec(),
                ..State::default()
            }),
            notices,
            max_calls: MAX_RECORDED_CALLS,
            capabilities: Capabilities {
                live_prices: false,
                ..Capabilities::ALL
            },
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
    fn require(&self, need: Capability, operation: &'static str) -> Result<()> {
        if self.capabilities.has(need) {
            Ok(())
        } else {
            Err(Error::unsupported(operation).with_provider(self.cloud))
        }
    }

    /// Keeps at most the newest `limit` (at least 2) recorded calls instead
    /// of [`MAX_RECORDED_CALLS`]: for long runs that read few of them.
    pub fn with_call_log(mut self, limit: usize) -> Self {
        self.max_calls = limit.max(2);
        self
    }

    /// Uses `clock` (shared with the test or other fakes) instead of its own.
    pub fn with_clock(mut self, clock: ManualClock) -> Self {
        self.clock = clock;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fake's clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Moves the clock forward and carries out interruptions whose deadline has
    /// passed (the instances become terminated).
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
        self.settle();
    }

    /// Carries out interruptions whose deadline has passed on the clock (for
    /// fakes sharing one clock that another advanced).
    pub fn settle(&self) {
        let now = self.clock.now();
        let mut st = self.state();
        let due: Vec<InstanceId> = st
            .pending_preemptions
            .iter()
            .filter(|(_, at)| *at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        st.pending_preemptions.retain(|(_, at)| *at > now);
        for id in due {
            if let Some(i) = st.instances.get_mut(&id) {
                i.state = InstanceState::Terminated;
                i.end_reason = Some(EndReason::new(EndCause::Reclaimed, "fake:preempted"));
            }
        }
    }

    /// The next call of `operation` (or of any operation, with `"*"`) fails with
    /// `error` before doing anything. Faults queue up in order.
    pub fn fail_next(&self, operation: &'static str, error: Error) {
        self.state().faults.push_back(Fault {
            operation,
            error,
            after_effect: false,
        });
    }

    /// The next call of `operation` does its work and then fails with `error`, as
    /// when a response is lost: a retry must not do the work twice.
    pub fn fail_next_after_effect(&self, operation: &'static str, error: Error) {
        self.state().faults.push_back(Fault {
            operation,
            error,
            after_effect: true,
        });
    }

    /// Every operation the fake records, scripts faults for and can slow down
    /// ([`FakeCloud::set_latency`]), by name.
    pub const OPERATIONS: [&'static str; 14] = [
        "instance_types",
        "offers",
        "spot_price_history",
        "stability",
        "create_placement_group",
        "placement_group",
        "list_placement_groups",
        "delete_placement_group",
        "launch",
        "instance",
        "list_instances",
        "terminate",
        "console_output",
        "interruptions",
    ];

    /// Every call of `operation` takes `delay` (of the tokio clock) before it
    /// answers; `Duration::ZERO` removes the delay.
    pub fn set_latency(&self, operation: &'static str, delay: Duration) {
        let mut st = self.state();
        if delay.is_zero() {
            st.latency.remove(operation);
        } else {
            st.latency.insert(operation, delay);
        }
    }

    /// Makes launches into `pool` fail with [`ErrorKind::InsufficientCapacity`]
    /// (or succeed again).
    pub fn set_out_of_capacity(&self, pool: &Pool, out: bool) {
        let mut st = self.state();
        if out {
            st.out_of_capacity.insert(pool.clone());
        } else {
            st.out_of_capacity.remove(pool);
        }
    }

    /// Limits how many live instances `pool` can hold (`None`: no limit).
    pub fn set_capacity_limit(&self, pool: &Pool, limit: Option<u32>) {
        let mut st = self.state();
        match limit {
            Some(n) => st.capacity_limits.insert(pool.clone(), n),
            None => st.capacity_limits.remove(pool),
        };
    }

    /// Changes the price of `pool` in the catalog (as a live price would move).
    pub fn set_price(&self, pool: &Pool, price: Price) {
        let now = self.clock.now();
        for o in self.state().offers.iter_mut().filter(|o| o.pool == *pool) {
            o.price = price;
            o.observed_at = now;
            o.source = PriceSource::new(SourceKind::Fake, "fake-set-price");
        }
    }

    /// Sets the stability signals returned for `pool`.
    pub fn set_stability(&self, pool: &Pool, stability: Stability) {
        self.state().stability.insert(pool.clone(), stability);
    }

    /// Sets the spot price history of `pool` (price changes, any order).
    pub fn set_spot_price_history(&self, pool: &Pool, mut points: Vec<(OffsetDateTime, Price)>) {
        points.sort_by_key(|(at, _)| *at);
        self.state().price_history.insert(pool.clone(), points);
    }

    /// Sends an interruption notice for a live instance with `lead` time before
    /// its deadline. A preemption also terminates the instance when the clock
    /// passes the deadline.
    pub fn inject_interruption(
        &self,
        id: &InstanceId,
        kind: NoticeKind,
        lead: Duration,
    ) -> Result<InterruptionNotice> {
        let now = self.clock.now();
        let deadline =
            now.saturating_add(time::Duration::try_from(lead).unwrap_or(time::Duration::MAX));
        {
            let mut st = self.state();
            match st.instances.get(id) {
                Some(i) if i.state.is_live() => {}
                _ => return Err(self.not_found("instance", id.as_str())),
            }
            if kind == NoticeKind::Preemption {
                st.pending_preemptions.push((id.clone(), deadline));
            }
        }
        let notice = InterruptionNotice {
            instance: Some(id.clone()),
            kind,
            deadline: Some(deadline),
            source: format!("{}:injected", self.name),
            received_at: now,
        };
        // No receivers is fine: nobody is watching.
        let _ = self.notices.send(notice.clone());
        Ok(notice)
    }

    /// Ends a live instance now, out of band, as a spot reclaim without
    /// notice does: its state becomes terminated, reclaimed by the cloud.
    pub fn preempt(&self, id: &InstanceId) -> Result<()> {
        self.do_terminate(id, EndReason::new(EndCause::Reclaimed, "fake:preempted"))
    }

    /// Ends a live instance now, out of band, as a person in the console
    /// does: its state becomes terminated, at someone's request.
    pub fn terminate_out_of_band(&self, id: &InstanceId) -> Result<()> {
        self.do_terminate(id, EndReason::new(EndCause::Requested, "fake:console"))
    }

    /// Writes a tag on a live instance, as a node's agent does with its own
    /// identity (heartbeat, progress, exit status).
    pub fn set_tag(&self, id: &InstanceId, key: &str, value: &str) -> Result<()> {
        let mut st = self.state();
        match st.instances.get_mut(id) {
            Some(i) if i.state.is_live() => {
                i.tags.insert(key.to_string(), value.to_string());
                Ok(())
            }
            _ => Err(self.not_found("instance", id.as_str())),
        }
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.state().calls.clone()
    }

    /// The instances that are not terminated.
    pub fn live_instances(&self) -> Vec<Instance> {
        self.state()
            .instances
            .values()
            .filter(|i| i.state.is_live())
            .cloned()
            .collect()
    }

    /// Every placement group.
    pub fn placement_groups(&self) -> Vec<PlacementGroup> {
        self.state().groups.values().cloned().collect()
    }

    /// The resources it holds, to save.
    pub fn export_state(&self) -> FakeState {
        let st = self.state();
        let mut launches: Vec<(String, LaunchRequest, Vec<InstanceId>)> = st
            .launches
            .iter()
            .map(|(k, (r, ids))| (k.clone(), r.clone(), ids.clone()))
            .collect();
        launches.sort_by(|a, b| a.0.cmp(&b.0));
        FakeState {
            instances: st.instances.values().cloned().collect(),
            launches,
            groups: st.groups.values().cloned().collect(),
            seq: st.seq,
        }
    }

    /// Replaces the resources it holds with saved ones.
    pub fn import_state(&self, saved: FakeState) {
        let mut st = self.state();
        st.instances = saved
            .instances
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        st.launches = saved
            .launches
            .into_iter()
            .map(|(k, r, ids)| (k, (r, ids)))
            .collect();
        st.groups = saved
            .groups
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect();
        st.seq = saved.seq;
    }

    /// Adds an instance that was not launched through gpufleet (tests use it
    /// for unmanaged neighbours that must survive clean-ups).
    pub fn insert_instance(&self, instance: Instance) {
        self.state().instances.insert(instance.id.clone(), instance);
    }

    fn not_found(&self, what: &str, id: &str) -> Error {
        Error::new(ErrorKind::NotFound, format!("{what} '{id}' does not exist"))
            .with_provider(self.cloud)
    }

    /// Records the call, waits its latency, and takes a scripted fault if one is
    /// queued for it.
    async fn begin(&self, operation: &'static str, target: String) -> Result<Option<Error>> {
        // Launches and group creations also check what their request needs.
        if let Some(need) = Capability::of_operation(operation) {
            self.require(need, operation)?;
        }
        let (latency, fault) = {
            let mut st = self.state();
            if st.calls.len() >= self.max_calls {
                // Keep the newest: a long-lived fake stays bounded.
                st.calls.drain(..self.max_calls / 2);
            }
            st.calls.push(RecordedCall { operation, target });
            let latency = st.latency.get(operation).copied();
            let idx = st
                .faults
                .iter()
                .position(|f| f.operation == operation || f.operation == "*");
            (latency, idx.and_then(|i| st.faults.remove(i)))
        };
        if let Some(d) = latency {
            tokio::time::sleep(d).await;
        }
        match fault {
            Some(f) if f.after_effect => Ok(Some(
                f.error.with_provider(self.cloud).with_operation(operation),
            )),
            Some(f) => Err(f.error.with_provider(self.cloud).with_operation(operation)),
            None => Ok(None),
        }
    }

    fn next_id(st: &mut State, prefix: &str) -> String {
        st.seq += 1;
        format!("{prefix}-{:06}", st.seq)
    }

    fn do_launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
        request.validate()?;
        if request.pool.cloud != self.cloud && self.cloud != Cloud::Fake {
            return Err(Error::invalid_input(format!(
                "pool {} is not on {}",
                request.pool, self.cloud
            )));
        }
        let now = self.clock.now();
        let mut st = self.state();
        let key = request.idempotency_key.to_string();
        if let Some((first, ids)) = st.launches.get(&key) {
            if first != request {
                return Err(Error::invalid_input(format!(
                    "idempotency key '{key}' was already used for a different launch request"
                ))
                .with_context("code", "IdempotentParameterMismatch"));
            }
            let ids = ids.clone();
            return Ok(ids
                .iter()
                .filter_map(|id| st.instances.get(id).cloned())
                .collect());
        }
        if !st.offers.iter().any(|o| o.pool == request.pool) {
            return Err(Error::invalid_input(format!(
                "no pool {} in this cloud's catalog",
                request.pool
            )));
        }
        if let Some(pg) = &request.placement_group {
            if !st.groups.contains_key(pg) {
                return Err(self.not_found("placement group", pg.as_str()));
            }
        }
        let live_in_pool = st
            .instances
            .values()
            .filter(|i| i.pool == request.pool && i.state.is_live())
            .count() as u32;
        let over_limit = st
            .capacity_limits
            .get(&request.pool)
            .is_some_and(|limit| live_in_pool + request.count > *limit);
        if st.out_of_capacity.contains(&request.pool) || over_limit {
            return Err(Error::new(
                ErrorKind::InsufficientCapacity,
                format!("no capacity for {} x {}", request.count, request.pool),
            )
            .with_context("pool", request.pool.to_string()));
        }
        let tags = request.effective_tags(now);
        let mut out = Vec::new();
        for _ in 0..request.count {
            let id = InstanceId::new(Self::next_id(&mut st, &format!("fake-{}", self.cloud)));
            let instance = Instance {
                id: id.clone(),
                pool: request.pool.clone(),
                state: InstanceState::Running,
                tags: tags.clone(),
                launched_at: now,
                expires_at: request.expires_at(now),
                placement_group: request.placement_group.clone(),
                end_reason: None,
            };
            st.instances.insert(id, instance.clone());
            out.push(instance);
        }
        st.launches.insert(
            key,
            (request.clone(), out.iter().map(|i| i.id.clone()).collect()),
        );
        Ok(out)
    }

    fn do_terminate(&self, id: &InstanceId, why: EndReason) -> Result<()> {
        let mut st = self.state();
        match st.instances.get_mut(id) {
            Some(i) if i.state.is_live() => {
                i.state = InstanceState::Terminated;
                i.end_reason = Some(why);
                st.pending_preemptions.retain(|(p, _)| p != id);
                Ok(())
            }
            _ => Err(self.not_found("instance", id.as_str())),
        }
    }
}

/// Returns the result of the work, or the after-effect fault if one was taken.
fn finish<T>(result: Result<T>, fault: Option<Error>) -> Result<T> {
    match fault {
        Some(e) => result.and(Err(e)),
        None => result,
    }
}

#[async_trait]
impl Catalog for FakeCloud {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        let fault = self.begin("instance_types", String::new()).await?;
        finish(Ok(self.state().types.clone()), fault)
    }

    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        let fault = self.begin("offers", String::new()).await?;
        let offers = self
            .state()
            .offers
            .iter()
            .filter(|o| query.matches(o))
            .cloned()
            .collect();
        finish(Ok(offers), fault)
    }
}

#[async_trait]
impl SpotMarket for FakeCloud {
    async fn spot_price_history(
        &self,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Result<Vec<PricePoint>> {
        let fault = self.begin("spot_price_history", pool.to_string()).await?;
        let st = self.state();
        let offer = st
            .offers
            .iter()
            .find(|o| o.pool == *pool)
            .ok_or_else(|| self.not_found("pool", &pool.to_string()))?;
        if pool.capacity != crate::Capacity::Spot {
            return Err(Error::invalid_input(format!(
                "{pool} is not a spot pool: only spot pools have a price history"
            )));
        }
        let points = st
            .price_history
            .get(pool)
            .cloned()
            .unwrap_or_else(|| vec![(offer.observed_at, offer.price)]);
        let first = points.iter().rposition(|(at, _)| *at <= since).unwrap_or(0);
        let source = PriceSource::new(SourceKind::Fake, "fake-spot-price-history");
        let history = points[first..]
            .iter()
            .map(|(at, price)| PricePoint {
                pool: pool.clone(),
                price: *price,
                at: *at,
                source: source.clone(),
            })
            .collect();
        finish(Ok(history), fault)
    }

    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        let fault = self.begin("stability", String::new()).await?;
        let st = self.state();
        let out = pools
            .iter()
            .map(|p| {
                st.stability.get(p).cloned().unwrap_or_else(|| {
                    st.offers
                        .iter()
                        .find(|o| o.pool == *p)
                        .map(|o| o.stability.clone())
                        .unwrap_or_default()
                })
            })
            .collect();
        finish(Ok(out), fault)
    }
}

#[async_trait]
impl Placement for FakeCloud {
    async fn create_placement_group(
        &self,
        request: &PlacementGroupRequest,
    ) -> Result<PlacementGroup> {
        self.require(
            Capabilities::for_strategy(request.strategy),
            "create_placement_group",
        )?;
        let fault = self
            .begin("create_placement_group", request.name.clone())
            .await?;
        request.validate()?;
        let mut st = self.state();
        if st.groups.values().any(|g| g.name == request.name) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("placement group '{}' already exists", request.name),
            ));
        }
        if !st.offers.iter().any(|o| o.pool.region == request.region) {
            return Err(Error::invalid_input(format!(
                "region '{}' has no offers in this cloud",
                request.region
            )));
        }
        let id = PlacementGroupId::new(Self::next_id(&mut st, "pg-fake"));
        let group = PlacementGroup {
            id: id.clone(),
            name: request.name.clone(),
            cloud: self.cloud,
            strategy: request.strategy,
            region: request.region.clone(),
            zone: request.zone.clone(),
            tags: request.tags.clone(),
        };
        st.groups.insert(id, group.clone());
        drop(st);
        finish(Ok(group), fault)
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        let fault = self.begin("placement_group", id.to_string()).await?;
        let g = self
            .state()
            .groups
            .get(id)
            .cloned()
            .ok_or_else(|| self.not_found("placement group", id.as_str()));
        finish(g, fault)
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        let fault = self.begin("list_placement_groups", String::new()).await?;
        let groups = self
            .state()
            .groups
            .values()
            .filter(|g| filter.matches(&g.tags))
            .cloned()
            .collect();
        finish(Ok(groups), fault)
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        let fault = self.begin("delete_placement_group", id.to_string()).await?;
        let mut st = self.state();
        if !st.groups.contains_key(id) {
            return Err(self.not_found("placement group", id.as_str()));
        }
        if st
            .instances
            .values()
            .any(|i| i.state.is_live() && i.placement_group.as_ref() == Some(id))
        {
            return Err(Error::invalid_input(format!(
                "placement group '{id}' still has running instances; terminate them first"
            ))
            .with_context("code", "InvalidPlacementGroup.InUse"));
        }
        st.groups.remove(id);
        drop(st);
        finish(Ok(()), fault)
    }
}

#[async_trait]
impl Compute for FakeCloud {
    async fn launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
        self.require(Capabilities::for_capacity(request.pool.capacity), "launch")?;
        let fault = self.begin("launch", request.pool.to_string()).await?;
        finish(self.do_launch(request), fault)
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        let fault = self.begin("instance", id.to_string()).await?;
        let i = self
            .state()
            .instances
            .get(id)
            .cloned()
            .ok_or_else(|| self.not_found("instance", id.as_str()));
        finish(i, fault)
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        let fault = self.begin("list_instances", String::new()).await?;
        let list = self
            .state()
            .instances
            .values()
            .filter(|i| i.state.is_live() && filter.matches(&i.tags))
            .cloned()
            .collect();
        finish(Ok(list), fault)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        let fault = self.begin("terminate", id.to_string()).await?;
        let why = EndReason::new(EndCause::Requested, "fake:terminate");
        finish(self.do_terminate(id, why), fault)
    }

    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        let fault = self.begin("console_output", id.to_string()).await?;
        let out = {
            let st = self.state();
            match st.instances.get(id) {
                Some(i) => {
                    let script = st
                        .launches
                        .values()
                        .find(|(_, ids)| ids.contains(id))
                        .and_then(|(r, _)| r.boot_script.clone());
                    let mut text = format!(
                        "[fake console] {} {} in {} since {}\n",
                        i.id,
                        i.pool.instance_type,
                        i.pool.location(),
                        i.launched_at
                    );
                    match script {
                        Some(s) => text.push_str(&format!(
                            "[fake console] boot script, {} bytes:\n{s}\n",
                            s.len()
                        )),
                        None => text.push_str("[fake console] no boot script\n"),
                    }
                    Ok(text)
                }
                None => Err(self.not_found("instance", id.as_str())),
            }
        };
        finish(out, fault)
    }
}

#[async_trait]
impl InterruptionSource for FakeCloud {
    async fn interruptions(&self) -> Result<NoticeStream> {
        let fault = self.begin("interruptions", String::new()).await?;
        let rx = self.notices.subscribe();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(notice) => return Some((Ok(notice), rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        finish(Ok(Box::pin(stream) as NoticeStream), fault)
    }
}

impl Provider for FakeCloud {
    fn cloud(&self) -> Cloud {
        self.cloud
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
}

#[cfg(test)]
mod operation_names {
    use super::FakeCloud;

    /// `OPERATIONS` names exactly the operations the fake records.
    #[test]
    fn the_list_of_operations_is_the_one_the_fake_records() {
        let source = include_str!("fake.rs");
        let mut recorded: Vec<&str> = source
            .split("begin(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        recorded.sort_unstable();
        recorded.dedup();
        let mut listed = FakeCloud::OPERATIONS.to_vec();
        listed.sort_unstable();
        assert_eq!(recorded, listed);
    }
}
