//! The GCP provider against the Compute Engine + Billing stand-in: prices
//! from SKUs, pagination, capacity, quota and rate-limit errors, retried
//! inserts, and faults that must end in bounded time with a typed error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::gcp as support;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::catalog::OfferQuery;
use gpufleet_core::layers::{LayerExt, TimeoutLayer};
use gpufleet_core::{
    Capacity, Catalog, Cloud, Compute, ErrorKind, LaunchRequest, Pool, Price, Provider, SourceKind,
    Zone,
};
use support::{key, retry, Fault, Gce};
use wiremock::ResponseTemplate;

const IMAGE: &str = "projects/debian-cloud/global/images/family/debian-12";

fn pool(zone: &str, itype: &str, capacity: Capacity) -> Pool {
    let region = zone.rsplit_once('-').unwrap().0;
    support::pool_in((Cloud::Gcp, region), Some(zone), itype, capacity)
}

#[tokio::test]
async fn whole_vm_prices_come_from_sku_parts_across_pages() {
    let (server, gce) = Gce::start().await;
    let p = support::provider(&server, None).await;
    let offers = p.offers(&OfferQuery::new()).await.unwrap();
    let find = |zone: &str, t: &str, c: Capacity| {
        offers
            .iter()
            .find(|o| o.pool == pool(zone, t, c))
            .unwrap_or_else(|| panic!("no offer {t} {c} in {zone}"))
    };
    // 12 cores x $0.031611 + 85 GiB x $0.004237 + 1 A100 x $2.933908.
    let od = find("us-central1-a", "a2-highgpu-1g", Capacity::OnDemand);
    assert_eq!(od.price, Price::from_micros_per_hour(3_673_385));
    assert_eq!(od.source.kind, SourceKind::Live);
    // Spot: the A100 price changed on page 2 (newer effectiveTime): $1.20.
    let spot = find("us-central1-a", "a2-highgpu-1g", Capacity::Spot);
    assert_eq!(spot.price, Price::from_micros_per_hour(1_421_831));
    // N1 + T4: 8 x $0.031611 + 30 GiB x $0.004237 + $0.35.
    let t4 = find(
        "us-central1-b",
        "n1-standard-8+nvidia-tesla-t4x1",
        Capacity::OnDemand,
    );
    assert_eq!(t4.price, Price::from_micros_per_hour(729_998));
    let gpu = t4.instance_type.gpu.as_ref().unwrap();
    assert_eq!(
        (gpu.model.as_str(), gpu.count, gpu.memory_gib),
        ("T4", 1, 16)
    );
    // Every zone came from its own page (three pages), the empty zone too.
    assert_eq!(gce.count("machineTypes.aggregatedList"), 3);
    assert_eq!(gce.count("services.skus.list"), 2);
    // e2 machines and SKUs for licences, commitments or unknown GPUs made
    // no offers.
    assert!(offers
        .iter()
        .all(|o| !o.pool.instance_type.starts_with("e2")));
    assert!(offers.iter().all(|o| o.price.micros_per_hour() > 1));
    // a2-highgpu-8g is only in zone a; n1-standard-4 hosts only in zone a.
    assert!(offers
        .iter()
        .all(|o| o.pool.instance_type != "a2-highgpu-8g"
            || o.pool.zone == Some(Zone::new("us-central1-a"))));
}

#[tokio::test]
async fn without_billing_the_snapshot_prices_are_used_and_say_so() {
    let (server, gce) = Gce::start().await;
    gce.fail_next("services.skus.list", Fault::http(403, "forbidden"));
    let p = support::provider(&server, None).await;
    let offers = p.offers(&OfferQuery::new()).await.unwrap();
    assert!(!offers.is_empty());
    assert!(
        offers.iter().all(|o| o.source.kind == SourceKind::Snapshot),
        "{:?}",
        offers[0].source
    );
}

#[tokio::test]
async fn a_page_token_that_repeats_ends_in_an_error() {
    let (server, gce) = Gce::start().await;
    gce.0.lock().unwrap().repeat_token = true;
    let p = support::provider(&server, None).await;
    let e = tokio::time::timeout(Duration::from_secs(10), p.offers(&OfferQuery::new()))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("page token"), "{e}");
    assert!(gce.count("machineTypes.aggregatedList") <= 3);
}

