//! `gpufleet offers`: one row per offer.

use serde::Serialize;
use time::OffsetDateTime;

use super::{enum_name, rfc3339, round};
use crate::Offer;

/// One offer as `offers --output json` prints it. The field names are a
/// stable schema.
#[derive(Debug, Clone, Serialize)]
pub struct OfferRow {
    /// Cloud.
    pub cloud: String,
    /// Region.
    pub region: String,
    /// Zone, where the offer is zonal.
    pub zone: Option<String>,
    /// Instance type.
    pub instance_type: String,
    /// GPU model (empty for none).
    pub gpu_model: String,
    /// GPUs per instance.
    pub gpu_count: u32,
    /// Memory of one GPU, GiB.
    pub gpu_memory_gib: u32,
    /// vCPUs.
    pub vcpus: u32,
    /// Host memory, GiB.
    pub memory_gib: f64,
    /// `on-demand` or `spot`.
    pub capacity: &'static str,
    /// Price of the instance, USD per hour.
    pub price_per_hour_usd: f64,
    /// Price per GPU, USD per hour.
    pub price_per_gpu_hour_usd: f64,
    /// When gpufleet fetched or published the price (RFC 3339): what PRICE
    /// AGE counts from.
    pub observed_at: String,
    /// Since when the cloud says the price applies (RFC 3339), where it
    /// says (Azure's `effectiveStartDate`).
    pub effective_at: Option<String>,
    /// Where the price came from.
    pub source: String,
    /// The spot interruption band, where the cloud publishes one.
    pub interruption_bucket: Option<&'static str>,
    /// The GPUs' link within a node.
    pub gpu_link: String,
    /// The fabric between nodes.
    pub fabric: String,
    /// Network bandwidth, Gbit/s, where known.
    pub network_gbps: Option<u32>,
}

impl From<&Offer> for OfferRow {
    fn from(o: &Offer) -> Self {
        let t = &o.instance_type;
        let gpu = t.gpu.as_ref();
        OfferRow {
            cloud: o.pool.cloud.to_string(),
            region: o.pool.region.to_string(),
            zone: o.pool.zone.as_ref().map(|z| z.to_string()),
            instance_type: t.name.clone(),
            gpu_model: gpu.map(|g| g.model.to_string()).unwrap_or_default(),
            gpu_count: t.gpu_count(),
            gpu_memory_gib: gpu.map_or(0, |g| g.memory_gib),
            vcpus: t.vcpus,
            memory_gib: round(t.memory_gib(), 2),
            capacity: o.pool.capacity.as_str(),
            price_per_hour_usd: o.price.usd_per_hour_f64(),
            price_per_gpu_hour_usd: o.price_per_gpu().usd_per_hour_f64(),
            observed_at: rfc3339(o.observed_at),
            effective_at: o.effective_at.map(rfc3339),
            source: o.source.to_string(),
            interruption_bucket: o.stability.bucket.map(|b| b.label()),
            gpu_link: enum_name(&t.interconnect.gpu_link),
            fabric: enum_name(&t.interconnect.fabric),
            network_gbps: t.interconnect.network_gbps,
        }
    }
}

/// How long ago a price was observed, for people: `5m`, `3h`, `2d`, `1.9y`.
pub fn price_age(observed: OffsetDateTime, now: OffsetDateTime) -> String {
    let secs = (now - observed).whole_seconds().max(0);
    match secs {
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s if s < 365 * 86_400 => format!("{}d", s / 86_400),
        s => format!("{:.1}y", s as f64 / (365.25 * 86_400.0)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn price_ages_read_at_a_glance() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let ago = |s: i64| now - time::Duration::seconds(s);
        assert_eq!(price_age(ago(300), now), "5m");
        assert_eq!(price_age(ago(3 * 3600), now), "3h");
        assert_eq!(price_age(ago(40 * 86_400), now), "40d");
        assert_eq!(price_age(ago(700 * 86_400), now), "1.9y");
        assert_eq!(price_age(now + time::Duration::HOUR, now), "0m");
    }
}
