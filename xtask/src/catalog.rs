//! Builds the embedded catalog snapshot from the public data in `shared/data`,
//! checking it against published instance specs as it goes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use gpufleet_core::catalog::SnapshotSource;
use gpufleet_core::{
    Capacity, Cloud, Fabric, GpuLink, GpuModel, GpuSpec, InstanceType, Interconnect,
    InterruptionBucket, Offer, Pool, Price, PriceSource, Region, Snapshot, SourceKind, Stability,
    Zone,
};
use time::macros::datetime;
use time::OffsetDateTime;

type Row = HashMap<String, String>;
/// On-demand and spot price, either of which may be missing.
type PricePair = (Option<Price>, Option<Price>);
/// An N1 host: prices, vCPUs and GiB of RAM.
type Host = (PricePair, u32, f64);

/// Published specs of one instance type: GPU model, count, GiB per GPU, link,
/// fabric, network Gbit/s.
struct Spec {
    name: &'static str,
    gpu: GpuModel,
    count: u32,
    mem: u32,
    link: GpuLink,
    fabric: Fabric,
    gbps: Option<u32>,
}

const fn spec(
    name: &'static str,
    gpu: GpuModel,
    count: u32,
    mem: u32,
    link: GpuLink,
    fabric: Fabric,
    gbps: Option<u32>,
) -> Spec {
    Spec {
        name,
        gpu,
        count,
        mem,
        link,
        fabric,
        gbps,
    }
}

use Fabric::{Efa, GpuDirect, Infiniband, Standard};
use GpuLink::{Nvlink, Nvswitch, Pcie};
use GpuModel as G;

/// AWS GPU instance types (AWS "Accelerated computing" instance specs).
const AWS_SPECS: &[Spec] = &[
    spec("g4dn.xlarge", G::T4, 1, 16, Pcie, Standard, Some(25)),
    spec("g4dn.2xlarge", G::T4, 1, 16, Pcie, Standard, Some(25)),
    spec("g4dn.4xlarge", G::T4, 1, 16, Pcie, Standard, Some(25)),
    spec("g4dn.8xlarge", G::T4, 1, 16, Pcie, Standard, Some(50)),
    spec("g4dn.metal", G::T4, 8, 16, Pcie, Efa, Some(100)),
    spec("g5.xlarge", G::A10G, 1, 24, Pcie, Standard, Some(10)),
    spec("g5.2xlarge", G::A10G, 1, 24, Pcie, Standard, Some(10)),
    spec("g5.4xlarge", G::A10G, 1, 24, Pcie, Standard, Some(25)),
    spec("g5.8xlarge", G::A10G, 1, 24, Pcie, Efa, Some(25)),
    spec("g5.12xlarge", G::A10G, 4, 24, Pcie, Efa, Some(40)),
    spec("g5.16xlarge", G::A10G, 1, 24, Pcie, Efa, Some(25)),
    spec("g5.24xlarge", G::A10G, 4, 24, Pcie, Efa, Some(50)),
    spec("g5.48xlarge", G::A10G, 8, 24, Pcie, Efa, Some(100)),
    spec("g5g.16xlarge", G::T4g, 2, 16, Pcie, Standard, Some(25)),
    spec("g6.2xlarge", G::L4, 1, 24, Pcie, Standard, Some(10)),
    spec("g6.4xlarge", G::L4, 1, 24, Pcie, Standard, Some(25)),
    spec("g6.24xlarge", G::L4, 4, 24, Pcie, Efa, Some(50)),
    spec("g6.48xlarge", G::L4, 8, 24, Pcie, Efa, Some(100)),
    spec("p3.2xlarge", G::V100, 1, 16, Pcie, Standard, Some(10)),
    spec("p3.8xlarge", G::V100, 4, 16, Nvlink, Standard, Some(10)),
    spec("p3.16xlarge", G::V100, 8, 16, Nvlink, Standard, Some(25)),
    spec("p3dn.24xlarge", G::V100, 8, 32, Nvlink, Efa, Some(100)),
    spec("p4d.24xlarge", G::A100, 8, 40, Nvswitch, Efa, Some(400)),
    spec(
        "p4de.24xlarge",
        G::A100_80GB,
        8,
        80,
        Nvswitch,
        Efa,
        Some(400),
    ),
    spec("p5.48xlarge", G::H100, 8, 80, Nvswitch, Efa, Some(3200)),
    spec("p5e.48xlarge", G::H200, 8, 141, Nvswitch, Efa, Some(3200)),
    spec("p5en.48xlarge", G::H200, 8, 141, Nvswitch, Efa, Some(3200)),
];

