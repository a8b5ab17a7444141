//! The catalog snapshot format: a small line-oriented text file, compiled into
//! the binary (`model/data/catalog.txt`, built by `cargo xtask catalog` from real
//! published prices) and also used for local caches of live catalogs.
//!
//! ```text
//! #gpufleet-catalog 1
//! source,<id>,<snapshot|live|cache|user|fake>,<name>,<observed_at RFC 3339>
//! type,<cloud>,<name>,<gpu model>,<gpu count>,<GiB per GPU>,<vcpus>,<memory MiB>,<pcie|nvlink|nvswitch>,<standard|efa|infiniband|gpu-direct>,<Gbit/s or ->
//! offer,<cloud>,<region>,<zone or ->,<instance type>,<on-demand|spot>,<USD per hour>,<source id>,<interruption bucket 0-4 or ->
//! ```
//!
//! Fields hold no commas. Lines starting with `#` after the first are comments.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::OfferQuery;
use crate::gpu::GpuModel;
use crate::model::{
    Capacity, Cloud, Fabric, GpuLink, GpuSpec, InstanceType, Interconnect, InterruptionBucket,
    Offer, Pool, PriceSource, Region, SourceKind, Stability, Zone,
};
use crate::money::Price;

/// The snapshot format version this build reads and writes.
pub const SNAPSHOT_FORMAT: u32 = 1;

const EMBEDDED: &str = include_str!("../../data/catalog.txt");

/// A snapshot line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("catalog snapshot line {line}: {message}")]
pub struct ParseSnapshotError {
    /// 1-based line number (0 for the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl From<ParseSnapshotError> for crate::Error {
    fn from(e: ParseSnapshotError) -> Self {
        crate::Error::invalid_input(e.to_string())
    }
}

/// A source of the prices in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSource {
    /// Short id used by the offer lines.
    pub id: String,
    /// Where it came from.
    pub source: PriceSource,
    /// When its prices were observed.
    pub observed_at: OffsetDateTime,
}

/// A catalog of instance types and offers held in memory.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    sources: Vec<SnapshotSource>,
    types: Vec<Arc<InstanceType>>,
    offers: Vec<Offer>,
}

