//! `gpufleet simulate --serve`: a service's replicas replayed minute by
//! minute over measured spot availability, against a request-rate profile,
//! for four ways of choosing capacity. What each costs and how many minutes
//! its ready replicas could carry the load is the measure.
//!
//! The load: requests per minute (a synthetic diurnal profile, or a CSV),
//! turned into requests in flight by Little's law (rate × the mean time a
//! request takes). Every policy has the same [`Autoscaler`] from the
//! service file's `[autoscale]` and `[replicas]`, fed that load each minute,
//! so they all want the same number of replicas; they differ in where those
//! replicas run. A minute is *served* when the ready replicas could carry
//! its requests in flight: each carries `target_in_flight / utilization`
//! (the target is the comfortable load, as Knative's target utilisation
//! makes it 70 % of a replica's capacity), times its speed.
//!
//! The capacity: each manifest pool is a spot pool, available at a tick
//! when its trace says so; a spot replica in a pool at a tick without
//! capacity is lost at that tick's start (no notice: the traces have none),
//! a spot launch there is refused. On-demand is always there, in each of the
//! manifest's zones. A replica is paid from its launch to its end, serves
//! from `cold_start` after its launch, and one drained ends at the end of
//! its minute.
//!
//! The policies:
//! - `on-demand`: the target on on-demand, spread over the zones.
//! - `spot-only`: the target on spot, no extra, no fallback; spread, a pool
//!   that refused or lost a replica set aside for a while.
//! - `spothedge`: SkyServe's SpotHedge as published (Mao et al., EuroSys
//!   2025, and `sky/serve/spot_placer.py`): the target and `extra` more on
//!   spot, each new one in the cheapest *active* location with no replica
//!   yet (else the cheapest active one); a location that lost or refused a
//!   replica is marked preempted until a replica is ready there again, all
//!   made active again when fewer than two are; on-demand stands in for
//!   spot replicas not ready (dynamic fallback), in the cheapest on-demand
//!   location. One instance type, the manifest's first chosen (SkyServe's
//!   spot placer takes one resource type).
//! - `gpufleet`: what `gpufleet serve` runs: [`plan`] with the service's
//!   `[spot]` over the pools costed per served hour from the placer's
//!   [`HazardModel`] and what the run has seen ([`PoolMemory`]: losses and
//!   refusals count against a pool, hours served for it; a pool that lost or
//!   refused a replica set aside for ten minutes).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::SimPool;
use crate::placer::HazardModel;
use crate::serve::{
    drain_order, mix, plan, Action, Autoscaler, LoadSample, PoolMemory, ReplicaPool, ReplicaState,
    ReplicaView, ServiceSpec, SpotSettings,
};
use crate::{
    Capacity, InstanceType, Interconnect, Offer, Pool, PriceSource, SourceKind, Stability,
};
use crate::{Error, Result};
use crate::{Money, Price};

mod prepare;
mod run;
use self::prepare::*;
use self::run::*;

/// Minutes in a day.
const DAY: usize = 1440;

/// The most minutes a demand CSV may give (two years).
pub const MAX_DEMAND_MINUTES: usize = 2 * 366 * DAY;

/// The service `simulate --serve` runs when no service file is given: up to
/// 16 replicas of 4 requests in flight each, scaled up after a minute over
/// and down after ten under, all on spot with one extra.
pub const DEFAULT_SIM_SERVICE: &str = r#"name = "sim"
run = "serve"
readiness = "/health"

[[gpu]]
model = "V100"

[replicas]
min = 1
max = 16

[autoscale]
target_in_flight = 4
up_after = "1m"
down_after = "10m"

[spot]
share = 1.0
extra = 1
"#;

/// How long a pool that lost or refused a replica is set aside (the
/// service controller's default).
pub const SET_ASIDE: Duration = Duration::from_secs(600);

/// Requests per minute, minute by minute.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// Where it comes from, for the report.
    pub name: String,
    per_minute: Vec<f64>,
    /// Indexed by the minute of the day (UTC) rather than from the start.
    by_time_of_day: bool,
}

