//! Catalog and spot market checks: types and offers agree and filter,
//! prices are positive and sourced, spot history is ordered.

use super::*;

/// The catalog lists GPU instance types and well-formed offers, and honours the
/// query's filters.
pub async fn check_catalog(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.catalog, "no catalog capability") {
        return s;
    }
    let types = p
        .instance_types()
        .await
        .unwrap_or_else(|e| panic!("instance_types: {e}"));
    assert!(!types.is_empty(), "instance_types is empty");
    let offers = p
        .offers(&OfferQuery::new())
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    assert!(!offers.is_empty(), "offers is empty");
    let now = time::OffsetDateTime::now_utc();
    for o in &offers {
        if p.cloud() != crate::Cloud::Fake {
            assert_eq!(
                o.pool.cloud,
                p.cloud(),
                "offer {} from another cloud",
                o.pool
            );
        }
        assert_eq!(
            o.pool.instance_type, o.instance_type.name,
            "offer {} names another type",
            o.pool
        );
        assert!(
            types
                .iter()
                .any(|t| t.name == o.instance_type.name && t.cloud == o.pool.cloud),
            "offer {} has a type instance_types does not list",
            o.pool
        );
        assert!(o.price.micros_per_hour() > 0, "offer {} is free", o.pool);
        assert!(
            o.observed_at <= now + time::Duration::minutes(5),
            "offer {} observed in the future",
            o.pool
        );
        assert!(!o.source.name.is_empty(), "offer {} has no source", o.pool);
        assert!(o.instance_type.gpu.is_some(), "offer {} has no GPU", o.pool);
    }
    // Filters.
    let first = &offers[0];
    let gpu = first
        .instance_type
        .gpu
        .clone()
        .unwrap_or_else(|| unreachable!());
    let q = OfferQuery::new()
        .gpu(gpu.model.clone(), Some(gpu.count))
        .region(first.pool.region.clone());
    let filtered = p
        .offers(&q)
        .await
        .unwrap_or_else(|e| panic!("offers({q:?}): {e}"));
    assert!(
        filtered.iter().any(|o| o.pool == first.pool),
        "filtered offers lost {}",
        first.pool
    );
    assert!(
        filtered.iter().all(|o| q.matches(o)),
        "offers ignored the query's filters"
    );
    let cap = first.price;
    let q = OfferQuery::new()
        .max_price(cap)
        .capacity(first.pool.capacity);
    let filtered = p.offers(&q).await.unwrap_or_else(|e| panic!("offers: {e}"));
    assert!(filtered
        .iter()
        .all(|o| o.price <= cap && o.pool.capacity == first.pool.capacity));
    Outcome::Passed
}

/// Spot pools have a price history and stability signals.
pub async fn check_spot_prices(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(
        caps.spot_price_history && caps.stability,
        "no spot price history",
    ) {
        return s;
    }
    let offers = p
        .offers(&OfferQuery::new().capacity(Capacity::Spot))
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    let Some(offer) = offers.first() else {
        return Outcome::Skipped("no spot offers".into());
    };
    let since = time::OffsetDateTime::now_utc() - time::Duration::days(7);
    let history = p
        .spot_price_history(&offer.pool, since)
        .await
        .unwrap_or_else(|e| panic!("spot_price_history({}): {e}", offer.pool));
    assert!(
        !history.is_empty(),
        "no spot price history for {}",
        offer.pool
    );
    assert!(
        history.windows(2).all(|w| w[0].at <= w[1].at),
        "history is not oldest first"
    );
    assert!(history
        .iter()
        .all(|pt| pt.pool == offer.pool && pt.price.micros_per_hour() > 0));
    let stability = p
        .stability(std::slice::from_ref(&offer.pool))
        .await
        .unwrap_or_else(|e| panic!("stability: {e}"));
    assert_eq!(stability.len(), 1, "stability returns one entry per pool");
    Outcome::Passed
}
