//! The live catalog: GPU instance types, where they are offered, and prices.

use async_trait::async_trait;
use gpufleet_model::Catalog;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::types::{Filter, InstanceTypeInfo, LocationType};
use futures::{StreamExt, TryStreamExt};
use gpufleet_model::catalog::OfferQuery;
use gpufleet_model::{
    Capacity, Cloud, Fabric, GpuLink, GpuModel, GpuSpec, InstanceType, Interconnect, Offer, Pool,
    PriceSource, Region, Result, SourceKind, Stability, Zone,
};

use crate::error::all_items;
use crate::zones::zones;
use crate::{pricing, AwsProvider};

/// One region's offers, fetched together and reused for the catalog TTL.
#[derive(Debug)]
pub(crate) struct RegionCatalog {
    pub(crate) offers: Vec<Offer>,
}

/// Parses `"400 Gigabit"`, `"Up to 25 Gigabit"`, `"4x 100 Gigabit"`.
fn network_gbps(s: &str) -> Option<u32> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let gbit = words
        .iter()
        .position(|w| w.eq_ignore_ascii_case("gigabit"))?;
    let n: u32 = words.get(gbit.checked_sub(1)?)?.parse().ok()?;
    let times = words
        .first()
        .and_then(|w| w.strip_suffix('x'))
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(1);
    Some(n * times)
}

/// An EC2 instance type as gpufleet's model, if it has GPUs.
pub(crate) fn to_instance_type(info: &InstanceTypeInfo, p: &AwsProvider) -> Option<InstanceType> {
    let name = info.instance_type()?.as_str().to_string();
    let gpus = info.gpu_info()?.gpus();
    let count: i32 = gpus.iter().filter_map(|g| g.count()).sum();
    let first = gpus.first()?;
    if count <= 0 {
        return None;
    }
    let memory_gib = first
        .memory_info()
        .and_then(|m| m.size_in_mib())
        .map_or(0, |mib| ((f64::from(mib) / 1024.0).round()) as u32);
    let mut model = GpuModel::from_cloud_name(first.name().unwrap_or(""));
    if model == GpuModel::A100 && memory_gib >= 80 {
        model = GpuModel::A100_80GB;
    }
    let known = p
        .inner
        .snapshot
        .instance_types()
        .iter()
        .find(|t| t.name == name)
        .cloned();
    let net = info.network_info();
    let efa = net.and_then(|n| n.efa_supported()).unwrap_or(false);
    // The EC2 API does not say how GPUs are linked inside the node: the
    // published spec in the embedded catalog does; failing that, the P
    // families link their GPUs (8-GPU sizes through NVSwitch), others use PCIe.
    let gpu_link = match &known {
        Some(t) => t.interconnect.gpu_link,
        None if name.starts_with('p') && count >= 8 => GpuLink::Nvswitch,
        None if name.starts_with('p') && count > 1 => GpuLink::Nvlink,
        None => GpuLink::Pcie,
    };
    Some(InstanceType {
        cloud: Cloud::Aws,
        gpu: Some(GpuSpec {
            model,
            count: u32::try_from(count).unwrap_or(0),
            memory_gib,
        }),
        vcpus: info
            .v_cpu_info()
            .and_then(|v| v.default_v_cpus())
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0),
        memory_mib: info
            .memory_info()
            .and_then(|m| m.size_in_mib())
            .and_then(|m| u64::try_from(m).ok())
            .unwrap_or(0),
        interconnect: Interconnect {
            gpu_link,
            fabric: if efa { Fabric::Efa } else { Fabric::Standard },
            network_gbps: net
                .and_then(|n| n.network_performance())
                .and_then(network_gbps),
        },
        name,
    })
}

