//! Procurement mix: how many instances to commit to, and what stays on-demand
//! or goes to spot, for a measured demand profile.
//!
//! The model, per commitment term with hourly price `r`:
//!
//! - commit `c` instances for the whole period (paid whether used or not);
//! - each interval's demand `d` splits into a non-interruptible part
//!   `n = (1 - s) d` and an interruptible part `i = s d`, where `s` is the
//!   interruptible share;
//! - committed instances serve `n` first, then `i`; what `n` still needs runs
//!   on-demand; what `i` still needs runs on spot, at the spot price plus the
//!   expected rework of interruptions (the placer's hazard and Daly's model,
//!   see [`spot_overhead`]); without a spot price, or when that costs at
//!   least the on-demand price, it runs on-demand;
//! - the cost over the profile is `c r H + p_od Σ max(0, n - c) dt +
//!   p_spot (1 + overhead) Σ (max(0, d - c) - max(0, n - c)) dt`, and `c` is
//!   the integer from 0 to the peak that minimises it (computed exactly with
//!   sorted demand and prefix sums, so a year of minutes is quick).
//!
//! A commitment's break-even utilisation is `r / p_od`: an instance busy more
//! than that share of the hours is cheaper committed than on-demand.
//! Monthly figures scale the profile's cost to 730 hours.

use std::sync::OnceLock;

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::advisor::Basis;

pub use crate::advisor::mix_prices::{
    parse_discount, parse_share, MixAdvice, MixAsk, MixChoice, MixPrices,
};
use crate::placer::cost::{optimal_interval, RunModel};
use crate::placer::hazard::HazardModel;
use crate::{Capacity, Cloud, Offer, Region};
use crate::{Error, Result};
use crate::{Money, Price};

/// Hours in the average month.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The shortest profile accepted: one week.
pub const MIN_PROFILE_HOURS: f64 = 168.0;

/// Default reserved / savings-plan discounts off on-demand for clouds without
/// commitment prices in the data (AWS, Azure): 1 year and 3 years, no upfront.
/// They are assumptions to replace with a real quote (`--discount-1y/-3y`).
pub const DEFAULT_DISCOUNTS: (f64, f64) = (0.30, 0.50);

/// A measured demand: instances in use over time.
#[derive(Debug, Clone, PartialEq)]
pub struct DemandProfile {
    /// `(hours this sample lasts, instances)`, in time order.
    pub samples: Vec<(f64, f64)>,
    /// First sample's time.
    pub start: OffsetDateTime,
    /// Seconds between samples (the most common step).
    pub step_seconds: i64,
}

impl DemandProfile {
    /// Hours covered.
    pub fn hours(&self) -> f64 {
        self.samples.iter().map(|s| s.0).sum()
    }

    /// Highest demand.
    pub fn peak(&self) -> f64 {
        self.samples.iter().map(|s| s.1).fold(0.0, f64::max)
    }

    /// Instance-hours demanded.
    pub fn instance_hours(&self) -> f64 {
        self.samples.iter().map(|s| s.0 * s.1).sum()
    }
}