/// Azure GPU sizes (Azure "GPU optimized virtual machine sizes"). Fractional-GPU
/// sizes are left out: gpufleet counts whole GPUs.
const AZURE_SPECS: &[Spec] = &[
    spec("Standard_NC6", G::K80, 1, 12, Pcie, Standard, None),
    spec("Standard_NC12", G::K80, 2, 12, Pcie, Standard, None),
    spec("Standard_NC24", G::K80, 4, 12, Pcie, Standard, None),
    spec("Standard_NC24r", G::K80, 4, 12, Pcie, Infiniband, Some(56)),
    spec("Standard_NC6s_v3", G::V100, 1, 16, Pcie, Standard, None),
    spec("Standard_NC12s_v3", G::V100, 2, 16, Pcie, Standard, None),
    spec("Standard_NC24s_v3", G::V100, 4, 16, Pcie, Standard, None),
    spec(
        "Standard_NC24rs_v3",
        G::V100,
        4,
        16,
        Pcie,
        Infiniband,
        Some(100),
    ),
    spec(
        "Standard_NC4as_T4_v3",
        G::T4,
        1,
        16,
        Pcie,
        Standard,
        Some(8),
    ),
    spec(
        "Standard_NC8as_T4_v3",
        G::T4,
        1,
        16,
        Pcie,
        Standard,
        Some(8),
    ),
    spec(
        "Standard_NC16as_T4_v3",
        G::T4,
        1,
        16,
        Pcie,
        Standard,
        Some(8),
    ),
    spec(
        "Standard_NC64as_T4_v3",
        G::T4,
        4,
        16,
        Pcie,
        Standard,
        Some(32),
    ),
    spec(
        "Standard_NC24ads_A100_v4",
        G::A100_80GB,
        1,
        80,
        Pcie,
        Standard,
        Some(20),
    ),
    spec(
        "Standard_NC48ads_A100_v4",
        G::A100_80GB,
        2,
        80,
        Pcie,
        Standard,
        Some(40),
    ),
    spec(
        "Standard_NC96ads_A100_v4",
        G::A100_80GB,
        4,
        80,
        Pcie,
        Standard,
        Some(80),
    ),
    spec(
        "Standard_NC40ads_H100_v5",
        G::H100,
        1,
        94,
        Pcie,
        Standard,
        Some(40),
    ),
    spec(
        "Standard_NC80adis_H100_v5",
        G::H100,
        2,
        94,
        Nvlink,
        Standard,
        Some(80),
    ),
    spec(
        "Standard_ND40rs_v2",
        G::V100,
        8,
        32,
        Nvlink,
        Infiniband,
        Some(100),
    ),
    spec(
        "Standard_ND96asr_v4",
        G::A100,
        8,
        40,
        Nvswitch,
        Infiniband,
        Some(1600),
    ),
    spec(
        "Standard_ND96amsr_A100_v4",
        G::A100_80GB,
        8,
        80,
        Nvswitch,
        Infiniband,
        Some(1600),
    ),
    spec(
        "Standard_ND96isr_H100_v5",
        G::H100,
        8,
        80,
        Nvswitch,
        Infiniband,
        Some(3200),
    ),
    spec("Standard_NV6", G::M60, 1, 8, Pcie, Standard, None),
    spec("Standard_NV12", G::M60, 2, 8, Pcie, Standard, None),
    spec("Standard_NV24", G::M60, 4, 8, Pcie, Standard, None),
    spec("Standard_NV12s_v3", G::M60, 1, 8, Pcie, Standard, None),
    spec("Standard_NV24s_v3", G::M60, 2, 8, Pcie, Standard, None),
    spec("Standard_NV48s_v3", G::M60, 4, 8, Pcie, Standard, None),
    spec("Standard_NV32as_v4", G::Mi25, 1, 16, Pcie, Standard, None),
    spec(
        "Standard_NV36ads_A10_v5",
        G::A10,
        1,
        24,
        Pcie,
        Standard,
        None,
    ),
    spec(
        "Standard_NV36adms_A10_v5",
        G::A10,
        1,
        24,
        Pcie,
        Standard,
        None,
    ),
    spec(
        "Standard_NV72ads_A10_v5",
        G::A10,
        2,
        24,
        Pcie,
        Standard,
        None,
    ),
];