/// One region's offers: where each GPU type is offered, its on-demand price
/// and the current spot price per zone.
async fn region_catalog(
    p: &AwsProvider,
    region: &Region,
    types: &[Arc<InstanceType>],
) -> Result<Arc<RegionCatalog>> {
    if let Some((at, c)) = p.inner.catalogs.lock().await.get(region) {
        if at.elapsed() < p.inner.config.catalog_ttl {
            return Ok(c.clone());
        }
    }
    let zones = zones(p, region).await?;
    let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
    let client = p.client(region)?;
    let mut offered: BTreeSet<(String, String)> = BTreeSet::new();
    for chunk in names.chunks(100) {
        let offerings = all_items(
            client
                .describe_instance_type_offerings()
                .location_type(LocationType::AvailabilityZone)
                .filters(
                    Filter::builder()
                        .name("instance-type")
                        .set_values(Some(chunk.to_vec()))
                        .build(),
                )
                .into_paginator()
                .send(),
            "DescribeInstanceTypeOfferings",
            |page| page.instance_type_offerings,
        )
        .await?;
        for o in &offerings {
            if let (Some(t), Some(z)) = (o.instance_type(), o.location()) {
                offered.insert((t.as_str().to_string(), z.to_string()));
            }
        }
    }
    let on_demand = pricing::on_demand_prices(p, region, &names).await;
    let spot = pricing::current_spot_prices(p, region, &names).await?;
    let by_name: HashMap<&str, &Arc<InstanceType>> =
        types.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut offers = Vec::new();
    for (type_name, zone_name) in &offered {
        let Some(t) = by_name.get(type_name.as_str()) else {
            continue;
        };
        let Some(zone_id) = zones.id_by_name.get(zone_name) else {
            tracing::debug!(zone = %zone_name, "offering in a zone DescribeAvailabilityZones did not list");
            continue;
        };
        let pool = |capacity| Pool {
            cloud: Cloud::Aws,
            region: region.clone(),
            zone: Some(Zone::new(zone_id.clone())),
            instance_type: type_name.clone(),
            capacity,
        };
        if let Some(od) = on_demand.get(type_name) {
            offers.push(Offer {
                pool: pool(Capacity::OnDemand),
                instance_type: (*t).clone(),
                zone_name: Some(zone_name.clone()),
                price: od.price,
                observed_at: od.observed_at,
                effective_at: None,
                source: od.source.clone(),
                stability: Stability::default(),
            });
        } else {
            tracing::debug!(instance_type = %type_name, %region, "no on-demand price; on-demand offer left out");
        }
        if let Some((price, at)) = spot.get(&(type_name.clone(), zone_name.clone())) {
            offers.push(Offer {
                pool: pool(Capacity::Spot),
                instance_type: (*t).clone(),
                zone_name: Some(zone_name.clone()),
                price: *price,
                observed_at: *at,
                effective_at: None,
                source: PriceSource::new(SourceKind::Live, "ec2:DescribeSpotPriceHistory"),
                stability: Stability {
                    bucket: pricing::advisor_bucket(p, region, type_name),
                    ..Stability::default()
                },
            });
        }
    }
    let catalog = Arc::new(RegionCatalog { offers });
    p.inner
        .catalogs
        .lock()
        .await
        .insert(region.clone(), (Instant::now(), catalog.clone()));
    Ok(catalog)
}

#[async_trait]
impl Catalog for AwsProvider {
    /// GPU instance types, from `DescribeInstanceTypes` in the first region (all
    /// pages), reused for the catalog TTL.
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        let mut cache = self.inner.types.lock().await;
        if let Some((at, types)) = cache.as_ref() {
            if at.elapsed() < self.inner.config.catalog_ttl {
                return Ok(types.clone());
            }
        }
        let region = &self.inner.config.regions[0];
        let infos = all_items(
            self.client(region)?
                .describe_instance_types()
                .filters(
                    Filter::builder()
                        .name("instance-type")
                        .values("p*")
                        .values("g*")
                        .build(),
                )
                .max_results(100)
                .into_paginator()
                .send(),
            "DescribeInstanceTypes",
            |page| page.instance_types,
        )
        .await?;
        let mut types: Vec<Arc<InstanceType>> = infos
            .iter()
            .filter_map(|info| to_instance_type(info, self))
            .map(Arc::new)
            .collect();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        types.dedup_by(|a, b| a.name == b.name);
        // An answer without a single GPU type (a proxy's error page served as
        // 200, say) is passed on but not kept for the TTL.
        if !types.is_empty() {
            *cache = Some((Instant::now(), types.clone()));
        }
        Ok(types)
    }

    /// Offers in the configured regions that match `query`, fetched concurrently
    /// (at most `max_concurrency` regions at once).
    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        if !query.wants_cloud(Cloud::Aws) {
            return Ok(Vec::new());
        }
        let regions: Vec<Region> = self
            .inner
            .config
            .regions
            .iter()
            .filter(|r| query.regions.is_empty() || query.regions.contains(r))
            .cloned()
            .collect();
        if regions.is_empty() {
            return Ok(Vec::new());
        }
        let types = self.instance_types().await?;
        let catalogs: Vec<Arc<RegionCatalog>> = futures::stream::iter(regions)
            .map(|r| {
                let types = types.clone();
                async move { region_catalog(self, &r, &types).await }
            })
            .buffer_unordered(self.inner.config.max_concurrency)
            .try_collect()
            .await?;
        let mut offers: Vec<Offer> = catalogs
            .iter()
            .flat_map(|c| c.offers.iter())
            .filter(|o| query.matches(o))
            .cloned()
            .collect();
        offers.sort_by(|a, b| a.pool.cmp(&b.pool));
        Ok(offers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_performance_strings() {
        assert_eq!(network_gbps("400 Gigabit"), Some(400));
        assert_eq!(network_gbps("Up to 25 Gigabit"), Some(25));
        assert_eq!(network_gbps("4x 100 Gigabit"), Some(400));
        assert_eq!(network_gbps("3200 Gigabit"), Some(3200));
        assert_eq!(network_gbps("High"), None);
    }
}
