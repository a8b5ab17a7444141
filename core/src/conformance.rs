//! One test suite for every provider (feature `conformance`).
//!
//! Each `check_*` function exercises one capability through `dyn Provider` and
//! panics with a clear message when the provider breaks the contract; it
//! returns [`Outcome::Skipped`] when [`Capabilities`] rule the check out. The
//! [`conformance_suite!`](crate::conformance_suite) macro expands them into one
//! `#[tokio::test]` each for a [`Harness`]:
//!
//! ```ignore
//! struct MyHarness;
//! #[async_trait::async_trait]
//! impl gpufleet_core::conformance::Harness for MyHarness { /* … */ }
//! gpufleet_core::conformance_suite!(MyHarness);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use crate::catalog::{sort_offers, OfferQuery, OfferSort};
use crate::error::{ErrorKind, Result};
use crate::layers::{CallCounter, CapabilityLayer, LayerExt};
use crate::model::{
    Capacity, IdempotencyKey, Instance, InstanceId, InstanceState, LaunchRequest, NoticeKind,
    Offer, PlacementGroupId, PlacementGroupRequest, PlacementStrategy, TagFilter, Tags,
};
use crate::provider::{Capabilities, Capability, Provider};

/// What a provider's test setup gives the suite.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A provider in a fresh state (each check calls this once).
    async fn provider(&self) -> Arc<dyn Provider>;

    /// An image to launch.
    fn image(&self) -> String {
        "gpufleet-conformance-image".into()
    }

    /// Makes the provider deliver a preemption notice for `instance` (through
    /// its metadata-service mock, say). `None` when this harness cannot, which
    /// skips the interruption check.
    async fn trigger_preemption(
        &self,
        provider: &Arc<dyn Provider>,
        instance: &Instance,
    ) -> Option<Result<()>> {
        let _ = (provider, instance);
        None
    }
}

/// How a check ended (a failed check panics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Everything held.
    Passed,
    /// Not applicable to this provider, and why.
    Skipped(String),
}

/// Prints a skipped check so it shows in test output.
pub fn report(name: &str, outcome: Outcome) {
    if let Outcome::Skipped(why) = outcome {
        eprintln!("conformance check {name} skipped: {why}");
    }
}

