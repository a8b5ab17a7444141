//! The live catalog: GPU VM sizes per region and zone (Resource SKUs),
//! prices (Retail Prices API) and Spot eviction rates (Resource Graph).

use async_trait::async_trait;
use gpufleet_model::Catalog;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use azure_core::http::{Method, Url};
use gpufleet_model::catalog::OfferQuery;
use gpufleet_model::paging::PageTokens;
use gpufleet_model::{
    Capacity, Cloud, Error, Fabric, GpuLink, GpuModel, GpuSpec, InstanceType, Interconnect,
    InterruptionBucket, Offer, Pool, Price, PriceSource, Region, Result, Snapshot, SourceKind,
    Stability, Zone,
};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::arm::next_page;
use crate::models::{GraphResponse, ResourceSku, RetailPage, RetailPrice};
use crate::AzureProvider;

/// API versions.
pub(crate) const SKUS_API: &str = "2021-07-01";
const PRICES_API: &str = "2023-01-01-preview";
const GRAPH_API: &str = "2022-10-01";

/// The live catalog.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) types: Vec<Arc<InstanceType>>,
    pub(crate) offers: Vec<Offer>,
    /// The regions scanned, and their eviction bands as fetched (`None` when
    /// Resource Graph was unavailable).
    pub(crate) regions: Vec<String>,
    pub(crate) evictions: Option<Evictions>,
}

/// Spot eviction bands: (lower-case size, lower-case region) -> band.
pub(crate) type Evictions = HashMap<(String, String), InterruptionBucket>;

/// gpufleet's zone id for an Azure zone: `eastus-1` (Azure's zone numbers
/// only mean something within a region).
pub(crate) fn zone_id(region: &str, zone: &str) -> String {
    format!("{region}-{zone}")
}

fn capability<'a>(sku: &'a ResourceSku, name: &str) -> Option<&'a str> {
    sku.capabilities
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(name))
        .map(|c| c.value.as_str())
}

/// A GPU VM size as gpufleet's model: GPU count from the `GPUs` capability,
/// the model from the size name (or the embedded catalog's spec).
pub(crate) fn to_instance_type(snapshot: &Snapshot, sku: &ResourceSku) -> Option<InstanceType> {
    let gpus: u32 = capability(sku, "GPUs")?.parse().ok()?;
    if gpus == 0 {
        return None;
    }
    let known = snapshot
        .instance_types()
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(&sku.name))
        .cloned();
    let vcpus = capability(sku, "vCPUs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let memory_mib = capability(sku, "MemoryGB")
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |gb| (gb * 1024.0).round() as u64);
    let rdma = capability(sku, "RdmaEnabled").is_some_and(|v| v.eq_ignore_ascii_case("True"));
    let (model, memory_gib, interconnect) = match &known {
        Some(t) => {
            let g = t.gpu.as_ref()?;
            (g.model.clone(), g.memory_gib, t.interconnect)
        }
        None => {
            let model = GpuModel::from_cloud_name(&sku.name);
            let mem = model.default_memory_gib().unwrap_or(0);
            let link = if sku.name.starts_with("Standard_ND") && gpus >= 8 {
                GpuLink::Nvswitch
            } else {
                GpuLink::Pcie
            };
            let fabric = if rdma {
                Fabric::Infiniband
            } else {
                Fabric::Standard
            };
            (
                model,
                mem,
                Interconnect {
                    gpu_link: link,
                    fabric,
                    network_gbps: None,
                },
            )
        }
    };
    Some(InstanceType {
        cloud: Cloud::Azure,
        name: sku.name.clone(),
        gpu: Some(GpuSpec {
            model,
            count: gpus,
            memory_gib,
        }),
        vcpus,
        memory_mib,
        interconnect,
    })
}

/// Where a SKU can be used in `region`: `None` when the region is
/// restricted for this subscription, else its unrestricted zones (empty for
/// a region without zones).
pub(crate) fn usable_zones(sku: &ResourceSku, region: &str) -> Option<Vec<String>> {
    let same = |r: &String| r.eq_ignore_ascii_case(region);
    if !sku.locations.iter().any(same) {
        return None;
    }
    let mut blocked_zones: Vec<String> = Vec::new();
    for r in &sku.restrictions {
        let info = r.restriction_info.clone().unwrap_or_default();
        let here = r.values.iter().any(same) || info.locations.iter().any(same);
        if !here {
            continue;
        }
        match r.kind.as_str() {
            "Location" => return None,
            "Zone" => blocked_zones.extend(info.zones),
            _ => {}
        }
    }
    let mut zones: Vec<String> = sku
        .location_info
        .iter()
        .filter(|l| same(&l.location))
        .flat_map(|l| l.zones.iter())
        .filter(|z| !blocked_zones.contains(z))
        .cloned()
        .collect();
    zones.sort();
    zones.dedup();
    let had_zones = sku
        .location_info
        .iter()
        .any(|l| same(&l.location) && !l.zones.is_empty());
    if had_zones && zones.is_empty() {
        // Every zone is restricted.
        return None;
    }
    Some(zones)
}

