//! One estimate of a pool's interruption hazard from every signal there is.
//!
//! The estimator is a Gamma-Poisson model whose evidence decays with age:
//!
//! - **Prior** λ₀ from published signals: the AWS Spot Advisor bucket or Azure
//!   eviction-rate band (see [`bucket_rate`]), scaled by the AWS spot placement
//!   score and by instance size; a default for spot pools without a signal.
//!   The prior is worth `prior_strength_hours` instance-hours of evidence:
//!   Gamma(α₀ = λ₀·S, β₀ = S).
//! - **Evidence** gpufleet observed: each interruption adds 1 to α and each
//!   capacity failure `capacity_failure_weight` (in the measured traces a pool
//!   that cannot give capacity is the pool that preempts), each weighted by
//!   w(t) = 2^(−age/half-life); each hour an instance ran in the pool adds its
//!   weight to β.
//! - **Bursts**: interruptions cluster. In the 2022 traces, after a preemption
//!   the same pool stayed unavailable for a mean of 1 h, and once back it
//!   preempted again after a median of 30 min (mean 1.7 h), against hours
//!   between preemptions overall. So each interruption also adds
//!   `burst_weight` (default 3) decaying with `burst_half_life` (default 2 h).
//! - **Estimate**: the posterior mean λ = α/β.
//!
//! So a pool interrupted a minute ago looks riskier than its prior, and a pool
//! that ran a week without interruption looks safer; both drift back to the
//! prior as the evidence ages.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{Capacity, InterruptionBucket, Offer};

/// Hazard per instance-hour for an interruption band (AWS Spot Advisor bucket
/// or Azure eviction rate), before the size factor.
///
/// AWS defines the bucket as the share of instances interrupted over the
/// trailing month, but read literally (λ = −ln(1−p)/720 h) it is three orders of
/// magnitude below what GPU pools do: every pool in the 2022 SkyPilot traces
/// (p2/p3, us-west-2a/b) is in the `>20%` bucket in both the 2021 and 2025
/// Spot Advisor data, and was measured at 0.09-1.7 preemptions per available
/// hour (1-GPU median 0.23/h, 8-GPU median 0.9/h). The mapping is therefore
/// linear in the band's midpoint, calibrated so that `>20%` (midpoint taken as
/// 30 %) gives 0.30/h for one GPU: `<5%` 0.025/h, `5-10%` 0.075/h, `10-15%`
/// 0.125/h, `15-20%` 0.175/h, `>20%` 0.30/h.
pub fn bucket_rate(bucket: InterruptionBucket) -> f64 {
    match bucket {
        InterruptionBucket::Under5 => 0.025,
        InterruptionBucket::From5To10 => 0.075,
        InterruptionBucket::From10To15 => 0.125,
        InterruptionBucket::From15To20 => 0.175,
        InterruptionBucket::Over20 => 0.30,
    }
}

/// How much more often a pool of `gpus`-GPU instances is interrupted than a
/// 1-GPU pool with the same published signal: 1 + log2(gpus)/3 (8 GPUs: 2x).
/// In the traces, 8-GPU pools were preempted 2-4x as often as 1-GPU pools of
/// the same family and zone.
pub fn size_factor(gpus: u32) -> f64 {
    1.0 + f64::from(gpus.max(1)).log2() / 3.0
}

/// 2^(−age/half-life).
fn decay(now: OffsetDateTime, at: OffsetDateTime, half_life: Duration) -> f64 {
    let age_h = ((now - at).as_seconds_f64() / 3600.0).max(0.0);
    0.5_f64.powf(age_h / (half_life.as_secs_f64() / 3600.0).max(1e-9))
}

/// What happened in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolEventKind {
    /// An instance was interrupted.
    Interruption,
    /// A launch was refused for lack of capacity.
    CapacityFailure,
}

impl PoolEventKind {
    /// Its name in a ledger (`interruption`, `capacity-failure`).
    pub fn as_str(self) -> &'static str {
        match self {
            PoolEventKind::Interruption => "interruption",
            PoolEventKind::CapacityFailure => "capacity-failure",
        }
    }

    /// Parses [`PoolEventKind::as_str`].
    pub fn parse(s: &str) -> Option<PoolEventKind> {
        [PoolEventKind::Interruption, PoolEventKind::CapacityFailure]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// One observation in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PoolEvent {
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// What.
    pub kind: PoolEventKind,
}

/// What gpufleet observed in one pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolEvidence {
    /// Interruptions and capacity failures.
    pub events: Vec<PoolEvent>,
    /// Periods an instance ran in the pool (start, end).
    pub exposure: Vec<(OffsetDateTime, OffsetDateTime)>,
}