impl Snapshot {
    /// The snapshot compiled into gpufleet: real published prices for AWS, GCP
    /// and Azure (see `core/data/README.md` for sources and dates).
    pub fn embedded() -> &'static Snapshot {
        static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
        SNAPSHOT.get_or_init(|| {
            #[allow(clippy::expect_used)]
            Snapshot::parse(EMBEDDED)
                .expect("the embedded catalog snapshot is checked by its tests")
        })
    }

    /// Builds a snapshot from parts, checking that every offer's type is listed.
    pub fn from_parts(
        sources: Vec<SnapshotSource>,
        types: Vec<Arc<InstanceType>>,
        offers: Vec<Offer>,
    ) -> Result<Snapshot, ParseSnapshotError> {
        let known: HashSet<(Cloud, &str)> =
            types.iter().map(|t| (t.cloud, t.name.as_str())).collect();
        for o in &offers {
            if !known.contains(&(o.pool.cloud, o.pool.instance_type.as_str())) {
                return Err(ParseSnapshotError {
                    line: 0,
                    message: format!("offer for unlisted instance type {}", o.pool),
                });
            }
        }
        Ok(Snapshot {
            sources,
            types,
            offers,
        })
    }

    /// A snapshot of offers fetched from live APIs at `fetched_at`, to keep as
    /// a local cache: live prices become [`SourceKind::Cache`] prices observed
    /// at `fetched_at`; snapshot prices keep their source and date.
    pub fn from_fetched(offers: Vec<Offer>, fetched_at: OffsetDateTime) -> Snapshot {
        let mut sources: Vec<SnapshotSource> = Vec::new();
        let mut types: Vec<Arc<InstanceType>> = Vec::new();
        let mut out = Vec::with_capacity(offers.len());
        for mut o in offers {
            if o.source.kind == SourceKind::Live {
                o.source.kind = SourceKind::Cache;
                o.observed_at = fetched_at;
            }
            if !sources
                .iter()
                .any(|s| s.source == o.source && s.observed_at == o.observed_at)
            {
                sources.push(SnapshotSource {
                    id: format!("s{}", sources.len() + 1),
                    source: o.source.clone(),
                    observed_at: o.observed_at,
                });
            }
            if !types
                .iter()
                .any(|t| t.cloud == o.instance_type.cloud && t.name == o.instance_type.name)
            {
                types.push(o.instance_type.clone());
            }
            out.push(o);
        }
        Snapshot {
            sources,
            types,
            offers: out,
        }
    }

    /// Reads a snapshot in the format above.
    pub fn parse(text: &str) -> Result<Snapshot, ParseSnapshotError> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
        let version = header
            .strip_prefix("#gpufleet-catalog ")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .ok_or_else(|| ParseSnapshotError {
                line: 1,
                message: format!(
                    "not a gpufleet catalog snapshot: expected '#gpufleet-catalog {SNAPSHOT_FORMAT}', found '{}'",
                    truncate(header)
                ),
            })?;
        if version != SNAPSHOT_FORMAT {
            return Err(ParseSnapshotError {
                line: 1,
                message: format!(
                    "snapshot format {version} is not the format {SNAPSHOT_FORMAT} this gpufleet reads; rebuild it with this version"
                ),
            });
        }

        let mut sources: HashMap<String, SnapshotSource> = HashMap::new();
        let mut source_order = Vec::new();
        let mut types: HashMap<(Cloud, String), Arc<InstanceType>> = HashMap::new();
        let mut type_order = Vec::new();
        let mut offers = Vec::new();
        let mut pools = HashSet::new();

        for (n, line) in lines {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |message: String| ParseSnapshotError { line: n, message };
            let fields: Vec<&str> = line.split(',').collect();
            match fields[0] {
                "source" => {
                    let [_, id, kind, name, at] = exactly(&fields, "a source").map_err(err)?;
                    let kind = parse_source_kind(kind)
                        .ok_or_else(|| err(format!("unknown source kind '{}'", truncate(kind))))?;
                    let observed_at = OffsetDateTime::parse(at, &Rfc3339)
                        .map_err(|e| err(format!("bad time '{}': {e}", truncate(at))))?;
                    let s = SnapshotSource {
                        id: id.to_string(),
                        source: PriceSource::new(kind, name),
                        observed_at,
                    };
                    if sources.insert(id.to_string(), s).is_some() {
                        return Err(err(format!("duplicate source '{}'", truncate(id))));
                    }
                    source_order.push(id.to_string());
                }
                "type" => {
                    let [_, cloud, name, gpu, count, gpu_mem, vcpus, mem_mib, link, fabric, gbps] =
                        exactly(&fields, "a type").map_err(err)?;
                    let cloud = cloud_named(cloud).map_err(err)?;
                    if name.is_empty() {
                        return Err(err("empty instance type name".into()));
                    }
                    let gpu = if gpu == "-" {
                        None
                    } else {
                        Some(GpuSpec {
                            model: GpuModel::from_cloud_name(gpu),
                            count: parse_num(count, "GPU count").map_err(err)?,
                            memory_gib: parse_num(gpu_mem, "GPU memory").map_err(err)?,
                        })
                    };
                    let t = InstanceType {
                        cloud,
                        name: name.to_string(),
                        gpu,
                        vcpus: parse_num(vcpus, "vCPU count").map_err(err)?,
                        memory_mib: parse_num(mem_mib, "memory").map_err(err)?,
                        interconnect: Interconnect {
                            gpu_link: parse_link(link).ok_or_else(|| {
                                err(format!("unknown GPU link '{}'", truncate(link)))
                            })?,
                            fabric: parse_fabric(fabric).ok_or_else(|| {
                                err(format!("unknown fabric '{}'", truncate(fabric)))
                            })?,
                            network_gbps: if gbps == "-" {
                                None
                            } else {
                                Some(parse_num(gbps, "network bandwidth").map_err(err)?)
                            },
                        },
                    };
                    let key = (cloud, name.to_string());
                    if types.contains_key(&key) {
                        return Err(err(format!(
                            "duplicate instance type {cloud}:{}",
                            truncate(name)
                        )));
                    }
                    let t = Arc::new(t);
                    type_order.push(t.clone());
                    types.insert(key, t);
                }
                "offer" => {
                    let [_, cloud, region, zone, itype, capacity, price, source, bucket] =
                        exactly(&fields, "an offer").map_err(err)?;
                    let cloud = cloud_named(cloud).map_err(err)?;
                    let instance_type = types
                        .get(&(cloud, itype.to_string()))
                        .ok_or_else(|| {
                            err(format!(
                                "offer for unlisted instance type '{}'",
                                truncate(itype)
                            ))
                        })?
                        .clone();
                    let capacity: Capacity = capacity
                        .parse()
                        .map_err(|_| err(format!("unknown capacity '{}'", truncate(capacity))))?;
                    let price: Price = price.parse().map_err(|e| err(format!("{e}")))?;
                    if price == Price::ZERO {
                        return Err(err("a price of zero".into()));
                    }
                    let src = sources
                        .get(source)
                        .ok_or_else(|| err(format!("unknown source '{}'", truncate(source))))?;
                    let bucket =
                        if bucket == "-" {
                            None
                        } else {
                            let r: u8 = parse_num(bucket, "interruption bucket").map_err(err)?;
                            Some(InterruptionBucket::from_index(r).ok_or_else(|| {
                                err(format!("interruption bucket {r} is not 0 to 4"))
                            })?)
                        };
                    if region.is_empty() {
                        return Err(err("empty region".into()));
                    }
                    let pool = Pool {
                        cloud,
                        region: Region::new(region),
                        zone: (zone != "-").then(|| Zone::new(zone)),
                        instance_type: itype.to_string(),
                        capacity,
                    };
                    if !pools.insert(pool.clone()) {
                        return Err(err(format!("duplicate pool {pool}")));
                    }
                    offers.push(Offer {
                        pool,
                        instance_type,
                        zone_name: None,
                        price,
                        observed_at: src.observed_at,
                        effective_at: None,
                        source: src.source.clone(),
                        stability: Stability {
                            bucket,
                            ..Stability::default()
                        },
                    });
                }
                other => return Err(err(format!("unknown line kind '{}'", truncate(other)))),
            }
        }
        let sources = source_order
            .into_iter()
            .filter_map(|id| sources.remove(&id))
            .collect();
        Ok(Snapshot {
            sources,
            types: type_order,
            offers,
        })
    }

    /// Writes the snapshot in the format [`Snapshot::parse`] reads.
    pub fn to_text(&self) -> String {
        let mut out = format!("#gpufleet-catalog {SNAPSHOT_FORMAT}\n");
        for s in &self.sources {
            let at = s.observed_at.format(&Rfc3339).unwrap_or_default();
            let _ = writeln!(
                out,
                "source,{},{},{},{}",
                s.id,
                source_kind_str(s.source.kind),
                s.source.name,
                at
            );
        }
        for t in &self.types {
            let (gpu, count, mem) = match &t.gpu {
                Some(g) => (
                    g.model.to_string(),
                    g.count.to_string(),
                    g.memory_gib.to_string(),
                ),
                None => ("-".into(), "0".into(), "0".into()),
            };
            let gbps = t
                .interconnect
                .network_gbps
                .map_or("-".to_string(), |g| g.to_string());
            let _ = writeln!(
                out,
                "type,{},{},{gpu},{count},{mem},{},{},{},{},{gbps}",
                t.cloud,
                t.name,
                t.vcpus,
                t.memory_mib,
                link_str(t.interconnect.gpu_link),
                fabric_str(t.interconnect.fabric),
            );
        }
        for o in &self.offers {
            let source = self
                .sources
                .iter()
                .find(|s| s.source == o.source && s.observed_at == o.observed_at)
                .map_or("-", |s| s.id.as_str());
            let _ = writeln!(
                out,
                "offer,{},{},{},{},{},{},{source},{}",
                o.pool.cloud,
                o.pool.region,
                o.pool.zone.as_ref().map_or("-", |z| z.as_str()),
                o.pool.instance_type,
                o.pool.capacity,
                o.price.display(6),
                o.stability
                    .bucket
                    .map_or("-".to_string(), |b| b.index().to_string()),
            );
        }
        out
    }

    /// Where the prices came from.
    pub fn sources(&self) -> &[SnapshotSource] {
        &self.sources
    }

    /// Every instance type.
    pub fn instance_types(&self) -> &[Arc<InstanceType>] {
        &self.types
    }

    /// Every offer.
    pub fn offers(&self) -> &[Offer] {
        &self.offers
    }

    /// The offers matching `query`.
    pub fn query(&self, query: &OfferQuery) -> Vec<Offer> {
        self.offers
            .iter()
            .filter(|o| query.matches(o))
            .cloned()
            .collect()
    }

    /// The part of the snapshot for one cloud.
    pub fn for_cloud(&self, cloud: Cloud) -> Snapshot {
        Snapshot {
            sources: self.sources.clone(),
            types: self
                .types
                .iter()
                .filter(|t| t.cloud == cloud)
                .cloned()
                .collect(),
            offers: self
                .offers
                .iter()
                .filter(|o| o.pool.cloud == cloud)
                .cloned()
                .collect(),
        }
    }

    /// The regions with offers, per cloud, sorted.
    pub fn regions(&self, cloud: Cloud) -> Vec<Region> {
        let mut regions: Vec<Region> = self
            .offers
            .iter()
            .filter(|o| o.pool.cloud == cloud)
            .map(|o| o.pool.region.clone())
            .collect();
        regions.sort();
        regions.dedup();
        regions
    }

    /// `names` (blank ones skipped) as regions, each checked against the
    /// regions with offers of `clouds` (all the real clouds when empty):
    /// an unknown one is [`crate::ErrorKind::InvalidInput`] naming it, the
    /// nearest known names and the known ones, as every front end (the
    /// CLI's flags and job files, the Python bindings) says it.
    pub fn known_regions<S: AsRef<str>>(
        &self,
        clouds: &[Cloud],
        names: &[S],
    ) -> crate::Result<Vec<Region>> {
        let clouds: &[Cloud] = if clouds.is_empty() {
            &Cloud::REAL
        } else {
            clouds
        };
        let known: Vec<Region> = clouds.iter().flat_map(|c| self.regions(*c)).collect();
        let mut out = Vec::new();
        for r in names
            .iter()
            .map(|r| r.as_ref().trim())
            .filter(|r| !r.is_empty())
        {
            crate::check_known("region", r, known.iter().map(Region::as_str))?;
            out.push(Region::new(r));
        }
        Ok(out)
    }

    /// Checks `zones` (blank ones skipped) against the zones with offers of
    /// `clouds` (all the real clouds when empty) in `regions`: an unknown
    /// one is [`crate::ErrorKind::InvalidInput`] naming the nearest known
    /// ones; an AWS zone *name* (`us-east-1a`, which maps to a different
    /// zone in each account) is refused saying the AZ IDs to use instead.
    pub fn known_zones<S: AsRef<str>>(
        &self,
        clouds: &[Cloud],
        regions: &[Region],
        zones: &[S],
    ) -> crate::Result<()> {
        let clouds: &[Cloud] = if clouds.is_empty() {
            &Cloud::REAL
        } else {
            clouds
        };
        let known: Vec<Zone> = clouds
            .iter()
            .flat_map(|c| self.zones(*c, regions))
            .collect();
        for z in zones
            .iter()
            .map(|z| z.as_ref().trim())
            .filter(|z| !z.is_empty())
        {
            if known.iter().any(|k| k.as_str() == z) {
                continue;
            }
            // us-east-1a, us-gov-west-1b, ap-southeast-4c: a region and a letter.
            let aws_region = z
                .strip_suffix(|c: char| c.is_ascii_lowercase())
                .filter(|r| self.regions(Cloud::Aws).iter().any(|k| k.as_str() == *r));
            if let (Some(region), true) = (aws_region, clouds.contains(&Cloud::Aws)) {
                let ids = self.zones(Cloud::Aws, &[Region::new(region)]);
                return Err(crate::Error::invalid_input(format!(
                    "unknown zone '{z}': AWS zones are named by AZ ID here ({}), the same zone in every account, while a name such as {z} maps to a different zone in each account (`aws ec2 describe-availability-zones --region {region}` shows which)",
                    ids.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
            crate::check_known("zone", z, known.iter().map(|k| k.as_str()))?;
        }
        Ok(())
    }

    /// The zones with offers of `cloud` in `regions` (every region when
    /// empty), sorted: AZ IDs on AWS (`use1-az1`), zone names on GCP.
    pub fn zones(&self, cloud: Cloud, regions: &[Region]) -> Vec<Zone> {
        let mut zones: Vec<Zone> = self
            .offers
            .iter()
            .filter(|o| {
                o.pool.cloud == cloud && (regions.is_empty() || regions.contains(&o.pool.region))
            })
            .filter_map(|o| o.pool.zone.clone())
            .collect();
        zones.sort();
        zones.dedup();
        zones
    }
}

/// A line's fields, which must be `N` (`what` names the line in the error).
fn exactly<'a, const N: usize>(fields: &[&'a str], what: &str) -> Result<[&'a str; N], String> {
    <[&str; N]>::try_from(fields)
        .map_err(|_| format!("{what} line has {N} fields, found {}", fields.len()))
}

/// The cloud a line names.
fn cloud_named(cloud: &str) -> Result<Cloud, String> {
    cloud
        .parse()
        .map_err(|_| format!("unknown cloud '{}'", truncate(cloud)))
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

fn parse_num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("bad {what} '{}': expected a whole number", truncate(s)))
}

