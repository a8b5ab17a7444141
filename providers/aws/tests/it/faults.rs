//! What moto cannot show, against the EC2 stand-in and a Price List stand-in
//! on wiremock: throttling, capacity errors in one zone, a launch whose answer
//! was lost, the error-code table, placement scores, realistic spot prices and
//! live on-demand prices.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::aws as support;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_aws::{AwsBuilder, AwsProvider};
use gpufleet_core::layers::{LayerExt, TimeoutLayer};
use gpufleet_core::{
    Capacity, Catalog, Cloud, Compute, ErrorKind, LaunchRequest, OfferQuery, Pool, Provider,
    Region, SourceKind, SpotMarket,
};
use support::ec2_mock::Ec2Mock;
use support::{key, retry};
use wiremock::matchers::{header, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The EC2 stand-in and a provider in `us-east-1` pointed at it.
async fn stand_in() -> (MockServer, Ec2Mock, AwsProvider) {
    let (server, ec2) = Ec2Mock::start().await;
    let p = support::provider(&server.uri(), None, "us-east-1").await;
    (server, ec2, p)
}

/// As `stand_in`, the provider behind `Arc<dyn Provider>` to take layers.
async fn stand_in_dyn() -> (MockServer, Ec2Mock, Arc<dyn Provider>) {
    let (server, ec2, p) = stand_in().await;
    (server, ec2, Arc::new(p))
}

fn pool(zone: &str, itype: &str, capacity: Capacity) -> Pool {
    support::pool_in((Cloud::Aws, "us-east-1"), Some(zone), itype, capacity)
}

#[tokio::test]
async fn request_limit_exceeded_is_retried_by_the_layer_not_the_sdk() {
    let (_server, ec2, p) = stand_in_dyn().await;
    ec2.fail_next("DescribeInstanceTypes", 503, "RequestLimitExceeded");
    // Without the layer: one call (the SDK does not retry), a typed error.
    let e = p.instance_types().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
    assert!(e.is_retryable());
    assert_eq!(ec2.count("DescribeInstanceTypes"), 1);
    // With it: two throttles, then success, in three calls.
    ec2.fail_next("DescribeInstanceTypes", 503, "RequestLimitExceeded");
    ec2.fail_next("DescribeInstanceTypes", 503, "RequestLimitExceeded");
    let layered = p.clone().layer(retry());
    let types = layered.instance_types().await.unwrap();
    assert_eq!(types.len(), 2);
    assert_eq!(ec2.count("DescribeInstanceTypes"), 4);
}

#[tokio::test]
async fn insufficient_capacity_in_one_zone_only() {
    let (_server, ec2, p) = stand_in().await;
    ec2.fail_zone("us-east-1a", "InsufficientInstanceCapacity");
    let zones = (
        pool("use1-az6", "p4d.24xlarge", Capacity::OnDemand),
        pool("use1-az1", "p4d.24xlarge", Capacity::OnDemand),
    );
    let context = ("code", "InsufficientInstanceCapacity");
    let launched =
        support::capacity_in_one_zone(&p, zones, "ami-0123456789abcdef0", context, || ()).await;
    assert_eq!(launched[0].pool.zone.as_ref().unwrap().as_str(), "use1-az1");
    // The zone name went to EC2, mapped from the AZ ID.
    let runs = ec2.calls("RunInstances");
    assert_eq!(runs[0]["Placement.AvailabilityZone"], "us-east-1a");
    assert_eq!(runs[1]["Placement.AvailabilityZone"], "us-east-1b");
    assert_eq!(ec2.state.lock().unwrap().instances.len(), 1);
}

#[tokio::test]
async fn a_launch_whose_answer_is_lost_is_retried_and_launches_once() {
    let (_server, ec2, p) = stand_in_dyn().await;
    let p = p
        .layer(TimeoutLayer::new(Duration::from_millis(800)))
        .layer(retry());
    // EC2 creates the instance but the answer comes too late.
    ec2.delay_next("RunInstances", Duration::from_secs(3));
    let req = LaunchRequest::new(
        pool("use1-az1", "g5.xlarge", Capacity::Spot),
        "ami-0123456789abcdef0",
        key("job-42-attempt-1"),
    );
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0].pool.capacity, Capacity::Spot);
    let s = ec2.state.lock().unwrap();
    assert_eq!(s.instances.len(), 1, "launched twice");
    let tokens: Vec<&str> = s
        .calls
        .iter()
        .filter(|(a, _)| a == "RunInstances")
        .map(|(_, p)| p["ClientToken"].as_str())
        .collect();
    assert!(
        tokens.iter().all(|t| *t == "job-42-attempt-1"),
        "{tokens:?}"
    );
    let run = &s.calls.iter().find(|(a, _)| a == "RunInstances").unwrap().1;
    assert_eq!(run["InstanceMarketOptions.MarketType"], "spot");
    assert_eq!(
        run["InstanceMarketOptions.SpotOptions.SpotInstanceType"],
        "one-time"
    );
    assert_eq!(
        run["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"],
        "terminate"
    );
}