impl Demand {
    /// A day's cycle: `trough` requests per minute at 04:00 UTC rising as a
    /// cosine to `peak` at 16:00 and back, every day alike.
    pub fn diurnal(peak: f64, trough: f64) -> Result<Demand> {
        if !(peak.is_finite() && trough.is_finite() && trough >= 0.0 && peak >= trough) {
            return Err(Error::invalid_input(format!(
                "invalid diurnal profile (peak {peak}, trough {trough} requests per minute): expected 0 <= trough <= peak"
            )));
        }
        let per_minute = (0..DAY)
            .map(|m| {
                let hours = m as f64 / 60.0 - 4.0;
                let rise = (1.0 - (2.0 * std::f64::consts::PI * hours / 24.0).cos()) / 2.0;
                trough + (peak - trough) * rise
            })
            .collect();
        Ok(Demand {
            name: format!("diurnal, {trough:.0} to {peak:.0} requests/min (04:00 and 16:00 UTC)"),
            per_minute,
            by_time_of_day: true,
        })
    }

    /// Requests per minute from a CSV, a row per minute from the traces'
    /// start, repeated when shorter than them: one column (`requests`) or
    /// two (`minute,requests`, the minutes 0, 1, 2, ... in order), a header
    /// row allowed, `#` comments and blank lines skipped.
    pub fn from_csv(name: &str, text: &str) -> Result<Demand> {
        let rows = crate::csv_rows::rows(text, name)?;
        let mut per_minute = Vec::new();
        for (i, (line, fields)) in rows.iter().enumerate() {
            let bad = |what: String| {
                Error::invalid_input(format!(
                    "{name} line {line}: {what}; expected `requests` or `minute,requests` per row, requests per minute >= 0"
                ))
            };
            let Some(last) = fields.last() else { continue };
            if fields.len() > 2 {
                return Err(bad(format!("{} fields", fields.len())));
            }
            let Ok(rate) = last.parse::<f64>() else {
                if i == 0 {
                    continue; // the header
                }
                return Err(bad(format!("invalid number of requests {last:?}")));
            };
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(bad(format!("invalid number of requests {last:?}")));
            }
            if fields.len() == 2 {
                let minute = fields[0].parse::<usize>().ok();
                if minute != Some(per_minute.len()) {
                    return Err(bad(format!(
                        "minute {:?} out of order (expected {})",
                        fields[0],
                        per_minute.len()
                    )));
                }
            }
            if per_minute.len() == MAX_DEMAND_MINUTES {
                return Err(bad(format!("more than {MAX_DEMAND_MINUTES} minutes")));
            }
            per_minute.push(rate);
        }
        if per_minute.is_empty() {
            return Err(Error::invalid_input(format!(
                "{name}: no requests per minute in it; expected `requests` or `minute,requests` per row"
            )));
        }
        Ok(Demand {
            name: name.to_string(),
            per_minute,
            by_time_of_day: false,
        })
    }

    /// Requests in minute `t` of a run that starts at `start`.
    fn at(&self, start: OffsetDateTime, t: usize) -> f64 {
        let i = if self.by_time_of_day {
            usize::from(start.hour()) * 60 + usize::from(start.minute()) + t
        } else {
            t
        };
        self.per_minute[i % self.per_minute.len()]
    }
}

/// One `simulate --serve` scenario.
#[derive(Debug, Clone)]
pub struct ServeScenario {
    /// The service: its `[replicas]`, `[autoscale]` and `[spot]` are used,
    /// not its GPUs or clouds (the pools are the manifest's).
    pub spec: ServiceSpec,
    /// The requests per minute.
    pub demand: Demand,
    /// The mean time a request is in flight.
    pub request_seconds: f64,
    /// The share of a replica's capacity `target_in_flight` is (0 to 1).
    pub utilization: f64,
    /// Launch to ready, in whole minutes.
    pub cold_start_minutes: u32,
}

