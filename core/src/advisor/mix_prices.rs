//! What a mix is computed on: the instance type (named, or the cheapest
//! on-demand one that has the GPUs asked for), its cheapest on-demand and
//! spot offers in the region, and the spot rework overhead, each with the
//! basis it rests on (a catalog price and when it was observed, a price the
//! user gave, or a default and why).

use crate::advisor::mix::{
    commitment_terms, recommend, spot_overhead, DemandProfile, MixReport, MixRequest,
};
use crate::advisor::Basis;
use crate::catalog::GpuRequirement;
use crate::suggest::check_known;
use crate::Price;
use crate::{Capacity, Cloud, Offer, Region};
use crate::{Error, Result};

/// What the user asked a mix for.
#[derive(Debug, Clone, PartialEq)]
pub struct MixChoice {
    /// Only this cloud's offers (any cloud when `None`).
    pub cloud: Option<Cloud>,
    /// The region.
    pub region: Region,
    /// The instance type, if named.
    pub instance_type: Option<String>,
    /// Else the GPUs: the cheapest on-demand type that has them is taken.
    pub gpu: Option<GpuRequirement>,
    /// An on-demand price that overrides the catalog's.
    pub on_demand_price: Option<Price>,
    /// A spot price that overrides the catalog's.
    pub spot_price: Option<Price>,
}

/// The instance type and prices a mix is computed on, with their bases: a
/// [`MixRequest`] still to be given its interruptible share and terms.
#[derive(Debug, Clone, PartialEq)]
pub struct MixPrices {
    /// The cloud of the chosen offers (the asked cloud, else AWS, when the
    /// catalog has none).
    pub cloud: Cloud,
    /// The instance type.
    pub instance_type: String,
    /// Its prices and their bases; nothing tolerates interruption and no
    /// term is considered until the caller says so.
    pub request: MixRequest,
}

fn source(o: &Offer) -> String {
    format!("{}, observed {}", o.source, o.observed_at.date())
}

impl MixChoice {
    /// Picks the instance type and its prices from `offers` (a catalog).
    /// Errors name what is missing and what to give instead: an unknown
    /// instance type (with the nearest names), no on-demand offer with the
    /// GPUs, no on-demand price, neither a type nor GPUs.
    pub fn prices(&self, offers: &[Offer]) -> Result<MixPrices> {
        let region = &self.region;
        let in_region: Vec<&Offer> = offers
            .iter()
            .filter(|o| &o.pool.region == region && self.cloud.is_none_or(|c| c == o.pool.cloud))
            .collect();
        let name = match (&self.instance_type, &self.gpu) {
            (Some(t), _) => {
                if !in_region.iter().any(|o| &o.instance_type.name == t) {
                    check_known(
                        &format!("instance type in {region}"),
                        t,
                        in_region.iter().map(|o| o.instance_type.name.as_str()),
                    )?;
                }
                t.clone()
            }
            (None, Some(g)) => in_region
                .iter()
                .filter(|o| o.pool.capacity == Capacity::OnDemand && g.matches(o))
                .min_by_key(|o| o.price)
                .map(|o| o.instance_type.name.clone())
                .ok_or_else(|| {
                    Error::invalid_input(format!(
                        "no on-demand offer with {g} in {region}; see 'gpufleet offers --gpu {g} --region {region}'"
                    ))
                })?,
            (None, None) => return Err(Error::invalid_input("give --instance-type or --gpu")),
        };
        let cheapest = |cap: Capacity| {
            in_region
                .iter()
                .filter(|o| o.instance_type.name == name && o.pool.capacity == cap)
                .min_by_key(|o| o.price)
                .copied()
        };
        let od_offer = cheapest(Capacity::OnDemand);
        let spot_offer = cheapest(Capacity::Spot);
        let cloud = od_offer
            .or(spot_offer)
            .map(|o| o.pool.cloud)
            .or(self.cloud)
            .unwrap_or(Cloud::Aws);
        let (on_demand, on_demand_basis) = match (self.on_demand_price, od_offer) {
            (Some(p), _) => (p, Basis::UserInput(format!("--on-demand-price {p}"))),
            (None, Some(o)) => (o.price, Basis::Price(source(o))),
            (None, None) => {
                return Err(Error::invalid_input(format!(
                "{name} has no on-demand price in {region} in the catalog; give --on-demand-price"
            )))
            }
        };
        let (spot, spot_basis, overhead, overhead_basis) = match (self.spot_price, spot_offer) {
            (Some(p), o) => {
                let (extra, why) = o
                    .map(spot_overhead)
                    .unwrap_or((0.0, Basis::Default("no hazard data: no rework".into())));
                (
                    Some(p),
                    Some(Basis::UserInput(format!("--spot-price {p}"))),
                    extra,
                    Some(why),
                )
            }
            (None, Some(o)) => {
                let (extra, why) = spot_overhead(o);
                (
                    Some(o.price),
                    Some(Basis::Price(source(o))),
                    extra,
                    Some(why),
                )
            }
            (None, None) => (None, None, 0.0, None),
        };
        Ok(MixPrices {
            cloud,
            instance_type: name,
            request: MixRequest {
                on_demand,
                on_demand_basis,
                spot,
                spot_basis,
                spot_overhead: overhead,
                spot_overhead_basis: overhead_basis,
                interruptible_share: 0.0,
                interruptible_basis: Basis::Default("nothing tolerates interruption".into()),
                terms: Vec::new(),
            },
        })
    }
}