#[tokio::test]
async fn ec2_error_codes_map_to_kinds_and_keep_the_code() {
    let (_server, ec2, p) = stand_in().await;
    for (status, code, kind) in [
        (403, "UnauthorizedOperation", ErrorKind::PermissionDenied),
        (401, "AuthFailure", ErrorKind::Unauthenticated),
        (400, "VcpuLimitExceeded", ErrorKind::QuotaExceeded),
        (
            400,
            "MaxSpotInstanceCountExceeded",
            ErrorKind::QuotaExceeded,
        ),
        (400, "SpotMaxPriceTooLow", ErrorKind::InsufficientCapacity),
        (500, "InsufficientCapacity", ErrorKind::InsufficientCapacity),
        (400, "InvalidParameterValue", ErrorKind::InvalidInput),
        (503, "RequestLimitExceeded", ErrorKind::RateLimited),
        (400, "SomethingNewFromAws", ErrorKind::Unexpected),
    ] {
        ec2.fail_next("RunInstances", status, code);
        let req = LaunchRequest::new(
            pool("use1-az1", "g5.xlarge", Capacity::Spot),
            "ami-0123456789abcdef0",
            key(&format!("k-{code}")),
        );
        let e = p.launch(&req).await.unwrap_err();
        assert_eq!(e.kind(), kind, "{code}: {e}");
        assert_eq!(e.provider(), Some(Cloud::Aws));
        assert_eq!(e.operation(), Some("RunInstances"));
        assert!(
            e.context().iter().any(|(k, v)| *k == "code" && v == code),
            "{code}: {:?}",
            e.context()
        );
    }
    assert!(ec2.state.lock().unwrap().instances.is_empty());
}

#[tokio::test]
async fn stability_has_placement_scores_and_advisor_buckets() {
    let (_server, ec2, p) = stand_in().await;
    let pools = [
        pool("use1-az6", "p4d.24xlarge", Capacity::Spot),
        pool("use1-az1", "p4d.24xlarge", Capacity::Spot),
        pool("use1-az1", "p4d.24xlarge", Capacity::OnDemand),
    ];
    let s = p.stability(&pools).await.unwrap();
    assert_eq!(s[0].placement_score, Some(9));
    assert_eq!(s[1].placement_score, Some(3));
    assert_eq!(s[2].placement_score, None);
    // p4d.24xlarge in us-east-1 is in the embedded Spot Advisor data.
    assert!(s[0].bucket.is_some());
    assert_eq!(ec2.count("GetSpotPlacementScores"), 1);
    let call = &ec2.calls("GetSpotPlacementScores")[0];
    assert_eq!(call["SingleAvailabilityZone"], "true");
    assert_eq!(call["RegionName.1"], "us-east-1");
    // A failing score endpoint leaves the score out and keeps the bucket.
    ec2.fail_next("GetSpotPlacementScores", 500, "InternalError");
    let s = p.stability(&pools[..1]).await.unwrap();
    assert_eq!(s[0].placement_score, None);
    assert!(s[0].bucket.is_some());
}