/// GPU VM sizes offered in `region` (all pages).
async fn region_skus(p: &AzureProvider, region: &str) -> Result<Vec<ResourceSku>> {
    let mut url = p.inner.arm.url(
        &format!(
            "/subscriptions/{}/providers/Microsoft.Compute/skus",
            p.inner.arm.subscription
        ),
        SKUS_API,
    )?;
    url.query_pairs_mut()
        .append_pair("$filter", &format!("location eq '{region}'"));
    let skus: Vec<ResourceSku> = p.inner.arm.list(url, "resourceSkus.list").await?;
    Ok(skus
        .into_iter()
        .filter(|s| s.resource_type == "virtualMachines")
        .collect())
}

/// Which price a Retail Prices item is: on-demand or Spot Linux
/// consumption, `None` for Low Priority, Windows, reservations and others.
pub(crate) fn price_kind(item: &RetailPrice) -> Option<Capacity> {
    if item.price_type != "Consumption" || item.unit_of_measure != "1 Hour" {
        return None;
    }
    if !item.currency_code.is_empty() && item.currency_code != "USD" {
        return None;
    }
    let meter = item.meter_name.to_ascii_lowercase();
    let sku = item.sku_name.to_ascii_lowercase();
    if meter.contains("low priority") || sku.contains("low priority") {
        return None;
    }
    if item.product_name.to_ascii_lowercase().contains("windows") {
        return None;
    }
    if meter.contains("spot") || sku.contains("spot") {
        Some(Capacity::Spot)
    } else {
        Some(Capacity::OnDemand)
    }
}

/// A Retail Prices number as a fixed-point price (exact for six decimals or
/// fewer, rounded to the micro-dollar beyond).
pub(crate) fn to_price(n: &serde_json::Number) -> Option<Price> {
    let text = n.to_string();
    match text.parse::<Price>() {
        Ok(p) => Some(p),
        Err(_) => n
            .as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(Price::from_usd_per_hour_f64),
    }
}

/// Linux consumption prices in `region`: (size, capacity) -> (price, since).
async fn region_prices(
    p: &AzureProvider,
    region: &str,
) -> Result<HashMap<(String, Capacity), (Price, OffsetDateTime)>> {
    let base = p.inner.config.prices_endpoint.trim_end_matches('/');
    let mut url = Url::parse(&format!("{base}/api/retail/prices"))
        .map_err(|e| Error::invalid_input(format!("Retail Prices endpoint '{base}': {e}")))?;
    url.query_pairs_mut()
        .append_pair("api-version", PRICES_API)
        .append_pair(
            "$filter",
            &format!("serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and priceType eq 'Consumption'"),
        );
    let mut out: HashMap<(String, Capacity), (Price, OffsetDateTime)> = HashMap::new();
    let mut pages = PageTokens::new(Cloud::Azure, "retail.prices", p.inner.arm.max_pages());
    let mut next = Some(url);
    while let Some(u) = next.take() {
        let page: RetailPage = p.inner.arm.public_get(u, "retail.prices").await?;
        for item in &page.items {
            if !item.arm_region_name.eq_ignore_ascii_case(region) {
                continue;
            }
            let (Some(capacity), Some(price)) = (price_kind(item), to_price(&item.retail_price))
            else {
                continue;
            };
            if price.micros_per_hour() == 0 {
                continue;
            }
            let since = item
                .effective_start_date
                .as_deref()
                .and_then(|d| OffsetDateTime::parse(d, &Rfc3339).ok())
                .unwrap_or(OffsetDateTime::UNIX_EPOCH);
            let slot = out
                .entry((item.arm_sku_name.clone(), capacity))
                .or_insert((price, since));
            if since > slot.1 {
                *slot = (price, since);
            }
        }
        next = next_page(&mut pages, page.next_page_link.as_deref(), "retail.prices")?;
    }
    Ok(out)
}