/// N1 hosts gpufleet offers for GPUs attached to N1 VMs, within Compute
/// Engine's published vCPU limits per GPU count.
const GCP_N1_HOSTS: &[(&str, GpuModel, u32, &str)] = &[
    ("T4", G::T4, 1, "n1-standard-4"),
    ("T4", G::T4, 1, "n1-standard-8"),
    ("T4", G::T4, 2, "n1-standard-16"),
    ("T4", G::T4, 4, "n1-standard-32"),
    ("V100", G::V100, 1, "n1-standard-8"),
    ("V100", G::V100, 2, "n1-standard-16"),
    ("V100", G::V100, 4, "n1-standard-32"),
    ("V100", G::V100, 8, "n1-standard-64"),
    ("P100", G::P100, 1, "n1-standard-8"),
    ("P100", G::P100, 2, "n1-standard-16"),
    ("P100", G::P100, 4, "n1-standard-32"),
    ("P4", G::P4, 1, "n1-standard-8"),
    ("P4", G::P4, 2, "n1-standard-16"),
    ("P4", G::P4, 4, "n1-standard-32"),
];

/// Plausible on-demand price of one GPU-hour, host included, in USD. Outside it a
/// row is dropped as a data error.
fn plausible_per_gpu(model: &GpuModel) -> (f64, f64) {
    match model {
        G::K80 | G::M60 | G::P4 | G::Mi25 => (0.05, 3.0),
        G::T4 | G::T4g | G::L4 => (0.1, 6.0),
        G::A10 | G::A10G | G::P100 => (0.2, 6.0),
        G::V100 => (0.5, 6.0),
        G::A100 | G::A100_80GB | G::L40S | G::RtxPro6000 => (0.5, 10.0),
        G::H100 | G::H200 => (1.0, 20.0),
        _ => (0.05, 30.0),
    }
}

const AWS_SOURCE: &str = "skypilot-catalog-aws-v7";
const AZURE_SOURCE: &str = "skypilot-catalog-azure-v6";
const GCP_SOURCE: &str = "gcp-billing-skus-2026-07-30";
const GCP_N1_SOURCE: &str = "gcp-billing-skus-2026-07-30+skypilot-gcp-v7-gpus";

/// The source gives no date ("about 2025"); dated to the start of that year.
const AWS_OBSERVED: OffsetDateTime = datetime!(2025-01-01 00:00 UTC);
/// Older than the v7 AWS rows; dated to the start of 2024.
const AZURE_OBSERVED: OffsetDateTime = datetime!(2024-01-01 00:00 UTC);
/// The Cloud Billing snapshot's own date.
const GCP_OBSERVED: OffsetDateTime = datetime!(2026-07-30 00:00 UTC);

fn read_csv(path: &Path) -> Result<Vec<Row>, String> {
    let mut reader =
        csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for r in reader.deserialize::<Row>() {
        rows.push(r.map_err(|e| format!("{}: {e}", path.display()))?);
    }
    Ok(rows)
}

fn field<'a>(row: &'a Row, name: &str) -> &'a str {
    row.get(name).map(|s| s.trim()).unwrap_or("")
}

/// Rounds a float-formatted price from a CSV to six decimals and parses it.
fn price(s: &str) -> Option<Price> {
    let v: f64 = s.trim().parse().ok()?;
    (v > 0.0).then(|| Price::from_usd_per_hour_f64(v))
}

#[derive(Default)]
struct Report {
    lines: Vec<String>,
    counts: BTreeMap<String, usize>,
}