fn parse_source_kind(s: &str) -> Option<SourceKind> {
    Some(match s {
        "snapshot" => SourceKind::Snapshot,
        "live" => SourceKind::Live,
        "cache" => SourceKind::Cache,
        "user" => SourceKind::User,
        "fake" => SourceKind::Fake,
        _ => return None,
    })
}

fn source_kind_str(k: SourceKind) -> &'static str {
    match k {
        SourceKind::Snapshot => "snapshot",
        SourceKind::Live => "live",
        SourceKind::Cache => "cache",
        SourceKind::User => "user",
        SourceKind::Fake => "fake",
    }
}

fn parse_link(s: &str) -> Option<GpuLink> {
    Some(match s {
        "pcie" => GpuLink::Pcie,
        "nvlink" => GpuLink::Nvlink,
        "nvswitch" => GpuLink::Nvswitch,
        _ => return None,
    })
}

fn link_str(l: GpuLink) -> &'static str {
    match l {
        GpuLink::Pcie => "pcie",
        GpuLink::Nvlink => "nvlink",
        GpuLink::Nvswitch => "nvswitch",
    }
}

fn parse_fabric(s: &str) -> Option<Fabric> {
    Some(match s {
        "standard" => Fabric::Standard,
        "efa" => Fabric::Efa,
        "infiniband" => Fabric::Infiniband,
        "gpu-direct" => Fabric::GpuDirect,
        _ => return None,
    })
}