#[tokio::test]
async fn a_region_refusing_placement_scores_is_asked_once() {
    let (_server, ec2, p) = stand_in().await;
    // A role without ec2:GetSpotPlacementScores: every instance type would
    // fail alike, so the region is asked once (one warning, not one a type).
    ec2.fail_next("GetSpotPlacementScores", 403, "UnauthorizedOperation");
    let pools = [
        pool("use1-az6", "p4d.24xlarge", Capacity::Spot),
        pool("use1-az1", "g5.xlarge", Capacity::Spot),
        pool("use1-az6", "g5.xlarge", Capacity::Spot),
    ];
    let s = p.stability(&pools).await.unwrap();
    assert_eq!(ec2.count("GetSpotPlacementScores"), 1);
    assert!(s.iter().all(|s| s.placement_score.is_none()), "{s:?}");
    // The Spot Advisor buckets still answer.
    assert!(s[0].bucket.is_some());
    // The next call asks again: the refusal is not remembered.
    let s = p.stability(&pools[..1]).await.unwrap();
    assert_eq!(ec2.count("GetSpotPlacementScores"), 2);
    assert_eq!(s[0].placement_score, Some(9));
}

#[tokio::test]
async fn spot_prices_current_and_history() {
    let (_server, _ec2, p) = stand_in().await;
    let offers = p
        .offers(&OfferQuery::new().capacity(Capacity::Spot))
        .await
        .unwrap();
    let p4d = offers
        .iter()
        .find(|o| o.pool == pool("use1-az6", "p4d.24xlarge", Capacity::Spot))
        .unwrap();
    // The newest price, with its zone name and AZ ID.
    assert_eq!(p4d.price, "9.83".parse().unwrap());
    assert_eq!(p4d.zone_name.as_deref(), Some("us-east-1a"));
    assert_eq!(p4d.source.kind, SourceKind::Live);
    let since = time::macros::datetime!(2026-11-14 00:00 UTC);
    let h = p.spot_price_history(&p4d.pool, since).await.unwrap();
    let prices: Vec<String> = h.iter().map(|pt| pt.price.to_string()).collect();
    assert_eq!(prices, ["11.0470", "10.2114", "9.8300"]);
    assert!(h.windows(2).all(|w| w[0].at < w[1].at));
    let e = p
        .spot_price_history(&pool("use1-az6", "p4d.24xlarge", Capacity::OnDemand), since)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

/// A Price List `GetProducts` answer (awsJson1_1) with one GPU product.
fn price_list_page(items: &[(&str, &str)], next: Option<&str>) -> ResponseTemplate {
    let docs: Vec<String> = items
        .iter()
        .map(|(t, usd)| {
            serde_json::json!({
                "product": {"productFamily": "Compute Instance", "attributes": {
                    "instanceType": t, "regionCode": "us-east-1", "operatingSystem": "Linux",
                    "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
                    "instanceFamily": "GPU instance"}, "sku": "SKU"},
                "serviceCode": "AmazonEC2",
                "terms": {"OnDemand": {"SKU.JRTCKXETXF": {"priceDimensions": {
                    "SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "endRange": "Inf",
                        "description": "per On Demand Linux Instance Hour", "appliesTo": [],
                        "rateCode": "SKU.JRTCKXETXF.6YS6EN2CT7", "beginRange": "0",
                        "pricePerUnit": {"USD": usd}}},
                    "sku": "SKU", "effectiveDate": "2026-11-01T00:00:00Z",
                    "offerTermCode": "JRTCKXETXF", "termAttributes": {}}}},
                "version": "20261101", "publicationDate": "2026-11-01T00:00:00Z"
            })
            .to_string()
        })
        .collect();
    let mut body = serde_json::json!({"FormatVersion": "aws_v1", "PriceList": docs});
    if let Some(n) = next {
        body["NextToken"] = n.into();
    }
    ResponseTemplate::new(200)
        .insert_header("content-type", "application/x-amz-json-1.1")
        .set_body_string(body.to_string())
}