#[tokio::test]
async fn capacity_exhausted_in_one_zone_then_launched_in_another() {
    let (server, gce) = Gce::start().await;
    gce.fail_zone("us-central1-a", "ZONE_RESOURCE_POOL_EXHAUSTED");
    let p = support::provider(&server, None).await;
    let zones = (
        pool("us-central1-a", "a2-highgpu-1g", Capacity::Spot),
        pool("us-central1-b", "a2-highgpu-1g", Capacity::Spot),
    );
    let context = ("reason", "ZONE_RESOURCE_POOL_EXHAUSTED");
    support::capacity_in_one_zone(&p, zones, IMAGE, context, || ()).await;
    assert_eq!(gce.instance_names().len(), 1);
    // What went to Compute Engine: a Spot VM deleted on preemption, GPUs
    // terminate on host maintenance, labels for cost reports.
    let s = gce.0.lock().unwrap();
    let body = s.instances["us-central1-b"].values().next().unwrap();
    assert_eq!(body["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(body["scheduling"]["instanceTerminationAction"], "DELETE");
    assert_eq!(body["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(body["labels"]["gpufleet-managed"], "true");
    assert_eq!(body["labels"]["gpufleet-idempotency-key"], "cap-b");
}

#[tokio::test]
async fn n1_shapes_attach_their_gpus_and_quota_errors_are_typed() {
    let (server, gce) = Gce::start().await;
    let p = support::provider(&server, None).await;
    gce.fail_next(
        "instances.insert",
        Fault::Operation("QUOTA_EXCEEDED".into()),
    );
    let req = LaunchRequest::new(
        pool(
            "us-central1-a",
            "n1-standard-8+nvidia-tesla-t4x1",
            Capacity::OnDemand,
        ),
        IMAGE,
        key("quota"),
    );
    let e = p.launch(&req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QuotaExceeded, "{e}");
    assert!(gce.instance_names().is_empty());
    let req = LaunchRequest::new(req.pool.clone(), IMAGE, key("quota-2"));
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(
        launched[0].pool, req.pool,
        "the shape reads back from machine type + accelerators"
    );
    let s = gce.0.lock().unwrap();
    let body = s.instances["us-central1-a"].values().next().unwrap();
    assert!(body["machineType"]
        .as_str()
        .unwrap()
        .ends_with("/machineTypes/n1-standard-8"));
    assert_eq!(body["guestAccelerators"][0]["acceleratorCount"], 1);
    assert_eq!(body["scheduling"]["provisioningModel"], "STANDARD");
}

#[tokio::test]
async fn rate_limited_then_success_through_the_retry_layer() {
    let (server, gce) = Gce::start().await;
    let p: Arc<dyn Provider> = Arc::new(support::provider(&server, None).await);
    // Compute Engine says 403 rateLimitExceeded: the reason decides.
    gce.fail_next("instances.insert", Fault::http(403, "rateLimitExceeded"));
    let req = LaunchRequest::new(
        pool("us-central1-a", "a2-highgpu-1g", Capacity::OnDemand),
        IMAGE,
        key("rl"),
    );
    let e = p.launch(&req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
    gce.fail_next("instances.insert", Fault::http(429, "rateLimitExceeded"));
    let p = p.layer(retry());
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(launched.len(), 1);
    assert_eq!(gce.count("instances.insert"), 3);
    assert_eq!(gce.instance_names().len(), 1);
}

#[tokio::test]
async fn a_retried_insert_with_the_same_request_id_creates_one_instance() {
    let (server, gce) = Gce::start().await;
    let p: Arc<dyn Provider> = Arc::new(support::provider(&server, None).await);
    let p = p
        .layer(TimeoutLayer::new(Duration::from_millis(600)))
        .layer(retry());
    // The insert is done but its answer comes too late; the retry's list
    // by key lags (eventual consistency) so the insert is sent again.
    gce.fail_next("instances.insert", Fault::Delay(Duration::from_secs(3)));
    gce.fail_next("instances.aggregatedList", Fault::Pass);
    gce.fail_next(
        "instances.aggregatedList",
        Fault::Raw(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "kind": "compute#instanceAggregatedList", "items": {}
        }))),
    );
    let req = LaunchRequest::new(
        pool("us-central1-a", "a2-highgpu-1g", Capacity::Spot),
        IMAGE,
        key("job-7-attempt-1"),
    );
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(launched.len(), 1);
    assert_eq!(gce.instance_names().len(), 1, "launched twice");
    let s = gce.0.lock().unwrap();
    let ids: Vec<String> = s
        .faults
        .calls
        .iter()
        .filter(|(o, _)| o == "instances.insert")
        .map(|(_, url)| {
            url.split("requestId=")
                .nth(1)
                .unwrap()
                .split('&')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], ids[1], "the retry reused the requestId");
}

/// What a node writes after launch reaches gpufleet as labels (its boot
/// script's `gcloud compute instances add-labels`), while the exact tags of
/// the launch travel in metadata. Both are read: the node's heartbeat,
/// progress, exit and notice from the labels, the launch's own tags (an
/// owner with capitals and `@`, which no label can hold) from metadata. The
/// labels used to be ignored whenever the metadata copy was there, which
/// is always, so no node report was ever seen on Compute Engine.
#[tokio::test]
async fn a_nodes_labels_are_read_beside_the_launch_tags() {
    let (server, gce) = Gce::start().await;
    let p = support::provider(&server, None).await;
    let mut req = LaunchRequest::new(
        pool("us-central1-a", "a2-highgpu-1g", Capacity::Spot),
        IMAGE,
        key("job-9-attempt-1"),
    );
    req.tags
        .insert(gpufleet_core::tags::OWNER.into(), "Ada@Example".into());
    let id = p.launch(&req).await.unwrap().remove(0).id;
    let (zone, name) = id.as_str().split_once('/').unwrap();
    let said = [
        (gpufleet_core::tags::HEARTBEAT, "1795000000"),
        (gpufleet_core::tags::PROGRESS, "420"),
        (gpufleet_core::tags::EXIT, "0"),
        (gpufleet_core::tags::NOTICE, "1795000001"),
    ];
    assert!(gce.add_labels(zone, name, &said));
    let seen = p.instance(&id).await.unwrap();
    for (k, v) in said {
        assert_eq!(seen.tags.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert_eq!(
        seen.tags
            .get(gpufleet_core::tags::OWNER)
            .map(String::as_str),
        Some("Ada@Example")
    );
    // Listing reads them the same way.
    let listed = p
        .list_instances(&gpufleet_core::TagFilter::managed())
        .await
        .unwrap();
    assert_eq!(
        listed[0]
            .tags
            .get(gpufleet_core::tags::PROGRESS)
            .map(String::as_str),
        Some("420")
    );
}

#[tokio::test]
async fn a_failed_instance_of_a_multi_instance_launch_leaves_nothing() {
    let (server, gce) = Gce::start().await;
    let p = support::provider(&server, None).await;
    gce.fail_next("instances.insert", Fault::Pass);
    gce.fail_next(
        "instances.insert",
        Fault::Operation("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS".into()),
    );
    let req = LaunchRequest::new(
        pool("us-central1-a", "a2-highgpu-8g", Capacity::OnDemand),
        IMAGE,
        key("two"),
    )
    .with_count(2);
    let e = p.launch(&req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity, "{e}");
    assert!(
        gce.instance_names().is_empty(),
        "{:?}",
        gce.instance_names()
    );
}

#[tokio::test]
async fn server_errors_and_bad_bodies_end_in_typed_errors() {
    let (server, gce) = Gce::start().await;
    let p: Arc<dyn Provider> = Arc::new(support::provider(&server, None).await);
    let p = p.layer(retry());
    for _ in 0..10 {
        gce.fail_next(
            "machineTypes.aggregatedList",
            Fault::http(503, "backendError"),
        );
    }
    let e = p.instance_types().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(
        gce.count("machineTypes.aggregatedList"),
        4,
        "1 try + 3 retries"
    );
    let (server, gce) = Gce::start().await;
    let p = support::provider(&server, None).await;
    gce.fail_next(
        "machineTypes.aggregatedList",
        Fault::Raw(ResponseTemplate::new(200).set_body_string("{\"items\": {\"zones/us-centr")),
    );
    let e = p.instance_types().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    gce.fail_next(
        "instances.get",
        Fault::Raw(ResponseTemplate::new(502).set_body_string("<html>Bad Gateway</html>")),
    );
    let e = support::instance_error(&p, "us-central1-a/gf-x").await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let e = support::instance_error(&p, "no-slash").await;
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test]
async fn slow_answers_hit_the_timeout_layer() {
    let (server, gce) = Gce::start().await;
    let late = Fault::Delay(Duration::from_secs(5));
    gce.fail_next("machineTypes.aggregatedList", late);
    support::late_catalog_read_times_out(Arc::new(support::provider(&server, None).await)).await;
}

/// The metadata stream yields a preemption of `instance` within `secs`, and
/// no second notice.
async fn one_preemption(m: &wiremock::MockServer, secs: u64, instance: &str) {
    let mut stream = support::metadata_stream(m);
    let n = support::next_notice(&mut stream, secs).await;
    support::assert_preemption_of(&n, instance);
    support::no_notice(&mut stream, 2500, "a second notice").await;
}

#[tokio::test]
async fn preemption_is_long_polled_from_the_etag_and_sent_once() {
    let m = support::metadata_server("us-central1-a", "gf-0001-0").await;
    // The plain read says FALSE; only the long poll from its ETag says TRUE.
    support::preempt_on_long_poll(&m, "411e3e1d2e5b7a1f", true, Duration::ZERO).await;
    one_preemption(&m, 10, "us-central1-a/gf-0001-0").await;
}

#[tokio::test]
async fn a_flapping_metadata_server_still_yields_one_notice() {
    let m = support::metadata_server("us-central1-b", "gf-flap-0").await;
    // Two 503s, an answer without Metadata-Flavor (not a metadata server),
    // then the preemption.
    for (answer, times, priority) in [
        (ResponseTemplate::new(503), Some(2), 1),
        (
            ResponseTemplate::new(200).set_body_string("TRUE"),
            Some(1),
            2,
        ),
        (support::metadata_value("TRUE"), None, 3),
    ] {
        let mock = support::preempted()
            .respond_with(answer)
            .with_priority(priority);
        match times {
            Some(n) => mock.up_to_n_times(n).mount(&m).await,
            None => mock.mount(&m).await,
        }
    }
    one_preemption(&m, 15, "us-central1-b/gf-flap-0").await;
}

#[tokio::test]
async fn the_preemption_window_counts_from_when_the_long_poll_answered() {
    let m = support::metadata_server("us-central1-a", "gf-late-0").await;
    // The long poll hangs 4 s, then says TRUE: the VM has 30 s from then,
    // not from when the poll was sent.
    support::preempt_on_long_poll(&m, "5c1f00d2", false, Duration::from_secs(4)).await;
    let mut stream = support::metadata_stream(&m);
    let n = support::next_notice(&mut stream, 15).await;
    let got = time::OffsetDateTime::now_utc();
    let left = (n.deadline.unwrap() - got).as_seconds_f64();
    assert!(
        (29.0..=30.5).contains(&left),
        "{left:.1} s left of 30 when the notice arrived"
    );
}

#[tokio::test]
async fn injected_credentials_are_the_ones_sent() {
    let (server, _gce) = Gce::start().await;
    let creds =
        google_cloud_auth::credentials::api_key_credentials::Builder::new("injected-api-key")
            .build();
    let config = gpufleet_gcp::GcpBuilder::new()
        .with_project(support::PROJECT)
        .with_compute_endpoint(server.uri())
        .with_billing_endpoint(server.uri())
        .with_credentials(creds.clone())
        .build()
        .unwrap();
    assert_eq!(config, config.clone());
    assert!(!format!("{config:?}").contains("injected-api-key"));
    let p = gpufleet_gcp::GcpProvider::new(config).await.unwrap();
    let offers = p.offers(&OfferQuery::new()).await.unwrap();
    assert!(!offers.is_empty());
    let requests = server.received_requests().await.unwrap();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(
            r.headers.get("x-goog-api-key").map(|v| v.to_str().unwrap()),
            Some("injected-api-key"),
            "{} {}",
            r.method,
            r.url
        );
    }
    // Injected credentials and anonymous ones exclude each other.
    let e = gpufleet_gcp::GcpBuilder::new()
        .with_project(support::PROJECT)
        .with_compute_endpoint(server.uri())
        .with_anonymous(true)
        .with_credentials(creds)
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("exclude each other"), "{e}");
}

#[tokio::test]
async fn addresses_are_the_first_interfaces_internal_and_external_ones() {
    let (server, _gce) = Gce::start().await;
    let p = support::provider(&server, None).await;
    let req = LaunchRequest::new(
        pool("us-central1-a", "a2-highgpu-1g", Capacity::Spot),
        IMAGE,
        key("svc-addr-1"),
    );
    p.launch(&req).await.unwrap();
    let listed = p
        .list_instances(&gpufleet_core::TagFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let a = listed[0].addresses;
    let private = a.private.expect("networkIP read").to_string();
    assert!(private.starts_with("10.128.0."), "{private}");
    // gpufleet's instances have no access configuration: no external
    // address.
    assert_eq!(a.public, None);
    assert_eq!(p.instance(&listed[0].id).await.unwrap().addresses, a);
}