impl PoolEvidence {
    /// Records an event.
    pub fn record(&mut self, at: OffsetDateTime, kind: PoolEventKind) {
        self.events.push(PoolEvent { at, kind });
    }

    /// Records a period an instance ran.
    pub fn ran(&mut self, from: OffsetDateTime, to: OffsetDateTime) {
        if to > from {
            self.exposure.push((from, to));
        }
    }
}

/// The estimator's settings (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HazardModel {
    /// Evidence loses half its weight in this long (default 24 h).
    pub half_life: Duration,
    /// How many instance-hours of evidence the prior is worth (default 24).
    pub prior_strength_hours: f64,
    /// The prior for a spot pool with no published signal, per hour, before the
    /// size factor (default 0.10: GCP and Azure publish no per-pool rate in the
    /// snapshot; between the `5-10%` and `10-15%` bands).
    pub default_spot_rate: f64,
    /// How much one capacity failure counts, in interruptions (default 0.5).
    pub capacity_failure_weight: f64,
    /// Extra weight of a recent interruption (default 3).
    pub burst_weight: f64,
    /// How fast that extra weight decays (default 2 h).
    pub burst_half_life: Duration,
}

impl Default for HazardModel {
    fn default() -> Self {
        HazardModel {
            half_life: Duration::from_secs(24 * 3600),
            prior_strength_hours: 24.0,
            default_spot_rate: 0.10,
            capacity_failure_weight: 0.5,
            burst_weight: 3.0,
            burst_half_life: Duration::from_secs(2 * 3600),
        }
    }
}

/// A pool's hazard and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HazardEstimate {
    /// Interruptions per instance-hour (0 for on-demand).
    pub rate_per_hour: f64,
    /// The prior from published signals.
    pub prior_rate_per_hour: f64,
    /// Decayed count of observed interruptions (capacity failures weighted).
    pub observed_events: f64,
    /// Decayed instance-hours observed.
    pub observed_hours: f64,
    /// The signals used, for explanations: `aws-spot-advisor:>20%`, …
    pub signals: Vec<String>,
}

impl HazardModel {
    fn weight(&self, now: OffsetDateTime, at: OffsetDateTime) -> f64 {
        decay(now, at, self.half_life)
    }

    /// The prior hazard of an offer's pool from its published signals.
    pub fn prior(&self, offer: &Offer) -> (f64, Vec<String>) {
        let mut signals = Vec::new();
        let rate = self.prior_noting(offer, |note| signals.push(note.to_string()));
        (rate, signals)
    }