/// The on-demand offers of a provider on the EC2 stand-in whose Price List
/// endpoint is `pricing`.
async fn live_on_demand(pricing: &MockServer) -> Vec<gpufleet_core::Offer> {
    let (ec2, _state) = Ec2Mock::start().await;
    let c = AwsBuilder::new()
        .with_regions("us-east-1")
        .with_endpoint_url(ec2.uri())
        .with_pricing_endpoint_url(pricing.uri())
        .with_static_credentials("AKIAGPUFLEETTEST0001", "gpufleet/test/secret/key/0001")
        .build()
        .unwrap();
    let p = AwsProvider::new(c).await.unwrap();
    let query = OfferQuery::new().capacity(Capacity::OnDemand);
    p.offers(&query).await.unwrap()
}

#[tokio::test]
async fn on_demand_prices_come_from_the_price_list_api_all_pages() {
    let pricing = MockServer::start().await;
    Mock::given(method("POST"))
        .and(header("x-amz-target", "AWSPriceListService.GetProducts"))
        .and(wiremock::matchers::body_string_contains("page-2"))
        .respond_with(price_list_page(&[("g5.xlarge", "1.0060000000")], None))
        .with_priority(1)
        .mount(&pricing)
        .await;
    Mock::given(method("POST"))
        .and(header("x-amz-target", "AWSPriceListService.GetProducts"))
        .respond_with(price_list_page(
            &[("p4d.24xlarge", "32.7726000000"), ("x9.unknown", "1.0")],
            Some("page-2"),
        ))
        .with_priority(2)
        .mount(&pricing)
        .await;
    let offers = live_on_demand(&pricing).await;
    let price = |t: &str| offers.iter().find(|o| o.instance_type.name == t).unwrap();
    assert_eq!(price("p4d.24xlarge").price, "32.7726".parse().unwrap());
    assert_eq!(price("g5.xlarge").price, "1.006".parse().unwrap());
    assert_eq!(price("g5.xlarge").source.name, "pricing:GetProducts");
    assert_eq!(pricing.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn an_unreachable_price_list_falls_back_to_the_snapshot() {
    let pricing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&pricing)
        .await;
    let offers = live_on_demand(&pricing).await;
    let p4d = offers
        .iter()
        .find(|o| o.instance_type.name == "p4d.24xlarge")
        .unwrap();
    assert_eq!(p4d.source.kind, SourceKind::Snapshot);
    assert!(p4d.price.micros_per_hour() > 0);
}

#[tokio::test]
async fn a_region_outside_the_configuration_is_named() {
    let (_server, _ec2, p) = stand_in().await;
    let mut pl = pool("usw2-az1", "p4d.24xlarge", Capacity::Spot);
    pl.region = Region::new("us-west-2");
    let req = LaunchRequest::new(pl, "ami-1", key("x"));
    let e = p.launch(&req).await.unwrap_err();
    assert!(e.to_string().contains("us-west-2"), "{e}");
    let e = p
        .launch(&LaunchRequest::new(
            pool("use1-az99", "p4d.24xlarge", Capacity::Spot),
            "ami-1",
            key("y"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("use1-az99"), "{e}");
}

#[tokio::test]
async fn the_spot_advisor_can_be_refreshed_from_its_public_json() {
    let (ec2, _state) = Ec2Mock::start().await;
    let advisor = MockServer::start().await;
    // The shape of spot-advisor-data.json (trimmed).
    let body = r#"{"global_rate": "<10%", "instance_types": {"p4d.24xlarge": {"emr": true, "cores": 96, "ram_gb": 1152.0}},
        "ranges": [{"index": 0, "label": "<5%", "dots": 0, "max": 5}, {"index": 4, "label": ">20%", "dots": 4, "max": 100}],
        "spot_advisor": {"us-east-1": {"Linux": {"p4d.24xlarge": {"s": 60, "r": 0}}, "Windows": {"p4d.24xlarge": {"s": 50, "r": 4}}}}}"#;
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/spot-advisor-data.json"))
        .respond_with(ResponseTemplate::new(200).set_body_string(body))
        .mount(&advisor)
        .await;
    let c = AwsBuilder::new()
        .with_regions("us-east-1")
        .with_endpoint_url(ec2.uri())
        .with_live_prices(false)
        .with_spot_advisor_url(format!("{}/spot-advisor-data.json", advisor.uri()))
        .with_static_credentials("AKIAGPUFLEETTEST0001", "x")
        .build()
        .unwrap();
    let p = AwsProvider::new(c).await.unwrap();
    let spot = pool("use1-az6", "p4d.24xlarge", Capacity::Spot);
    assert_eq!(p.refresh_spot_advisor().await.unwrap(), 1);
    let s = p.stability(std::slice::from_ref(&spot)).await.unwrap();
    assert_eq!(s[0].bucket, Some(gpufleet_core::InterruptionBucket::Under5));
    // A broken document is an error and keeps what was there.
    advisor.reset().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{\"spot_advisor\": {}}"))
        .mount(&advisor)
        .await;
    let e = p.refresh_spot_advisor().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let s = p.stability(&[spot]).await.unwrap();
    assert_eq!(s[0].bucket, Some(gpufleet_core::InterruptionBucket::Under5));
}

#[tokio::test]
async fn launches_into_a_placement_group() {
    use gpufleet_core::{Placement, PlacementGroupRequest, PlacementStrategy, Tags};
    let (_server, ec2, p) = stand_in().await;
    let group = p
        .create_placement_group(&PlacementGroupRequest {
            name: "train-42-cluster".into(),
            strategy: PlacementStrategy::Partition(3),
            region: Region::new("us-east-1"),
            zone: None,
            tags: Tags::new(),
        })
        .await
        .unwrap();
    assert_eq!(group.id.as_str(), "us-east-1/train-42-cluster");
    assert_eq!(group.strategy, PlacementStrategy::Partition(3));
    assert_eq!(ec2.calls("CreatePlacementGroup")[0]["PartitionCount"], "3");
    let req = LaunchRequest::new(
        pool("use1-az6", "p4d.24xlarge", Capacity::OnDemand),
        "ami-0123456789abcdef0",
        key("train-42-0"),
    )
    .with_count(2)
    .with_placement_group(group.id.clone());
    let launched = p.launch(&req).await.unwrap();
    assert_eq!(launched.len(), 2);
    assert!(launched
        .iter()
        .all(|i| i.placement_group.as_ref() == Some(&group.id)));
    assert_eq!(
        ec2.calls("RunInstances")[0]["Placement.GroupName"],
        "train-42-cluster"
    );
}

/// Faults that must end in bounded time with a typed error or a right answer.
mod bounded {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_pagination_token_that_repeats_forever_ends() {
        let (server, ec2) = Ec2Mock::start().await;
        ec2.state.lock().unwrap().repeat_token = true;
        let p = support::provider(&server.uri(), None, "us-east-1").await;
        let start = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(20), p.instance_types()).await;
        let r = r.expect("paging never ended");
        // The SDK's paginator stops at a repeated token: the types are read once.
        assert_eq!(r.unwrap().len(), 2);
        assert!(
            ec2.count("DescribeInstanceTypes") <= 3,
            "{}",
            ec2.count("DescribeInstanceTypes")
        );
        assert!(start.elapsed() < Duration::from_secs(20));
    }

    #[tokio::test]
    async fn malformed_and_truncated_bodies_are_typed_errors() {
        let (_server, ec2, p) = stand_in().await;
        for body in [
            "<DescribeInstanceTypesResponse><instanceTypeSet><item><instanceType>p4d.24",
            "this is not XML at all",
            "<html><body>502 Bad Gateway</body></html>",
        ] {
            ec2.raw_next(
                "DescribeInstanceTypes",
                ResponseTemplate::new(200).set_body_raw(body, "text/xml"),
            );
            match p.instance_types().await {
                Err(e) => assert!(
                    matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Unexpected),
                    "{body}: {e}"
                ),
                // A body that parses to nothing is an empty answer, not a crash.
                Ok(types) => assert!(types.is_empty(), "{body}: {types:?}"),
            }
        }
        ec2.raw_next(
            "DescribeInstanceTypes",
            ResponseTemplate::new(500).set_body_raw("", "text/plain"),
        );
        let e = p.instance_types().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }

    #[tokio::test]
    async fn a_5xx_storm_gives_up_after_the_retry_budget() {
        let (_server, ec2, p) = stand_in_dyn().await;
        let p = p.layer(retry());
        for _ in 0..50 {
            ec2.fail_next("DescribeInstanceTypes", 500, "InternalError");
        }
        let start = Instant::now();
        let e = p.instance_types().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_persistent(), "{e}");
        assert_eq!(ec2.count("DescribeInstanceTypes"), 4);
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn an_answer_slower_than_the_timeout_is_a_timeout() {
        let (_server, ec2, p) = stand_in_dyn().await;
        ec2.delay_next("DescribeInstanceTypes", Duration::from_secs(10));
        support::late_catalog_read_times_out(p).await;
    }

    #[tokio::test]
    async fn throttling_with_and_without_retry_after() {
        let (_server, ec2, p) = stand_in_dyn().await;
        let p = p.layer(retry());
        ec2.raw_next(
            "DescribeInstanceTypes",
            support::ec2_mock::error(429, "Throttling", "slow down")
                .insert_header("Retry-After", "1"),
        );
        ec2.raw_next(
            "DescribeInstanceTypes",
            support::ec2_mock::error(429, "Throttling", "slow down"),
        );
        let start = Instant::now();
        let types = p.instance_types().await.unwrap();
        assert_eq!(types.len(), 2);
        assert_eq!(ec2.count("DescribeInstanceTypes"), 3);
        // The first throttle's Retry-After (1 s) was honoured.
        assert!(start.elapsed() >= Duration::from_secs(1));
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn an_injected_sdk_config_is_the_one_that_signs_and_its_region_is_scanned() {
    let (server, ec2) = Ec2Mock::start().await;
    let sdk = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("eu-west-3"))
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(
                    "AKIDINJECTED",
                    "injected-secret",
                    None,
                    None,
                    "caller",
                ),
            ),
        )
        .build();
    let config = AwsBuilder::new()
        .with_sdk_config(sdk)
        .with_endpoint_url(server.uri())
        .with_live_prices(false)
        .build()
        .unwrap();
    // Equal to itself (the same injected object), and its Debug shows
    // nothing of the credentials.
    assert_eq!(config, config.clone());
    assert!(!format!("{config:?}").contains("injected-secret"));
    let p = AwsProvider::new(config).await.unwrap();
    assert_eq!(p.config().regions, vec![Region::new("eu-west-3")]);
    ec2.fail_next("DescribeInstanceTypes", 503, "RequestLimitExceeded");
    let e = p.instance_types().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
    // Signed with the caller's key for the caller's region, and not retried
    // by the SDK even though the caller's config did not turn retries off.
    assert_eq!(ec2.count("DescribeInstanceTypes"), 1);
    let requests = server.received_requests().await.unwrap();
    let auth = requests[0]
        .headers
        .get("authorization")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(auth.contains("Credential=AKIDINJECTED/"), "{auth}");
    assert!(auth.contains("/eu-west-3/ec2/aws4_request"), "{auth}");
}
