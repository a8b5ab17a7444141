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

mod aws;
mod azure;
mod gcp;
mod specs;
use self::{aws::*, azure::*, gcp::*, specs::*};

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

/// Where a row's prices come from, and when they were observed.
struct Listed {
    source: PriceSource,
    observed_at: OffsetDateTime,
}

impl Listed {
    fn new(source: &str, observed_at: OffsetDateTime) -> Self {
        Self {
            source: PriceSource::new(SourceKind::Snapshot, source),
            observed_at,
        }
    }
}

struct Builder {
    types: BTreeMap<(Cloud, String), Arc<InstanceType>>,
    offers: Vec<Offer>,
    pools: HashSet<Pool>,
    report: Report,
    /// Lines of `core/data/commitments.csv` (the advisor's, in core).
    commitments: BTreeSet<String>,
}

impl Builder {
    fn add_type(&mut self, t: InstanceType) -> Arc<InstanceType> {
        self.types
            .entry((t.cloud, t.name.clone()))
            .or_insert_with(|| Arc::new(t))
            .clone()
    }

    /// The instance type a SkyPilot row (AWS, Azure) names, from the published
    /// spec of that name, and the row's prices as [`Builder::check_prices`]
    /// keeps them (`at` names the place in its notes); `None` (and a note
    /// saying `skipped`) without a spec. A GPU count that disagrees with the
    /// spec is corrected and noted.
    fn spec_row(
        &mut self,
        (cloud, specs): (Cloud, &[Spec]),
        r: &Row,
        at: &str,
        skipped: &str,
    ) -> Option<(Arc<InstanceType>, PricePair)> {
        let name = field(r, "InstanceType");
        let Some(s) = specs.iter().find(|s| s.name == name) else {
            self.report.note(skipped, name.to_string());
            return None;
        };
        let csv_count = parse_u32(field(r, "AcceleratorCount")).unwrap_or(0);
        if csv_count != s.count {
            self.report.note(
                &format!("{cloud} GPU count corrected to the published spec"),
                format!("{name}: {csv_count} -> {}", s.count),
            );
        }
        let vcpus = parse_u32(field(r, "vCPUs")).unwrap_or(0);
        let mem: f64 = field(r, "MemoryGiB").parse().unwrap_or(0.0);
        let t = self.add_type(spec_type(cloud, s, vcpus, mem));
        let (od, spot) = (price(field(r, "Price")), price(field(r, "SpotPrice")));
        let prices = self.check_prices(&t, at, od, spot);
        Some((t, prices))
    }

    /// Adds a pool's on-demand and spot offers, whichever of `prices` is
    /// there (as [`Builder::check_prices`] kept them); `spot_bucket` is the
    /// spot offer's published interruption bucket.
    fn add_offers(
        &mut self,
        t: &Arc<InstanceType>,
        (region, zone): (&str, Option<&str>),
        prices: PricePair,
        listed: &Listed,
        spot_bucket: Option<InterruptionBucket>,
    ) {
        let (od, spot) = prices;
        let offers = [
            od.map(|p| (Capacity::OnDemand, p, None)),
            spot.map(|p| (Capacity::Spot, p, spot_bucket)),
        ];
        for (capacity, price, bucket) in offers.into_iter().flatten() {
            let pool = Pool {
                cloud: t.cloud,
                region: Region::new(region),
                zone: zone.map(Zone::new),
                instance_type: t.name.clone(),
                capacity,
            };
            if !self.pools.insert(pool.clone()) {
                self.report.note("duplicate pool dropped", pool.to_string());
                continue;
            }
            self.offers.push(Offer {
                pool,
                instance_type: t.clone(),
                zone_name: None,
                price,
                observed_at: listed.observed_at,
                effective_at: None,
                source: listed.source.clone(),
                stability: Stability {
                    bucket,
                    ..Stability::default()
                },
            });
        }
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

fn parse_u32(s: &str) -> Option<u32> {
    let v: f64 = s.trim().parse().ok()?;
    (v >= 0.0 && v.fract() == 0.0).then_some(v as u32)
}

/// Builds the snapshot, writes it to `out` and the report beside it, GCP's
/// committed-use prices to `commitments_out`, and returns a summary.
pub fn build(data: &Path, out: &Path, commitments_out: &Path) -> Result<String, String> {
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
    let commit_path = commitments_out;
    std::fs::write(commit_path, &commitments)
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
