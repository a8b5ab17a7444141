//! No credential reaches the logs: TRACE-level output of the Google client
//! libraries and gpufleet through a catalog fetch, a launch, a rate-limited
//! retry and errors, with Application Default Credentials whose refresh
//! token, client secret and access token are recognisable.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::gcp as support;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::conformance::LogCapture;
use gpufleet_core::layers::{LayerExt, RetryLayer, TracingLayer};
use gpufleet_core::{Capacity, Catalog, Cloud, OfferQuery, Provider};
use support::{Fault, Gce};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const ACCESS_TOKEN: &str = "ya29.GPUFLEET-LEAK-TEST-ACCESS-TOKEN";
const REFRESH_TOKEN: &str = "1//GPUFLEET-LEAK-TEST-REFRESH-TOKEN";
const CLIENT_SECRET: &str = "GOCSPX-gpufleetLeakTestClientSecret";

#[tokio::test]
async fn trace_logs_hold_no_tokens_or_secrets() {
    let capture = LogCapture::default();
    let _guard = capture.install(&[]);

    // The OAuth token endpoint of an authorized_user ADC file.
    let oauth = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "access_token": ACCESS_TOKEN, "expires_in": 3599, "token_type": "Bearer",
            "scope": "https://www.googleapis.com/auth/cloud-platform"
        })))
        .mount(&oauth)
        .await;
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let adc = dir.join("adc.json");
    std::fs::write(
        &adc,
        serde_json::json!({
            "type": "authorized_user",
            "client_id": "123-gpufleet.apps.googleusercontent.com",
            "client_secret": CLIENT_SECRET,
            "refresh_token": REFRESH_TOKEN,
            "token_uri": format!("{}/token", oauth.uri()),
            "quota_project_id": support::PROJECT
        })
        .to_string(),
    )
    .unwrap();
    // This test binary has this one test: the variable is ours alone.
    std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &adc);

    let (server, gce) = Gce::start().await;
    let config = gpufleet_gcp::GcpBuilder::new()
        .with_project(support::PROJECT)
        .with_compute_endpoint(server.uri())
        .with_billing_endpoint(server.uri())
        .with_operation_poll(Duration::from_millis(5))
        .build()
        .unwrap();
    let p: Arc<dyn Provider> = Arc::new(gpufleet_gcp::GcpProvider::new(config).await.unwrap());
    let p = p
        .layer(RetryLayer::new().with_min_delay(Duration::from_millis(10)))
        .layer(TracingLayer);
    gce.fail_next(
        "machineTypes.aggregatedList",
        Fault::http(429, "rateLimitExceeded"),
    );
    p.offers(&OfferQuery::new()).await.unwrap();
    let pool = support::pool_in(
        (Cloud::Gcp, "us-central1"),
        Some("us-central1-a"),
        "a2-highgpu-1g",
        Capacity::Spot,
    );
    gce.fail_next("instances.insert", Fault::http(403, "rateLimitExceeded"));
    let image = "projects/debian-cloud/global/images/family/debian-12";
    let exhaust = || gce.fail_zone("us-central1-a", "ZONE_RESOURCE_POOL_EXHAUSTED");
    let missing = "us-central1-a/gone";
    let (_, e) =
        support::launch_refuse_and_miss(&p, (pool.clone(), pool), image, exhaust, missing).await;

    // The token was really used.
    let used = server.received_requests().await.unwrap().iter().any(|r| {
        r.headers.get("authorization").and_then(|v| v.to_str().ok())
            == Some(&format!("Bearer {ACCESS_TOKEN}"))
    });
    assert!(used, "the access token was not sent");
    capture.assert_free_of(
        &[
            ("access token", ACCESS_TOKEN),
            ("refresh token", REFRESH_TOKEN),
            ("client secret", CLIENT_SECRET),
            ("leak marker", "GPUFLEET-LEAK-TEST"),
        ],
        1000,
    );
    let shown = format!("{e:?} {e}");
    assert!(!shown.contains(ACCESS_TOKEN));
}