impl Report {
    fn note(&mut self, category: &str, detail: String) {
        *self.counts.entry(category.to_string()).or_default() += 1;
        let line = format!("{category}: {detail}");
        let shown = self
            .lines
            .iter()
            .filter(|l| l.starts_with(category))
            .count();
        if shown < 8 && !self.lines.contains(&line) {
            self.lines.push(line);
        }
    }
}

struct Builder {
    types: BTreeMap<(Cloud, String), Arc<InstanceType>>,
    offers: Vec<Offer>,
    pools: HashSet<Pool>,
    report: Report,
    /// Lines of `core/data/commitments.csv`.
    commitments: BTreeSet<String>,
}

impl Builder {
    fn add_type(&mut self, t: InstanceType) -> Arc<InstanceType> {
        self.types
            .entry((t.cloud, t.name.clone()))
            .or_insert_with(|| Arc::new(t))
            .clone()
    }

    #[allow(clippy::too_many_arguments)]
    fn add_offer(
        &mut self,
        t: &Arc<InstanceType>,
        region: &str,
        zone: Option<&str>,
        capacity: Capacity,
        price: Price,
        source: &PriceSource,
        observed_at: OffsetDateTime,
        bucket: Option<InterruptionBucket>,
    ) {
        let pool = Pool {
            cloud: t.cloud,
            region: Region::new(region),
            zone: zone.map(Zone::new),
            instance_type: t.name.clone(),
            capacity,
        };
        if !self.pools.insert(pool.clone()) {
            self.report.note("duplicate pool dropped", pool.to_string());
            return;
        }
        self.offers.push(Offer {
            pool,
            instance_type: t.clone(),
            zone_name: None,
            price,
            observed_at,
            source: source.clone(),
            stability: Stability {
                bucket,
                ..Stability::default()
            },
        });
    }

    /// Checks on-demand and spot prices; returns what may be kept.
    fn check_prices(
        &mut self,
        t: &InstanceType,
        at: &str,
        od: Option<Price>,
        spot: Option<Price>,
    ) -> (Option<Price>, Option<Price>) {
        let gpu = t.gpu.as_ref().map(|g| (g.model.clone(), g.count.max(1)));
        let (lo, hi) = gpu
            .as_ref()
            .map(|(m, _)| plausible_per_gpu(m))
            .unwrap_or((0.0, f64::MAX));
        let n = gpu.map_or(1, |(_, n)| n) as f64;
        let od = od.filter(|p| {
            let per = p.usd_per_hour_f64() / n;
            let ok = (lo..=hi).contains(&per);
            if !ok {
                self.report.note(
                    "implausible on-demand price dropped",
                    format!("{} {at}: ${:.4}/GPU-h outside {lo}-{hi}", t.name, per),
                );
            }
            ok
        });
        let spot = spot.filter(|s| {
            if let Some(o) = od {
                if *s >= o {
                    self.report.note(
                        "spot price not below on-demand dropped",
                        format!("{} {at}: spot {s} >= on-demand {o}", t.name),
                    );
                    return false;
                }
            }
            let per = s.usd_per_hour_f64() / n;
            let ok = (lo / 20.0..=hi).contains(&per);
            if !ok {
                self.report.note(
                    "implausible spot price dropped",
                    format!("{} {at}: ${:.4}/GPU-h", t.name, per),
                );
            }
            ok
        });
        if od.is_none() && spot.is_some() {
            self.report.note(
                "spot-only pool (no on-demand price in source)",
                format!("{} {at}", t.name),
            );
        }
        (od, spot)
    }
}

fn spec_type(cloud: Cloud, s: &Spec, vcpus: u32, memory_gib: f64) -> InstanceType {
    InstanceType {
        cloud,
        name: s.name.to_string(),
        gpu: Some(GpuSpec {
            model: s.gpu.clone(),
            count: s.count,
            memory_gib: s.mem,
        }),
        vcpus,
        memory_mib: (memory_gib * 1024.0).round() as u64,
        interconnect: Interconnect {
            gpu_link: s.link,
            fabric: s.fabric,
            network_gbps: s.gbps,
        },
    }
}

