//! What is offered where: capacity types, pools, price sources, stability signals, price points and offers.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::money::Price;

use super::*;

/// On-demand or spot (GCP Spot VMs, Azure Spot VMs, AWS Spot Instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "kebab-case")]
pub enum Capacity {
    /// Pay-as-you-go capacity that is not preempted.
    OnDemand,
    /// Spare capacity at a discount that the cloud may take back with short notice.
    Spot,
}

impl Capacity {
    /// `on-demand` or `spot`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl FromStr for Capacity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on-demand" | "ondemand" | "od" | "on_demand" => Ok(Capacity::OnDemand),
            "spot" | "preemptible" => Ok(Capacity::Spot),
            _ => Err(Error::invalid_input(format!(
                "unknown capacity type '{s}'; valid: spot, on-demand"
            ))),
        }
    }
}

/// The unit the placer chooses: one instance type, in one location, with one kind
/// of capacity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pool {
    /// The cloud.
    pub cloud: Cloud,
    /// The region.
    pub region: Region,
    /// The zone, where the cloud prices or allocates per zone (`None` for a
    /// regional pool such as an Azure size priced per region).
    pub zone: Option<Zone>,
    /// The instance type name.
    pub instance_type: String,
    /// On-demand or spot.
    pub capacity: Capacity,
}

impl Pool {
    /// The location part, `region` or `region/zone`.
    pub fn location(&self) -> String {
        match &self.zone {
            Some(z) => format!("{}/{}", self.region, z),
            None => self.region.to_string(),
        }
    }
}

impl fmt::Display for Pool {
    /// `aws:us-east-1/use1-az4:p4d.24xlarge:spot`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.cloud,
            self.location(),
            self.instance_type,
            self.capacity
        )
    }
}

/// Parses a pool as it is displayed (`aws:us-east-1/use1-az4:p4d.24xlarge:spot`):
/// `CLOUD:REGION[/ZONE]:INSTANCE_TYPE:spot|on-demand`.
impl std::str::FromStr for Pool {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Pool> {
        let bad = || {
            crate::Error::invalid_input(format!(
                "invalid pool '{s}': expected CLOUD:REGION[/ZONE]:INSTANCE_TYPE:spot|on-demand, as offers and place print it"
            ))
        };
        let parts: Vec<&str> = s.trim().split(':').collect();
        let [cloud, location, itype, capacity] = parts[..] else {
            return Err(bad());
        };
        let cloud = match cloud.parse::<Cloud>() {
            Ok(c) if c != Cloud::Fake => c,
            _ => return Err(bad()),
        };
        let (region, zone) = match location.split_once('/') {
            Some((r, z)) if !z.is_empty() => (r, Some(Zone::new(z))),
            Some(_) => return Err(bad()),
            None => (location, None),
        };
        let capacity = match capacity {
            "spot" => Capacity::Spot,
            "on-demand" => Capacity::OnDemand,
            _ => return Err(bad()),
        };
        if region.is_empty() || itype.is_empty() {
            return Err(bad());
        }
        Ok(Pool {
            cloud,
            region: Region::new(region),
            zone,
            instance_type: itype.to_string(),
            capacity,
        })
    }
}

/// Where a price (or other observation) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// The snapshot compiled into gpufleet.
    Snapshot,
    /// A cloud API, just now.
    Live,
    /// A local cache of an earlier live fetch.
    Cache,
    /// Given by the user.
    User,
    /// The fake cloud.
    Fake,
}

/// Where a price was observed: the kind and a short name of the source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PriceSource {
    /// Snapshot, live, cache, user or fake.
    pub kind: SourceKind,
    /// The source's name: `skypilot-catalog-aws-v7`,
    /// `ec2:DescribeSpotPriceHistory`, …
    pub name: String,
}

impl PriceSource {
    /// A source of the given kind and name.
    pub fn new(kind: SourceKind, name: impl Into<String>) -> Self {
        PriceSource {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for PriceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            SourceKind::Snapshot => "snapshot",
            SourceKind::Live => "live",
            SourceKind::Cache => "cache",
            SourceKind::User => "user",
            SourceKind::Fake => "fake",
        };
        write!(f, "{kind}:{}", self.name)
    }
}