/// A mix asked for in a front end's words, read: the type and prices, the
/// share of the demand that tolerates interruption (with how it was given,
/// `--interruptible-share 30%`, or `None` for the default of none), and the
/// commitment discounts (fractions, `None` for the published or default ones).
/// `gpufleet mix` and the Python bindings' `mix` both ask through it.
#[derive(Debug, Clone, PartialEq)]
pub struct MixAsk {
    /// The instance type (or GPUs), region and price overrides.
    pub choice: MixChoice,
    /// The interruptible share (0 to 1) and the words that gave it.
    pub interruptible_share: Option<(f64, String)>,
    /// 1-year and 3-year discounts off on-demand (0 to below 1).
    pub discounts: (Option<f64>, Option<f64>),
}

/// A recommended mix: the report and what it was computed on.
#[derive(Debug, Clone, PartialEq)]
pub struct MixAdvice {
    /// The cloud of the chosen offers.
    pub cloud: Cloud,
    /// The instance type.
    pub instance_type: String,
    /// The region.
    pub region: Region,
    /// Every option priced, the cheapest recommended.
    pub report: MixReport,
}

impl MixAsk {
    /// Prices `profile` on `offers` (a catalog): the type and its prices, the
    /// commitment terms, then every option. A spot price given while nothing
    /// tolerates interruption is refused (it would change nothing).
    pub fn advise(&self, offers: &[Offer], profile: &DemandProfile) -> Result<MixAdvice> {
        let (share, basis) = match &self.interruptible_share {
            Some((s, words)) => (*s, Basis::UserInput(words.clone())),
            None => (
                0.0,
                Basis::Default(
                    "nothing tolerates interruption unless --interruptible-share says so".into(),
                ),
            ),
        };
        if share == 0.0 {
            if let Some(p) = &self.choice.spot_price {
                return Err(Error::invalid_input(format!(
                    "--spot-price {p} has no effect: no demand tolerates interruption, so none runs on spot; give --interruptible-share too (such as 30%)"
                )));
            }
        }
        let prices = self.choice.prices(offers)?;
        let region = self.choice.region.clone();
        let terms = commitment_terms(
            prices.cloud,
            &prices.instance_type,
            &region,
            prices.request.on_demand,
            self.discounts,
        )?;
        let request = MixRequest {
            interruptible_share: share,
            interruptible_basis: basis,
            terms,
            ..prices.request
        };
        Ok(MixAdvice {
            cloud: prices.cloud,
            instance_type: prices.instance_type,
            region,
            report: recommend(profile, &request)?,
        })
    }
}

/// Reads an interruptible share as `what` gives it: a fraction (`0.3`) or a
/// percentage (`30%`), 0 to 1; the error names `what` and the valid forms.
pub fn parse_share(s: &str, what: &str) -> Result<f64> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(Error::invalid_input(format!(
            "invalid {what} '{s}': expected a fraction from 0 to 1 (0.3) or a percentage (30%)"
        ))),
    }
}