fn parse_u32(s: &str) -> Option<u32> {
    let v: f64 = s.trim().parse().ok()?;
    (v >= 0.0 && v.fract() == 0.0).then_some(v as u32)
}

fn build_aws(b: &mut Builder, data: &Path) -> Result<(), String> {
    let rows = read_csv(&data.join("skypilot_catalog/aws_vms_v7_gpu_rows_partial.csv"))?;
    let advisor = read_csv(&data.join("aws_spot_advisor/spot_advisor_2025-06-28_accel_linux.csv"))?;
    let buckets: HashMap<(String, String), InterruptionBucket> = advisor
        .iter()
        .filter_map(|r| {
            let idx: u8 = field(r, "interruption_bucket").parse().ok()?;
            Some((
                (
                    field(r, "instance_type").to_string(),
                    field(r, "region").to_string(),
                ),
                InterruptionBucket::from_index(idx)?,
            ))
        })
        .collect();
    let source = PriceSource::new(SourceKind::Snapshot, AWS_SOURCE);
    for r in &rows {
        let name = field(r, "InstanceType");
        let Some(s) = AWS_SPECS.iter().find(|s| s.name == name) else {
            b.report.note(
                "aws type without a published spec skipped",
                name.to_string(),
            );
            continue;
        };
        let csv_count = parse_u32(field(r, "AcceleratorCount")).unwrap_or(0);
        if csv_count != s.count {
            b.report.note(
                "aws GPU count corrected to the published spec",
                format!("{name}: {csv_count} -> {}", s.count),
            );
        }
        let vcpus = parse_u32(field(r, "vCPUs")).unwrap_or(0);
        let mem: f64 = field(r, "MemoryGiB").parse().unwrap_or(0.0);
        let t = b.add_type(spec_type(Cloud::Aws, s, vcpus, mem));
        let (region, zone) = (field(r, "Region"), field(r, "AvailabilityZone"));
        let at = format!("{region}/{zone}");
        let (od, spot) = b.check_prices(
            &t,
            &at,
            price(field(r, "Price")),
            price(field(r, "SpotPrice")),
        );
        if let Some(p) = od {
            b.add_offer(
                &t,
                region,
                Some(zone),
                Capacity::OnDemand,
                p,
                &source,
                AWS_OBSERVED,
                None,
            );
        }
        if let Some(p) = spot {
            let bucket = buckets
                .get(&(name.to_string(), region.to_string()))
                .copied();
            if bucket.is_none() {
                b.report.note(
                    "aws spot offer without a Spot Advisor bucket",
                    format!("{name} {region}"),
                );
            }
            b.add_offer(
                &t,
                region,
                Some(zone),
                Capacity::Spot,
                p,
                &source,
                AWS_OBSERVED,
                bucket,
            );
        }
    }
    Ok(())
}

fn build_azure(b: &mut Builder, data: &Path) -> Result<(), String> {
    let rows = read_csv(&data.join("skypilot_catalog/azure_vms_v6_gpu_rows.csv"))?;
    let source = PriceSource::new(SourceKind::Snapshot, AZURE_SOURCE);
    for r in &rows {
        let name = field(r, "InstanceType");
        if name.ends_with("_Promo") {
            b.report.note("azure promo size skipped", name.to_string());
            continue;
        }
        let Some(s) = AZURE_SPECS.iter().find(|s| s.name == name) else {
            b.report.note(
                "azure size skipped (fractional or non-NVIDIA GPU, or no published spec)",
                name.to_string(),
            );
            continue;
        };
        let csv_count = parse_u32(field(r, "AcceleratorCount")).unwrap_or(0);
        if csv_count != s.count {
            b.report.note(
                "azure GPU count corrected to the published spec",
                format!("{name}: {csv_count} -> {}", s.count),
            );
        }
        let vcpus = parse_u32(field(r, "vCPUs")).unwrap_or(0);
        let mem: f64 = field(r, "MemoryGiB").parse().unwrap_or(0.0);
        let t = b.add_type(spec_type(Cloud::Azure, s, vcpus, mem));
        let region = field(r, "Region");
        let (od, spot) = b.check_prices(
            &t,
            region,
            price(field(r, "Price")),
            price(field(r, "SpotPrice")),
        );
        if let Some(p) = od {
            b.add_offer(
                &t,
                region,
                None,
                Capacity::OnDemand,
                p,
                &source,
                AZURE_OBSERVED,
                None,
            );
        }
        if let Some(p) = spot {
            b.add_offer(
                &t,
                region,
                None,
                Capacity::Spot,
                p,
                &source,
                AZURE_OBSERVED,
                None,
            );
        }
    }
    Ok(())
}