/// Parses a demand profile: CSV `time,instances` (time as RFC 3339 or Unix
/// seconds), strictly increasing times at most an hour apart, at least a week
/// long. Each sample holds until the next; the last for the usual step.
pub fn parse_profile(text: &str) -> Result<DemandProfile> {
    let err = |line: usize, why: String| {
        Error::invalid_input(format!("demand profile line {line}: {why}"))
    };
    let rows = crate::csv_rows::rows(text, "demand profile")?;
    let mut lines = rows.iter();
    match lines.next() {
        Some((_, h)) if h.len() == 2 && h[0] == "time" && h[1] == "instances" => {}
        Some((n, h)) => {
            return Err(err(
                *n,
                format!("expected the header 'time,instances', found '{}'", h.join(",")),
            ))
        }
        None => {
            return Err(Error::invalid_input(
                "the demand profile is empty: expected a 'time,instances' header and at least a week of rows",
            ))
        }
    }
    let mut points: Vec<(i64, f64)> = Vec::new();
    for (n, cols) in lines {
        let n = *n;
        let [t, v] = &cols[..] else {
            return Err(err(
                n,
                format!(
                    "expected two columns 'time,instances', found '{}'",
                    cols.join(",")
                ),
            ));
        };
        let (t, v) = (t.as_str(), v.as_str());
        let at = match t.parse::<i64>() {
            Ok(secs) => secs,
            Err(_) => OffsetDateTime::parse(t, &Rfc3339)
                .map_err(|_| {
                    err(
                        n,
                        format!("invalid time '{t}': expected RFC 3339 (2026-01-05T00:00:00Z) or Unix seconds"),
                    )
                })?
                .unix_timestamp(),
        };
        let inst: f64 = v
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x >= 0.0 && *x <= 1e7)
            .ok_or_else(|| {
                err(
                    n,
                    format!("invalid instances '{v}': expected a number from 0 to 10,000,000"),
                )
            })?;
        if let Some(&(prev, _)) = points.last() {
            if at <= prev {
                return Err(err(n, format!("time '{t}' is not after the previous row")));
            }
            if at - prev > 3600 {
                return Err(err(
                    n,
                    format!(
                        "a gap of {:.1} h before '{t}': the profile must be hourly or finer",
                        (at - prev) as f64 / 3600.0
                    ),
                ));
            }
        }
        points.push((at, inst));
    }
    if points.len() < 2 {
        return Err(Error::invalid_input(format!(
            "the demand profile has {} row(s): expected at least a week of hourly or finer rows",
            points.len()
        )));
    }
    let mut steps: Vec<i64> = points.windows(2).map(|w| w[1].0 - w[0].0).collect();
    steps.sort_unstable();
    let step = steps[steps.len() / 2];
    let mut samples: Vec<(f64, f64)> = points
        .windows(2)
        .map(|w| ((w[1].0 - w[0].0) as f64 / 3600.0, w[0].1))
        .collect();
    if let Some(&(_, last)) = points.last() {
        samples.push((step as f64 / 3600.0, last));
    }
    let start = OffsetDateTime::from_unix_timestamp(points[0].0)
        .map_err(|_| err(2, "time out of range".into()))?;
    let profile = DemandProfile {
        samples,
        start,
        step_seconds: step,
    };
    if profile.hours() < MIN_PROFILE_HOURS - 1e-9 {
        return Err(Error::invalid_input(format!(
            "the demand profile covers {:.1} h: expected at least a week ({MIN_PROFILE_HOURS} h) so that weekly cycles count",
            profile.hours()
        )));
    }
    Ok(profile)
}

/// A commitment term and its price per instance-hour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Commitment {
    /// `1y` or `3y`.
    pub term: String,
    /// Price per committed instance-hour.
    pub hourly: Price,
    /// Where the price came from.
    pub basis: Basis,
}

/// A published commitment price from the embedded data.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitmentPrice {
    /// Cloud.
    pub cloud: Cloud,
    /// Instance type.
    pub instance_type: String,
    /// Region.
    pub region: String,
    /// `1y` or `3y`.
    pub term: String,
    /// Price per instance-hour.
    pub hourly: Price,
    /// Source name and date.
    pub source: String,
}

const EMBEDDED_COMMITMENTS: &str = include_str!("../../data/commitments.csv");

/// Parses the commitment price table (`cloud,instance_type,region,term,hourly_usd,source`).
pub fn parse_commitments(text: &str) -> Result<Vec<CommitmentPrice>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || Error::invalid_input(format!("commitments line {}: '{line}'", i + 1));
        let c: Vec<&str> = line.split(',').collect();
        let [cloud, it, region, term, hourly, source] = c[..] else {
            return Err(bad());
        };
        out.push(CommitmentPrice {
            cloud: match cloud {
                "aws" => Cloud::Aws,
                "gcp" => Cloud::Gcp,
                "azure" => Cloud::Azure,
                _ => return Err(bad()),
            },
            instance_type: it.to_string(),
            region: region.to_string(),
            term: term.to_string(),
            hourly: hourly.parse().map_err(|_| bad())?,
            source: source.to_string(),
        });
    }
    Ok(out)
}

