//! Placement groups as resource policies: `groupPlacementPolicy.collocation =
//! COLLOCATED` (compact placement, gpufleet's cluster strategy) or an
//! `availabilityDomainCount` (spread). Compute Engine has no partition
//! placement. Ids are `region/name`.

use async_trait::async_trait;
use gpufleet_model::Placement;

use google_cloud_compute_v1::model::resource_policy_group_placement_policy::Collocation;
use google_cloud_compute_v1::model::{ResourcePolicy, ResourcePolicyGroupPlacementPolicy};
use gpufleet_model::{
    Cloud, Error, ErrorKind, PlacementGroup, PlacementGroupId, PlacementGroupRequest,
    PlacementStrategy, Region, Result, TagFilter, Tags,
};

use crate::error::from_gax;
use crate::operation::{wait, Scope};
use crate::tags::DESCRIPTION_PREFIX;
use crate::{last_segment, split_id, GcpProvider};

/// Availability domains a spread group uses.
const SPREAD_DOMAINS: i32 = 2;

fn to_group(region: &str, rp: &ResourcePolicy) -> Option<PlacementGroup> {
    let gp = rp.group_placement_policy.as_ref()?;
    let name = rp.name.clone()?;
    let strategy = if gp.collocation == Some(Collocation::Collocated) {
        PlacementStrategy::Cluster
    } else if gp.availability_domain_count.is_some() {
        PlacementStrategy::Spread
    } else {
        return None;
    };
    let tags: Tags = rp
        .description
        .as_deref()
        .and_then(|d| d.strip_prefix(DESCRIPTION_PREFIX))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    Some(PlacementGroup {
        id: PlacementGroupId::new(format!("{region}/{name}")),
        name,
        cloud: Cloud::Gcp,
        strategy,
        region: Region::new(region),
        zone: None,
        tags,
    })
}

#[async_trait]
impl Placement for GcpProvider {
    async fn create_placement_group(&self, req: &PlacementGroupRequest) -> Result<PlacementGroup> {
        // An unsupported strategy is unsupported whatever its parameters.
        let policy = match req.strategy {
            PlacementStrategy::Cluster => {
                ResourcePolicyGroupPlacementPolicy::new().set_collocation(Collocation::Collocated)
            }
            PlacementStrategy::Spread => {
                ResourcePolicyGroupPlacementPolicy::new().set_availability_domain_count(SPREAD_DOMAINS)
            }
            PlacementStrategy::Partition(n) => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "Compute Engine has no partition placement (asked for {n} partitions): use cluster (compact) or spread"
                    ),
                )
                .with_operation("create_placement_group")
                .with_provider(Cloud::Gcp))
            }
        };
        req.validate()?;
        let tags = serde_json::to_string(&req.tags).map_err(|e| {
            Error::invalid_input(format!("tags cannot be stored: {e}")).with_provider(Cloud::Gcp)
        })?;
        let region = req.region.as_str();
        let body = ResourcePolicy::new()
            .set_name(req.name.clone())
            .set_region(region)
            .set_description(format!("{DESCRIPTION_PREFIX}{tags}"))
            .set_group_placement_policy(policy);
        let op = self
            .inner
            .resource_policies
            .insert()
            .set_project(self.project())
            .set_region(region)
            .set_request_id(crate::tags::request_id(
                &format!("pg/{region}/{}", req.name),
                0,
            ))
            .set_body(body)
            .send()
            .await
            .map_err(|e| {
                from_gax("resourcePolicies.insert", e).with_context("name", req.name.clone())
            })?;
        wait(self, Scope::Region(region), op, "resourcePolicies.insert").await?;
        self.placement_group(&PlacementGroupId::new(format!("{region}/{}", req.name)))
            .await
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        let (region, name) = split_id(id.as_str(), "placement group")?;
        let rp = send_scoped!(
            self, resource_policies.get, set_region(region), set_resource_policy(name);
            "resourcePolicies.get"
        )?;
        to_group(region, &rp).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("resource policy {id} is not a placement policy"),
            )
            .with_provider(Cloud::Gcp)
        })
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        let mut out = Vec::new();
        each_aggregated_page!(
            self,
            resource_policies,
            "resourcePolicies.aggregatedList",
            |page| {
                for (region, list) in crate::scoped(&page.items, "regions") {
                    out.extend(
                        list.resource_policies
                            .iter()
                            .filter_map(|rp| {
                                let region = rp.region.as_deref().map_or(region, last_segment);
                                to_group(region, rp)
                            })
                            .filter(|g| filter.matches(&g.tags)),
                    );
                }
            }
        )
        .await?;
        out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(out)
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        let (region, name) = split_id(id.as_str(), "placement group")?;
        let op = send_scoped!(
            self, resource_policies.delete, set_region(region), set_resource_policy(name);
            "resourcePolicies.delete"
        )?;
        wait(self, Scope::Region(region), op, "resourcePolicies.delete").await
    }
}
