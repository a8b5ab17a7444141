//! Spot prices and stability signals: the `SpotMarket` capability.

use async_trait::async_trait;
use gpufleet_model::{Capacity, Pool, Result, SpotMarket, Stability};

use crate::AzureProvider;

/// Azure publishes no spot price history API: the history is the trait's
/// default, the Retail Prices API's current price from when it took effect.
#[async_trait]
impl SpotMarket for AzureProvider {
    /// Spot eviction-rate bands from Azure Resource Graph (those of the cached
    /// catalog while it is fresh and covers the pools' regions).
    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        let mut regions: Vec<String> = pools.iter().map(|p| p.region.to_string()).collect();
        regions.sort();
        regions.dedup();
        let rates = if pools.iter().any(|p| p.capacity == Capacity::Spot) {
            crate::catalog::cached_eviction_rates(self, &regions).await?
        } else {
            Default::default()
        };
        Ok(pools
            .iter()
            .map(|p| Stability {
                bucket: (p.capacity == Capacity::Spot)
                    .then(|| {
                        rates
                            .get(&(
                                p.instance_type.to_ascii_lowercase(),
                                p.region.as_str().to_ascii_lowercase(),
                            ))
                            .copied()
                    })
                    .flatten(),
                ..Stability::default()
            })
            .collect())
    }
}