/// The commitment prices compiled into gpufleet (GCP committed-use prices of
/// the 2026-07-30 Cloud Billing snapshot).
pub fn embedded_commitments() -> &'static [CommitmentPrice] {
    static TABLE: OnceLock<Vec<CommitmentPrice>> = OnceLock::new();
    TABLE.get_or_init(|| parse_commitments(EMBEDDED_COMMITMENTS).unwrap_or_default())
}

/// The 1-year and 3-year commitment prices for an instance type in a region:
/// published prices where the data has them, else `on_demand` less the given
/// discounts (the cloud's documented defaults unless the user gave their own).
pub fn commitment_terms(
    cloud: Cloud,
    instance_type: &str,
    region: &Region,
    on_demand: Price,
    discounts: (Option<f64>, Option<f64>),
) -> Result<Vec<Commitment>> {
    for d in [discounts.0, discounts.1].into_iter().flatten() {
        {
            if !(0.0..1.0).contains(&d) || d.is_nan() {
                return Err(Error::invalid_input(format!(
                    "invalid commitment discount {:.1}%: expected 0 to 99.9 percent off on-demand",
                    d * 100.0
                )));
            }
        }
    }
    let mut terms = Vec::new();
    for (term, i) in [("1y", 0), ("3y", 1)] {
        let published = embedded_commitments().iter().find(|c| {
            c.cloud == cloud
                && c.instance_type == instance_type
                && c.region == region.as_str()
                && c.term == term
        });
        let given = if i == 0 { discounts.0 } else { discounts.1 };
        let (hourly, basis) = match (given, published) {
            (Some(pct), _) => (
                Price::from_usd_per_hour_f64(on_demand.usd_per_hour_f64() * (1.0 - pct)),
                Basis::UserInput(format!("--discount-{term} {:.1}%", pct * 100.0)),
            ),
            (None, Some(p)) => (
                p.hourly,
                Basis::Price(format!("{} committed-use price, {}", term, p.source)),
            ),
            (None, None) => {
                let (pct, why) = default_discount(cloud, i);
                (
                    Price::from_usd_per_hour_f64(on_demand.usd_per_hour_f64() * (1.0 - pct)),
                    Basis::Default(format!("{:.0}% off on-demand ({why})", pct * 100.0)),
                )
            }
        };
        terms.push(Commitment {
            term: term.into(),
            hourly,
            basis,
        });
    }
    Ok(terms)
}

fn default_discount(cloud: Cloud, term: usize) -> (f64, &'static str) {
    let assumed = if term == 0 {
        DEFAULT_DISCOUNTS.0
    } else {
        DEFAULT_DISCOUNTS.1
    };
    match cloud {
        Cloud::Gcp => match median_gcp_discount(term) {
            Some(m) => (m, "median GCP GPU-VM committed-use discount in the snapshot"),
            None => (assumed, "assumed"),
        },
        Cloud::Aws => (
            assumed,
            "assumed Savings Plan / reserved discount, no upfront; give your quote with --discount-1y/--discount-3y",
        ),
        _ => (
            assumed,
            "assumed reservation discount; give your quote with --discount-1y/--discount-3y",
        ),
    }
}

/// The median discount of the published GCP GPU-VM commitments against the
/// snapshot's on-demand prices, per term (computed once).
fn median_gcp_discount(term: usize) -> Option<f64> {
    static MEDIANS: OnceLock<[Option<f64>; 2]> = OnceLock::new();
    MEDIANS.get_or_init(|| {
        let on_demand: std::collections::HashMap<(&str, &str), i64> =
            crate::catalog::Snapshot::embedded()
                .offers()
                .iter()
                .filter(|o| o.pool.cloud == Cloud::Gcp && o.pool.capacity == Capacity::OnDemand)
                .map(|o| {
                    (
                        (o.instance_type.name.as_str(), o.pool.region.as_str()),
                        o.price.micros_per_hour(),
                    )
                })
                .collect();
        ["1y", "3y"].map(|want| {
            let mut d: Vec<f64> = embedded_commitments()
                .iter()
                .filter(|c| c.term == want)
                .filter_map(|c| {
                    let od = *on_demand.get(&(c.instance_type.as_str(), c.region.as_str()))?;
                    (od > 0).then(|| 1.0 - c.hourly.micros_per_hour() as f64 / od as f64)
                })
                .collect();
            d.sort_by(f64::total_cmp);
            d.get(d.len() / 2).copied()
        })
    })[term.min(1)]
}

