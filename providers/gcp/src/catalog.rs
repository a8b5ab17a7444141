//! The live catalog: machine shapes per zone and their prices.

use async_trait::async_trait;
use gpufleet_model::Catalog;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use gpufleet_model::catalog::OfferQuery;
use gpufleet_model::{
    Capacity, Cloud, Fabric, GpuLink, GpuModel, GpuSpec, InstanceType, Interconnect, Offer, Pool,
    PriceSource, Region, Result, SourceKind, Stability, Zone,
};

use crate::pricing::{fetch_rates, Rates, Vm};
use crate::{last_segment, region_of, GcpProvider};

/// Machine families whose types bundle GPUs.
const ACCELERATOR_FAMILIES: &[&str] = &["a2", "a3", "a4", "g2", "g4"];

/// One VM shape gpufleet offers: a machine type, and for N1 the GPUs
/// attached to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    /// gpufleet's name: the machine type, or `host+acceleratorxN` for N1.
    pub(crate) name: String,
    /// The machine type to create.
    pub(crate) machine_type: String,
    /// GPUs to attach (N1 only): accelerator type and count.
    pub(crate) attach: Option<(String, u32)>,
}

/// Splits `n1-standard-8+nvidia-tesla-t4x1` into host, accelerator, count.
pub(crate) fn split_shape(name: &str) -> Option<(&str, &str, u32)> {
    let (host, gpu) = name.split_once('+')?;
    let (accel, count) = gpu.rsplit_once('x')?;
    Some((host, accel, count.parse().ok()?))
}

impl Shape {
    /// The shape of a gpufleet instance type name.
    pub(crate) fn from_name(name: &str) -> Shape {
        match split_shape(name) {
            Some((host, accel, count)) => Shape {
                name: name.to_string(),
                machine_type: host.to_string(),
                attach: Some((accel.to_string(), count)),
            },
            None => Shape {
                name: name.to_string(),
                machine_type: name.to_string(),
                attach: None,
            },
        }
    }
}

/// The live catalog: types, offers, and the zones of each shape.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) types: Vec<Arc<InstanceType>>,
    pub(crate) offers: Vec<Offer>,
}

#[derive(Debug, Clone)]
pub(crate) struct Machine {
    cpus: u32,
    memory_mib: u64,
    accel: Option<(String, u32)>,
}

fn family(machine_type: &str) -> &str {
    machine_type.split('-').next().unwrap_or(machine_type)
}

/// Machine types of one aggregated-list page, per zone (accelerator-optimized
/// families with GPUs, and N1 hosts).
pub(crate) fn read_machine_page(
    page: &google_cloud_compute_v1::model::MachineTypeAggregatedList,
    out: &mut BTreeMap<String, BTreeMap<String, Machine>>,
) {
    for (zone, list) in crate::scoped(&page.items, "zones") {
        for m in &list.machine_types {
            let Some(name) = m.name.as_deref() else {
                continue;
            };
            let fam = family(name);
            let accel = m.accelerators.first().and_then(|a| {
                Some((
                    last_segment(a.guest_accelerator_type.as_deref()?).to_string(),
                    u32::try_from(a.guest_accelerator_count?).ok()?,
                ))
            });
            let wanted = (ACCELERATOR_FAMILIES.contains(&fam) && accel.is_some())
                || name.starts_with("n1-standard-");
            if !wanted {
                continue;
            }
            out.entry(zone.to_string()).or_default().insert(
                name.to_string(),
                Machine {
                    cpus: m
                        .guest_cpus
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(0),
                    memory_mib: m.memory_mb.and_then(|c| u64::try_from(c).ok()).unwrap_or(0),
                    accel,
                },
            );
        }
    }
}

/// Machine types per zone (accelerator-optimized families and N1 hosts).
async fn machine_types(p: &GcpProvider) -> Result<BTreeMap<String, BTreeMap<String, Machine>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Machine>> = BTreeMap::new();
    each_aggregated_page!(p, machine_types, "machineTypes.aggregatedList", |page| {
        read_machine_page(&page, &mut out)
    })
    .await?;
    Ok(out)
}

