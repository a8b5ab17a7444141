//! Placement group checks: create, read back, list by tag, delete, and
//! the errors for a duplicate and a missing group.

use super::*;

/// Placement groups can be created, found, listed and deleted; names are
/// unique; a gone group is NotFound; a bad partition count is refused.
pub async fn check_placement_groups(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.placement_groups && caps.catalog, "no placement groups") {
        return s;
    }
    let offers = p
        .offers(&OfferQuery::new())
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    let region = offers
        .first()
        .map(|o| o.pool.region.clone())
        .unwrap_or_else(|| panic!("no offers"));
    let owner = unique("pg-owner");
    let mut tags = Tags::new();
    tags.insert(crate::tags::MANAGED.into(), "true".into());
    tags.insert(crate::tags::OWNER.into(), owner.clone());
    let req = PlacementGroupRequest {
        name: unique("gpufleet-conf"),
        strategy: PlacementStrategy::Cluster,
        region: region.clone(),
        zone: None,
        tags: tags.clone(),
    };
    let group = p
        .create_placement_group(&req)
        .await
        .unwrap_or_else(|e| panic!("create_placement_group: {e}"));
    assert_eq!(group.name, req.name);
    assert_eq!(group.strategy, PlacementStrategy::Cluster);
    let got = p
        .placement_group(&group.id)
        .await
        .unwrap_or_else(|e| panic!("placement_group: {e}"));
    assert_eq!(got.id, group.id);
    assert_eq!(got.strategy, group.strategy);
    let listed = p
        .list_placement_groups(&TagFilter::default().with(crate::tags::OWNER, owner))
        .await
        .unwrap_or_else(|e| panic!("list_placement_groups: {e}"));
    assert!(
        listed.iter().any(|g| g.id == group.id),
        "list_placement_groups misses the new group"
    );
    expect_kind!(
        p.create_placement_group(&req).await,
        ErrorKind::AlreadyExists,
        "creating a group with a taken name"
    );
    let bad = PlacementGroupRequest {
        name: unique("gpufleet-bad"),
        strategy: PlacementStrategy::Partition(9),
        ..req.clone()
    };
    // Out of range where partitions exist; unsupported where they do not.
    let refusal = if caps.has(Capability::PlacementPartition) {
        ErrorKind::InvalidInput
    } else {
        ErrorKind::Unsupported
    };
    expect_kind!(
        p.create_placement_group(&bad).await,
        refusal,
        "a partition group with 9 partitions"
    );
    if caps.placement_spread {
        let spread = PlacementGroupRequest {
            name: unique("gpufleet-spread"),
            strategy: PlacementStrategy::Spread,
            ..req.clone()
        };
        let g = p
            .create_placement_group(&spread)
            .await
            .unwrap_or_else(|e| panic!("create spread group: {e}"));
        assert_eq!(g.strategy, PlacementStrategy::Spread);
        p.delete_placement_group(&g.id)
            .await
            .unwrap_or_else(|e| panic!("delete spread group: {e}"));
    }
    p.delete_placement_group(&group.id)
        .await
        .unwrap_or_else(|e| panic!("delete_placement_group: {e}"));
    expect_kind!(
        p.placement_group(&group.id).await,
        ErrorKind::NotFound,
        "looking up a deleted group"
    );
    expect_kind!(
        p.delete_placement_group(&group.id).await,
        ErrorKind::NotFound,
        "deleting a deleted group"
    );
    Outcome::Passed
}