/// The band of an Azure eviction rate (`0-5`, `5-10`, `10-15`, `15-20`,
/// `20+`, with or without `%`).
pub(crate) fn eviction_bucket(rate: &str) -> Option<InterruptionBucket> {
    let r = rate.trim().trim_end_matches('%').replace(' ', "");
    Some(match r.as_str() {
        "0-5" => InterruptionBucket::Under5,
        "5-10" => InterruptionBucket::From5To10,
        "10-15" => InterruptionBucket::From10To15,
        "15-20" => InterruptionBucket::From15To20,
        "20+" | "20-100" | ">20" => InterruptionBucket::Over20,
        _ => return None,
    })
}

/// Spot eviction rates from Azure Resource Graph: (size, region) -> band.
pub(crate) async fn eviction_rates(p: &AzureProvider, regions: &[String]) -> Result<Evictions> {
    let list = regions
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(",");
    let query = format!(
        "SpotResources | where type =~ 'microsoft.compute/skuspotevictionrate/location' | where location in~ ({list}) | project skuName = tostring(sku.name), location, evictionRate = tostring(properties.evictionRate)"
    );
    let url = p
        .inner
        .arm
        .url("/providers/Microsoft.ResourceGraph/resources", GRAPH_API)?;
    let mut out = HashMap::new();
    let mut skip: Option<String> = None;
    let mut pages = PageTokens::new(
        Cloud::Azure,
        "resourceGraph.resources",
        p.inner.arm.max_pages(),
    );
    loop {
        let mut options = serde_json::json!({"resultFormat": "objectArray", "$top": 1000});
        if let Some(s) = &skip {
            options["$skipToken"] = serde_json::json!(s);
        }
        let body = serde_json::json!({
            "subscriptions": [p.inner.arm.subscription],
            "query": query,
            "options": options,
        });
        let page: GraphResponse = p
            .inner
            .arm
            .call(
                Method::Post,
                url.clone(),
                Some(&body),
                "resourceGraph.resources",
            )
            .await?;
        for row in &page.data {
            let (Some(sku), Some(loc), Some(rate)) = (
                row["skuName"].as_str(),
                row["location"].as_str(),
                row["evictionRate"].as_str(),
            ) else {
                continue;
            };
            if let Some(b) = eviction_bucket(rate) {
                out.insert((sku.to_ascii_lowercase(), loc.to_ascii_lowercase()), b);
            }
        }
        match pages.next(page.skip_token.as_deref())? {
            Some(s) => skip = Some(s),
            None => return Ok(out),
        }
    }
}

/// The regions to scan: the configured ones, else those of the snapshot.
pub(crate) fn regions(p: &AzureProvider) -> Vec<String> {
    if p.inner.config.regions.is_empty() {
        p.inner
            .snapshot
            .regions(Cloud::Azure)
            .iter()
            .map(|r| r.to_string())
            .collect()
    } else {
        p.inner
            .config
            .regions
            .iter()
            .map(|r| r.to_string())
            .collect()
    }
}

/// The eviction bands of `regions`: from the cached catalog while it is fresh
/// and covers them, else from Resource Graph.
pub(crate) async fn cached_eviction_rates(
    p: &AzureProvider,
    regions: &[String],
) -> Result<Evictions> {
    {
        let cache = p.inner.catalog.lock().await;
        if let Some((at, live)) = cache.as_ref() {
            if let Some(e) = &live.evictions {
                if at.elapsed() < p.inner.config.catalog_ttl
                    && regions
                        .iter()
                        .all(|r| live.regions.iter().any(|l| l.eq_ignore_ascii_case(r)))
                {
                    return Ok(e.clone());
                }
            }
        }
    }
    eviction_rates(p, regions).await
}

