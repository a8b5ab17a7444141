//! Placement groups: strategies, requests and groups.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

use super::*;

/// How instances in a placement group are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "strategy", content = "partitions")]
pub enum PlacementStrategy {
    /// Close together for low latency (AWS cluster, GCP compact collocation, Azure
    /// proximity placement group).
    Cluster,
    /// On distinct hardware.
    Spread,
    /// Across the given number of partitions (AWS partition groups, 1 to 7).
    Partition(u8),
}

impl fmt::Display for PlacementStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementStrategy::Cluster => f.write_str("cluster"),
            PlacementStrategy::Spread => f.write_str("spread"),
            PlacementStrategy::Partition(n) => write!(f, "partition({n})"),
        }
    }
}

/// Parses `cluster`, `spread` or `partition:N` (N from 1 to 7), as
/// `launch --placement-group` takes it.
impl std::str::FromStr for PlacementStrategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "cluster" => Ok(PlacementStrategy::Cluster),
            "spread" => Ok(PlacementStrategy::Spread),
            other => match other.strip_prefix("partition:").map(str::parse::<u8>) {
                Some(Ok(n)) if (1..=7).contains(&n) => Ok(PlacementStrategy::Partition(n)),
                _ => Err(Error::invalid_input(format!(
                    "invalid placement group strategy '{other}': expected cluster, spread or partition:N with N from 1 to 7"
                ))),
            },
        }
    }
}

/// A request for a placement group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementGroupRequest {
    /// A name unique in the account and region.
    pub name: String,
    /// How to place.
    pub strategy: PlacementStrategy,
    /// The region.
    pub region: Region,
    /// The zone, for clouds whose groups are zonal.
    pub zone: Option<Zone>,
    /// Tags.
    pub tags: Tags,
}

impl PlacementGroupRequest {
    /// Checks the request is well formed, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty()
            || self.name.len() > 63
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(Error::invalid_input(format!(
                "invalid placement group name '{}': use 1 to 63 letters, digits and '-'",
                self.name
            )));
        }
        if let PlacementStrategy::Partition(n) = self.strategy {
            if !(1..=7).contains(&n) {
                return Err(Error::invalid_input(format!(
                    "invalid partition count {n}: a partition placement group has 1 to 7 partitions"
                )));
            }
        }
        Ok(())
    }
}

/// A placement group: AWS cluster/spread/partition group, GCP compact resource
/// policy, Azure proximity placement group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementGroup {
    /// The cloud's identifier.
    pub id: PlacementGroupId,
    /// Its name.
    pub name: String,
    /// The cloud.
    pub cloud: Cloud,
    /// How it places.
    pub strategy: PlacementStrategy,
    /// The region.
    pub region: Region,
    /// The zone, for clouds whose groups are zonal.
    pub zone: Option<Zone>,
    /// Tags.
    pub tags: Tags,
}