/// Attachable accelerator types per zone, with the most cards per VM.
async fn accelerator_types(p: &GcpProvider) -> Result<BTreeMap<String, HashMap<String, u32>>> {
    let mut out: BTreeMap<String, HashMap<String, u32>> = BTreeMap::new();
    each_aggregated_page!(
        p,
        accelerator_types,
        "acceleratorTypes.aggregatedList",
        |page| {
            for (zone, list) in crate::scoped(&page.items, "zones") {
                for a in &list.accelerator_types {
                    if let (Some(name), Some(max)) =
                        (a.name.as_deref(), a.maximum_cards_per_instance)
                    {
                        out.entry(zone.to_string())
                            .or_default()
                            .insert(name.to_string(), u32::try_from(max).unwrap_or(0));
                    }
                }
            }
        }
    )
    .await?;
    Ok(out)
}

/// The cached live catalog, fetched again after the TTL.
pub(crate) async fn live(p: &GcpProvider) -> Result<Arc<Live>> {
    let mut cache = p.inner.catalog.lock().await;
    if let Some((at, live)) = cache.as_ref() {
        if at.elapsed() < p.inner.config.catalog_ttl {
            return Ok(live.clone());
        }
    }
    let machines = machine_types(p).await?;
    let accelerators = accelerator_types(p).await?;
    let rates = match fetch_rates(p).await {
        Ok(r) if r.len() > 0 => Some(r),
        Ok(_) => {
            tracing::warn!("the Cloud Billing Catalog listed no Compute Engine prices gpufleet reads; using the embedded snapshot's prices");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "Cloud Billing Catalog unavailable; using the embedded snapshot's prices");
            None
        }
    };
    let live = Arc::new(build(p, &machines, &accelerators, rates.as_ref()));
    if !live.types.is_empty() {
        *cache = Some((Instant::now(), live.clone()));
    }
    Ok(live)
}

/// N1 shapes in the embedded catalog: (accelerator, count) -> host types.
fn n1_shapes(p: &GcpProvider) -> Vec<(String, String, u32)> {
    p.inner
        .snapshot
        .instance_types()
        .iter()
        .filter_map(|t| {
            let (host, accel, n) = split_shape(&t.name)?;
            Some((host.to_string(), accel.to_string(), n))
        })
        .collect()
}

fn instance_type(
    p: &GcpProvider,
    shape: &Shape,
    machine: &Machine,
    accel: &str,
    count: u32,
) -> InstanceType {
    let known = p
        .inner
        .snapshot
        .instance_types()
        .iter()
        .find(|t| t.name == shape.name)
        .cloned();
    let model = GpuModel::from_cloud_name(accel);
    let memory_gib = known
        .as_ref()
        .and_then(|t| t.gpu.as_ref())
        .map(|g| g.memory_gib)
        .or_else(|| model.default_memory_gib())
        .unwrap_or(0);
    let interconnect = known.as_ref().map_or(
        Interconnect {
            gpu_link: if count > 1 && shape.attach.is_none() {
                GpuLink::Nvswitch
            } else {
                GpuLink::Pcie
            },
            fabric: Fabric::Standard,
            network_gbps: None,
        },
        |t| t.interconnect,
    );
    InstanceType {
        cloud: Cloud::Gcp,
        name: shape.name.clone(),
        gpu: Some(GpuSpec {
            model,
            count,
            memory_gib,
        }),
        vcpus: machine.cpus,
        memory_mib: machine.memory_mib,
        interconnect,
    }
}