/// GCP interconnect by machine family and GPU count.
fn gcp_interconnect(machine: &str, count: u32, model: &GpuModel) -> Interconnect {
    let (gpu_link, fabric, network_gbps) = if machine.starts_with("a3-megagpu") {
        (Nvswitch, GpuDirect, Some(1800))
    } else if machine == "a3-highgpu-8g" {
        (Nvswitch, GpuDirect, Some(1000))
    } else if machine.starts_with("a2-") || machine.starts_with("a3-") {
        (
            if count > 1 { Nvswitch } else { Pcie },
            Standard,
            (count >= 8).then_some(100),
        )
    } else if *model == G::V100 && count > 1 {
        (Nvlink, Standard, None)
    } else {
        (Pcie, Standard, None)
    };
    Interconnect {
        gpu_link,
        fabric,
        network_gbps,
    }
}

fn build_gcp(b: &mut Builder, data: &Path) -> Result<(), String> {
    let vm_rows = read_csv(
        &data.join("gcp_price_history_cyclenerd/gcp_vm_prices_snapshot_2026-07-30_gpu_and_n1.csv"),
    )?;
    let gpu_rows = read_csv(&data.join("skypilot_catalog/gcp_vms_v7_gpu_rows.csv"))?;
    // Zones offering each accelerator, per region.
    let mut zones: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
    // GPU-only prices per (accelerator, count, zone).
    let mut gpu_prices: HashMap<(String, u32, String), PricePair> = HashMap::new();
    for r in &gpu_rows {
        let acc = field(r, "AcceleratorName").to_string();
        let zone = field(r, "AvailabilityZone").to_string();
        zones
            .entry((acc.clone(), field(r, "Region").to_string()))
            .or_default()
            .insert(zone.clone());
        if let Some(n) = parse_u32(field(r, "AcceleratorCount")) {
            gpu_prices.insert(
                (acc, n, zone),
                (price(field(r, "Price")), price(field(r, "SpotPrice"))),
            );
        }
    }
    let source = PriceSource::new(SourceKind::Snapshot, GCP_SOURCE);
    let n1_source = PriceSource::new(SourceKind::Snapshot, GCP_N1_SOURCE);
    let mut hosts: HashMap<(String, String), Host> = HashMap::new();
    for r in &vm_rows {
        let machine = field(r, "instance_type");
        let region = field(r, "region");
        if machine.starts_with("n1-") {
            hosts.insert(
                (machine.to_string(), region.to_string()),
                (
                    (
                        price(field(r, "hour_usd")),
                        price(field(r, "hour_spot_usd")),
                    ),
                    parse_u32(field(r, "vcpus")).unwrap_or(0),
                    field(r, "ram_gb").parse().unwrap_or(0.0),
                ),
            );
            continue;
        }
        let Some(count) = parse_u32(field(r, "accelerator_count")).filter(|n| *n >= 1) else {
            b.report
                .note("gcp fractional-GPU shape skipped", machine.to_string());
            continue;
        };
        let acc = field(r, "accelerator");
        let model = GpuModel::from_cloud_name(acc);
        let Some(mem) = model.default_memory_gib() else {
            b.report.note(
                "gcp shape with an unknown GPU skipped",
                format!("{machine} ({acc})"),
            );
            continue;
        };
        let t = b.add_type(InstanceType {
            cloud: Cloud::Gcp,
            name: machine.to_string(),
            gpu: Some(GpuSpec {
                model: model.clone(),
                count,
                memory_gib: mem,
            }),
            vcpus: parse_u32(field(r, "vcpus")).unwrap_or(0),
            memory_mib: (field(r, "ram_gb").parse::<f64>().unwrap_or(0.0) * 1024.0).round() as u64,
            interconnect: gcp_interconnect(machine, count, &model),
        });
        let skypilot_acc = match (machine, &model) {
            (m, _) if m.starts_with("a3-megagpu") => "H100-MEGA",
            (_, G::A100) => "A100",
            (_, G::A100_80GB) => "A100-80GB",
            (_, G::H100) => "H100",
            (_, G::L4) => "L4",
            _ => "",
        };
        let (od, spot) = b.check_prices(
            &t,
            region,
            price(field(r, "hour_usd")),
            price(field(r, "hour_spot_usd")),
        );
        if od.is_some() {
            for (term, col) in [("1y", "month_1y_cud_usd"), ("3y", "month_3y_cud_usd")] {
                match field(r, col).parse::<f64>() {
                    Ok(month) if month > 0.0 => {
                        let hourly = Price::from_usd_per_hour_f64(month / 730.0);
                        b.commitments.insert(format!(
                            "gcp,{machine},{region},{term},{},{GCP_SOURCE}",
                            hourly.display(6)
                        ));
                    }
                    _ => b.report.note(
                        "gcp shape without a committed-use price",
                        format!("{machine} {region} {term}"),
                    ),
                }
            }
        }
        let region_zones: Vec<Option<String>> = if skypilot_acc.is_empty() {
            b.report.note(
                "gcp shape priced per region (no zone data in source)",
                format!("{machine} {region}"),
            );
            vec![None]
        } else {
            match zones.get(&(skypilot_acc.to_string(), region.to_string())) {
                Some(z) => z.iter().cloned().map(Some).collect(),
                None => {
                    b.report.note(
                        "gcp region without zone data skipped",
                        format!("{machine} {region}"),
                    );
                    continue;
                }
            }
        };
        for zone in region_zones {
            if let Some(p) = od {
                b.add_offer(
                    &t,
                    region,
                    zone.as_deref(),
                    Capacity::OnDemand,
                    p,
                    &source,
                    GCP_OBSERVED,
                    None,
                );
            }
            if let Some(p) = spot {
                b.add_offer(
                    &t,
                    region,
                    zone.as_deref(),
                    Capacity::Spot,
                    p,
                    &source,
                    GCP_OBSERVED,
                    None,
                );
            }
        }
    }
    // GPUs attached to N1 hosts: host price (per region) + GPU price (per zone).
    let mut attach: Vec<(&(String, u32, String), &PricePair)> = gpu_prices.iter().collect();
    attach.sort_by(|a, b| a.0.cmp(b.0));
    for ((acc, count, zone), (gpu_od, gpu_spot)) in attach {
        for (host_acc, model, n, host) in GCP_N1_HOSTS {
            if host_acc != acc || n != count {
                continue;
            }
            let region = zone.rsplit_once('-').map_or(zone.as_str(), |(r, _)| r);
            let Some(((host_od, host_spot), vcpus, ram)) =
                hosts.get(&(host.to_string(), region.to_string()))
            else {
                b.report.note(
                    "gcp N1 host price missing; attachment skipped",
                    format!("{host} {region}"),
                );
                continue;
            };
            let name = format!("{host}+nvidia-tesla-{}x{n}", acc.to_lowercase());
            let t = b.add_type(InstanceType {
                cloud: Cloud::Gcp,
                name,
                gpu: Some(GpuSpec {
                    model: model.clone(),
                    count: *n,
                    memory_gib: model.default_memory_gib().unwrap_or(16),
                }),
                vcpus: *vcpus,
                memory_mib: (ram * 1024.0).round() as u64,
                interconnect: gcp_interconnect(host, *n, model),
            });
            let sum = |a: &Option<Price>, b: &Option<Price>| {
                a.zip(*b).and_then(|(a, b)| a.checked_add(b))
            };
            let (od, spot) =
                b.check_prices(&t, zone, sum(host_od, gpu_od), sum(host_spot, gpu_spot));
            if let Some(p) = od {
                b.add_offer(
                    &t,
                    region,
                    Some(zone),
                    Capacity::OnDemand,
                    p,
                    &n1_source,
                    GCP_OBSERVED,
                    None,
                );
            }
            if let Some(p) = spot {
                b.add_offer(
                    &t,
                    region,
                    Some(zone),
                    Capacity::Spot,
                    p,
                    &n1_source,
                    GCP_OBSERVED,
                    None,
                );
            }
        }
    }
    Ok(())
}

