//! Compute Engine prices from the Cloud Billing Catalog.
//!
//! Compute Engine bills a VM by its parts: vCPUs and RAM per machine family
//! and region, plus each GPU. The catalog has one SKU per part, region and
//! usage type, described in English ("Nvidia Tesla T4 GPU running in
//! Americas", "Spot Preemptible A2 Instance Core running in Americas", "N1
//! Predefined Instance Ram running in Americas"). [`Rates`] reads those
//! descriptions into (region, part, capacity) -> price per unit-hour, and
//! [`Rates::vm_price`] adds them up for a machine shape. SKUs that name no
//! part gpufleet prices (licences, commitments, sole tenancy, custom
//! shapes, …) are ignored. When a part appears twice (a price change on a
//! later page), the newer `effectiveTime` wins.

use gpufleet_model::SpotMarket;

use std::collections::HashMap;

use google_cloud_billing_v1::model::Sku;
use gpufleet_model::{Capacity, Price, Result};
use time::OffsetDateTime;

use crate::{all_pages, GcpProvider, COMPUTE_SERVICE};

/// What a SKU prices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    /// A vCPU of a machine family (`n1`, `a2`, `g2`, …).
    Core(String),
    /// A GiB of RAM of a machine family.
    Ram(String),
    /// One GPU of an accelerator type (`nvidia-tesla-t4`).
    Gpu(String),
}

/// Description words that mark SKUs gpufleet does not price.
const SKIP: &[&str] = &[
    "commitment",
    "sole tenancy",
    "custom",
    "reserved",
    "dws",
    "calendar",
    "extended",
    "premium",
    "licens",
    "flex",
    "upgrade",
    "virtual workstation",
];

/// SKU GPU names whose accelerator type is not their plain spelling.
const GPU_ALIASES: &[(&str, &str)] = &[
    ("nvidia-tesla-a100-80gb", "nvidia-a100-80gb"),
    ("nvidia-h100-80gb-mega", "nvidia-h100-mega-80gb"),
    ("nvidia-h100-mega-80gb", "nvidia-h100-mega-80gb"),
    ("nvidia-h200-141gb", "nvidia-h200-141gb"),
];

/// Reads a SKU description and usage type: the part and capacity it prices.
pub(crate) fn parse_sku(description: &str, usage_type: &str) -> Option<(Part, Capacity)> {
    let lower = description.to_ascii_lowercase();
    if SKIP.iter().any(|w| lower.contains(w)) {
        return None;
    }
    let (rest, capacity) = if let Some(r) = lower.strip_prefix("spot preemptible ") {
        (r, Capacity::Spot)
    } else if let Some(r) = lower.strip_prefix("preemptible ") {
        (r, Capacity::Spot)
    } else {
        match usage_type {
            "OnDemand" => (lower.as_str(), Capacity::OnDemand),
            "Preemptible" => (lower.as_str(), Capacity::Spot),
            _ => return None,
        }
    };
    if usage_type == "OnDemand" && capacity == Capacity::Spot
        || usage_type == "Preemptible" && capacity == Capacity::OnDemand
    {
        return None;
    }
    let what = rest.split(" running in ").next()?.trim();
    if let Some(gpu) = what.strip_suffix(" gpu") {
        let name = gpu.split_whitespace().collect::<Vec<_>>().join("-");
        if !name.starts_with("nvidia-") {
            return None;
        }
        let name = GPU_ALIASES
            .iter()
            .find(|(from, _)| *from == name)
            .map_or(name.clone(), |(_, to)| to.to_string());
        return Some((Part::Gpu(name), capacity));
    }
    let words: Vec<&str> = what.split_whitespace().collect();
    let family = (*words.first()?).to_string();
    if !family.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let tail = &words[1..];
    let unit = match tail {
        ["instance", "core"] | ["predefined", "instance", "core"] => Part::Core(family),
        ["instance", "ram"] | ["predefined", "instance", "ram"] => Part::Ram(family),
        _ => return None,
    };
    Some((unit, capacity))
}

/// Price per unit-hour in nano-dollars, from the last tier of the SKU's
/// newest pricing (the tier that applies from the first hour on for
/// Compute Engine, which has one).
fn nanos_per_unit(sku: &Sku) -> Option<(i128, OffsetDateTime)> {
    let info = sku.pricing_info.last()?;
    let expr = info.pricing_expression.as_ref()?;
    let money = expr.tiered_rates.last()?.unit_price.as_ref()?;
    if !money.currency_code.is_empty() && money.currency_code != "USD" {
        return None;
    }
    let nanos = i128::from(money.units) * 1_000_000_000 + i128::from(money.nanos);
    // RAM is priced per GiB-hour ("GiBy.h"), cores and GPUs per hour ("h").
    if !matches!(expr.usage_unit.as_str(), "h" | "GiBy.h") || nanos < 0 {
        return None;
    }
    let at = info
        .effective_time
        .as_ref()
        .and_then(|t| OffsetDateTime::from_unix_timestamp(t.seconds()).ok())
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    Some((nanos, at))
}

