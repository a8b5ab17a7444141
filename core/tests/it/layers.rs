//! Retry, timeout and tracing layers over the fake cloud.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::fake::FakeCloud;
use gpufleet_core::layers::{
    CallCounter, CapabilityLayer, LayerExt, RetryLayer, TimeoutLayer, TracingLayer,
};
use gpufleet_core::*;

fn fake() -> Arc<FakeCloud> {
    Arc::new(FakeCloud::from_snapshot(Cloud::Aws))
}

/// A fake whose next calls of `op` fail with `errors`, in order, and the
/// fake behind the quick retry layer.
fn failing(op: Operation, errors: Vec<Error>) -> (Arc<FakeCloud>, Arc<dyn Provider>) {
    let f = fake();
    for e in errors {
        f.fail_next(op, e);
    }
    let p = (f.clone() as Arc<dyn Provider>).layer(retry());
    (f, p)
}

fn calls(f: &FakeCloud, op: Operation) -> usize {
    f.calls().iter().filter(|c| c.operation == op).count()
}

fn retry() -> RetryLayer {
    RetryLayer::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_retries(3)
        .without_jitter()
}

#[tokio::test(start_paused = true)]
async fn rate_limited_call_succeeds_after_retries() {
    let (f, p) = failing(
        Operation::Offers,
        vec![
            Error::new(ErrorKind::RateLimited, "RequestLimitExceeded"),
            Error::new(ErrorKind::RateLimited, "RequestLimitExceeded"),
        ],
    );
    let offers = p.offers(&OfferQuery::new()).await.unwrap();
    assert!(!offers.is_empty());
    assert_eq!(calls(&f, Operation::Offers), 3);
}

