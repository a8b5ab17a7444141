//! EC2 placement groups: cluster, spread and partition. Ids are
//! `region/group-name` (EC2 deletes groups by name).

use async_trait::async_trait;
use gpufleet_model::Placement;

use aws_sdk_ec2::types::{
    PlacementGroup as Ec2Group, PlacementGroupState, PlacementStrategy as Ec2Strategy,
    ResourceType, TagSpecification,
};
use gpufleet_model::{
    Cloud, Error, ErrorKind, PlacementGroup, PlacementGroupId, PlacementGroupRequest,
    PlacementStrategy, Region, Result, TagFilter,
};

use crate::error::from_sdk;
use crate::tags::{ec2_tags, from_ec2_tags, tag_filters};
use crate::{join_id, split_id, AwsProvider};

fn to_group(region: &Region, g: &Ec2Group) -> Option<PlacementGroup> {
    let name = g.group_name()?.to_string();
    let strategy = match g.strategy()? {
        Ec2Strategy::Cluster => PlacementStrategy::Cluster,
        Ec2Strategy::Spread => PlacementStrategy::Spread,
        Ec2Strategy::Partition => PlacementStrategy::Partition(
            g.partition_count()
                .and_then(|n| u8::try_from(n).ok())
                .unwrap_or(1),
        ),
        _ => return None,
    };
    Some(PlacementGroup {
        id: PlacementGroupId::new(join_id(region, &name)),
        name,
        cloud: Cloud::Aws,
        strategy,
        region: region.clone(),
        zone: None,
        tags: from_ec2_tags(g.tags()),
    })
}

fn gone(g: &Ec2Group) -> bool {
    matches!(
        g.state(),
        Some(PlacementGroupState::Deleted | PlacementGroupState::Deleting)
    )
}

#[async_trait]
impl Placement for AwsProvider {
    async fn create_placement_group(&self, req: &PlacementGroupRequest) -> Result<PlacementGroup> {
        req.validate()?;
        let client = self.client(&req.region)?;
        let (strategy, partitions) = match req.strategy {
            PlacementStrategy::Cluster => (Ec2Strategy::Cluster, None),
            PlacementStrategy::Spread => (Ec2Strategy::Spread, None),
            PlacementStrategy::Partition(n) => (Ec2Strategy::Partition, Some(i32::from(n))),
        };
        let out = client
            .create_placement_group()
            .group_name(&req.name)
            .strategy(strategy)
            .set_partition_count(partitions)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::PlacementGroup)
                    .set_tags(Some(ec2_tags(&req.tags)))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| from_sdk("CreatePlacementGroup", e))?;
        match out.placement_group().and_then(|g| to_group(&req.region, g)) {
            Some(g) => Ok(g),
            // Older API versions answer only `return=true`: describe it.
            None => {
                self.placement_group(&PlacementGroupId::new(join_id(&req.region, &req.name)))
                    .await
            }
        }
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        let (region, name) = split_id(id.as_str(), "placement group")?;
        let not_found = || {
            Error::new(ErrorKind::NotFound, format!("no placement group {id}"))
                .with_provider(Cloud::Aws)
                .with_operation("DescribePlacementGroups")
        };
        let out = self
            .client(&region)?
            .describe_placement_groups()
            .group_names(name)
            .send()
            .await
            .map_err(|e| from_sdk("DescribePlacementGroups", e));
        let out = match out {
            Ok(o) => o,
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::InvalidInput => {
                return Err(not_found())
            }
            Err(e) => return Err(e),
        };
        out.placement_groups()
            .iter()
            .filter(|g| !gone(g) && g.group_name() == Some(name))
            .find_map(|g| to_group(&region, g))
            .ok_or_else(not_found)
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        let mut out = Vec::new();
        for region in &self.inner.config.regions {
            let resp = self
                .client(region)?
                .describe_placement_groups()
                .set_filters(Some(tag_filters(filter)))
                .send()
                .await
                .map_err(|e| from_sdk("DescribePlacementGroups", e))?;
            out.extend(
                resp.placement_groups()
                    .iter()
                    .filter(|g| !gone(g))
                    .filter_map(|g| to_group(region, g))
                    .filter(|g| filter.matches(&g.tags)),
            );
        }
        Ok(out)
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        // Describe first: deleting a deleted group succeeds quietly on EC2 while
        // it is still listed as `deleted`.
        let group = self.placement_group(id).await?;
        self.client(&group.region)?
            .delete_placement_group()
            .group_name(&group.name)
            .send()
            .await
            .map_err(|e| from_sdk("DeletePlacementGroup", e))?;
        Ok(())
    }
}