/// The parts of a VM shape that are billed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Vm<'a> {
    /// Machine family (`n1`, `a2`, …).
    pub(crate) family: &'a str,
    /// vCPUs.
    pub(crate) vcpus: u32,
    /// RAM in MiB.
    pub(crate) memory_mib: u64,
    /// Accelerator type.
    pub(crate) gpu: &'a str,
    /// How many.
    pub(crate) gpus: u32,
}

/// Part prices per region and capacity.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    rates: HashMap<(String, Part, Capacity), (i128, OffsetDateTime)>,
    /// When the newest price took effect.
    pub(crate) newest: Option<OffsetDateTime>,
}

impl Rates {
    /// Reads SKUs (any order; a newer effective time replaces an older one).
    pub(crate) fn add(&mut self, skus: &[Sku]) {
        for sku in skus {
            let Some(cat) = sku.category.as_ref() else {
                continue;
            };
            if cat.resource_family != "Compute" {
                continue;
            }
            let Some((part, capacity)) = parse_sku(&sku.description, &cat.usage_type) else {
                continue;
            };
            let Some((nanos, at)) = nanos_per_unit(sku) else {
                continue;
            };
            for region in &sku.service_regions {
                let slot = self
                    .rates
                    .entry((region.clone(), part.clone(), capacity))
                    .or_insert((nanos, at));
                if at >= slot.1 {
                    *slot = (nanos, at);
                }
            }
            self.newest = self.newest.max(Some(at));
        }
    }

    /// How many (region, part, capacity) prices are known.
    pub(crate) fn len(&self) -> usize {
        self.rates.len()
    }

    fn get(&self, region: &str, part: Part, capacity: Capacity) -> Option<i128> {
        self.rates
            .get(&(region.to_string(), part, capacity))
            .map(|(n, _)| *n)
    }

    /// The whole-VM price of `vm` in `region`, where every part has a price.
    pub(crate) fn vm_price(&self, region: &str, vm: &Vm<'_>, capacity: Capacity) -> Option<Price> {
        let core = self.get(region, Part::Core(vm.family.into()), capacity)?;
        let ram = self.get(region, Part::Ram(vm.family.into()), capacity)?;
        let gpu = self.get(region, Part::Gpu(vm.gpu.into()), capacity)?;
        let nanos = core * i128::from(vm.vcpus)
            + ram * i128::from(vm.memory_mib) / 1024
            + gpu * i128::from(vm.gpus);
        let micros = (nanos + 500) / 1000;
        i64::try_from(micros)
            .ok()
            .filter(|m| *m > 0)
            .map(Price::from_micros_per_hour)
    }
}

/// All Compute Engine SKUs priced in USD, every page.
pub(crate) async fn fetch_rates(p: &GcpProvider) -> Result<Rates> {
    let mut rates = Rates::default();
    let list = |token: String| {
        let req = p
            .inner
            .billing
            .list_skus()
            .set_parent(COMPUTE_SERVICE)
            .set_currency_code("USD")
            .set_page_size(5000)
            .set_page_token(token);
        async move {
            let page = req.send().await?;
            let next = page.next_page_token.clone();
            Ok((page, next))
        }
    };
    all_pages(p, "services.skus.list", list, |page| rates.add(&page.skus)).await?;
    Ok(rates)
}

/// Compute Engine publishes no spot price history (Spot prices change at most
/// once a month, through the SKU catalog), interruption rates or placement
/// scores: the history is the current SKU price from when it took effect, and
/// the placer's estimate for GCP pools comes from what gpufleet observed.
impl SpotMarket for GcpProvider {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_descriptions() {
        let gpu = |name: &str| Part::Gpu(name.into());
        for (description, usage, want) in [
            (
                "Nvidia Tesla T4 GPU running in Americas",
                "OnDemand",
                Some((gpu("nvidia-tesla-t4"), Capacity::OnDemand)),
            ),
            (
                "Spot Preemptible Nvidia Tesla T4 GPU running in Americas",
                "Preemptible",
                Some((gpu("nvidia-tesla-t4"), Capacity::Spot)),
            ),
            (
                "N1 Predefined Instance Core running in Americas",
                "OnDemand",
                Some((Part::Core("n1".into()), Capacity::OnDemand)),
            ),
            (
                "Spot Preemptible A2 Instance Ram running in Belgium",
                "Preemptible",
                Some((Part::Ram("a2".into()), Capacity::Spot)),
            ),
            (
                "Nvidia H100 80GB Mega GPU running in Iowa",
                "OnDemand",
                Some((gpu("nvidia-h100-mega-80gb"), Capacity::OnDemand)),
            ),
            (
                "Commitment v1: A2 Cpu in Americas for 1 Year",
                "Commit1Yr",
                None,
            ),
            ("Licensing Fee for Windows Server on VM", "OnDemand", None),
            ("Storage PD Capacity", "OnDemand", None),
            ("", "", None),
        ] {
            assert_eq!(parse_sku(description, usage), want, "{description}");
        }
    }
}