fn fabric_str(f: Fabric) -> &'static str {
    match f {
        Fabric::Standard => "standard",
        Fabric::Efa => "efa",
        Fabric::Infiniband => "infiniband",
        Fabric::GpuDirect => "gpu-direct",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "#gpufleet-catalog 1
source,s1,snapshot,test-source,2025-01-01T00:00:00Z
type,aws,p4d.24xlarge,A100,8,40,96,1179648,nvswitch,efa,400
offer,aws,us-east-1,use1-az1,p4d.24xlarge,on-demand,32.7726,s1,-
offer,aws,us-east-1,use1-az1,p4d.24xlarge,spot,9.83,s1,2
";

    #[test]
    fn parses_and_round_trips() {
        let s = Snapshot::parse(SMALL).unwrap();
        assert_eq!(s.offers().len(), 2);
        let spot = &s.offers()[1];
        assert_eq!(spot.pool.capacity, Capacity::Spot);
        assert_eq!(spot.price.to_string(), "9.8300");
        assert_eq!(spot.stability.bucket, Some(InterruptionBucket::From10To15));
        assert_eq!(
            spot.instance_type.gpu.as_ref().unwrap().model,
            GpuModel::A100
        );
        assert_eq!(spot.source.to_string(), "snapshot:test-source");
        let again = Snapshot::parse(&s.to_text()).unwrap();
        assert_eq!(again.offers(), s.offers());
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let bad = SMALL.replace("9.83", "-9.83");
        let e = Snapshot::parse(&bad).unwrap_err();
        assert_eq!(e.line, 5);
        assert!(e.message.contains("negative"), "{e}");

        let e = Snapshot::parse(&SMALL.replace("#gpufleet-catalog 1", "#gpufleet-catalog 9"))
            .unwrap_err();
        assert!(e.to_string().contains("format 9"), "{e}");

        let e = Snapshot::parse(&format!(
            "{SMALL}offer,aws,us-east-1,use1-az1,p4d.24xlarge,spot,9.83,s1,-\n"
        ))
        .unwrap_err();
        assert!(e.message.contains("duplicate pool"), "{e}");

        let e = Snapshot::parse(&SMALL.replace("type,aws,p4d.24xlarge", "type,aws,p5.48xlarge"))
            .unwrap_err();
        assert!(e.message.contains("unlisted instance type"), "{e}");

        // A short line and an unknown cloud: named, with what was found.
        let e = Snapshot::parse(&SMALL.replace(",nvswitch,efa,400", "")).unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.message, "a type line has 11 fields, found 8");
        let e = Snapshot::parse(&SMALL.replace("offer,aws,", "offer,mars,")).unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (4, "unknown cloud 'mars'"));

        assert!(Snapshot::parse("").is_err());
        assert!(Snapshot::parse("#gpufleet-catalog 1\nbogus,1").is_err());
        assert!(Snapshot::parse("#gpufleet-catalog 1\noffer").is_err());
    }
}
