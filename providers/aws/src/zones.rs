//! EC2 zones: the zone names an account sees (`us-east-1a`, shuffled per
//! account) and the AZ IDs that are the same everywhere (`use1-az4`).
//! gpufleet names zones by AZ ID, so that pools, prices and notices agree
//! across accounts; EC2 calls that take a zone name get it from here.

use std::collections::HashMap;
use std::sync::Arc;

use gpufleet_model::{Region, Result};

use crate::error::from_sdk;
use crate::AwsProvider;

/// Zone names (`us-east-1a`, different in every account) and AZ IDs
/// (`use1-az4`, the same everywhere) of one region.
#[derive(Debug, Default)]
pub(crate) struct Zones {
    pub(crate) id_by_name: HashMap<String, String>,
    pub(crate) name_by_id: HashMap<String, String>,
}

/// The zone map of a region (fetched once: it does not change).
pub(crate) async fn zones(p: &AwsProvider, region: &Region) -> Result<Arc<Zones>> {
    if let Some(z) = p.inner.zones.lock().await.get(region) {
        return Ok(z.clone());
    }
    let out = p
        .client(region)?
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| from_sdk("DescribeAvailabilityZones", e))?;
    let mut zones = Zones::default();
    for z in out.availability_zones() {
        if let (Some(name), Some(id)) = (z.zone_name(), z.zone_id()) {
            zones.id_by_name.insert(name.to_string(), id.to_string());
            zones.name_by_id.insert(id.to_string(), name.to_string());
        }
    }
    let zones = Arc::new(zones);
    p.inner
        .zones
        .lock()
        .await
        .insert(region.clone(), zones.clone());
    Ok(zones)
}