/// Default checkpoint cost and restart overhead behind [`spot_overhead`], hours.
pub const SPOT_CHECKPOINT_COST_H: f64 = 1.0 / 60.0;
/// Default restart overhead behind [`spot_overhead`], hours.
pub const SPOT_RESTART_H: f64 = 10.0 / 60.0;

/// The expected extra share of spot instance-hours lost to interruptions in
/// this pool: the placer's hazard prior for the offer, Daly's model with the
/// Young/Daly checkpoint interval, a 1-minute checkpoint and a 10-minute
/// restart after each interruption, per hour of work.
pub fn spot_overhead(spot: &Offer) -> (f64, Basis) {
    let model = HazardModel::default();
    let (rate, signals) = model.prior(spot);
    let run = RunModel {
        work: 1.0,
        hazard: rate,
        interval: optimal_interval(1.0, rate, SPOT_CHECKPOINT_COST_H),
        checkpoint_cost: SPOT_CHECKPOINT_COST_H,
        restart: SPOT_RESTART_H,
    };
    // Rework and restarts per hour of work, not the job's first start.
    let extra = run.overhead_share().max(0.0);
    (
        extra,
        Basis::Formula(format!(
            "{rate:.3} interruptions/h ({}), 1 min checkpoints, 10 min restarts -> +{:.1}% hours",
            signals.join(", "),
            extra * 100.0
        )),
    )
}

/// What to price a demand profile against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixRequest {
    /// On-demand price per instance-hour.
    pub on_demand: Price,
    /// Where it came from.
    pub on_demand_basis: Basis,
    /// Spot price per instance-hour, if this type is sold as spot.
    pub spot: Option<Price>,
    /// Where it came from.
    pub spot_basis: Option<Basis>,
    /// Extra share of spot hours lost to interruptions.
    pub spot_overhead: f64,
    /// Where that came from.
    pub spot_overhead_basis: Option<Basis>,
    /// Share of the demand that tolerates interruption (0 to 1).
    pub interruptible_share: f64,
    /// Where that came from.
    pub interruptible_basis: Basis,
    /// Commitment terms to consider.
    pub terms: Vec<Commitment>,
}

/// The break-even of one commitment term.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakEven {
    /// Term.
    pub term: String,
    /// Committed price per instance-hour.
    pub hourly: Price,
    /// Discount off on-demand.
    pub discount: f64,
    /// Share of hours an instance must be busy for the commitment to pay.
    pub break_even_utilisation: f64,
    /// Where the price came from.
    pub basis: Basis,
}

/// One way to buy the demand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixOption {
    /// `all on-demand`, `all committed at peak (1y)`, `mix (3y)`, …
    pub name: String,
    /// Commitment term, if any.
    pub term: Option<String>,
    /// Committed instances.
    pub committed: u32,
    /// Share of committed instance-hours used.
    pub committed_utilisation: Option<f64>,
    /// On-demand instance-hours over the profile.
    pub on_demand_instance_hours: f64,
    /// Spot instance-hours over the profile (including rework).
    pub spot_instance_hours: f64,
    /// Cost over the profile.
    pub cost: Money,
    /// Cost per 730-hour month.
    pub monthly: Money,
    /// Monthly saving against all on-demand.
    pub monthly_saving: Money,
    /// Saving against all on-demand.
    pub saving_share: f64,
}

/// The advice for a demand profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixReport {
    /// Hours the profile covers.
    pub profile_hours: f64,
    /// Peak demand.
    pub peak: f64,
    /// Mean demand.
    pub mean: f64,
    /// The inputs and where each came from.
    pub request: MixRequest,
    /// Break-even per term.
    pub break_even: Vec<BreakEven>,
    /// Every option priced: all on-demand, all committed at peak per term,
    /// the best mix per term.
    pub options: Vec<MixOption>,
    /// The cheapest option.
    pub recommended: MixOption,
}