/// The cached live catalog, fetched again after the TTL.
pub(crate) async fn live(p: &AzureProvider) -> Result<Arc<Live>> {
    let mut cache = p.inner.catalog.lock().await;
    if let Some((at, live)) = cache.as_ref() {
        if at.elapsed() < p.inner.config.catalog_ttl {
            return Ok(live.clone());
        }
    }
    let regions = regions(p);
    // The SKUs first: without them there is no catalog, and the optional
    // parts (eviction rates, live prices) need not warn of an ARM that is
    // not there at all.
    let mut skus_by_region = Vec::with_capacity(regions.len());
    for region in &regions {
        skus_by_region.push(region_skus(p, region).await?);
    }
    let fetched = match eviction_rates(p, &regions).await {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!(error = %e, "Spot eviction rates from Resource Graph unavailable; Azure spot offers carry no eviction band");
            None
        }
    };
    let none = HashMap::new();
    let evictions = fetched.as_ref().unwrap_or(&none);
    let mut types: BTreeMap<String, Arc<InstanceType>> = BTreeMap::new();
    let mut offers = Vec::new();
    for (region, skus) in regions.iter().zip(&skus_by_region) {
        let fetched_at = OffsetDateTime::now_utc();
        let prices = match region_prices(p, region).await {
            Ok(prices) => Some(prices),
            Err(e) => {
                tracing::warn!(error = %e, %region, "Retail Prices API unavailable; using the embedded snapshot's prices");
                None
            }
        };
        for sku in skus {
            let Some(t) = to_instance_type(&p.inner.snapshot, sku) else {
                continue;
            };
            let Some(zones) = usable_zones(sku, region) else {
                tracing::debug!(size = %sku.name, %region, "restricted for this subscription");
                continue;
            };
            let t = types
                .entry(t.name.clone())
                .or_insert_with(|| Arc::new(t))
                .clone();
            for capacity in [Capacity::OnDemand, Capacity::Spot] {
                let live_price = prices
                    .as_ref()
                    .and_then(|m| m.get(&(sku.name.clone(), capacity)).copied());
                // Observed now; the cloud's effective date is its own field.
                let (price, source, at, effective) = match live_price {
                    Some((price, since)) => (
                        price,
                        PriceSource::new(SourceKind::Live, "azure:retail-prices"),
                        fetched_at,
                        Some(since),
                    ),
                    None => match p.inner.snapshot.offers().iter().find(|o| {
                        o.pool.region.as_str() == region
                            && o.pool.instance_type == sku.name
                            && o.pool.capacity == capacity
                    }) {
                        Some(o) => (o.price, o.source.clone(), o.observed_at, o.effective_at),
                        None => continue,
                    },
                };
                let stability = Stability {
                    bucket: (capacity == Capacity::Spot)
                        .then(|| {
                            evictions
                                .get(&(sku.name.to_ascii_lowercase(), region.to_ascii_lowercase()))
                                .copied()
                        })
                        .flatten(),
                    ..Stability::default()
                };
                let zone_list: Vec<Option<String>> = if zones.is_empty() {
                    vec![None]
                } else {
                    zones.iter().map(|z| Some(zone_id(region, z))).collect()
                };
                for z in zone_list {
                    offers.push(Offer {
                        pool: Pool {
                            cloud: Cloud::Azure,
                            region: Region::new(region.clone()),
                            zone: z.clone().map(Zone::new),
                            instance_type: sku.name.clone(),
                            capacity,
                        },
                        instance_type: t.clone(),
                        zone_name: z,
                        price,
                        observed_at: at,
                        effective_at: effective,
                        source: source.clone(),
                        stability: stability.clone(),
                    });
                }
            }
        }
    }
    let live = Arc::new(Live {
        types: types.into_values().collect(),
        offers,
        regions,
        evictions: fetched,
    });
    if !live.types.is_empty() {
        *cache = Some((Instant::now(), live.clone()));
    }
    Ok(live)
}

#[async_trait]
impl Catalog for AzureProvider {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        Ok(live(self).await?.types.clone())
    }

    /// Offers that match `query`.
    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        if !query.wants_cloud(Cloud::Azure) {
            return Ok(Vec::new());
        }
        Ok(query.select(&live(self).await?.offers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_bands() {
        assert_eq!(eviction_bucket("0-5"), Some(InterruptionBucket::Under5));
        assert_eq!(eviction_bucket("20+"), Some(InterruptionBucket::Over20));
        assert_eq!(
            eviction_bucket("10-15%"),
            Some(InterruptionBucket::From10To15)
        );
        assert_eq!(eviction_bucket("lots"), None);
    }

    #[test]
    fn prices_are_exact() {
        let n: serde_json::Number = serde_json::from_str("3.673").unwrap();
        assert_eq!(to_price(&n), Some(Price::from_micros_per_hour(3_673_000)));
        let n: serde_json::Number = serde_json::from_str("0.0000123").unwrap();
        assert_eq!(to_price(&n), Some(Price::from_micros_per_hour(12)));
    }
}