/// A published band of how often spot capacity is taken back: the AWS Spot
/// Advisor "frequency of interruption" (share of instances interrupted over the
/// trailing month) and the Azure Spot eviction rate use the same five bands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum InterruptionBucket {
    /// Under 5 %.
    #[serde(rename = "<5%")]
    Under5,
    /// 5 to 10 %.
    #[serde(rename = "5-10%")]
    From5To10,
    /// 10 to 15 %.
    #[serde(rename = "10-15%")]
    From10To15,
    /// 15 to 20 %.
    #[serde(rename = "15-20%")]
    From15To20,
    /// Over 20 %.
    #[serde(rename = ">20%")]
    Over20,
}

impl InterruptionBucket {
    /// From the Spot Advisor's `r` index (0 to 4).
    pub fn from_index(r: u8) -> Option<Self> {
        Some(match r {
            0 => InterruptionBucket::Under5,
            1 => InterruptionBucket::From5To10,
            2 => InterruptionBucket::From10To15,
            3 => InterruptionBucket::From15To20,
            4 => InterruptionBucket::Over20,
            _ => return None,
        })
    }

    /// The Spot Advisor's `r` index (0 to 4).
    pub fn index(self) -> u8 {
        self as u8
    }

    /// The band's label: `<5%`, `5-10%`, `10-15%`, `15-20%`, `>20%`.
    pub fn label(self) -> &'static str {
        match self {
            InterruptionBucket::Under5 => "<5%",
            InterruptionBucket::From5To10 => "5-10%",
            InterruptionBucket::From10To15 => "10-15%",
            InterruptionBucket::From15To20 => "15-20%",
            InterruptionBucket::Over20 => ">20%",
        }
    }
}

impl fmt::Display for InterruptionBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Interruptions and capacity failures gpufleet itself saw in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Observed {
    /// Interruptions seen.
    pub interruptions: u32,
    /// Launches refused for lack of capacity.
    pub capacity_failures: u32,
    /// Instance-hours gpufleet watched the pool for.
    pub exposure_hours: f64,
    /// When the last interruption was seen.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_interruption_at: Option<OffsetDateTime>,
}

/// What is known about how likely a pool is to take its capacity back.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Stability {
    /// The estimated interruption hazard in interruptions per instance-hour, where
    /// an estimate has been made.
    pub interruption_rate_per_hour: Option<f64>,
    /// AWS spot placement score, 1 (unlikely to succeed) to 10 (very likely).
    pub placement_score: Option<u8>,
    /// AWS Spot Advisor interruption bucket or Azure eviction-rate band.
    pub bucket: Option<InterruptionBucket>,
    /// What gpufleet itself observed.
    pub observed: Option<Observed>,
}

/// A price point in a spot price history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PricePoint {
    /// The pool.
    pub pool: Pool,
    /// The price from this time on.
    pub price: Price,
    /// When the price took effect.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Where it came from.
    pub source: PriceSource,
}

impl PricePoint {
    /// The history of a cloud that publishes no spot price history (GCP,
    /// Azure): each of `offers` for `pool` as one point, in effect since the
    /// later of its `observed_at` (the price's effective date) and `since`.
    pub fn from_current(
        offers: impl IntoIterator<Item = Offer>,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Vec<PricePoint> {
        offers
            .into_iter()
            .filter(|o| o.pool == *pool)
            .map(|o| PricePoint {
                at: o.observed_at.max(since),
                pool: o.pool,
                price: o.price,
                source: o.source,
            })
            .collect()
    }
}

/// A price for a pool, observed at a time from a source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    /// The pool.
    pub pool: Pool,
    /// The instance type sold in the pool.
    pub instance_type: Arc<InstanceType>,
    /// The account-specific zone name where it differs from the zone ID (AWS
    /// `us-east-1a` for `use1-az4`).
    pub zone_name: Option<String>,
    /// The hourly price of one instance.
    pub price: Price,
    /// When gpufleet last fetched the price (a live call, the catalog
    /// cache's refresh) or published it (the embedded snapshot's build):
    /// what every PRICE AGE means.
    #[serde(with = "time::serde::rfc3339")]
    pub observed_at: OffsetDateTime,
    /// Since when the cloud says the price applies (Azure's
    /// `effectiveStartDate`), where it says: not how fresh it is.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub effective_at: Option<OffsetDateTime>,
    /// Where it came from.
    pub source: PriceSource,
    /// Stability signals for the pool.
    pub stability: Stability,
}

impl Offer {
    /// The hourly price of one GPU of the instance (the whole price without GPUs).
    pub fn price_per_gpu(&self) -> Price {
        self.price.per(self.instance_type.gpu_count())
    }
}
