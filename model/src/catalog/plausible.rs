//! A floor under live prices and a ceiling over them: a price far below
//! anything the published catalog has for that instance type is a bad feed
//! (an emulator's placeholder, a unit error), not a bargain, and is dropped
//! before it can rank first; one far above anything published (a unit
//! error the other way, a scripted `price 1e12`) is dropped as well, so it
//! is never paid or carried into an expected cost it would overflow.

use std::collections::HashMap;

use crate::{Cloud, Offer, Price, Snapshot};

/// A live price below this share of the lowest catalog price of the same
/// cloud and instance type (any region, any capacity) is implausible: spot
/// discounts reach about 90 % of on-demand, and the catalog's lowest is
/// already a spot price where there is one.
pub const FLOOR_SHARE_OF_CATALOG: f64 = 0.10;

/// For an instance type the catalog does not have: a floor of one cent per
/// GPU-hour (no GPU is rented for less), one cent for a machine without one.
pub const FLOOR_PER_GPU_HOUR_USD: f64 = 0.01;

/// A live price above this multiple of the highest catalog price of the
/// same cloud and instance type (any region, any capacity) is implausible:
/// published prices of one type differ by region by well under 2x.
pub const CEILING_MULTIPLE_OF_CATALOG: f64 = 10.0;

/// For an instance type the catalog does not have: a ceiling of $100 per
/// GPU-hour (about eight times the dearest on-demand H100 hour published),
/// $100 an hour for a machine without one.
pub const CEILING_PER_GPU_HOUR_USD: f64 = 100.0;

/// The highest price `offer` may plausibly have, given the highest price
/// the catalog publishes for its type (when it has the type).
fn ceiling_from(offer: &Offer, highest: Option<Price>) -> Price {
    match highest {
        Some(p) => Price::from_usd_per_hour_f64(p.usd_per_hour_f64() * CEILING_MULTIPLE_OF_CATALOG),
        None => Price::from_usd_per_hour_f64(
            CEILING_PER_GPU_HOUR_USD * f64::from(offer.instance_type.gpu_count().max(1)),
        ),
    }
}

/// The highest published price per (cloud, instance type).
fn highest_prices(reference: &Snapshot) -> HashMap<(Cloud, &str), Price> {
    let mut highest: HashMap<(Cloud, &str), Price> = HashMap::new();
    for o in reference.offers() {
        highest
            .entry((o.pool.cloud, o.instance_type.name.as_str()))
            .and_modify(|p| *p = (*p).max(o.price))
            .or_insert(o.price);
    }
    highest
}

/// The highest price `offer` may plausibly have.
pub fn price_ceiling(offer: &Offer, reference: &Snapshot) -> Price {
    let highest = reference
        .offers()
        .iter()
        .filter(|o| {
            o.pool.cloud == offer.pool.cloud && o.instance_type.name == offer.instance_type.name
        })
        .map(|o| o.price)
        .max();
    ceiling_from(offer, highest)
}

/// The lowest published price per (cloud, instance type), any region and
/// capacity: what the floor is a share of.
fn lowest_prices(reference: &Snapshot) -> HashMap<(Cloud, &str), Price> {
    let mut lowest: HashMap<(Cloud, &str), Price> = HashMap::new();
    for o in reference.offers() {
        lowest
            .entry((o.pool.cloud, o.instance_type.name.as_str()))
            .and_modify(|p| *p = (*p).min(o.price))
            .or_insert(o.price);
    }
    lowest
}

fn floor_from(offer: &Offer, lowest: Option<Price>) -> Price {
    match lowest {
        Some(p) => Price::from_usd_per_hour_f64(p.usd_per_hour_f64() * FLOOR_SHARE_OF_CATALOG),
        None => Price::from_usd_per_hour_f64(
            FLOOR_PER_GPU_HOUR_USD * f64::from(offer.instance_type.gpu_count().max(1)),
        ),
    }
}

/// The lowest price `offer` may plausibly have.
pub fn price_floor(offer: &Offer, reference: &Snapshot) -> Price {
    let lowest = reference
        .offers()
        .iter()
        .filter(|o| {
            o.pool.cloud == offer.pool.cloud && o.instance_type.name == offer.instance_type.name
        })
        .map(|o| o.price)
        .min();
    floor_from(offer, lowest)
}

