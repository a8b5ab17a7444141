//! Offers: the query every provider answers, sorting, and the snapshot of real
//! published prices compiled into gpufleet.

pub mod plausible;
mod snapshot;

pub use snapshot::{ParseSnapshotError, Snapshot, SnapshotSource, SNAPSHOT_FORMAT};

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use derive_setters::Setters;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::gpu::GpuModel;
use crate::model::{Capacity, Cloud, Offer, Region, Zone};
use crate::money::Price;

/// The most GPUs one instance has on any cloud gpufleet knows (GCP
/// `a2-megagpu-16g`).
pub const MAX_GPUS_PER_INSTANCE: u32 = 16;

/// One acceptable GPU configuration: a model, and optionally an exact count.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuRequirement {
    /// The model.
    pub model: GpuModel,
    /// Exactly this many GPUs per instance; any count when `None`.
    pub count: Option<u32>,
}

impl GpuRequirement {
    /// Whether an offer has this many of this model.
    pub fn matches(&self, offer: &Offer) -> bool {
        match &offer.instance_type.gpu {
            Some(g) => g.model == self.model && self.count.is_none_or(|c| c == g.count),
            None => false,
        }
    }
}

impl FromStr for GpuRequirement {
    type Err = Error;

    /// `MODEL` or `MODEL:COUNT`, such as `H100:8` or `t4`.
    fn from_str(s: &str) -> Result<Self> {
        let (model, count) = match s.rsplit_once(':') {
            Some((m, c)) => (m, Some(c)),
            None => (s, None),
        };
        let model = GpuModel::parse(model).map_err(|e| Error::invalid_input(e.to_string()))?;
        let count = match count {
            None => None,
            Some(c) => match c.trim().parse::<u32>() {
                Ok(n) if (1..=MAX_GPUS_PER_INSTANCE).contains(&n) => Some(n),
                _ => {
                    return Err(Error::invalid_input(format!(
                        "invalid GPU count '{c}' in '{s}': expected a whole number from 1 to {MAX_GPUS_PER_INSTANCE}"
                    )))
                }
            },
        };
        Ok(GpuRequirement { model, count })
    }
}

impl fmt::Display for GpuRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.count {
            Some(c) => write!(f, "{}:{c}", self.model),
            None => write!(f, "{}", self.model),
        }
    }
}

/// Which offers a caller wants. Every field left empty or `None` matches all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Setters)]
#[setters(generate = false, strip_option)]
#[non_exhaustive]
pub struct OfferQuery {
    /// Only these clouds.
    pub clouds: Vec<Cloud>,
    /// Only these regions.
    pub regions: Vec<Region>,
    /// Only these zones.
    pub zones: Vec<Zone>,
    /// Any of these GPU configurations.
    pub gpus: Vec<GpuRequirement>,
    /// At least this much memory per GPU.
    #[setters(generate)]
    pub min_gpu_memory_gib: Option<u32>,
    /// Only this capacity type.
    #[setters(generate)]
    pub capacity: Option<Capacity>,
    /// At most this hourly price per instance.
    #[setters(generate)]
    pub max_price: Option<Price>,
    /// Only these instance types.
    pub instance_types: Vec<String>,
}

impl OfferQuery {
    /// Matches every offer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a cloud.
    pub fn cloud(mut self, cloud: Cloud) -> Self {
        self.clouds.push(cloud);
        self
    }

    /// Adds a region.
    pub fn region(mut self, region: impl Into<Region>) -> Self {
        self.regions.push(region.into());
        self
    }

    /// Adds a zone.
    pub fn zone(mut self, zone: impl Into<Zone>) -> Self {
        self.zones.push(zone.into());
        self
    }

    /// Adds an acceptable GPU configuration.
    pub fn gpu(mut self, model: GpuModel, count: Option<u32>) -> Self {
        self.gpus.push(GpuRequirement { model, count });
        self
    }

    /// Adds an instance type.
    pub fn instance_type(mut self, name: impl Into<String>) -> Self {
        self.instance_types.push(name.into());
        self
    }

    /// Whether the query lets `cloud` through.
    pub fn wants_cloud(&self, cloud: Cloud) -> bool {
        self.clouds.is_empty() || self.clouds.contains(&cloud)
    }

    /// The offers of `all` that match, in pool order: what a provider with
    /// its whole catalog in memory answers.
    pub fn select(&self, all: &[Offer]) -> Vec<Offer> {
        let mut out: Vec<Offer> = all.iter().filter(|o| self.matches(o)).cloned().collect();
        out.sort_by(|a, b| a.pool.cmp(&b.pool));
        out
    }

    /// Whether `offer` matches.
    pub fn matches(&self, offer: &Offer) -> bool {
        let pool = &offer.pool;
        self.wants_cloud(pool.cloud)
            && (self.regions.is_empty() || self.regions.contains(&pool.region))
            && (self.zones.is_empty() || pool.zone.as_ref().is_some_and(|z| self.zones.contains(z)))
            && (self.gpus.is_empty() || self.gpus.iter().any(|g| g.matches(offer)))
            && self.min_gpu_memory_gib.is_none_or(|min| {
                offer
                    .instance_type
                    .gpu
                    .as_ref()
                    .is_some_and(|g| g.memory_gib >= min)
            })
            && self.capacity.is_none_or(|c| c == pool.capacity)
            && self.max_price.is_none_or(|max| offer.price <= max)
            && (self.instance_types.is_empty() || self.instance_types.contains(&pool.instance_type))
    }
}

/// How to order offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OfferSort {
    /// Cheapest instance first.
    #[default]
    Price,
    /// Cheapest GPU-hour first.
    PricePerGpu,
}

impl FromStr for OfferSort {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "price" => Ok(OfferSort::Price),
            "price-per-gpu" => Ok(OfferSort::PricePerGpu),
            _ => Err(Error::invalid_input(format!(
                "unknown sort '{s}'; valid: price, price-per-gpu"
            ))),
        }
    }
}

/// Sorts offers, cheapest first, ties broken by pool so the order is
/// deterministic.
pub fn sort_offers(offers: &mut [Offer], sort: OfferSort) {
    offers.sort_by(|a, b| compare(a, b, sort));
}

fn compare(a: &Offer, b: &Offer, sort: OfferSort) -> Ordering {
    let key = |o: &Offer| match sort {
        OfferSort::Price => o.price,
        OfferSort::PricePerGpu => o.price_per_gpu(),
    };
    key(a).cmp(&key(b)).then_with(|| a.pool.cmp(&b.pool))
}