/// A way of choosing capacity for the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServePolicy {
    /// Everything on on-demand.
    OnDemand,
    /// Everything on spot, no extra, no fallback.
    SpotOnly,
    /// SkyServe's SpotHedge as published.
    Spothedge,
    /// `gpufleet serve`'s own step, with the service file's `[spot]`.
    Gpufleet,
    /// The same with `[spot] survive_zone_loss = true`.
    GpufleetSurvive,
}

impl ServePolicy {
    /// Every policy, the reference first.
    pub const ALL: [ServePolicy; 5] = [
        ServePolicy::OnDemand,
        ServePolicy::SpotOnly,
        ServePolicy::Spothedge,
        ServePolicy::Gpufleet,
        ServePolicy::GpufleetSurvive,
    ];

    /// Its name: `on-demand`, `spot-only`, `spothedge`, `gpufleet`,
    /// `gpufleet-survive`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServePolicy::OnDemand => "on-demand",
            ServePolicy::SpotOnly => "spot-only",
            ServePolicy::Spothedge => "spothedge",
            ServePolicy::Gpufleet => "gpufleet",
            ServePolicy::GpufleetSurvive => "gpufleet-survive",
        }
    }

    /// Parses [`ServePolicy::as_str`].
    pub fn parse(s: &str) -> Result<ServePolicy> {
        let s = s.trim();
        ServePolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "unknown service policy {s:?}: expected one of on-demand, spot-only, spothedge, gpufleet, gpufleet-survive"
                ))
            })
    }
}

/// How one policy did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeResult {
    /// The policy.
    pub policy: ServePolicy,
    /// What the replicas cost (in JSON, dollars with six decimals, as a
    /// string, as every amount gpufleet writes).
    pub cost_usd: Money,
    /// That over the on-demand policy's cost, when it ran.
    pub cost_vs_on_demand: Option<f64>,
    /// The share of minutes the ready replicas could carry the load.
    pub served_share: f64,
    /// Minutes they could not.
    pub short_minutes: u64,
    /// Spot replicas lost to the cloud.
    pub preemptions: u64,
    /// Replicas launched.
    pub launches: u64,
    /// Spot launches refused (no capacity).
    pub refused_launches: u64,
    /// Replica-hours paid on spot.
    pub spot_hours: f64,
    /// Replica-hours paid on on-demand.
    pub on_demand_hours: f64,
    /// Ready capacity per hour, in replicas (mean over the hour's minutes).
    #[serde(skip)]
    pub hourly_ready: Vec<f64>,
}

/// A `simulate --serve` run's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeReport {
    /// The spot pools (`TYPE ZONE`).
    pub pools: Vec<String>,
    /// Minutes replayed.
    pub minutes: u64,
    /// The demand's name.
    pub demand: String,
    /// The most requests in flight in a minute.
    pub peak_in_flight: f64,
    /// The replicas the autoscaler asked for at most.
    pub peak_target: u32,
    /// Launch to ready, minutes.
    pub cold_start_minutes: u32,
    /// Mean time a request is in flight, seconds.
    pub request_seconds: f64,
    /// The share of a replica's capacity its target is.
    pub utilization: f64,
    /// Per policy.
    pub results: Vec<ServeResult>,
    /// The replicas the load needed per hour (mean in flight ÷ one
    /// replica's capacity).
    #[serde(skip)]
    pub hourly_needed: Vec<f64>,
}