/// A log sink for secret-leak tests: a cloneable [`std::io::Write`] that keeps
/// everything written to it, a TRACE subscriber that writes to it, and a check
/// that none of the secrets appear.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// Captures every event at TRACE, plus `directives` (such as a provider's
    /// redacting caps), on this thread until the guard is dropped.
    ///
    /// # Panics
    /// When a directive does not parse.
    pub fn install(&self, directives: &[&str]) -> tracing::subscriber::DefaultGuard {
        let mut filter = tracing_subscriber::EnvFilter::new("trace");
        for d in directives {
            filter = filter.add_directive(
                d.parse()
                    .unwrap_or_else(|e| panic!("log directive '{d}': {e}")),
            );
        }
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Panics, naming the secret (not printing it), when any of `secrets`
    /// appears in the captured output; also when less than `min_bytes` were
    /// captured, since a check of nothing proves nothing.
    pub fn assert_free_of(&self, secrets: &[(&str, &str)], min_bytes: usize) {
        let text = self.text();
        assert!(
            text.len() >= min_bytes,
            "the logs captured only {} bytes (expected at least {min_bytes}): is the subscriber installed?",
            text.len()
        );
        for (what, secret) in secrets {
            assert!(!text.contains(secret), "the logs hold the {what}");
        }
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as u64 % 1_000_000_000;
    format!("{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn skip_unless(cond: bool, why: &str) -> Option<Outcome> {
    (!cond).then(|| Outcome::Skipped(why.to_string()))
}

macro_rules! expect_kind {
    ($result:expr, $kind:expr, $what:expr) => {
        match $result {
            Ok(_) => panic!("{}: expected {:?}, got success", $what, $kind),
            Err(e) => assert_eq!(e.kind(), $kind, "{}: expected {:?}, got {e}", $what, $kind),
        }
    };
}

async fn launch_pool(p: &dyn Provider, caps: Capabilities, capacity: Capacity) -> Offer {
    let capacity = if capacity == Capacity::Spot && !caps.spot {
        Capacity::OnDemand
    } else {
        capacity
    };
    let mut offers = p
        .offers(&OfferQuery::new().capacity(capacity))
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    sort_offers(&mut offers, OfferSort::Price);
    offers
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("the provider has no {capacity} offer to launch into"))
}

fn request(h: &dyn Harness, offer: &Offer, job: &str) -> LaunchRequest {
    let key = IdempotencyKey::new(unique("conf")).unwrap_or_else(|e| panic!("{e}"));
    LaunchRequest::new(offer.pool.clone(), h.image(), key)
        .with_tag(crate::model::tags::JOB, job)
        .with_tag(crate::model::tags::OWNER, "conformance")
}

/// The catalog lists GPU instance types and well-formed offers, and honours the
/// query's filters.
pub async fn check_catalog(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.catalog, "no catalog capability") {
        return s;
    }
    let types = p
        .instance_types()
        .await
        .unwrap_or_else(|e| panic!("instance_types: {e}"));
    assert!(!types.is_empty(), "instance_types is empty");
    let offers = p
        .offers(&OfferQuery::new())
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    assert!(!offers.is_empty(), "offers is empty");
    let now = time::OffsetDateTime::now_utc();
    for o in &offers {
        if p.cloud() != crate::Cloud::Fake {
            assert_eq!(
                o.pool.cloud,
                p.cloud(),
                "offer {} from another cloud",
                o.pool
            );
        }
        assert_eq!(
            o.pool.instance_type, o.instance_type.name,
            "offer {} names another type",
            o.pool
        );
        assert!(
            types
                .iter()
                .any(|t| t.name == o.instance_type.name && t.cloud == o.pool.cloud),
            "offer {} has a type instance_types does not list",
            o.pool
        );
        assert!(o.price.micros_per_hour() > 0, "offer {} is free", o.pool);
        assert!(
            o.observed_at <= now + time::Duration::minutes(5),
            "offer {} observed in the future",
            o.pool
        );
        assert!(!o.source.name.is_empty(), "offer {} has no source", o.pool);
        assert!(o.instance_type.gpu.is_some(), "offer {} has no GPU", o.pool);
    }
    // Filters.
    let first = &offers[0];
    let gpu = first
        .instance_type
        .gpu
        .clone()
        .unwrap_or_else(|| unreachable!());
    let q = OfferQuery::new()
        .gpu(gpu.model.clone(), Some(gpu.count))
        .region(first.pool.region.clone());
    let filtered = p
        .offers(&q)
        .await
        .unwrap_or_else(|e| panic!("offers({q:?}): {e}"));
    assert!(
        filtered.iter().any(|o| o.pool == first.pool),
        "filtered offers lost {}",
        first.pool
    );
    assert!(
        filtered.iter().all(|o| q.matches(o)),
        "offers ignored the query's filters"
    );
    let cap = first.price;
    let q = OfferQuery::new()
        .max_price(cap)
        .capacity(first.pool.capacity);
    let filtered = p.offers(&q).await.unwrap_or_else(|e| panic!("offers: {e}"));
    assert!(filtered
        .iter()
        .all(|o| o.price <= cap && o.pool.capacity == first.pool.capacity));
    Outcome::Passed
}