/// Builds the snapshot, writes it to `out` and the report beside it, and returns
/// a summary.
pub fn build(data: &Path, out: &Path) -> Result<String, String> {
    let mut b = Builder {
        types: BTreeMap::new(),
        offers: Vec::new(),
        pools: HashSet::new(),
        report: Report::default(),
        commitments: BTreeSet::new(),
    };
    build_aws(&mut b, data)?;
    build_gcp(&mut b, data)?;
    build_azure(&mut b, data)?;
    b.offers.sort_by(|x, y| x.pool.cmp(&y.pool));
    let sources = vec![
        SnapshotSource {
            id: "aws".into(),
            source: PriceSource::new(SourceKind::Snapshot, AWS_SOURCE),
            observed_at: AWS_OBSERVED,
        },
        SnapshotSource {
            id: "gcp".into(),
            source: PriceSource::new(SourceKind::Snapshot, GCP_SOURCE),
            observed_at: GCP_OBSERVED,
        },
        SnapshotSource {
            id: "gcp-n1".into(),
            source: PriceSource::new(SourceKind::Snapshot, GCP_N1_SOURCE),
            observed_at: GCP_OBSERVED,
        },
        SnapshotSource {
            id: "azure".into(),
            source: PriceSource::new(SourceKind::Snapshot, AZURE_SOURCE),
            observed_at: AZURE_OBSERVED,
        },
    ];
    let types: Vec<Arc<InstanceType>> = b.types.values().cloned().collect();
    let snapshot = Snapshot::from_parts(sources, types, b.offers).map_err(|e| e.to_string())?;
    let text = snapshot.to_text();
    // The written file must read back to the same offers.
    let back =
        Snapshot::parse(&text).map_err(|e| format!("the written snapshot does not parse: {e}"))?;
    if back.offers() != snapshot.offers() {
        return Err("the written snapshot does not read back to the same offers".into());
    }
    std::fs::write(out, &text).map_err(|e| format!("{}: {e}", out.display()))?;

    let mut summary = String::new();
    for cloud in Cloud::REAL {
        let types = snapshot
            .instance_types()
            .iter()
            .filter(|t| t.cloud == cloud)
            .count();
        let offers: Vec<&Offer> = snapshot
            .offers()
            .iter()
            .filter(|o| o.pool.cloud == cloud)
            .collect();
        let spot = offers
            .iter()
            .filter(|o| o.pool.capacity == Capacity::Spot)
            .count();
        let _ = writeln!(
            summary,
            "{cloud}: {types} GPU instance types, {} offers ({} on-demand, {spot} spot) in {} regions",
            offers.len(),
            offers.len() - spot,
            snapshot.regions(cloud).len()
        );
    }
    let _ = writeln!(summary, "\nchecks (count, then up to 8 examples each):");
    for (category, n) in &b.report.counts {
        let _ = writeln!(summary, "  {n:5}  {category}");
    }
    for line in &b.report.lines {
        let _ = writeln!(summary, "         {line}");
    }
    let mut commitments = String::from("cloud,instance_type,region,term,hourly_usd,source\n");
    for line in &b.commitments {
        commitments.push_str(line);
        commitments.push('\n');
    }
    let commit_path = out.with_file_name("commitments.csv");
    std::fs::write(&commit_path, &commitments)
        .map_err(|e| format!("{}: {e}", commit_path.display()))?;
    let _ = writeln!(
        summary,
        "\ncommitted-use prices: {} (gcp, 1y and 3y)",
        b.commitments.len()
    );
    let report_path = out.with_file_name("catalog-report.txt");
    std::fs::write(&report_path, &summary)
        .map_err(|e| format!("{}: {e}", report_path.display()))?;
    Ok(summary)
}
