//! No credential reaches the logs: TRACE-level output of azure_core and
//! gpufleet through a catalog fetch, a throttled retry, a launch, an
//! allocation failure and errors, with a recognisable bearer token; the
//! config's `Debug` hides it too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::azure as support;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::conformance::LogCapture;
use gpufleet_core::layers::{LayerExt, RetryLayer, TracingLayer};
use gpufleet_core::{Capacity, Catalog, Cloud, OfferQuery, Provider};
use support::{Arm, Fault};

#[tokio::test]
async fn trace_logs_hold_no_bearer_token() {
    let capture = LogCapture::default();
    let _guard = capture.install(&[]);

    let (server, arm) = Arm::start().await;
    let provider = support::provider(&server).await;
    let shown = format!("{:?} {:?}", provider.config(), provider);
    assert!(
        !shown.contains(support::TOKEN),
        "Debug shows the token: {shown}"
    );
    let p: Arc<dyn Provider> = Arc::new(provider);
    let p = p
        .layer(RetryLayer::new().with_min_delay(Duration::from_millis(10)))
        .layer(TracingLayer);
    arm.fail_next("skus.list", Fault::http(429, "TooManyRequests"));
    p.offers(&OfferQuery::new()).await.unwrap();
    let pool = |zone: &str| {
        let a100 = "Standard_NC24ads_A100_v4";
        support::pool_in((Cloud::Azure, "eastus"), Some(zone), a100, Capacity::Spot)
    };
    let image = "Canonical:ubuntu-24_04-lts:server:latest";
    let pools = (pool("eastus-1"), pool("eastus-2"));
    let exhaust = || arm.fail_zone("eastus-2", "ZonalAllocationFailed");
    let missing = format!("{}/gone", support::RG);
    let (e, e2) = support::launch_refuse_and_miss(&p, pools, image, exhaust, &missing).await;

    capture.assert_free_of(
        &[
            ("bearer token", support::TOKEN),
            ("bearer token", "gpufleet-test-bearer"),
        ],
        1000,
    );
    let shown = format!("{e:?} {e} {e2:?}");
    assert!(!shown.contains("gpufleet-test-bearer"), "{shown}");
}

/// A `nextLink` naming another host is not followed with the token: the
/// listing fails saying why, and the other host hears nothing.
#[tokio::test]
async fn the_token_never_follows_a_link_to_another_host() {
    let (server, arm) = Arm::start().await;
    let elsewhere = wiremock::MockServer::start().await;
    // The stand-in builds its links from this base: point them away.
    arm.0.lock().unwrap().base = elsewhere.uri();
    let provider = support::provider(&server).await;
    let e = provider
        .offers(&OfferQuery::default())
        .await
        .expect_err("a link to another host was followed");
    assert!(
        e.to_string().contains("refusing to send the Azure token"),
        "{e}"
    );
    assert!(
        elsewhere.received_requests().await.unwrap().is_empty(),
        "the other host was called"
    );
}