/// Spot pools have a price history and stability signals.
pub async fn check_spot_prices(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(
        caps.spot_price_history && caps.stability,
        "no spot price history",
    ) {
        return s;
    }
    let offers = p
        .offers(&OfferQuery::new().capacity(Capacity::Spot))
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    let Some(offer) = offers.first() else {
        return Outcome::Skipped("no spot offers".into());
    };
    let since = time::OffsetDateTime::now_utc() - time::Duration::days(7);
    let history = p
        .spot_price_history(&offer.pool, since)
        .await
        .unwrap_or_else(|e| panic!("spot_price_history({}): {e}", offer.pool));
    assert!(
        !history.is_empty(),
        "no spot price history for {}",
        offer.pool
    );
    assert!(
        history.windows(2).all(|w| w[0].at <= w[1].at),
        "history is not oldest first"
    );
    assert!(history
        .iter()
        .all(|pt| pt.pool == offer.pool && pt.price.micros_per_hour() > 0));
    let stability = p
        .stability(std::slice::from_ref(&offer.pool))
        .await
        .unwrap_or_else(|e| panic!("stability: {e}"));
    assert_eq!(stability.len(), 1, "stability returns one entry per pool");
    Outcome::Passed
}

/// Placement groups can be created, found, listed and deleted; names are
/// unique; a gone group is NotFound; a bad partition count is refused.
pub async fn check_placement_groups(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.placement_groups && caps.catalog, "no placement groups") {
        return s;
    }
    let offers = p
        .offers(&OfferQuery::new())
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    let region = offers
        .first()
        .map(|o| o.pool.region.clone())
        .unwrap_or_else(|| panic!("no offers"));
    let owner = unique("pg-owner");
    let mut tags = Tags::new();
    tags.insert(crate::model::tags::MANAGED.into(), "true".into());
    tags.insert(crate::model::tags::OWNER.into(), owner.clone());
    let req = PlacementGroupRequest {
        name: unique("gpufleet-conf"),
        strategy: PlacementStrategy::Cluster,
        region: region.clone(),
        zone: None,
        tags: tags.clone(),
    };
    let group = p
        .create_placement_group(&req)
        .await
        .unwrap_or_else(|e| panic!("create_placement_group: {e}"));
    assert_eq!(group.name, req.name);
    assert_eq!(group.strategy, PlacementStrategy::Cluster);
    let got = p
        .placement_group(&group.id)
        .await
        .unwrap_or_else(|e| panic!("placement_group: {e}"));
    assert_eq!(got.id, group.id);
    assert_eq!(got.strategy, group.strategy);
    let listed = p
        .list_placement_groups(&TagFilter::default().with(crate::model::tags::OWNER, owner))
        .await
        .unwrap_or_else(|e| panic!("list_placement_groups: {e}"));
    assert!(
        listed.iter().any(|g| g.id == group.id),
        "list_placement_groups misses the new group"
    );
    expect_kind!(
        p.create_placement_group(&req).await,
        ErrorKind::AlreadyExists,
        "creating a group with a taken name"
    );
    let bad = PlacementGroupRequest {
        name: unique("gpufleet-bad"),
        strategy: PlacementStrategy::Partition(9),
        ..req.clone()
    };
    // Out of range where partitions exist; unsupported where they do not.
    let refusal = if caps.has(Capability::PlacementPartition) {
        ErrorKind::InvalidInput
    } else {
        ErrorKind::Unsupported
    };
    expect_kind!(
        p.create_placement_group(&bad).await,
        refusal,
        "a partition group with 9 partitions"
    );
    if caps.placement_spread {
        let spread = PlacementGroupRequest {
            name: unique("gpufleet-spread"),
            strategy: PlacementStrategy::Spread,
            ..req.clone()
        };
        let g = p
            .create_placement_group(&spread)
            .await
            .unwrap_or_else(|e| panic!("create spread group: {e}"));
        assert_eq!(g.strategy, PlacementStrategy::Spread);
        p.delete_placement_group(&g.id)
            .await
            .unwrap_or_else(|e| panic!("delete spread group: {e}"));
    }
    p.delete_placement_group(&group.id)
        .await
        .unwrap_or_else(|e| panic!("delete_placement_group: {e}"));
    expect_kind!(
        p.placement_group(&group.id).await,
        ErrorKind::NotFound,
        "looking up a deleted group"
    );
    expect_kind!(
        p.delete_placement_group(&group.id).await,
        ErrorKind::NotFound,
        "deleting a deleted group"
    );
    Outcome::Passed
}