/// Splits live offers into the plausible and, with why, the dropped (the
/// reference's lowest prices are indexed once, not scanned per offer).
pub fn plausible(offers: Vec<Offer>, reference: &Snapshot) -> (Vec<Offer>, Vec<String>) {
    let lowest = lowest_prices(reference);
    let highest = highest_prices(reference);
    let mut keep = Vec::with_capacity(offers.len());
    let mut dropped = Vec::new();
    for o in offers {
        let key = (o.pool.cloud, o.instance_type.name.as_str());
        let floor = floor_from(&o, lowest.get(&key).copied());
        let ceiling = ceiling_from(&o, highest.get(&key).copied());
        if o.price > ceiling {
            dropped.push(format!(
                "{} at ${}/h is over the plausible ceiling ${:.2}/h",
                o.pool,
                o.price.display(4),
                ceiling.usd_per_hour_f64()
            ));
        } else if o.price < floor || o.price <= Price::ZERO {
            dropped.push(format!(
                "{} at ${:.5}/h is under the plausible floor ${:.4}/h",
                o.pool,
                o.price.usd_per_hour_f64(),
                floor.usd_per_hour_f64()
            ));
        } else {
            keep.push(o);
        }
    }
    (keep, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One p4d.24xlarge offer of the snapshot and every p4d.24xlarge price.
    fn p4d(snap: &Snapshot) -> (Offer, Vec<Price>) {
        let all: Vec<&Offer> = snap
            .offers()
            .iter()
            .filter(|o| o.instance_type.name == "p4d.24xlarge")
            .collect();
        let prices = all.iter().map(|o| o.price).collect();
        (all[0].clone(), prices)
    }

    #[test]
    fn a_placeholder_price_is_dropped_and_a_deep_spot_discount_kept() {
        let snap = Snapshot::embedded();
        let (base, prices) = p4d(snap);
        let lowest = prices.iter().copied().min().unwrap();
        let mut bad = base.clone();
        bad.price = Price::from_usd_per_hour_f64(0.00001);
        let mut deep = base.clone();
        deep.price = Price::from_usd_per_hour_f64(lowest.usd_per_hour_f64() * 0.5);
        let (keep, dropped) = plausible(vec![bad, deep.clone()], snap);
        assert_eq!(keep.len(), 1);
        assert_eq!(keep[0].price, deep.price);
        assert_eq!(dropped.len(), 1);
        assert!(
            dropped[0].contains("under the plausible floor"),
            "{dropped:?}"
        );
        // Unknown types get a per-GPU floor.
        let mut odd = base;
        std::sync::Arc::make_mut(&mut odd.instance_type).name = "p9.unknown".into();
        assert_eq!(price_floor(&odd, snap), Price::from_usd_per_hour_f64(0.08));
        assert_eq!(
            price_ceiling(&odd, snap),
            Price::from_usd_per_hour_f64(800.0)
        );
    }

    /// A price far over anything published (a scripted 1e12 $/h, a unit
    /// error) is dropped, never paid; a dear but real one is kept.
    #[test]
    fn a_price_over_the_ceiling_is_dropped() {
        let snap = Snapshot::embedded();
        let (base, prices) = p4d(snap);
        let highest = prices.iter().copied().max().unwrap();
        let mut dear = base.clone();
        dear.price = Price::from_usd_per_hour_f64(highest.usd_per_hour_f64() * 3.0);
        let mut absurd = base.clone();
        absurd.price = Price::from_usd_per_hour_f64(1e12);
        let mut huge = base;
        huge.price = Price::from_usd_per_hour_f64(9.2e12);
        let (keep, dropped) = plausible(vec![dear.clone(), absurd, huge], snap);
        assert_eq!(keep.len(), 1);
        assert_eq!(keep[0].price, dear.price);
        assert_eq!(dropped.len(), 2, "{dropped:?}");
        assert!(
            dropped
                .iter()
                .all(|d| d.contains("over the plausible ceiling")),
            "{dropped:?}"
        );
    }
}
