//! Declared capabilities match behaviour: every operation a provider does
//! not declare answers `Unsupported`.

use super::*;

/// One call that needs `need`, made on `p`.
pub(super) async fn attempt(
    p: &Arc<dyn Provider>,
    need: Capability,
    region: &crate::Region,
) -> Result<()> {
    let group = |strategy| PlacementGroupRequest {
        name: unique("gpufleet-caps"),
        strategy,
        region: region.clone(),
        zone: None,
        tags: Tags::new(),
    };
    let pool = crate::Pool {
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
        crate::Region::new("us-east-1")
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