    /// The prior rate, telling `note` each signal it used (lazily: a caller
    /// that does not want them formats nothing).
    fn prior_noting(&self, offer: &Offer, mut note: impl FnMut(std::fmt::Arguments<'_>)) -> f64 {
        if offer.pool.capacity == Capacity::OnDemand {
            note(format_args!("on-demand"));
            return 0.0;
        }
        let gpus = offer.instance_type.gpu_count();
        let s = &offer.stability;
        let mut rate = if let Some(r) = s
            .interruption_rate_per_hour
            .filter(|r| r.is_finite() && *r >= 0.0)
        {
            note(format_args!("provider-rate:{r:.3}/h"));
            r
        } else if let Some(b) = s.bucket {
            note(format_args!("interruption-bucket:{b}"));
            bucket_rate(b) * size_factor(gpus)
        } else {
            note(format_args!("default-spot-prior"));
            self.default_spot_rate * size_factor(gpus)
        };
        if let Some(score) = s.placement_score.filter(|s| (1..=10).contains(s)) {
            // 10 -> x0.6, 5 -> x1.1, 1 -> x1.5.
            rate *= 1.6 - 0.1 * f64::from(score);
            note(format_args!("placement-score:{score}"));
        }
        rate
    }

    /// Decayed observed events (capacity failures weighted, bursts added) and
    /// decayed instance-hours.
    fn observed(&self, evidence: Option<&PoolEvidence>, now: OffsetDateTime) -> (f64, f64) {
        let (mut events, mut hours) = (0.0, 0.0);
        let Some(ev) = evidence else {
            return (events, hours);
        };
        for e in ev.events.iter().filter(|e| e.at <= now) {
            let w = self.weight(now, e.at);
            events += match e.kind {
                PoolEventKind::Interruption => {
                    w + self.burst_weight * decay(now, e.at, self.burst_half_life)
                }
                PoolEventKind::CapacityFailure => w * self.capacity_failure_weight,
            };
        }
        let h = self.half_life.as_secs_f64() / 3600.0;
        for (from, to) in &ev.exposure {
            let to = (*to).min(now);
            if to > *from {
                // ∫ 2^(−(now−t)/h) dt from `from` to `to`, in hours.
                hours +=
                    h / std::f64::consts::LN_2 * (self.weight(now, to) - self.weight(now, *from));
            }
        }
        (events, hours)
    }

    /// The posterior mean α/β.
    fn posterior(&self, prior: f64, events: f64, hours: f64) -> f64 {
        let s = self.prior_strength_hours.max(1e-6);
        (prior * s + events) / (s + hours)
    }

    /// The posterior hazard per hour alone, without the signals (the fast path
    /// ranking uses for every candidate).
    pub fn rate(&self, offer: &Offer, evidence: Option<&PoolEvidence>, now: OffsetDateTime) -> f64 {
        if offer.pool.capacity == Capacity::OnDemand {
            return 0.0;
        }
        let prior = self.prior_noting(offer, |_| {});
        let (events, hours) = self.observed(evidence, now);
        self.posterior(prior, events, hours)
    }

    /// The posterior hazard of an offer's pool given what gpufleet observed.
    pub fn estimate(
        &self,
        offer: &Offer,
        evidence: Option<&PoolEvidence>,
        now: OffsetDateTime,
    ) -> HazardEstimate {
        let (prior, mut signals) = self.prior(offer);
        if offer.pool.capacity == Capacity::OnDemand {
            return HazardEstimate {
                rate_per_hour: 0.0,
                prior_rate_per_hour: 0.0,
                observed_events: 0.0,
                observed_hours: 0.0,
                signals,
            };
        }
        let (events, hours) = self.observed(evidence, now);
        if events > 0.0 || hours > 0.0 {
            signals.push(format!("observed:{events:.1}/{hours:.0}h"));
        }
        HazardEstimate {
            rate_per_hour: self.posterior(prior, events, hours),
            prior_rate_per_hour: prior,
            observed_events: events,
            observed_hours: hours,
            signals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cloud, Snapshot};

    fn spot_offer() -> Offer {
        Snapshot::embedded()
            .offers()
            .iter()
            .find(|o| {
                o.pool.cloud == Cloud::Aws
                    && o.pool.capacity == Capacity::Spot
                    && o.stability.bucket.is_some()
            })
            .unwrap()
            .clone()
    }

    #[test]
    fn recent_interruption_is_riskier_than_a_stable_week() {
        let m = HazardModel::default();
        let offer = spot_offer();
        let now = crate::fake::FAKE_EPOCH;
        let prior = m.estimate(&offer, None, now).rate_per_hour;

        let mut hot = PoolEvidence::default();
        hot.ran(
            now - time::Duration::hours(1),
            now - time::Duration::minutes(1),
        );
        hot.record(
            now - time::Duration::minutes(1),
            PoolEventKind::Interruption,
        );
        let hot = m.estimate(&offer, Some(&hot), now).rate_per_hour;

        let mut calm = PoolEvidence::default();
        calm.ran(now - time::Duration::days(7), now);
        let calm = m.estimate(&offer, Some(&calm), now).rate_per_hour;

        assert!(
            hot > prior && prior > calm,
            "hot {hot} prior {prior} calm {calm}"
        );
        // An old interruption has mostly decayed away.
        let mut old = PoolEvidence::default();
        old.record(now - time::Duration::days(10), PoolEventKind::Interruption);
        let old = m.estimate(&offer, Some(&old), now).rate_per_hour;
        assert!((old - prior) / prior < 0.01, "old {old} prior {prior}");
    }

    #[test]
    fn the_fast_rate_is_the_estimate() {
        let m = HazardModel::default();
        let now = crate::fake::FAKE_EPOCH;
        let mut ev = PoolEvidence::default();
        ev.ran(now - time::Duration::hours(5), now);
        ev.record(
            now - time::Duration::minutes(30),
            PoolEventKind::Interruption,
        );
        ev.record(
            now - time::Duration::hours(2),
            PoolEventKind::CapacityFailure,
        );
        for offer in Snapshot::embedded().offers().iter().step_by(97) {
            for e in [None, Some(&ev)] {
                assert_eq!(
                    m.rate(offer, e, now),
                    m.estimate(offer, e, now).rate_per_hour,
                    "{}",
                    offer.pool
                );
            }
        }
    }

    #[test]
    fn signals_scale_the_prior() {
        let m = HazardModel::default();
        let mut o = spot_offer();
        o.stability.bucket = Some(InterruptionBucket::Under5);
        let low = m.prior(&o).0;
        o.stability.bucket = Some(InterruptionBucket::Over20);
        let high = m.prior(&o).0;
        assert!(high > low * 10.0);
        o.stability.placement_score = Some(10);
        assert!(m.prior(&o).0 < high);
        o.pool.capacity = Capacity::OnDemand;
        assert_eq!(
            m.estimate(&o, None, crate::fake::FAKE_EPOCH).rate_per_hour,
            0.0
        );
        assert_eq!(size_factor(8), 2.0);
    }
}
