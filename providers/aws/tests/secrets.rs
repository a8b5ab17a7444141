//! No credential ever reaches the logs: TRACE-level output of the AWS SDK and
//! gpufleet through a launch, a throttled retry, errors and IMDS notices.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::aws as support;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_aws::{AwsBuilder, AwsProvider};
use gpufleet_core::conformance::LogCapture;
use gpufleet_core::layers::{LayerExt, RetryLayer, TracingLayer};
use gpufleet_core::{
    Capacity, Catalog, Cloud, Compute, InterruptionSource, LaunchRequest, OfferQuery, Provider,
};
use support::{ec2_mock::Ec2Mock, imds};

const ACCESS_KEY: &str = "AKIAGPUFLEETLEAKTEST";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG/gpufleetLEAKSECRETKEY";

#[tokio::test]
async fn trace_logs_hold_no_keys_or_tokens() {
    let capture = LogCapture::default();
    // TRACE everywhere, with the directives gpufleet documents for any
    // subscriber (the CLI adds them to GPUFLEET_LOG).
    let _guard = capture.install(gpufleet_aws::REDACTING_LOG_DIRECTIVES);

    let (server, ec2) = Ec2Mock::start().await;
    let (imds_server, _) = imds::start("i-0abc", "us-east-1").await;
    imds::preempt(&imds_server, "2026-11-22T08:22:00Z").await;
    let config = AwsBuilder::new()
        .with_regions("us-east-1")
        .with_endpoint_url(server.uri())
        .with_metadata_endpoint(imds_server.uri())
        .with_live_prices(false)
        .with_static_credentials(ACCESS_KEY, SECRET_KEY)
        .with_notice_poll(Duration::from_millis(50))
        .build()
        .unwrap();
    let shown = format!("{config:?}");
    assert!(
        !shown.contains(SECRET_KEY),
        "Debug shows the secret: {shown}"
    );
    let p: Arc<dyn Provider> = Arc::new(AwsProvider::new(config).await.unwrap());
    let p = p
        .layer(RetryLayer::new().with_min_delay(Duration::from_millis(10)))
        .layer(TracingLayer);
    ec2.fail_next("DescribeInstanceTypes", 503, "RequestLimitExceeded");
    p.offers(&OfferQuery::new()).await.unwrap();
    let pool = support::pool_in(
        (Cloud::Aws, "us-east-1"),
        Some("use1-az1"),
        "g5.xlarge",
        Capacity::Spot,
    );
    ec2.fail_next("RunInstances", 403, "UnauthorizedOperation");
    let req = LaunchRequest::new(pool.clone(), "ami-1", support::key("leak-1"));
    assert!(p.launch(&req).await.is_err());
    p.launch(&LaunchRequest::new(pool, "ami-1", support::key("leak-2")))
        .await
        .unwrap();
    let mut notices = p.interruptions().await.unwrap();
    support::next_notice(&mut notices, 5).await;
    drop(notices);

    capture.assert_free_of(
        &[("secret key", SECRET_KEY), ("IMDSv2 token", imds::TOKEN)],
        10_000,
    );
    let log = capture.text();
    // The signature is derived from the secret; it must not be logged either.
    assert!(
        !log.contains("Signature="),
        "a request signature was logged"
    );
}
