//! The Cloud Billing side of the stand-in: SKUs as `services.skus.list`
//! returns them, the default catalog, and the paged list.

use std::collections::HashMap;

use serde_json::{json, Value};
use wiremock::ResponseTemplate;

use super::{error, Fault, Gce};

fn money(usd_nanos: i64) -> Value {
    json!({"currencyCode": "USD", "units": (usd_nanos / 1_000_000_000).to_string(), "nanos": usd_nanos % 1_000_000_000})
}

/// A Cloud Billing SKU as `services.skus.list` returns it.
pub fn sku(
    id: &str,
    description: &str,
    group: &str,
    usage: &str,
    regions: &[&str],
    unit: &str,
    usd_nanos: i64,
    effective: &str,
) -> Value {
    json!({
        "name": format!("services/6F81-5844-456A/skus/{id}"),
        "skuId": id,
        "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                     "resourceGroup": group, "usageType": usage},
        "serviceRegions": regions,
        "pricingInfo": [{
            "summary": "",
            "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd_nanos)}],
                "usageUnitDescription": if unit == "h" { "hour" } else { "gibibyte hour" },
                "baseUnit": if unit == "h" { "s" } else { "By.s" },
                "baseUnitDescription": "second", "baseUnitConversionFactor": 3600
            },
            "currencyConversionRate": 1,
            "effectiveTime": effective
        }],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": regions}
    })
}

/// The SKUs of the default world, in two pages; page 2 changes the A2 Spot
/// GPU price (newer effectiveTime) and holds SKUs that price nothing
/// gpufleet offers.
pub fn default_skus() -> Vec<Vec<Value>> {
    const T0: &str = "2026-10-01T07:00:00Z";
    const T1: &str = "2026-11-01T07:00:00Z";
    // (id, description, resource group, usage type, unit, USD nanos, effective)
    #[rustfmt::skip]
    let pages: [&[(&str, &str, &str, &str, &str, i64, &str)]; 2] = [&[
        ("A001", "A2 Instance Core running in Americas", "CPU", "OnDemand", "h", 31_611_000, T0),
        ("A002", "A2 Instance Ram running in Americas", "RAM", "OnDemand", "GiBy.h", 4_237_000, T0),
        ("A003", "Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", "h", 2_933_908_000, T0),
        ("A004", "Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", "h", 9_483_000, T0),
        ("A005", "Spot Preemptible A2 Instance Ram running in Americas", "RAM", "Preemptible", "GiBy.h", 1_271_000, T0),
        ("A006", "Spot Preemptible Nvidia Tesla A100 GPU running in Americas", "GPU", "Preemptible", "h", 1_000_000_000, T0),
        ("N001", "N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", "h", 31_611_000, T0),
        ("N002", "N1 Predefined Instance Ram running in Americas", "RAM", "OnDemand", "GiBy.h", 4_237_000, T0),
        ("N003", "Spot Preemptible N1 Predefined Instance Core running in Americas", "N1Standard", "Preemptible", "h", 6_655_000, T0),
        ("N004", "Spot Preemptible N1 Predefined Instance Ram running in Americas", "RAM", "Preemptible", "GiBy.h", 892_000, T0),
        ("T001", "Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", "h", 350_000_000, T0),
        ("T002", "Spot Preemptible Nvidia Tesla T4 GPU running in Americas", "GPU", "Preemptible", "h", 140_000_000, T0),
    ], &[
        ("A006", "Spot Preemptible Nvidia Tesla A100 GPU running in Americas", "GPU", "Preemptible", "h", 1_200_000_000, T1),
        ("X001", "Commitment v1: A2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", "h", 19_915_000, T0),
        ("X002", "Licensing Fee for SQL Server 2022 Enterprise on VM with 1 to 4 VCPU", "License", "OnDemand", "h", 1_500_000_000, T0),
        ("X003", "Storage PD Capacity", "PDStandard", "OnDemand", "GiBy.mo", 40_000_000, T0),
        ("X004", "Nvidia Quantum Flux Capacitor GPU running in Americas", "GPU", "OnDemand", "h", 1, T0),
    ]];
    let r = &["us-central1", "europe-west4"];
    pages
        .iter()
        .map(|page| {
            let each = |&(id, description, group, usage, unit, nanos, at)| {
                sku(id, description, group, usage, r, unit, nanos, at)
            };
            page.iter().map(each).collect()
        })
        .collect()
}

impl Gce {
    /// `services.skus.list`: the held pages, by `sku-N` page tokens.
    pub(super) fn skus(&self, q: &HashMap<String, String>) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        if let Some(f) = s.faults.take("services.skus.list", format!("{q:?}")) {
            match f {
                Fault::Http(status, reason, after) => {
                    return Fault::respond(status, &reason, after, |s, r| error(s, r, "injected"))
                }
                Fault::Raw(t) => return t,
                _ => {}
            }
        }
        let idx: usize = q
            .get("pageToken")
            .and_then(|t| t.strip_prefix("sku-"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let page = s.sku_pages.get(idx).cloned().unwrap_or_default();
        let next = if idx + 1 < s.sku_pages.len() {
            format!("sku-{}", idx + 1)
        } else {
            String::new()
        };
        ResponseTemplate::new(200).set_body_json(json!({"skus": page, "nextPageToken": next}))
    }
}