/// Launch, describe, list by tag and terminate one instance.
pub async fn check_launch_lifecycle(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.compute && caps.catalog, "no compute") {
        return s;
    }
    let offer = launch_pool(p.as_ref(), caps, Capacity::OnDemand).await;
    let job = unique("job");
    let req = request(h, &offer, &job);
    let launched = p
        .launch(&req)
        .await
        .unwrap_or_else(|e| panic!("launch into {}: {e}", offer.pool));
    assert_eq!(
        launched.len(),
        1,
        "launched {} instances, asked for 1",
        launched.len()
    );
    let inst = &launched[0];
    assert_eq!(inst.pool, offer.pool, "instance landed in another pool");
    assert_eq!(
        inst.tags
            .get(crate::model::tags::MANAGED)
            .map(String::as_str),
        Some("true"),
        "no managed tag"
    );
    assert_eq!(
        inst.tags.get(crate::model::tags::JOB),
        Some(&job),
        "job tag lost"
    );
    let got = p
        .instance(&inst.id)
        .await
        .unwrap_or_else(|e| panic!("instance({}): {e}", inst.id));
    assert_eq!(got.id, inst.id);
    let by_tag = TagFilter::default().with(crate::model::tags::JOB, job.clone());
    let listed = p
        .list_instances(&by_tag)
        .await
        .unwrap_or_else(|e| panic!("list_instances: {e}"));
    assert_eq!(
        listed.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&inst.id],
        "list by job tag"
    );
    p.terminate(&inst.id)
        .await
        .unwrap_or_else(|e| panic!("terminate({}): {e}", inst.id));
    let listed = p
        .list_instances(&by_tag)
        .await
        .unwrap_or_else(|e| panic!("list_instances: {e}"));
    assert!(listed.is_empty(), "a terminated instance is still listed");
    match p.instance(&inst.id).await {
        Ok(i) => assert!(
            matches!(
                i.state,
                InstanceState::Terminated | InstanceState::ShuttingDown
            ),
            "terminated instance is {:?}",
            i.state
        ),
        Err(e) => assert_eq!(
            e.kind(),
            ErrorKind::NotFound,
            "describe after terminate: {e}"
        ),
    }
    Outcome::Passed
}

/// The same idempotency key launches once; reusing it for another request is
/// refused; a bad request creates nothing.
pub async fn check_idempotent_launch(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.compute && caps.catalog, "no compute") {
        return s;
    }
    let offer = launch_pool(p.as_ref(), caps, Capacity::OnDemand).await;
    let job = unique("job");
    let req = request(h, &offer, &job);
    let first = p
        .launch(&req)
        .await
        .unwrap_or_else(|e| panic!("launch: {e}"));
    let second = p
        .launch(&req)
        .await
        .unwrap_or_else(|e| panic!("relaunch with the same key: {e}"));
    let ids = |v: &[Instance]| v.iter().map(|i| i.id.clone()).collect::<Vec<InstanceId>>();
    assert_eq!(
        ids(&first),
        ids(&second),
        "the same key launched different instances"
    );
    let by_tag = TagFilter::default().with(crate::model::tags::JOB, job.clone());
    let listed = p
        .list_instances(&by_tag)
        .await
        .unwrap_or_else(|e| panic!("list_instances: {e}"));
    assert_eq!(
        listed.len(),
        1,
        "the same key left {} instances",
        listed.len()
    );
    expect_kind!(
        p.launch(&req.clone().with_count(2)).await,
        ErrorKind::InvalidInput,
        "reusing a key for another request"
    );

    let bad_job = unique("job");
    let bad = request(h, &offer, &bad_job).with_count(0);
    expect_kind!(
        p.launch(&bad).await,
        ErrorKind::InvalidInput,
        "launching 0 instances"
    );
    let listed = p
        .list_instances(&TagFilter::default().with(crate::model::tags::JOB, bad_job))
        .await
        .unwrap_or_else(|e| panic!("list_instances: {e}"));
    assert!(listed.is_empty(), "a refused launch left instances behind");
    for i in first {
        p.terminate(&i.id)
            .await
            .unwrap_or_else(|e| panic!("terminate: {e}"));
    }
    Outcome::Passed
}

