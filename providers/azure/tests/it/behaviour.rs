//! The Azure provider against the ARM stand-in: catalog restrictions,
//! Retail Prices filtering, eviction rates, allocation failures, throttling
//! with Retry-After, long-running operations, retried creates, Scheduled
//! Events acknowledgement, and faults that end in bounded time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::azure as support;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::catalog::OfferQuery;
use gpufleet_core::layers::{LayerExt, TimeoutLayer};
use gpufleet_core::{
    Capacity, Catalog, Cloud, Compute, ErrorKind, InterruptionBucket, LaunchRequest, Pool, Price,
    Provider, SourceKind, SpotMarket,
};
use support::{key, retry, Arm, Fault};
use wiremock::ResponseTemplate;

const IMAGE: &str = "Canonical:ubuntu-24_04-lts:server:latest";
const A100: &str = "Standard_NC24ads_A100_v4";

fn pool(zone: Option<&str>, itype: &str, capacity: Capacity) -> Pool {
    support::pool_in((Cloud::Azure, "eastus"), zone, itype, capacity)
}

#[tokio::test]
async fn catalog_honours_restrictions_prices_and_eviction_rates() {
    let (server, arm) = Arm::start().await;
    let p = support::provider(&server).await;
    let offers = p.offers(&OfferQuery::new()).await.unwrap();
    let zones = |t: &str, c: Capacity| {
        let mut z: Vec<String> = offers
            .iter()
            .filter(|o| o.pool.instance_type == t && o.pool.capacity == c)
            .map(|o| o.pool.zone.as_ref().unwrap().to_string())
            .collect();
        z.sort();
        z
    };
    // Zone 3 is restricted for this subscription.
    assert_eq!(zones(A100, Capacity::OnDemand), ["eastus-1", "eastus-2"]);
    // Page 2 of the SKU list, one zone.
    assert_eq!(zones("Standard_NC6s_v3", Capacity::Spot), ["eastus-1"]);
    // Restricted region, and a size without GPUs: nothing.
    assert!(offers
        .iter()
        .all(|o| o.pool.instance_type != "Standard_ND96isr_H100_v5"));
    assert!(offers
        .iter()
        .all(|o| o.pool.instance_type != "Standard_D4s_v5"));
    let find = |t: &str, c: Capacity| {
        offers
            .iter()
            .find(|o| o.pool.instance_type == t && o.pool.capacity == c)
            .unwrap()
    };
    let od = find(A100, Capacity::OnDemand);
    // Linux consumption, not the Windows meter ($4.50).
    assert_eq!(od.price, Price::from_micros_per_hour(3_673_000));
    assert_eq!(od.source.kind, SourceKind::Live);
    assert_eq!(od.stability.bucket, None);
    // Spot, not Low Priority ($0.50).
    let spot = find(A100, Capacity::Spot);
    assert_eq!(spot.price, Price::from_micros_per_hour(734_600));
    assert_eq!(spot.stability.bucket, Some(InterruptionBucket::Under5));
    assert_eq!(
        find("Standard_NC6s_v3", Capacity::Spot).stability.bucket,
        Some(InterruptionBucket::Over20)
    );
    // Consumption, not the reservation price.
    assert_eq!(
        find("Standard_NC6s_v3", Capacity::OnDemand).price,
        Price::from_micros_per_hour(3_060_000)
    );
    let t = &od.instance_type;
    assert_eq!((t.vcpus, t.memory_mib), (24, 220 * 1024));
    let g = t.gpu.as_ref().unwrap();
    assert_eq!((g.model.as_str(), g.count), ("A100-80GB", 1));
    assert_eq!(arm.count("skus.list"), 2);
    assert_eq!(arm.count("prices"), 2);
    // stability() uses the bands the fresh catalog fetched...
    let graph = arm.count("graph");
    assert_eq!(graph, 1);
    let s = p
        .stability(&[spot.pool.clone(), od.pool.clone()])
        .await
        .unwrap();
    assert_eq!(s[0].bucket, Some(InterruptionBucket::Under5));
    assert_eq!(s[1].bucket, None);
    assert_eq!(arm.count("graph"), graph);
    // ...and asks Resource Graph for a region the catalog did not scan.
    let mut elsewhere = spot.pool.clone();
    elsewhere.region = gpufleet_core::Region::new("westus3");
    elsewhere.zone = None;
    let s = p.stability(&[elsewhere]).await.unwrap();
    assert_eq!(s[0].bucket, None);
    assert_eq!(arm.count("graph"), graph + 1);
}