/// Weighted values sorted, with suffix sums, for Σ dt · max(0, v - c).
struct Excess {
    values: Vec<f64>,
    /// Suffix sums of dt·v and dt from each index.
    sum_wv: Vec<f64>,
    sum_w: Vec<f64>,
}

impl Excess {
    fn new(mut pairs: Vec<(f64, f64)>) -> Excess {
        pairs.sort_by(|a, b| a.1.total_cmp(&b.1));
        let n = pairs.len();
        let (mut sum_wv, mut sum_w) = (vec![0.0; n + 1], vec![0.0; n + 1]);
        for i in (0..n).rev() {
            sum_wv[i] = sum_wv[i + 1] + pairs[i].0 * pairs[i].1;
            sum_w[i] = sum_w[i + 1] + pairs[i].0;
        }
        Excess {
            values: pairs.into_iter().map(|p| p.1).collect(),
            sum_wv,
            sum_w,
        }
    }

    fn above(&self, c: f64) -> f64 {
        let i = self.values.partition_point(|v| *v <= c);
        (self.sum_wv[i] - c * self.sum_w[i]).max(0.0)
    }
}

/// Prices every option for the profile and recommends the cheapest.
pub fn recommend(profile: &DemandProfile, request: &MixRequest) -> Result<MixReport> {
    let s = request.interruptible_share;
    if !(0.0..=1.0).contains(&s) || s.is_nan() {
        return Err(Error::invalid_input(format!(
            "invalid interruptible share {s}: expected a fraction from 0 to 1 (0.3 or 30%)"
        )));
    }
    if request.on_demand.micros_per_hour() <= 0 {
        return Err(Error::invalid_input(format!(
            "invalid on-demand price {}: it must be more than zero",
            request.on_demand
        )));
    }
    if !(request.spot_overhead.is_finite() && request.spot_overhead >= 0.0) {
        return Err(Error::invalid_input(format!(
            "invalid spot overhead {}: expected zero or more",
            request.spot_overhead
        )));
    }
    let hours = profile.hours();
    if hours <= 0.0 || profile.samples.is_empty() {
        return Err(Error::invalid_input("the demand profile is empty"));
    }
    let peak = profile.peak();
    let od = request.on_demand.micros_per_hour() as f64;
    if let Some(p) = request.spot.filter(|p| p.micros_per_hour() <= 0) {
        return Err(Error::invalid_input(format!(
            "invalid spot price {p}: it must be more than zero"
        )));
    }
    // Spot with its rework, where it is cheaper than on-demand: dearer, the
    // interruptible demand runs on-demand (it would cost more on spot and
    // could be interrupted besides).
    let spot = request
        .spot
        .map(|p| p.micros_per_hour() as f64 * (1.0 + request.spot_overhead))
        .filter(|&p| p < od);
    let total = Excess::new(profile.samples.clone());
    let firm = Excess::new(
        profile
            .samples
            .iter()
            .map(|&(w, d)| (w, (1.0 - s) * d))
            .collect(),
    );
    let demand_hours = profile.instance_hours();
    let scale = HOURS_PER_MONTH / hours;
    let all_od = demand_hours * od;
    let to_money = |micros: f64| Money::from_micros(micros.round() as i64);
    // Price committing `c` instances at `rate` micros per hour.
    let price = |name: String, term: Option<&Commitment>, c: u32, use_spot: bool| -> MixOption {
        let cf = f64::from(c);
        let rate = term.map_or(0.0, |t| t.hourly.micros_per_hour() as f64);
        let od_hours = firm.above(cf);
        let flex_hours = total.above(cf) - od_hours;
        let (od_hours, spot_hours, spot_cost) = match spot.filter(|_| use_spot) {
            Some(p) => (
                od_hours,
                flex_hours * (1.0 + request.spot_overhead),
                flex_hours * p,
            ),
            None => (od_hours + flex_hours, 0.0, 0.0),
        };
        let cost = cf * rate * hours + od_hours * od + spot_cost;
        let used = demand_hours - total.above(cf);
        MixOption {
            name,
            term: term.map(|t| t.term.clone()),
            committed: c,
            committed_utilisation: (c > 0).then(|| used / (cf * hours)),
            on_demand_instance_hours: od_hours,
            spot_instance_hours: spot_hours,
            cost: to_money(cost),
            monthly: to_money(cost * scale),
            monthly_saving: to_money((all_od - cost) * scale),
            saving_share: if all_od > 0.0 {
                (all_od - cost) / all_od
            } else {
                0.0
            },
        }
    };
    let peak_c = peak.ceil().min(f64::from(u32::MAX)) as u32;
    let mut options = vec![price("all on-demand".into(), None, 0, false)];
    let mut break_even = Vec::new();
    for t in &request.terms {
        if t.hourly.micros_per_hour() <= 0 {
            return Err(Error::invalid_input(format!(
                "invalid {} commitment price {}: it must be more than zero",
                t.term, t.hourly
            )));
        }
        break_even.push(BreakEven {
            term: t.term.clone(),
            hourly: t.hourly,
            discount: 1.0 - t.hourly.micros_per_hour() as f64 / od,
            break_even_utilisation: t.hourly.micros_per_hour() as f64 / od,
            basis: t.basis.clone(),
        });
        options.push(price(
            format!("all committed at peak ({})", t.term),
            Some(t),
            peak_c,
            false,
        ));
        // The cost of committing c is convex in c (a linear commitment plus
        // excess demand priced on-demand and, where cheaper, on spot: each
        // Σ dt · max(0, v - c) is convex and spot is filtered below
        // on-demand), so the first c whose next step does not lower it is a
        // minimum: a binary search, O(log peak · log n) (every c from 0 to
        // the peak was priced, minutes on a large profile). Its neighbours
        // settle ties as the money rounds (lowest cost, then fewest
        // committed).
        let raw = |c: u32| {
            let cf = f64::from(c);
            let rate = t.hourly.micros_per_hour() as f64;
            let firm_h = firm.above(cf);
            let flex_h = total.above(cf) - firm_h;
            cf * rate * hours + firm_h * od + flex_h * spot.unwrap_or(od)
        };
        let (mut lo, mut hi) = (0u32, peak_c);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if raw(mid + 1) >= raw(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let best = (lo.saturating_sub(1)..=lo.saturating_add(1).min(peak_c))
            .map(|c| price(format!("mix ({})", t.term), Some(t), c, true))
            .min_by_key(|o| (o.cost, o.committed))
            .unwrap_or_else(|| price(format!("mix ({})", t.term), Some(t), 0, true));
        options.push(best);
    }
    if request.terms.is_empty() {
        options.push(price("mix (no commitment)".into(), None, 0, true));
    }
    let recommended = options
        .iter()
        .filter(|o| o.name.starts_with("mix"))
        .min_by_key(|o| (o.cost, o.committed))
        .cloned()
        .unwrap_or_else(|| options[0].clone());
    Ok(MixReport {
        profile_hours: hours,
        peak,
        mean: demand_hours / hours,
        request: request.clone(),
        break_even,
        options,
        recommended,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(hours: usize, f: impl Fn(usize) -> f64) -> DemandProfile {
        let mut csv = String::from("time,instances\n");
        for h in 0..hours {
            csv.push_str(&format!("{},{}\n", 1_767_571_200 + h as i64 * 3600, f(h)));
        }
        parse_profile(&csv).unwrap()
    }

    fn request(share: f64) -> MixRequest {
        let od = Price::from_usd_per_hour_f64(10.0);
        MixRequest {
            on_demand: od,
            on_demand_basis: Basis::UserInput("test".into()),
            spot: Some(Price::from_usd_per_hour_f64(3.0)),
            spot_basis: Some(Basis::UserInput("test".into())),
            spot_overhead: 0.05,
            spot_overhead_basis: None,
            interruptible_share: share,
            interruptible_basis: Basis::UserInput("test".into()),
            terms: vec![
                Commitment {
                    term: "1y".into(),
                    hourly: Price::from_usd_per_hour_f64(6.3),
                    basis: Basis::UserInput("test".into()),
                },
                Commitment {
                    term: "3y".into(),
                    hourly: Price::from_usd_per_hour_f64(4.4),
                    basis: Basis::UserInput("test".into()),
                },
            ],
        }
    }

    #[test]
    fn flat_demand_commits_to_all_of_it() {
        let p = profile(24 * 14, |_| 8.0);
        let r = recommend(&p, &request(0.0)).unwrap();
        assert_eq!(r.recommended.committed, 8);
        assert_eq!(r.recommended.term.as_deref(), Some("3y"));
        assert_eq!(r.recommended.on_demand_instance_hours, 0.0);
        assert_eq!(r.recommended.spot_instance_hours, 0.0);
        // 8 x $4.40 x 730 h a month against 8 x $10 x 730.
        assert_eq!(r.recommended.monthly, Money::from_cents(8 * 440 * 730));
        assert_eq!(r.options[0].monthly, Money::from_cents(8 * 1000 * 730));
        assert!((r.recommended.saving_share - 0.56).abs() < 1e-9);
        assert!((r.break_even[0].break_even_utilisation - 0.63).abs() < 1e-9);
    }

    #[test]
    fn demand_idle_most_of_the_day_commits_nothing() {
        // Four busy hours a day: 17 % utilisation, below both break-evens.
        let p = profile(24 * 7, |h| if h % 24 < 4 { 16.0 } else { 0.0 });
        let r = recommend(&p, &request(0.0)).unwrap();
        assert_eq!(r.recommended.committed, 0);
        assert_eq!(r.recommended.monthly_saving, Money::ZERO);
        // Committing at peak would cost far more than on-demand.
        let at_peak = r
            .options
            .iter()
            .find(|o| o.name.contains("peak (1y)"))
            .unwrap();
        assert!(at_peak.cost > r.options[0].cost);
    }

    #[test]
    fn spot_serves_only_the_interruptible_share() {
        let p = profile(24 * 7, |h| if h % 24 < 12 { 10.0 } else { 2.0 });
        let none = recommend(&p, &request(0.0)).unwrap();
        assert_eq!(none.recommended.spot_instance_hours, 0.0);
        let part = recommend(&p, &request(0.4)).unwrap();
        let o = &part.recommended;
        // Never more spot than 40 % of demand (plus its rework).
        let flex = 0.4 * p.instance_hours() * 1.05;
        assert!(o.spot_instance_hours <= flex + 1e-6, "{o:?}");
        assert!(o.spot_instance_hours > 0.0);
        // Moving 40 % of the demand to spot is cheaper than keeping it firm.
        assert!(part.recommended.cost < none.recommended.cost);
        // The firm night-time baseline (2 x 0.6 = 1.2, busy all the time) is
        // over both break-evens, so at least one instance is committed.
        assert!(o.committed >= 1);
    }

    #[test]
    fn spot_dearer_than_on_demand_serves_nothing_and_never_costs_more() {
        // All of it interruptible, with spot (and its rework) above the
        // on-demand price and commitments at 1 % off: the recommendation
        // is on-demand, not a commitment at peak that costs 28 % more
        // than all on-demand (as it was when the interruptible demand had
        // to run on spot whatever spot cost).
        let p = profile(24 * 8, |h| if h % 24 > 8 { 10.0 } else { 4.0 });
        let mut req = request(1.0);
        req.spot = Some(Price::from_usd_per_hour_f64(30.0));
        for t in &mut req.terms {
            t.hourly = Price::from_usd_per_hour_f64(9.9);
        }
        let r = recommend(&p, &req).unwrap();
        assert!(r.recommended.cost <= r.options[0].cost, "{r:?}");
        assert!(
            r.options.iter().all(|o| o.spot_instance_hours == 0.0),
            "{r:?}"
        );
        // Just under on-demand with its rework, spot takes the flexible work.
        req.spot = Some(Price::from_usd_per_hour_f64(9.0));
        let r = recommend(&p, &req).unwrap();
        assert!(r.recommended.spot_instance_hours > 0.0, "{r:?}");
        assert!(r.recommended.cost < r.options[0].cost, "{r:?}");
        // A spot price of zero is no price.
        req.spot = Some(Price::ZERO);
        let e = recommend(&p, &req).unwrap_err();
        assert!(e.message().contains("invalid spot price"), "{e}");
    }

    #[test]
    fn the_exact_search_matches_brute_force() {
        let p = profile(24 * 8, |h| {
            ((h * 37) % 11) as f64 + if h % 24 < 9 { 5.0 } else { 0.0 }
        });
        let req = request(0.25);
        let r = recommend(&p, &req).unwrap();
        for t in &req.terms {
            let brute = (0..=16u32)
                .map(|c| {
                    let cf = f64::from(c);
                    let mut cost = cf * t.hourly.usd_per_hour_f64() * p.hours();
                    for &(w, d) in &p.samples {
                        let n = 0.75 * d;
                        let i = 0.25 * d;
                        cost += w * (n - cf).max(0.0) * 10.0;
                        cost += w * (i - (cf - n).max(0.0)).max(0.0) * 3.0 * 1.05;
                    }
                    (cost, c)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap();
            let ours = r
                .options
                .iter()
                .find(|o| o.name == format!("mix ({})", t.term))
                .unwrap();
            assert_eq!(ours.committed, brute.1, "{}", t.term);
            assert!((ours.cost.as_usd_f64() - brute.0).abs() < 0.01);
        }
    }

    #[test]
    fn malformed_profiles_are_named() {
        let cases = [
            ("", "empty"),
            ("when,count\n1,2\n", "header"),
            ("time,instances\n0,1\n3600,x\n", "instances 'x'"),
            ("time,instances\n0,1\n3600,-2\n", "instances '-2'"),
            ("time,instances\n0,1\n0,1\n", "not after"),
            ("time,instances\n0,1\n7200,1\n", "gap of 2.0 h"),
            ("time,instances\n0,1\n3600,1\n", "at least a week"),
            ("time,instances\nyesterday,1\n", "invalid time 'yesterday'"),
            ("time,instances\n0,1,2\n", "two columns"),
        ];
        for (text, want) in cases {
            let e = parse_profile(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let mut rfc = String::from("time,instances\n");
        let t0 = OffsetDateTime::from_unix_timestamp(1_767_571_200).unwrap();
        for m in 0..(7 * 24 * 4) {
            let t = t0 + time::Duration::minutes(15 * m);
            rfc.push_str(&format!("{},3\n", t.format(&Rfc3339).unwrap()));
        }
        let p = parse_profile(&rfc).unwrap();
        assert_eq!(p.step_seconds, 900);
        assert!((p.hours() - 168.0).abs() < 1e-9);
    }

    #[test]
    fn bad_requests_are_named() {
        let p = profile(24 * 7, |_| 1.0);
        let e = recommend(&p, &request(1.5)).unwrap_err().to_string();
        assert!(e.contains("1.5"), "{e}");
        let e = commitment_terms(
            Cloud::Aws,
            "p4d.24xlarge",
            &Region::new("us-east-1"),
            Price::from_usd_per_hour_f64(32.77),
            (Some(1.2), None),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("120.0%"), "{e}");
    }

    #[test]
    fn gcp_commitments_come_from_the_published_prices() {
        assert!(!embedded_commitments().is_empty());
        let c = &embedded_commitments()[0];
        let terms = commitment_terms(
            Cloud::Gcp,
            &c.instance_type,
            &Region::new(c.region.clone()),
            Price::from_usd_per_hour_f64(100.0),
            (None, None),
        )
        .unwrap();
        assert!(matches!(terms[0].basis, Basis::Price(_)), "{terms:?}");
        let aws = commitment_terms(
            Cloud::Aws,
            "p4d.24xlarge",
            &Region::new("us-east-1"),
            Price::from_usd_per_hour_f64(10.0),
            (None, Some(0.6)),
        )
        .unwrap();
        assert_eq!(aws[0].hourly, Price::from_usd_per_hour_f64(7.0));
        assert!(matches!(aws[0].basis, Basis::Default(_)));
        assert_eq!(aws[1].hourly, Price::from_usd_per_hour_f64(4.0));
        assert!(matches!(aws[1].basis, Basis::UserInput(_)));
    }
}