fn build(
    p: &GcpProvider,
    machines: &BTreeMap<String, BTreeMap<String, Machine>>,
    accelerators: &BTreeMap<String, HashMap<String, u32>>,
    rates: Option<&Rates>,
) -> Live {
    let regions = &p.inner.config.regions;
    let n1 = n1_shapes(p);
    let mut types: BTreeMap<String, Arc<InstanceType>> = BTreeMap::new();
    let mut offers = Vec::new();
    let observed = rates.and_then(|r| r.newest).unwrap_or_else(crate::now);
    for (zone, zone_machines) in machines {
        let region = region_of(zone);
        if !regions.is_empty() && !regions.iter().any(|r| r.as_str() == region) {
            continue;
        }
        // (shape, machine, accelerator, count)
        let mut shapes: Vec<(Shape, &Machine, String, u32)> = Vec::new();
        for (name, m) in zone_machines {
            if let Some((accel, count)) = &m.accel {
                shapes.push((Shape::from_name(name), m, accel.clone(), *count));
            }
        }
        if let Some(attachable) = accelerators.get(zone) {
            for (host, accel, count) in &n1 {
                let fits = attachable.get(accel).is_some_and(|max| count <= max);
                if let (true, Some(m)) = (fits, zone_machines.get(host)) {
                    let name = format!("{host}+{accel}x{count}");
                    shapes.push((Shape::from_name(&name), m, accel.clone(), *count));
                }
            }
        }
        for (shape, m, accel, count) in shapes {
            let t = types
                .entry(shape.name.clone())
                .or_insert_with(|| Arc::new(instance_type(p, &shape, m, &accel, count)))
                .clone();
            for capacity in [Capacity::OnDemand, Capacity::Spot] {
                let vm = Vm {
                    family: family(&shape.machine_type),
                    vcpus: m.cpus,
                    memory_mib: m.memory_mib,
                    gpu: &accel,
                    gpus: count,
                };
                let live_price = rates.and_then(|r| r.vm_price(region, &vm, capacity));
                let (price, source, at) = match live_price {
                    Some(price) => (
                        price,
                        PriceSource::new(SourceKind::Live, "cloudbilling:services.skus"),
                        observed,
                    ),
                    None => match snapshot_price(p, region, &shape.name, capacity) {
                        Some(o) => (o.price, o.source.clone(), o.observed_at),
                        None => {
                            tracing::debug!(shape = %shape.name, %zone, %capacity, "no price for this shape; offer left out");
                            continue;
                        }
                    },
                };
                offers.push(Offer {
                    pool: Pool {
                        cloud: Cloud::Gcp,
                        region: Region::new(region),
                        zone: Some(Zone::new(zone.clone())),
                        instance_type: shape.name.clone(),
                        capacity,
                    },
                    instance_type: t.clone(),
                    zone_name: Some(zone.clone()),
                    price,
                    observed_at: at,
                    effective_at: None,
                    source,
                    stability: Stability::default(),
                });
            }
        }
    }
    Live {
        types: types.into_values().collect(),
        offers,
    }
}

fn snapshot_price<'a>(
    p: &'a GcpProvider,
    region: &str,
    name: &str,
    capacity: Capacity,
) -> Option<&'a Offer> {
    p.inner.snapshot.offers().iter().find(|o| {
        o.pool.region.as_str() == region
            && o.pool.instance_type == name
            && o.pool.capacity == capacity
    })
}

#[async_trait]
impl Catalog for GcpProvider {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        Ok(live(self).await?.types.clone())
    }

    /// Offers that match `query`.
    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        if !query.wants_cloud(Cloud::Gcp) {
            return Ok(Vec::new());
        }
        Ok(query.select(&live(self).await?.offers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(
            split_shape("n1-standard-8+nvidia-tesla-t4x1"),
            Some(("n1-standard-8", "nvidia-tesla-t4", 1))
        );
        assert_eq!(split_shape("a2-highgpu-1g"), None);
        let s = Shape::from_name("n1-standard-64+nvidia-tesla-v100x8");
        assert_eq!(s.machine_type, "n1-standard-64");
        assert_eq!(s.attach, Some(("nvidia-tesla-v100".into(), 8)));
    }
}