#[tokio::test(start_paused = true)]
async fn non_retryable_error_is_returned_at_once() {
    let (f, p) = failing(
        Operation::Offers,
        vec![Error::new(ErrorKind::Unauthenticated, "AuthFailure")],
    );
    let e = p.offers(&OfferQuery::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated);
    assert!(!e.is_persistent(), "a non-retryable error is not a give-up");
    assert_eq!(calls(&f, Operation::Offers), 1);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_limit_and_mark_the_error_persistent() {
    let (f, p) = failing(
        Operation::Offers,
        vec![Error::new(ErrorKind::Unavailable, "HTTP 503"); 10],
    );
    let start = tokio::time::Instant::now();
    let e = p.offers(&OfferQuery::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.is_persistent());
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("gave up after retries"), "{e}");
    assert_eq!(
        calls(&f, Operation::Offers),
        4,
        "one attempt and three retries"
    );
    // 100 + 200 + 400 ms of backoff without jitter (tokio's timer rounds each
    // sleep up to the next millisecond).
    let elapsed = start.elapsed();
    assert!((700..=705).contains(&elapsed.as_millis()), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_a_long_one_gives_up() {
    let (f, p) = failing(
        Operation::Offers,
        vec![Error::new(ErrorKind::RateLimited, "429").with_retry_after(Duration::from_secs(7))],
    );
    let start = tokio::time::Instant::now();
    p.offers(&OfferQuery::new()).await.unwrap();
    let elapsed = start.elapsed();
    assert!(
        (7_000..=7_005).contains(&elapsed.as_millis()),
        "{elapsed:?}"
    );

    f.fail_next(
        gpufleet_core::Operation::Offers,
        Error::new(ErrorKind::RateLimited, "429").with_retry_after(Duration::from_secs(3600)),
    );
    let e = p.offers(&OfferQuery::new()).await.unwrap_err();
    assert!(
        e.is_persistent(),
        "a Retry-After past the limit gives up at once"
    );
    assert_eq!(calls(&f, Operation::Offers), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_call_times_out_and_each_attempt_is_bounded() {
    let f = fake();
    f.set_latency(gpufleet_core::Operation::Offers, Duration::from_secs(3600));
    let p = (f.clone() as Arc<dyn Provider>).layer(TimeoutLayer::new(Duration::from_secs(2)));
    let e = p.offers(&OfferQuery::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.is_retryable());

    let p = (f.clone() as Arc<dyn Provider>)
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .layer(retry());
    let start = tokio::time::Instant::now();
    let e = p.offers(&OfferQuery::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.is_persistent());
    // 4 attempts of 2 s plus 0.7 s of backoff: bounded, not an hour.
    let elapsed = start.elapsed();
    assert!(
        (8_700..=8_710).contains(&elapsed.as_millis()),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn creating_a_placement_group_is_not_retried() {
    let (f, p) = failing(
        Operation::CreatePlacementGroup,
        vec![Error::new(ErrorKind::Unavailable, "503")],
    );
    let req = PlacementGroupRequest {
        name: "train".into(),
        strategy: PlacementStrategy::Cluster,
        region: Region::new("us-east-1"),
        zone: None,
        tags: Tags::new(),
    };
    assert_eq!(
        p.create_placement_group(&req).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(calls(&f, Operation::CreatePlacementGroup), 1);
}

#[tokio::test(start_paused = true)]
async fn a_launch_whose_response_was_lost_is_retried_with_its_key_and_launches_once() {
    let f = fake();
    let p = (f.clone() as Arc<dyn Provider>)
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .layer(retry())
        .layer(TracingLayer);
    let offer = p
        .cheapest_offers(
            &OfferQuery::new()
                .gpu(GpuModel::A10G, Some(1))
                .capacity(Capacity::OnDemand),
            1,
        )
        .await
        .unwrap()
        .remove(0);
    f.fail_next_after_effect(
        gpufleet_core::Operation::Launch,
        Error::new(ErrorKind::Timeout, "response lost"),
    );
    let req = LaunchRequest::new(offer.pool, "ami-1", IdempotencyKey::new("job-7").unwrap())
        .with_count(2);
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(launched.len(), 2);
    assert_eq!(
        calls(&f, Operation::Launch),
        2,
        "the lost response was retried"
    );
    assert_eq!(f.live_instances().len(), 2, "and nothing launched twice");
}

#[tokio::test]
async fn capacity_errors_are_not_retried_in_the_same_pool() {
    let f = fake();
    let offer = f
        .cheapest_offers(&OfferQuery::new().capacity(Capacity::Spot), 1)
        .await
        .unwrap()
        .remove(0);
    f.set_out_of_capacity(&offer.pool, true);
    let p = (f.clone() as Arc<dyn Provider>).layer(retry());
    let req = LaunchRequest::new(
        offer.pool.clone(),
        "ami-1",
        IdempotencyKey::new("k").unwrap(),
    );
    let e = p.launch(&req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity);
    assert_eq!(calls(&f, Operation::Launch), 1);
    assert!(f.live_instances().is_empty());
}

/// The tracing layer warns of a failure, but a `NotFound` is an answer (an
/// instance already gone, `terminate ID` asking every cloud): it is logged at
/// DEBUG, so `gpufleet terminate` of an id on one cloud prints no WARN line
/// per other cloud.
#[tokio::test]
async fn the_tracing_layer_warns_of_failures_but_not_of_not_found() {
    let logs = gpufleet_core::conformance::LogCapture::default();
    let _guard = logs.install(&[]);
    let f = fake();
    let p = (f.clone() as Arc<dyn Provider>).layer(TracingLayer);
    let gone = p.terminate(&InstanceId::new("i-0123456789abcdef0")).await;
    assert_eq!(gone.unwrap_err().kind(), ErrorKind::NotFound);
    f.fail_next(
        gpufleet_core::Operation::ListInstances,
        Error::new(ErrorKind::Unavailable, "down"),
    );
    let down = p.list_instances(&TagFilter::default()).await;
    assert_eq!(down.unwrap_err().kind(), ErrorKind::Unavailable);
    let text = logs.text();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no log line with {needle:?} in:\n{text}"))
            .to_string()
    };
    let not_found = line("i-0123456789abcdef0");
    assert!(
        not_found.contains("DEBUG") && not_found.contains("not found"),
        "{not_found}"
    );
    let failed = line("down");
    assert!(
        failed.contains("WARN") && failed.contains("failed"),
        "{failed}"
    );
}

/// One retry budget per account: a throttled account's calls stop retrying
/// once it is spent (each fails at its first refusal, not after three more
/// tries), a call that succeeds earns tokens back, and a layer for another
/// account has its own.
#[tokio::test(start_paused = true)]
async fn a_throttled_account_shares_one_retry_budget() {
    use gpufleet_core::fake::{RateLimit, RateLimits};
    let f = fake();
    // One read, never refilled: every read after it is refused in EC2's
    // words.
    f.set_rate_limits(Some(RateLimits {
        reads: RateLimit {
            bucket: 1,
            refill_per_second: 0,
        },
        writes: RateLimit {
            bucket: 200,
            refill_per_second: 5,
        },
    }));
    let layer = retry().for_account(20);
    let p = (f.clone() as Arc<dyn Provider>).layer(layer.clone());
    let id = InstanceId::new("no-such");
    // The first call takes the one token (and is NotFound, not throttled).
    assert_eq!(
        p.instance(&id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Then: 20 tokens are four retries of 5 in all, three for the first
    // call (its limit), one for the next, none after.
    let mut calls_made = Vec::new();
    for _ in 0..3 {
        let before = calls(&f, Operation::Instance);
        let e = p.instance(&id).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
        assert!(e.to_string().contains("RequestLimitExceeded"), "{e}");
        calls_made.push(calls(&f, Operation::Instance) - before);
    }
    assert_eq!(
        calls_made,
        vec![4, 2, 1],
        "the budget runs out, then no retries"
    );
    assert_eq!(layer.budget().tokens(), 0);
    assert_eq!(f.throttled(), 7);
    // Another account's layer has its own budget.
    let other = retry().for_account(20);
    assert_eq!(other.budget().tokens(), 20);
    // With no budget a failure is not retried; a call that succeeds at once
    // gives a token back.
    f.fail_next(
        Operation::Offers,
        Error::new(ErrorKind::Unavailable, "HTTP 503"),
    );
    assert!(
        p.offers(&OfferQuery::new()).await.is_err(),
        "no budget: no retry"
    );
    p.offers(&OfferQuery::new()).await.unwrap();
    assert_eq!(layer.budget().tokens(), 1);
}

/// The capability layer refuses an operation the provider does not declare
/// before it is sent.
#[tokio::test]
async fn an_undeclared_operation_is_refused_before_it_is_sent() {
    let count = CallCounter::new();
    let fake = FakeCloud::from_snapshot(Cloud::Aws);
    let caps = fake.capabilities().without_spread();
    let limited: Arc<dyn Provider> = Arc::new(fake.with_capabilities(caps));
    let p = limited.layer(count.clone()).layer(CapabilityLayer);
    let spread = PlacementGroupRequest {
        name: "gpufleet-spread".into(),
        strategy: PlacementStrategy::Spread,
        region: Region::new("us-east-1"),
        zone: None,
        tags: Tags::new(),
    };
    let err = p.create_placement_group(&spread).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("placement_spread"), "{err}");
    assert_eq!(count.count(), 0, "the call was sent");
    // A declared operation goes through.
    let offers = p.offers(&OfferQuery::new()).await.unwrap();
    assert!(!offers.is_empty());
    assert_eq!(count.count(), 1);
}
