//! The embedded catalog snapshot: coverage, invariants, and what the fake cloud
//! does with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use gpufleet_core::catalog::{sort_offers, OfferSort};
use gpufleet_core::clock::Clock;
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::Operation;
use gpufleet_core::*;

#[test]
fn covers_the_three_clouds_with_real_prices() {
    let s = Snapshot::embedded();
    let types = |c: Cloud| s.instance_types().iter().filter(|t| t.cloud == c).count();
    assert!(types(Cloud::Aws) >= 25, "aws types: {}", types(Cloud::Aws));
    assert!(types(Cloud::Gcp) >= 15, "gcp types: {}", types(Cloud::Gcp));
    assert!(
        types(Cloud::Azure) >= 20,
        "azure types: {}",
        types(Cloud::Azure)
    );
    for cloud in Cloud::REAL {
        for cap in [Capacity::OnDemand, Capacity::Spot] {
            let n = s.query(&OfferQuery::new().cloud(cloud).capacity(cap)).len();
            assert!(n > 100, "{cloud} {cap}: {n} offers");
        }
    }
    // GCP N1 attachments with their hosts.
    for name in [
        "n1-standard-8+nvidia-tesla-t4x1",
        "n1-standard-64+nvidia-tesla-v100x8",
    ] {
        assert!(
            s.instance_types().iter().any(|t| t.name == name),
            "{name} missing"
        );
    }
}

#[test]
fn every_offer_is_well_formed() {
    let s = Snapshot::embedded();
    let mut pools = HashSet::new();
    for o in s.offers() {
        assert!(pools.insert(o.pool.clone()), "duplicate {}", o.pool);
        let gpu = o.instance_type.gpu.as_ref().expect("GPU types only");
        assert!(
            gpu.model.is_known(),
            "{}: unknown GPU {}",
            o.pool,
            gpu.model
        );
        assert!(gpu.count >= 1 && gpu.memory_gib >= 8);
        assert!(o.price > Price::ZERO);
        assert!(o.observed_at.year() >= 2024);
        if o.pool.cloud == Cloud::Aws {
            let zone = o.pool.zone.as_ref().expect("AWS offers are per AZ");
            assert!(
                zone.as_str().contains("-az"),
                "AWS zones are AZ IDs: {zone}"
            );
        }
    }
    // Spot is cheaper than on-demand wherever both exist.
    for o in s
        .offers()
        .iter()
        .filter(|o| o.pool.capacity == Capacity::Spot)
    {
        let od = Pool {
            capacity: Capacity::OnDemand,
            ..o.pool.clone()
        };
        if let Some(od) = s.offers().iter().find(|x| x.pool == od) {
            assert!(
                o.price < od.price,
                "{}: spot {} >= on-demand {}",
                o.pool,
                o.price,
                od.price
            );
        }
    }
}

#[test]
fn known_quirks_of_the_source_data_are_corrected() {
    let s = Snapshot::embedded();
    let nd = s
        .instance_types()
        .iter()
        .find(|t| t.name == "Standard_ND96isr_H100_v5")
        .unwrap();
    assert_eq!(
        nd.gpu.as_ref().unwrap().count,
        8,
        "ND96isr H100 v5 has 8 GPUs, not 12"
    );
    // Its spot price equalled on-demand in the source: no spot offer is kept.
    assert!(s
        .query(
            &OfferQuery::new()
                .instance_type("Standard_ND96isr_H100_v5")
                .capacity(Capacity::Spot)
        )
        .is_empty());
    let p4de = s.query(&OfferQuery::new().instance_type("p4de.24xlarge"));
    let unique: HashSet<_> = p4de.iter().map(|o| &o.pool).collect();
    assert_eq!(unique.len(), p4de.len());
}

#[test]
fn aws_spot_offers_carry_spot_advisor_buckets() {
    let s = Snapshot::embedded();
    let spot = s.query(&OfferQuery::new().cloud(Cloud::Aws).capacity(Capacity::Spot));
    let with = spot.iter().filter(|o| o.stability.bucket.is_some()).count();
    assert!(
        with * 100 / spot.len() >= 95,
        "{with} of {} have a bucket",
        spot.len()
    );
}

#[test]
fn queries_filter_and_sort() {
    let s = Snapshot::embedded();
    let q = OfferQuery::new()
        .gpu(GpuModel::H100, Some(8))
        .capacity(Capacity::Spot)
        .max_price("60".parse().unwrap());
    let mut offers = s.query(&q);
    assert!(!offers.is_empty());
    sort_offers(&mut offers, OfferSort::Price);
    assert!(offers.windows(2).all(|w| w[0].price <= w[1].price));
    assert!(offers
        .iter()
        .all(|o| o.instance_type.gpu.as_ref().unwrap().count == 8
            && o.price <= "60".parse().unwrap()));
    let mem = s.query(&OfferQuery::new().min_gpu_memory_gib(80));
    assert!(mem
        .iter()
        .all(|o| o.instance_type.gpu.as_ref().unwrap().memory_gib >= 80));
    assert!(!mem.is_empty());
}

#[tokio::test]
async fn fake_preemption_terminates_at_the_deadline() {
    let f = FakeCloud::from_snapshot(Cloud::Gcp);
    let offer = f
        .cheapest_offers(&OfferQuery::new().capacity(Capacity::Spot), 1)
        .await
        .unwrap()
        .remove(0);
    let inst = f
        .launch(&LaunchRequest::new(
            offer.pool,
            "img",
            IdempotencyKey::new("a").unwrap(),
        ))
        .await
        .unwrap()
        .remove(0);
    let notice = f
        .inject_interruption(&inst.id, NoticeKind::Preemption, Duration::from_secs(30))
        .unwrap();
    assert_eq!(
        notice.deadline,
        Some(f.clock().now() + time::Duration::seconds(30))
    );
    f.advance(Duration::from_secs(29));
    assert_eq!(
        f.instance(&inst.id).await.unwrap().state,
        InstanceState::Running
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(
        f.instance(&inst.id).await.unwrap().state,
        InstanceState::Terminated
    );
    assert_eq!(
        f.terminate(&inst.id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn fake_capacity_limits_and_groups_in_use() {
    let f = FakeCloud::from_snapshot(Cloud::Azure);
    let offer = f
        .cheapest_offers(&OfferQuery::new(), 1)
        .await
        .unwrap()
        .remove(0);
    f.set_capacity_limit(&offer.pool, Some(2));
    let group = f
        .create_placement_group(&PlacementGroupRequest {
            name: "ppg-1".into(),
            strategy: PlacementStrategy::Cluster,
            region: offer.pool.region.clone(),
            zone: None,
            tags: Tags::new(),
        })
        .await
        .unwrap();
    let req = |k: &str, n: u32| {
        LaunchRequest::new(offer.pool.clone(), "img", IdempotencyKey::new(k).unwrap())
            .with_count(n)
            .with_placement_group(group.id.clone())
    };
    assert_eq!(
        f.launch(&req("a", 3)).await.unwrap_err().kind(),
        ErrorKind::InsufficientCapacity
    );
    let two = f.launch(&req("b", 2)).await.unwrap();
    assert_eq!(
        f.launch(&req("c", 1)).await.unwrap_err().kind(),
        ErrorKind::InsufficientCapacity
    );
    let e = f.delete_placement_group(&group.id).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    for i in two {
        f.terminate(&i.id).await.unwrap();
    }
    f.delete_placement_group(&group.id).await.unwrap();
    let ops: Vec<Operation> = f.calls().iter().map(|c| c.operation).collect();
    assert_eq!(ops.iter().filter(|o| **o == Operation::Launch).count(), 3);
}