/// Reads a commitment discount as `what` gives it: a percentage off
/// on-demand (`35` or `35%`), 0 to 99.9, as a fraction.
pub fn parse_discount(s: &str, what: &str) -> Result<f64> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(x) if (0.0..100.0).contains(&x) => Ok(x / 100.0),
        _ => Err(Error::invalid_input(format!(
            "invalid {what} '{s}': expected a percentage off on-demand from 0 to 99.9, such as 35"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Snapshot;

    fn choice() -> MixChoice {
        MixChoice {
            cloud: Some(Cloud::Aws),
            region: Region::new("us-east-1"),
            instance_type: None,
            gpu: Some("A100:8".parse().expect("gpu")),
            on_demand_price: None,
            spot_price: None,
        }
    }

    #[test]
    fn the_cheapest_on_demand_type_with_the_gpus_and_its_catalog_prices() {
        let offers = Snapshot::embedded().offers();
        let p = choice().prices(offers).expect("prices");
        assert_eq!(p.cloud, Cloud::Aws);
        let od = offers
            .iter()
            .filter(|o| {
                o.pool.region.as_str() == "us-east-1"
                    && o.pool.cloud == Cloud::Aws
                    && o.pool.capacity == Capacity::OnDemand
                    && o.instance_type.name == p.instance_type
            })
            .map(|o| o.price)
            .min()
            .expect("an on-demand offer");
        assert_eq!(p.request.on_demand, od);
        assert!(matches!(p.request.on_demand_basis, Basis::Price(_)));
    }

    #[test]
    fn given_prices_win_and_bad_choices_are_named() {
        let offers = Snapshot::embedded().offers();
        let mut c = choice();
        c.on_demand_price = Some(Price::from_micros_per_hour(30_000_000));
        let p = c.prices(offers).expect("prices");
        assert_eq!(p.request.on_demand, Price::from_micros_per_hour(30_000_000));
        assert!(matches!(p.request.on_demand_basis, Basis::UserInput(_)));
        let mut c = choice();
        c.gpu = None;
        c.instance_type = Some("p4d.24xlarg".into());
        let e = c.prices(offers).unwrap_err();
        assert!(e.to_string().contains("p4d.24xlarge"), "{e}");
        let mut c = choice();
        c.gpu = None;
        assert!(c
            .prices(offers)
            .unwrap_err()
            .to_string()
            .contains("--instance-type or --gpu"));
    }

    #[test]
    fn an_ask_prices_the_profile_in_the_words_it_was_given() {
        let offers = Snapshot::embedded().offers();
        // A week of 4 instances.
        let mut text = String::from("time,instances\n");
        for h in 0..24 * 7 {
            text.push_str(&format!("{},4\n", 1_767_571_200 + 3600 * h));
        }
        let profile = crate::advisor::mix::parse_profile(&text).expect("profile");
        let ask = MixAsk {
            choice: choice(),
            interruptible_share: Some((0.3, "share=30%".into())),
            discounts: (Some(0.35), None),
        };
        let advice = ask.advise(offers, &profile).expect("advice");
        let prices = choice().prices(offers).expect("prices");
        assert_eq!(advice.instance_type, prices.instance_type);
        assert_eq!(advice.region.as_str(), "us-east-1");
        assert_eq!(advice.report.request.interruptible_share, 0.3);
        assert_eq!(
            advice.report.request.interruptible_basis,
            Basis::UserInput("share=30%".into())
        );
        // A spot price with nothing interruptible is refused, naming both.
        let no_share = MixAsk {
            choice: MixChoice {
                spot_price: Some(Price::from_usd_per_hour_f64(1.0)),
                ..choice()
            },
            interruptible_share: None,
            discounts: (None, None),
        };
        let e = no_share.advise(offers, &profile).unwrap_err().to_string();
        assert!(
            e.contains("--spot-price") && e.contains("--interruptible-share"),
            "{e}"
        );
        assert_eq!(parse_share("30%", "x").expect("share"), 0.3);
        assert!(parse_share("130%", "share of it")
            .unwrap_err()
            .to_string()
            .contains("share of it '130%'"));
        assert_eq!(parse_discount("35", "d").expect("discount"), 0.35);
        assert!(parse_discount("100", "--discount-3y")
            .unwrap_err()
            .to_string()
            .contains("--discount-3y '100'"));
    }
}