/// Replays `scenario` over `pools` (the spot pools of one or more instance
/// types; the first's throughput is the reference) for each of `policies`.
pub fn simulate_serve(
    pools: &[SimPool],
    scenario: &ServeScenario,
    policies: &[ServePolicy],
) -> Result<ServeReport> {
    let p = prepare(pools, scenario)?;
    let mut results = Vec::new();
    for &policy in policies {
        let mut run = Run::new(&p, policy);
        for t in 0..p.minutes {
            run.step(t)?;
        }
        results.push(run.finish());
    }
    let reference = results
        .iter()
        .find(|r| r.policy == ServePolicy::OnDemand)
        .map(|r| r.cost_usd);
    for r in &mut results {
        r.cost_vs_on_demand = reference
            .filter(|c| c.micros() > 0)
            .map(|c| r.cost_usd.micros() as f64 / c.micros() as f64);
    }
    let mut autoscaler = Autoscaler::new(&scenario.spec, p.start);
    let (mut peak_in_flight, mut peak_target) = (0.0f64, autoscaler.target());
    let mut hourly_needed = vec![0.0; p.minutes.div_ceil(60)];
    for t in 0..p.minutes {
        // The same samples the runs' autoscalers read.
        let sample = p.sample(t, autoscaler.target());
        peak_in_flight = peak_in_flight.max(sample.in_flight);
        hourly_needed[t / 60] += sample.in_flight / p.per_replica / 60.0;
        autoscaler.observe(&sample);
        peak_target = peak_target.max(autoscaler.target());
    }
    Ok(ServeReport {
        pools: pools
            .iter()
            .map(|p| format!("{} {}", p.pool.instance_type, p.pool.location()))
            .collect(),
        minutes: p.minutes as u64,
        demand: scenario.demand.name.clone(),
        peak_in_flight,
        peak_target,
        cold_start_minutes: scenario.cold_start_minutes,
        request_seconds: scenario.request_seconds,
        utilization: scenario.utilization,
        results,
        hourly_needed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{format_trace, parse_manifest};

    /// Three zones of p3.2xlarge over three days of 10-minute ticks; `down`
    /// gives each zone's ticks without spot capacity.
    fn pools(down: [std::ops::Range<usize>; 3]) -> Vec<SimPool> {
        let start = time::macros::datetime!(2022-10-26 00:00 UTC);
        let rfc3339 = &time::format_description::well_known::Rfc3339;
        let mut manifest =
            String::from("file,cloud,region,zone,instance_type,on_demand_price,spot_price\n");
        for z in ["a", "b", "c"] {
            manifest.push_str(&format!(
                "{z}.csv,aws,us-west-2,us-west-2{z},p3.2xlarge,3.06,1.00\n"
            ));
        }
        parse_manifest(&manifest, |f| {
            let k = ["a.csv", "b.csv", "c.csv"]
                .iter()
                .position(|n| *n == f)
                .unwrap();
            Ok(format_trace((0..432).map(|i| {
                let at = start + time::Duration::minutes(10 * i as i64);
                (at.format(rfc3339).unwrap(), !down[k].contains(&i))
            })))
        })
        .unwrap()
    }

    fn scenario(rpm: f64) -> ServeScenario {
        ServeScenario {
            spec: ServiceSpec::from_toml(DEFAULT_SIM_SERVICE).unwrap(),
            demand: Demand::diurnal(rpm, rpm).unwrap(),
            request_seconds: 2.0,
            utilization: 0.7,
            cold_start_minutes: 5,
        }
    }

    fn result(r: &ServeReport, p: ServePolicy) -> &ServeResult {
        r.results.iter().find(|x| x.policy == p).unwrap()
    }

    #[test]
    fn a_zone_lost_is_covered_by_the_extra_spot_replica() {
        // 240 requests a minute of 2 s: 8 in flight, 2 replicas of 4. Zone a
        // loses spot for five hours (its replica is replaced in zone b, the
        // first of the two left), zone c for 100 minutes later on.
        let report = simulate_serve(
            &pools([100..130, 0..0, 200..210]),
            &scenario(240.0),
            &ServePolicy::ALL,
        )
        .unwrap();
        assert_eq!(report.minutes, 432 * 10);
        assert_eq!(report.peak_target, 2);
        let od = result(&report, ServePolicy::OnDemand);
        // Short only while the first replicas start (the autoscaler starts
        // at one and asks for two after a minute over).
        assert!(od.short_minutes <= 7, "{od:?}");
        assert_eq!(od.preemptions, 0);
        assert_eq!(od.cost_vs_on_demand, Some(1.0));
        // Two on-demand replicas for 72 hours, the second from minute 1.
        let hours = od.on_demand_hours;
        assert!((hours - 144.0).abs() < 0.1, "{hours}");
        let spot_only = result(&report, ServePolicy::SpotOnly);
        assert!(spot_only.preemptions >= 2, "{spot_only:?}");
        assert!(spot_only.short_minutes > od.short_minutes, "{spot_only:?}");
        for p in [ServePolicy::Spothedge, ServePolicy::Gpufleet] {
            let r = result(&report, p);
            assert!(r.preemptions >= 1, "{r:?}");
            // The extra replica carries the load while one is replaced.
            assert!(r.short_minutes <= od.short_minutes, "{r:?}");
            assert!(r.cost_vs_on_demand.unwrap() < 0.5, "{r:?}");
        }
        // gpufleet never launched into a pool without capacity twice in a
        // row: the pool is set aside once it refused.
        let g = result(&report, ServePolicy::Gpufleet);
        assert!(g.refused_launches <= 2, "{g:?}");
    }

    #[test]
    fn no_spot_anywhere_falls_back_to_on_demand() {
        // Every zone loses spot for a day: SpotHedge and gpufleet stand in
        // with on-demand and serve as on-demand does; spot only cannot.
        let report = simulate_serve(
            &pools([144..288, 144..288, 144..288]),
            &scenario(240.0),
            &ServePolicy::ALL,
        )
        .unwrap();
        let od = result(&report, ServePolicy::OnDemand);
        let spot_only = result(&report, ServePolicy::SpotOnly);
        assert!(
            spot_only.short_minutes >= od.short_minutes + 24 * 60 - 10,
            "{spot_only:?}"
        );
        for p in [ServePolicy::Spothedge, ServePolicy::Gpufleet] {
            let r = result(&report, p);
            assert!(r.on_demand_hours >= 48.0, "{r:?}");
            // A cold start's worth of minutes while the fallback starts.
            assert!(r.short_minutes <= od.short_minutes + 6, "{r:?}");
        }
    }

    #[test]
    fn demand_files_are_checked() {
        let d = Demand::from_csv("d.csv", "minute,requests\n0,10\n1,20\n").unwrap();
        let t0 = time::macros::datetime!(2022-10-26 22:05 UTC);
        assert_eq!((d.at(t0, 0), d.at(t0, 1), d.at(t0, 2)), (10.0, 20.0, 10.0));
        let one = Demand::from_csv("d.csv", "requests\n5\n# a comment\n\n6\n").unwrap();
        assert_eq!(one.at(t0, 1), 6.0);
        for (text, needle) in [
            (
                "0,10\n2,5\n",
                "d.csv line 2: minute \"2\" out of order (expected 1)",
            ),
            (
                "requests\nx\n",
                "d.csv line 2: invalid number of requests \"x\"",
            ),
            ("5\n-1\n", "d.csv line 2: invalid number of requests \"-1\""),
            ("1,2,3\n", "d.csv line 1: 3 fields"),
            ("requests\n", "d.csv: no requests per minute in it"),
        ] {
            let e = Demand::from_csv("d.csv", text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let d = Demand::diurnal(100.0, 10.0).unwrap();
        let midnight = time::macros::datetime!(2022-10-26 00:00 UTC);
        assert!((d.at(midnight, 4 * 60) - 10.0).abs() < 1e-9);
        assert!((d.at(midnight, 16 * 60) - 100.0).abs() < 1e-9);
        assert!((d.at(midnight, 28 * 60) - 10.0).abs() < 1e-9);
        assert!(Demand::diurnal(10.0, 100.0).is_err());
        assert!(ServePolicy::parse("yolo")
            .unwrap_err()
            .to_string()
            .contains(
                "expected one of on-demand, spot-only, spothedge, gpufleet, gpufleet-survive"
            ));
    }
}