/// Unknown and gone resources are NotFound, never a panic or success.
pub async fn check_not_found(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.compute && caps.catalog, "no compute") {
        return s;
    }
    let ghost = InstanceId::new(unique("i-0gpufleetghost"));
    expect_kind!(
        p.instance(&ghost).await,
        ErrorKind::NotFound,
        "describing an unknown instance"
    );
    expect_kind!(
        p.terminate(&ghost).await,
        ErrorKind::NotFound,
        "terminating an unknown instance"
    );
    if caps.placement_groups {
        let ghost = PlacementGroupId::new(unique("pg-ghost"));
        expect_kind!(
            p.placement_group(&ghost).await,
            ErrorKind::NotFound,
            "an unknown placement group"
        );
    }
    let offer = launch_pool(p.as_ref(), caps, Capacity::OnDemand).await;
    let launched = p
        .launch(&request(h, &offer, &unique("job")))
        .await
        .unwrap_or_else(|e| panic!("launch: {e}"));
    let id = &launched[0].id;
    p.terminate(id)
        .await
        .unwrap_or_else(|e| panic!("terminate: {e}"));
    expect_kind!(
        p.terminate(id).await,
        ErrorKind::NotFound,
        "terminating an instance twice"
    );
    Outcome::Passed
}

/// A preemption notice arrives once, with a deadline.
pub async fn check_interruption_stream(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(
        caps.interruptions && caps.compute && caps.catalog,
        "no interruption stream",
    ) {
        return s;
    }
    let offer = launch_pool(p.as_ref(), caps, Capacity::Spot).await;
    let launched = p
        .launch(&request(h, &offer, &unique("job")))
        .await
        .unwrap_or_else(|e| panic!("launch: {e}"));
    let inst = launched[0].clone();
    let mut stream = p
        .interruptions()
        .await
        .unwrap_or_else(|e| panic!("interruptions: {e}"));
    match h.trigger_preemption(&p, &inst).await {
        None => return Outcome::Skipped("the harness cannot trigger a preemption".into()),
        Some(r) => r.unwrap_or_else(|e| panic!("triggering a preemption: {e}")),
    }
    let notice = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap_or_else(|_| panic!("no notice within 10 s of a preemption"))
        .unwrap_or_else(|| panic!("the notice stream ended"))
        .unwrap_or_else(|e| panic!("notice stream error: {e}"));
    assert_eq!(notice.kind, NoticeKind::Preemption);
    assert!(
        notice.deadline.is_some(),
        "a preemption notice without a deadline"
    );
    if let Some(id) = &notice.instance {
        assert_eq!(id, &inst.id, "the notice names another instance");
    }
    let again = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(
        !matches!(again, Ok(Some(Ok(ref n))) if *n == notice),
        "the same notice was delivered twice"
    );
    let _ = p.terminate(&inst.id).await;
    Outcome::Passed
}