#[tokio::test]
async fn without_retail_prices_the_snapshot_is_used_and_says_so() {
    let (server, arm) = Arm::start().await;
    arm.fail_next("prices", Fault::http(503, "ServiceUnavailable"));
    let p = support::provider(&server).await;
    let offers = p
        .offers(&OfferQuery::new().instance_type(A100))
        .await
        .unwrap();
    assert!(!offers.is_empty());
    assert!(offers.iter().all(|o| o.source.kind == SourceKind::Snapshot));
}

#[tokio::test]
async fn a_next_link_that_repeats_ends_in_an_error() {
    let (server, arm) = Arm::start().await;
    arm.0.lock().unwrap().repeat_link = true;
    let p = support::provider(&server).await;
    let e = tokio::time::timeout(Duration::from_secs(10), p.instance_types())
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("page token"), "{e}");
}

#[tokio::test]
async fn zonal_allocation_failure_cleans_up_then_another_zone_works() {
    let (server, arm) = Arm::start().await;
    arm.fail_zone("eastus-1", "ZonalAllocationFailed");
    let p = support::provider(&server).await;
    let zones = (
        pool(Some("eastus-1"), A100, Capacity::Spot),
        pool(Some("eastus-2"), A100, Capacity::Spot),
    );
    let context = ("code", "ZonalAllocationFailed");
    // The Failed VM resource was deleted before the launch returned.
    let deleted = || assert!(arm.vm_names().is_empty(), "{:?}", arm.vm_names());
    let launched = support::capacity_in_one_zone(&p, zones, IMAGE, context, deleted).await;
    assert_eq!(launched[0].state, gpufleet_core::InstanceState::Running);
    let s = arm.0.lock().unwrap();
    let vm = s.vms.values().next().unwrap();
    assert_eq!(vm["properties"]["priority"], "Spot");
    assert_eq!(vm["properties"]["evictionPolicy"], "Delete");
    assert_eq!(vm["properties"]["billingProfile"]["maxPrice"], -1.0);
    assert_eq!(vm["zones"][0], "2");
    assert_eq!(vm["tags"]["gpufleet:managed"], "true");
    assert_eq!(
        vm["properties"]["storageProfile"]["imageReference"]["publisher"],
        "Canonical"
    );
}

#[tokio::test]
async fn allocation_sku_and_quota_errors_are_typed() {
    let (server, arm) = Arm::start().await;
    let p = support::provider(&server).await;
    let req = |k: &str| {
        LaunchRequest::new(
            pool(Some("eastus-1"), A100, Capacity::OnDemand),
            IMAGE,
            key(k),
        )
    };
    arm.fail_next("vm.put", Fault::Operation("AllocationFailed".into()));
    let e = p.launch(&req("alloc")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity, "{e}");
    arm.fail_next("vm.put", Fault::http(409, "SkuNotAvailable"));
    assert_eq!(
        p.launch(&req("sku")).await.unwrap_err().kind(),
        ErrorKind::InsufficientCapacity
    );
    arm.fail_next("vm.put", Fault::http(409, "OperationNotAllowed"));
    let e = p.launch(&req("quota")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QuotaExceeded, "{e}");
    arm.fail_next(
        "vm.put",
        Fault::Operation("OverconstrainedAllocationRequest".into()),
    );
    assert_eq!(
        p.launch(&req("over")).await.unwrap_err().kind(),
        ErrorKind::InsufficientCapacity
    );
    assert!(arm.vm_names().is_empty(), "{:?}", arm.vm_names());
}

