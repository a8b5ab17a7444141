//! Helpers every provider's tests use, written once (the provider crates'
//! tests reach them through this dev-only crate).

use std::time::Duration;

use gpufleet_core::layers::{LayerExt, RetryLayer, TimeoutLayer};
use gpufleet_core::{
    Capacity, Cloud, Compute, Error, ErrorKind, IdempotencyKey, Instance, InstanceId,
    LaunchRequest, Pool, Provider, Region, Zone,
};

/// A retry layer quick enough for tests: 20 ms before the first retry, at
/// most 3 retries, no jitter.
pub fn retry() -> RetryLayer {
    RetryLayer::new()
        .with_min_delay(Duration::from_millis(20))
        .with_max_retries(3)
        .without_jitter()
}

/// An idempotency key (the tests' keys are valid ones).
pub fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

/// A pool of `itype` in `cloud`'s `region`, in `zone` if given.
pub fn pool_in(
    (cloud, region): (Cloud, &str),
    zone: Option<&str>,
    itype: &str,
    capacity: Capacity,
) -> Pool {
    Pool {
        cloud,
        region: Region::new(region),
        zone: zone.map(Zone::new),
        instance_type: itype.into(),
        capacity,
    }
}

/// The stream's next notice, which must come within `secs` seconds.
pub async fn next_notice(
    stream: &mut gpufleet_core::NoticeStream,
    secs: u64,
) -> gpufleet_core::InterruptionNotice {
    use futures::StreamExt;
    match tokio::time::timeout(Duration::from_secs(secs), stream.next()).await {
        Ok(Some(Ok(n))) => n,
        other => panic!("no notice within {secs} s: {other:?}"),
    }
}

/// `n` is a preemption notice for `instance` (the provider's instance id).
pub fn assert_preemption_of(n: &gpufleet_core::InterruptionNotice, instance: &str) {
    assert_eq!(n.kind, gpufleet_core::NoticeKind::Preemption, "{n:?}");
    let id = n.instance.as_ref().map(|i| i.as_str());
    assert_eq!(id, Some(instance), "{n:?}");
}

/// Nothing more from the stream (no notice, no error, no end) within `ms`
/// milliseconds; `what` says what that would have meant.
pub async fn no_notice(stream: &mut gpufleet_core::NoticeStream, ms: u64, what: &str) {
    use futures::StreamExt;
    let again = tokio::time::timeout(Duration::from_millis(ms), stream.next()).await;
    assert!(again.is_err(), "{what}: {again:?}");
}

/// A launch in `full`, whose zone the stand-in has no capacity in, fails as
/// `InsufficientCapacity` with `context` (key, value) and the pool in its
/// error's context; `after_refusal` then checks what the refusal left; then
/// a launch in `ok` succeeds there. Returns what that one launched.
pub async fn capacity_in_one_zone(
    p: &dyn Compute,
    (full, ok): (Pool, Pool),
    image: &str,
    context: (&str, &str),
    after_refusal: impl FnOnce(),
) -> Vec<Instance> {
    let e = p
        .launch(&LaunchRequest::new(full, image, key("cap-a")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity, "{e}");
    let has = |(k, v): &(&'static str, String)| *k == context.0 && v == context.1;
    assert!(e.context().iter().any(has), "{:?}", e.context());
    assert!(e.context().iter().any(|(k, _)| *k == "pool"), "{e}");
    after_refusal();
    let launched = p
        .launch(&LaunchRequest::new(ok.clone(), image, key("cap-b")))
        .await
        .unwrap();
    assert_eq!(launched[0].pool, ok);
    launched
}

/// The error `p` gives for instance `id`, which must be one.
pub async fn instance_error(p: &dyn Compute, id: &str) -> Error {
    p.instance(&InstanceId::new(id)).await.unwrap_err()
}

/// Behind a 300 ms timeout layer, a catalog read that the stand-in was told
/// to answer late (after seconds) ends as `Timeout` within 2 s.
pub async fn late_catalog_read_times_out(p: std::sync::Arc<dyn Provider>) {
    let p = p.layer(TimeoutLayer::new(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    let e = p.instance_types().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// What logs the most, for a test that reads the logs afterwards: a launch
/// in `ok` and its terminate; then, once `exhaust` has made the stand-in
/// refuse `full`'s zone, a launch there refused for capacity; then a lookup
/// of `missing`, which is not found. Returns those two errors.
pub async fn launch_refuse_and_miss(
    p: &dyn Compute,
    (ok, full): (Pool, Pool),
    image: &str,
    exhaust: impl FnOnce(),
    missing: &str,
) -> (Error, Error) {
    let launched = p
        .launch(&LaunchRequest::new(ok, image, key("leak-1")))
        .await
        .unwrap();
    p.terminate(&launched[0].id).await.unwrap();
    exhaust();
    let e = p
        .launch(&LaunchRequest::new(full, image, key("leak-2")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity);
    let gone = instance_error(p, missing).await;
    assert_eq!(gone.kind(), ErrorKind::NotFound);
    (e, gone)
}