/// One call that needs `need`, made on `p`.
async fn attempt(
    p: &Arc<dyn Provider>,
    need: Capability,
    region: &crate::model::Region,
) -> Result<()> {
    let group = |strategy| PlacementGroupRequest {
        name: unique("gpufleet-caps"),
        strategy,
        region: region.clone(),
        zone: None,
        tags: Tags::new(),
    };
    let pool = crate::model::Pool {
        cloud: p.cloud(),
        region: region.clone(),
        zone: None,
        instance_type: "gpufleet-conformance".into(),
        capacity: Capacity::Spot,
    };
    match need {
        Capability::Catalog => p.offers(&OfferQuery::new()).await.map(drop),
        Capability::SpotPriceHistory => {
            let since = time::OffsetDateTime::now_utc() - time::Duration::days(1);
            p.spot_price_history(&pool, since).await.map(drop)
        }
        Capability::Stability => p.stability(std::slice::from_ref(&pool)).await.map(drop),
        Capability::PlacementGroups => p
            .create_placement_group(&group(PlacementStrategy::Cluster))
            .await
            .map(drop),
        Capability::PlacementSpread => p
            .create_placement_group(&group(PlacementStrategy::Spread))
            .await
            .map(drop),
        Capability::PlacementPartition => p
            .create_placement_group(&group(PlacementStrategy::Partition(2)))
            .await
            .map(drop),
        Capability::Compute => p.list_instances(&TagFilter::managed()).await.map(drop),
        Capability::Spot => {
            let key = IdempotencyKey::new(unique("caps")).unwrap_or_else(|e| panic!("{e}"));
            let req = LaunchRequest::new(pool, "gpufleet-conformance-image", key);
            p.launch(&req).await.map(drop)
        }
        Capability::Interruptions => p.interruptions().await.map(drop),
    }
}

/// Declared capabilities match behaviour: every operation whose capability the
/// provider does not declare answers `Unsupported` from the provider itself,
/// and through [`CapabilityLayer`] is refused before any call is made.
pub async fn check_declared_capabilities(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    let missing: Vec<Capability> = Capability::ALL
        .into_iter()
        .filter(|c| !caps.has(*c))
        .collect();
    if let Some(s) = skip_unless(!missing.is_empty(), "declares every capability") {
        return s;
    }
    let region = if caps.catalog {
        p.offers(&OfferQuery::new())
            .await
            .unwrap_or_else(|e| panic!("offers: {e}"))
            .first()
            .map(|o| o.pool.region.clone())
            .unwrap_or_else(|| panic!("no offers"))
    } else {
        crate::model::Region::new("us-east-1")
    };
    let sent = CallCounter::new();
    let layered = p.clone().layer(sent.clone()).layer(CapabilityLayer);
    for need in missing {
        let what = format!("{need} (not declared)");
        expect_kind!(
            attempt(&p, need, &region).await,
            ErrorKind::Unsupported,
            what
        );
        let before = sent.count();
        expect_kind!(
            attempt(&layered, need, &region).await,
            ErrorKind::Unsupported,
            what
        );
        assert_eq!(
            sent.count(),
            before,
            "{what}: the capability layer let the call through"
        );
    }
    Outcome::Passed
}

/// The suite's checks, listed once: invokes the macro in brackets with any
/// tokens after it, then `test_name => check_function,` for every check. A
/// harness that needs its own test body (a stand-in server started per test)
/// defines that macro and passes it here, instead of copying the list:
///
/// ```ignore
/// macro_rules! my_check {
///     ($($name:ident => $check:ident,)*) => {$(
///         #[tokio::test]
///         async fn $name() { /* start the stand-in, run conformance::$check */ }
///     )*};
/// }
/// gpufleet_core::conformance_checks!([my_check]);
/// ```
#[macro_export]
macro_rules! conformance_checks {
    ([$($callback:tt)+] $($arg:tt)*) => {
        $($callback)+! { $($arg)*
            conformance_catalog => check_catalog,
            conformance_spot_prices => check_spot_prices,
            conformance_placement_groups => check_placement_groups,
            conformance_launch_lifecycle => check_launch_lifecycle,
            conformance_idempotent_launch => check_idempotent_launch,
            conformance_not_found => check_not_found,
            conformance_interruption_stream => check_interruption_stream,
            conformance_declared_capabilities => check_declared_capabilities,
        }
    };
}

/// Expands the suite into one `#[tokio::test]` per check for a [`Harness`]
/// expression (evaluated anew for each test).
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_checks!([$crate::conformance_suite] @each $harness;);
    };
    (@each $harness:expr; $($name:ident => $check:ident,)*) => {$(
        #[tokio::test]
        async fn $name() {
            let harness = $harness;
            let outcome = $crate::conformance::$check(&harness).await;
            $crate::conformance::report(stringify!($name), outcome);
        }
    )*};
}