#[tokio::test]
async fn throttling_with_and_without_retry_after() {
    let (server, arm) = Arm::start().await;
    let p: Arc<dyn Provider> = Arc::new(support::provider(&server).await);
    arm.fail_next(
        "vm.put",
        Fault::Http(429, "TooManyRequests".into(), Some(1)),
    );
    let req = LaunchRequest::new(
        pool(Some("eastus-1"), A100, Capacity::OnDemand),
        IMAGE,
        key("throttle"),
    );
    let e = p.launch(&req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    // Through the retry layer: once with Retry-After (waited), once without.
    arm.fail_next(
        "vm.put",
        Fault::Http(429, "TooManyRequests".into(), Some(1)),
    );
    arm.fail_next("vm.put", Fault::http(429, "TooManyRequests"));
    let started = std::time::Instant::now();
    let launched = p.clone().layer(retry()).launch(&req).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After was not honoured"
    );
    assert_eq!(launched.len(), 1);
    assert_eq!(arm.count("vm.put"), 4);
    assert_eq!(arm.vm_names().len(), 1);
}

#[tokio::test]
async fn long_running_operations_wait_as_asked() {
    let (server, arm) = Arm::start().await;
    arm.0.lock().unwrap().retry_after = Some(1);
    let p = support::provider(&server).await;
    let req = LaunchRequest::new(
        pool(None, "Standard_NC6s_v3", Capacity::OnDemand),
        IMAGE,
        key("lro"),
    );
    let started = std::time::Instant::now();
    let launched = p.launch(&req).await.unwrap();
    // InProgress once, then Succeeded: at least one Retry-After wait.
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(arm.count("operation") >= 2, "{}", arm.count("operation"));
    p.terminate(&launched[0].id).await.unwrap();
    assert!(arm.vm_names().is_empty());
}

#[tokio::test]
async fn a_retried_create_leaves_one_vm() {
    let (server, arm) = Arm::start().await;
    let p: Arc<dyn Provider> = Arc::new(support::provider(&server).await);
    let p = p
        .layer(TimeoutLayer::new(Duration::from_millis(600)))
        .layer(retry());
    // The PUT is done but its answer is late; the retry's list lags too, so
    // the PUT is sent again: to the same name.
    arm.fail_next("vm.put", Fault::Delay(Duration::from_secs(3)));
    arm.fail_next("vm.list", Fault::Pass);
    arm.fail_next(
        "vm.list",
        Fault::Raw(ResponseTemplate::new(200).set_body_json(serde_json::json!({"value": []}))),
    );
    let req = LaunchRequest::new(
        pool(Some("eastus-1"), A100, Capacity::Spot),
        IMAGE,
        key("job-9-attempt-1"),
    );
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(launched.len(), 1);
    assert_eq!(arm.count("vm.put"), 2);
    assert_eq!(
        arm.vm_names().len(),
        1,
        "launched twice: {:?}",
        arm.vm_names()
    );
}

