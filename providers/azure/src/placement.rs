//! Proximity placement groups: gpufleet's cluster strategy on Azure. Azure
//! spreads with availability sets and zones, not placement groups, and has
//! no partitions: both are refused. Ids are `resourceGroup/name`.

use async_trait::async_trait;
use gpufleet_model::Placement;

use azure_core::http::Method;
use gpufleet_model::{
    Cloud, Error, ErrorKind, PlacementGroup, PlacementGroupId, PlacementGroupRequest,
    PlacementStrategy, Region, Result, TagFilter, Zone,
};

use crate::catalog::zone_id;
use crate::models::{PpgProperties, ProximityPlacementGroup};
use crate::{AzureProvider, COMPUTE_API};

fn path(p: &AzureProvider, name: &str) -> String {
    let rg = &p.inner.config.resource_group;
    crate::compute_path(p, rg, "proximityPlacementGroups", Some(name))
}

fn to_group(p: &AzureProvider, g: ProximityPlacementGroup) -> Option<PlacementGroup> {
    let name = g.name?;
    Some(PlacementGroup {
        id: PlacementGroupId::new(format!("{}/{name}", p.inner.config.resource_group)),
        name,
        cloud: Cloud::Azure,
        strategy: PlacementStrategy::Cluster,
        zone: g.zones.first().map(|z| Zone::new(zone_id(&g.location, z))),
        region: Region::new(g.location),
        tags: crate::tags::from_arm(&g.tags),
    })
}

#[async_trait]
impl Placement for AzureProvider {
    async fn create_placement_group(&self, req: &PlacementGroupRequest) -> Result<PlacementGroup> {
        // An unsupported strategy is unsupported whatever its parameters.
        match req.strategy {
            PlacementStrategy::Cluster => {}
            other => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "Azure has no {other} placement groups: proximity placement groups cluster (use cluster); spread VMs across zones instead"
                    ),
                )
                .with_operation("create_placement_group")
                .with_provider(Cloud::Azure))
            }
        }
        req.validate()?;
        // ARM PUT creates or updates: look first, so a taken name is an error.
        match self
            .placement_group(&PlacementGroupId::new(format!(
                "{}/{}",
                self.inner.config.resource_group, req.name
            )))
            .await
        {
            Ok(_) => {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "a proximity placement group named '{}' exists in resource group '{}'",
                        req.name, self.inner.config.resource_group
                    ),
                )
                .with_provider(Cloud::Azure)
                .with_operation("proximityPlacementGroups.createOrUpdate"))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let zone = req
            .zone
            .as_ref()
            .and_then(|z| z.as_str().rsplit_once('-').map(|(_, n)| n.to_string()));
        let body = ProximityPlacementGroup {
            location: req.region.to_string(),
            zones: zone.into_iter().collect(),
            tags: crate::tags::to_arm(&req.tags)?,
            properties: PpgProperties {
                proximity_placement_group_type: Some("Standard".into()),
            },
            ..ProximityPlacementGroup::default()
        };
        let url = self.inner.arm.url(&path(self, &req.name), COMPUTE_API)?;
        let g: ProximityPlacementGroup = self
            .inner
            .arm
            .call(
                Method::Put,
                url,
                Some(&body),
                "proximityPlacementGroups.createOrUpdate",
            )
            .await?;
        to_group(self, g).ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "the created group came back without a name",
            )
            .with_provider(Cloud::Azure)
        })
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        let name = crate::own_name(self, id.as_str(), "placement group")?;
        let url = self.inner.arm.url(&path(self, name), COMPUTE_API)?;
        let g: ProximityPlacementGroup = self
            .inner
            .arm
            .call(
                Method::Get,
                url,
                None::<&()>,
                "proximityPlacementGroups.get",
            )
            .await?;
        to_group(self, g).ok_or_else(|| {
            Error::new(ErrorKind::NotFound, format!("no placement group {id}"))
                .with_provider(Cloud::Azure)
        })
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        let rg = &self.inner.config.resource_group;
        let url = self.inner.arm.url(
            &crate::compute_path(self, rg, "proximityPlacementGroups", None),
            COMPUTE_API,
        )?;
        let groups: Vec<ProximityPlacementGroup> = self
            .inner
            .arm
            .list(url, "proximityPlacementGroups.list")
            .await?;
        let mut out: Vec<PlacementGroup> = groups
            .into_iter()
            .filter_map(|g| to_group(self, g))
            .filter(|g| filter.matches(&g.tags))
            .collect();
        out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(out)
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        // DELETE of a missing resource is 204 in ARM; gpufleet's contract is
        // NotFound, so look first.
        self.placement_group(id).await?;
        let name = crate::own_name(self, id.as_str(), "placement group")?;
        let url = self.inner.arm.url(&path(self, name), COMPUTE_API)?;
        self.inner
            .arm
            .run(
                Method::Delete,
                url,
                None::<&()>,
                "proximityPlacementGroups.delete",
            )
            .await
            .map(|_| ())
    }
}