#[tokio::test]
async fn bad_requests_create_nothing_and_bad_tokens_are_typed() {
    let (server, arm) = Arm::start().await;
    let p = support::provider(&server).await;
    let e = p
        .launch(&LaunchRequest::new(
            pool(Some("eastus-1"), A100, Capacity::Spot),
            "ami-0abc",
            key("bad-image"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("Publisher:Offer:Sku:Version"), "{e}");
    assert_eq!(arm.count("vm.put"), 0);
    let wrong = gpufleet_azure::AzureProvider::new(
        gpufleet_azure::AzureBuilder::new()
            .with_subscription_id(support::SUB)
            .with_arm_endpoint(server.uri())
            .with_static_token("not-the-token")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let e = support::instance_error(&wrong, "gpufleet/gf-1").await;
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    // A truncated body and a server error: both Unavailable.
    let ours = gpufleet_core::InstanceId::new(format!("{}/gf-1", support::RG));
    for fault in [
        Fault::Raw(ResponseTemplate::new(200).set_body_string("{\"name\": \"gf-")),
        Fault::http(500, "InternalServerError"),
    ] {
        arm.fail_next("vm.get", fault);
        let e = p.instance(&ours).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }
    let e = support::instance_error(&p, "other-rg/gf-1").await;
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test]
async fn slow_answers_hit_the_timeout_layer() {
    let (server, arm) = Arm::start().await;
    arm.fail_next("skus.list", Fault::Delay(Duration::from_secs(5)));
    support::late_catalog_read_times_out(Arc::new(support::provider(&server).await)).await;
}

#[tokio::test]
async fn an_eviction_notice_is_acknowledged_after_the_checkpoint() {
    let (server, arm) = Arm::start().await;
    arm.0.lock().unwrap().events = serde_json::json!({"DocumentIncarnation": 3, "Events": [{
        "EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventStatus": "Scheduled",
        "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["gf-00aa-0"],
        "NotBefore": "Sun, 22 Nov 2026 10:00:30 GMT", "Description": "", "EventSource": "Platform",
        "DurationInSeconds": -1}]});
    let p = support::provider(&server).await;
    let config = p.config().clone();
    let mut notices = gpufleet_azure::scheduled_event_notices(&config).unwrap();
    let n = support::next_notice(&mut notices, 10).await;
    support::assert_preemption_of(&n, &format!("{}/gf-00aa-0", support::RG));
    assert_eq!(n.deadline.unwrap().unix_timestamp(), 1_795_341_630);
    gpufleet_azure::interruption::acknowledge(&config.imds_endpoint, &n)
        .await
        .unwrap();
    let acks = arm.0.lock().unwrap().acks.clone();
    assert_eq!(
        acks,
        vec![
            serde_json::json!({"StartRequests": [{"EventId": "602d9444-d2cd-49c7-8624-8643e7171297"}]})
        ]
    );
    // Sent once.
    support::no_notice(&mut notices, 2500, "sent twice").await;
}

#[tokio::test]
async fn a_flapping_scheduled_events_endpoint_still_yields_one_notice() {
    let (server, arm) = Arm::start().await;
    arm.0.lock().unwrap().events = serde_json::json!({"DocumentIncarnation": 4, "Events": [{
        "EventId": "F1", "EventStatus": "Scheduled", "EventType": "Preempt", "ResourceType": "VirtualMachine",
        "Resources": ["gf-flap-0"], "NotBefore": "Sun, 22 Nov 2026 10:00:30 GMT", "Description": "",
        "EventSource": "Platform", "DurationInSeconds": -1}]});
    arm.0.lock().unwrap().vm_name = "gf-flap-0".into();
    // A 500, a body that is not JSON, a hang past the poller's 3 s timeout,
    // then the document.
    arm.fail_next("events.get", Fault::http(500, "InternalServerError"));
    arm.fail_next(
        "events.get",
        Fault::Raw(ResponseTemplate::new(200).set_body_string("<html>")),
    );
    arm.fail_next("events.get", Fault::Delay(Duration::from_secs(5)));
    let p = support::provider(&server).await;
    let mut notices = gpufleet_azure::scheduled_event_notices(p.config()).unwrap();
    let n = tokio::time::timeout(
        Duration::from_secs(20),
        futures::StreamExt::next(&mut notices),
    )
    .await
    .expect("a notice within 20 s");
    // The malformed document may surface as an error item; the notice follows.
    let n = match n.unwrap() {
        Ok(n) => n,
        Err(_) => support::next_notice(&mut notices, 20).await,
    };
    support::assert_preemption_of(&n, &format!("{}/gf-flap-0", support::RG));
    support::no_notice(&mut notices, 2500, "a second notice").await;
}

#[tokio::test]
async fn events_for_other_vms_are_neither_notices_nor_acknowledged() {
    let (server, arm) = Arm::start().await;
    // The availability set's document: a Reboot for a neighbour, then this
    // VM's eviction (IMDS says this VM is gf-00aa-0; names compare without
    // case, as Azure's do).
    arm.0.lock().unwrap().events = serde_json::json!({"DocumentIncarnation": 5, "Events": [
        {"EventId": "N1", "EventStatus": "Scheduled", "EventType": "Reboot", "ResourceType": "VirtualMachine",
         "Resources": ["some-other-vm"], "NotBefore": "Sun, 22 Nov 2026 10:05:00 GMT", "Description": "",
         "EventSource": "Platform", "DurationInSeconds": 9},
        {"EventId": "M1", "EventStatus": "Scheduled", "EventType": "Preempt", "ResourceType": "VirtualMachine",
         "Resources": ["other-1", "GF-00AA-0"], "NotBefore": "Sun, 22 Nov 2026 10:00:30 GMT", "Description": "",
         "EventSource": "Platform", "DurationInSeconds": -1}]});
    let p = support::provider(&server).await;
    let config = p.config().clone();
    let mut notices = gpufleet_azure::scheduled_event_notices(&config).unwrap();
    let n = support::next_notice(&mut notices, 10).await;
    support::assert_preemption_of(&n, &format!("{}/gf-00aa-0", support::RG));
    assert_eq!(gpufleet_azure::interruption::event_id(&n), Some("M1"));
    support::no_notice(&mut notices, 2500, "the neighbour's event came through").await;
}

#[tokio::test]
async fn without_this_vms_name_no_event_is_acted_on() {
    let (server, arm) = Arm::start().await;
    arm.0.lock().unwrap().events = serde_json::json!({"DocumentIncarnation": 6, "Events": [
        {"EventId": "X1", "EventStatus": "Scheduled", "EventType": "Preempt", "ResourceType": "VirtualMachine",
         "Resources": ["gf-00aa-0"], "NotBefore": "Sun, 22 Nov 2026 10:00:30 GMT", "Description": "",
         "EventSource": "Platform", "DurationInSeconds": -1}]});
    // IMDS answers compute/name with a 500, twice.
    for _ in 0..2 {
        arm.fail_next("events.name", Fault::http(500, "InternalServerError"));
    }
    let p = support::provider(&server).await;
    let mut notices = gpufleet_azure::scheduled_event_notices(p.config()).unwrap();
    support::no_notice(&mut notices, 1500, "acted without knowing the VM").await;
    assert_eq!(arm.count("events.get"), 0, "read events before the name");
    // Once IMDS answers, the eviction comes through.
    let n = support::next_notice(&mut notices, 10).await;
    assert_eq!(gpufleet_azure::interruption::event_id(&n), Some("X1"));
}

/// An IMDS name endpoint that keeps failing does not make this VM ignore
/// its own eviction for ever: after `NAME_TRIES` polls without the name, the
/// listed events are acted on (it used to wait for the name for ever).
#[tokio::test]
async fn a_name_imds_never_gives_does_not_hide_the_eviction_for_ever() {
    let (server, arm) = Arm::start().await;
    arm.0.lock().unwrap().events = serde_json::json!({"DocumentIncarnation": 7, "Events": [
        {"EventId": "Y1", "EventStatus": "Scheduled", "EventType": "Preempt", "ResourceType": "VirtualMachine",
         "Resources": ["gf-00aa-0"], "NotBefore": "Sun, 22 Nov 2026 10:00:30 GMT", "Description": "",
         "EventSource": "Platform", "DurationInSeconds": -1}]});
    for _ in 0..200 {
        arm.fail_next("events.name", Fault::http(500, "InternalServerError"));
    }
    let p = support::provider(&server).await;
    let mut notices = gpufleet_azure::scheduled_event_notices(p.config()).unwrap();
    let n = support::next_notice(&mut notices, 15).await;
    assert_eq!(gpufleet_azure::interruption::event_id(&n), Some("Y1"));
    assert!(arm.count("events.name") >= gpufleet_azure::interruption::NAME_TRIES as usize);
}

/// `console_output` (what `jobs logs` prints) reads the serial console log
/// through boot diagnostics (enabled in every launch): ARM's
/// `retrieveBootDiagnosticsData` gives a SAS URL, fetched without the ARM
/// token; a failure never shows the URL's signature.
#[tokio::test]
async fn the_console_comes_from_boot_diagnostics_without_showing_its_sas() {
    let (server, arm) = Arm::start().await;
    let p = support::provider(&server).await;
    let req = LaunchRequest::new(
        pool(Some("eastus-2"), A100, Capacity::Spot),
        IMAGE,
        key("console"),
    );
    let launched = p.launch(&req).await.unwrap();
    let vm = arm.vm_bodies()[0].clone();
    assert_eq!(
        vm["properties"]["diagnosticsProfile"]["bootDiagnostics"]["enabled"],
        true
    );
    let text = p.console_output(&launched[0].id).await.unwrap();
    assert!(text.contains("gpufleet: run started"), "{text}");
    let blob_calls: Vec<_> = arm
        .calls()
        .into_iter()
        .filter(|(op, _)| op == "bootdiag.blob")
        .collect();
    assert_eq!(blob_calls.len(), 1);

    // The blob answers 403: the error says so without the signature.
    arm.fail_next(
        "bootdiag.blob",
        Fault::Raw(ResponseTemplate::new(403).set_body_string("<Error/>")),
    );
    let e = p.console_output(&launched[0].id).await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains(support::SAS_SIG), "{e:?}");
    // A VM that is gone is NotFound.
    let gone = gpufleet_core::InstanceId::new(format!("{}/gf-nothing-0", support::RG));
    assert_eq!(
        p.console_output(&gone).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn addresses_come_from_the_vms_network_interfaces_in_one_call() {
    let (server, arm) = Arm::start().await;
    let p = support::provider(&server).await;
    for n in 0..3 {
        let req = LaunchRequest::new(
            pool(Some("eastus-1"), A100, Capacity::Spot),
            IMAGE,
            key(&format!("svc-addr-{n}")),
        );
        p.launch(&req).await.unwrap();
    }
    let before = (arm.count("nic.list"), arm.count("nic.get"));
    let listed = p
        .list_instances(&gpufleet_core::TagFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    let mut ips: Vec<String> = listed
        .iter()
        .map(|i| i.addresses.private.expect("a private address").to_string())
        .collect();
    ips.sort();
    assert_eq!(ips, ["10.0.0.4", "10.0.0.5", "10.0.0.6"]);
    assert!(listed.iter().all(|i| i.addresses.public.is_none()));
    // One listing of the resource group's interfaces, whatever the VMs.
    assert_eq!(arm.count("nic.list"), before.0 + 1);
    assert_eq!(arm.count("nic.get"), before.1);
    // One VM: its primary interface, named in its networkProfile.
    let one = p.instance(&listed[1].id).await.unwrap();
    assert_eq!(one.addresses, listed[1].addresses);
    assert_eq!(arm.count("nic.get"), before.1 + 1);
    // Interfaces that cannot be read (an identity without
    // networkInterfaces/read) leave addresses unknown, not the listing
    // failed.
    arm.fail_next(
        "nic.list",
        Fault::Http(403, "AuthorizationFailed".into(), None),
    );
    let listed = p
        .list_instances(&gpufleet_core::TagFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|i| i.addresses.is_empty()));
}
