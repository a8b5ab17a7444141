//! How an outage's chance of ending falls with its age.
//!
//! The availability chain gives every pool one recovery rate for the later
//! part of an outage ([`AvailState::OutageOld`](super::AvailState::OutageOld)),
//! as if an outage forgot how long it had lasted. Outages do not: in the 2022
//! traces an outage 20 minutes old ended within the next hour about seven
//! times in ten, one 4 hours old about one time in five, and one a day old
//! hardly ever. A pool three hours into an outage priced with the average
//! rate is hoped for far more than it should be, and one twenty minutes in far
//! less. [`OutageAges`] holds the recovery rate by age band, and
//! [`OutageAges::rate_within`] turns it into the one rate the chain takes for
//! a pool's current outage: the rate that gives the same chance of the outage
//! ending within the job's slack (the wait the decision can afford) as the
//! bands do, from the age the outage has reached.
//!
//! The policy applies it itself: a candidate's [`Availability`] says how old
//! its outage is ([`Availability::outage_hours`]), the bands are
//! [`PolicyConfig::outage_ages`] (the 2022 figures by default; the simulator's
//! learner puts its own there), and the horizon is the job's slack
//! ([`JobState::slack_hours`], at least one planning step).
//!
//! [`Availability`]: super::Availability
//! [`Availability::outage_hours`]: super::Availability::outage_hours
//! [`PolicyConfig::outage_ages`]: super::PolicyConfig::outage_ages
//! [`JobState::slack_hours`]: super::JobState::slack_hours

use serde::{Deserialize, Serialize};

/// Upper edges of the outage-age bands, hours; the last band has no upper
/// edge.
pub const OUTAGE_AGE_EDGES_HOURS: [f64; 6] = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0];

/// The number of outage-age bands.
pub const OUTAGE_AGE_BANDS: usize = OUTAGE_AGE_EDGES_HOURS.len() + 1;

/// Recovery rates per hour of an outage by its age band
/// ([`OUTAGE_AGE_EDGES_HOURS`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OutageAges {
    /// Recoveries per hour of outages in each age band.
    pub per_hour: [f64; OUTAGE_AGE_BANDS],
}

impl Default for OutageAges {
    /// The 2022 availability traces (`data/traces`, every pool of the three
    /// windows together, 10-minute ticks): of 26,873 ticks in outages past
    /// their first 10 minutes, the share that ended in the next tick, by the
    /// outage's age — 27 % (under 30 min), 19 % (under 1 h), 9.8 % (1–2 h),
    /// 5.0 % (2–4 h), 3.4 % (4–8 h), 2.3 % (8–16 h), 0.25 % (longer) — as
    /// per-hour rates.
    fn default() -> Self {
        OutageAges {
            per_hour: [1.8905, 1.2865, 0.6163, 0.3077, 0.2095, 0.1398, 0.0148],
        }
    }
}

impl OutageAges {
    /// The band an outage `age_hours` old is in.
    pub fn band(age_hours: f64) -> usize {
        OUTAGE_AGE_EDGES_HOURS
            .iter()
            .position(|edge| age_hours < *edge)
            .unwrap_or(OUTAGE_AGE_EDGES_HOURS.len())
    }

    /// The constant recovery rate per hour that gives an outage `age_hours`
    /// old the chance these bands give it of ending within `horizon_hours`
    /// (the bands' mean rate over that stretch of its age). A horizon of
    /// zero gives the rate at `age_hours`.
    pub fn rate_within(&self, age_hours: f64, horizon_hours: f64) -> f64 {
        let start = age_hours.max(0.0);
        let horizon = if horizon_hours.is_finite() {
            horizon_hours.max(0.0)
        } else {
            0.0
        };
        if horizon == 0.0 {
            return self.per_hour[Self::band(start)];
        }
        let end = start + horizon;
        let mut cumulative = 0.0;
        let mut t = start;
        while t < end {
            let b = Self::band(t);
            let next = OUTAGE_AGE_EDGES_HOURS
                .get(b)
                .map_or(end, |edge| edge.min(end));
            cumulative += self.per_hour[b] * (next - t);
            t = next;
        }
        cumulative / horizon
    }

    /// Whether every rate is finite and not negative.
    pub(crate) fn valid(&self) -> bool {
        self.per_hour.iter().all(|r| r.is_finite() && *r >= 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_bands_mean_over_the_horizon() {
        let ages = OutageAges::default();
        // Within one band: that band's rate.
        assert_eq!(ages.rate_within(2.5, 1.0), ages.per_hour[3]);
        assert_eq!(ages.rate_within(0.2, 0.0), ages.per_hour[0]);
        // Across bands: weighted by the hours spent in each.
        let r = ages.rate_within(1.5, 1.0);
        let want = (ages.per_hour[2] * 0.5 + ages.per_hour[3] * 0.5) / 1.0;
        assert!((r - want).abs() < 1e-12, "{r} {want}");
        // Into the open last band.
        let r = ages.rate_within(12.0, 24.0);
        let want = (ages.per_hour[5] * 4.0 + ages.per_hour[6] * 20.0) / 24.0;
        assert!((r - want).abs() < 1e-12, "{r} {want}");
    }

    #[test]
    fn an_older_outage_is_hoped_for_less() {
        let ages = OutageAges::default();
        let mut last = f64::INFINITY;
        for age in [0.2, 0.6, 1.5, 3.0, 6.0, 12.0, 30.0] {
            let r = ages.rate_within(age, 12.0);
            assert!(r < last, "age {age}: {r} not below {last}");
            last = r;
        }
        // A non-finite horizon reads as none, not as a NaN rate.
        assert_eq!(ages.rate_within(3.0, f64::NAN), ages.per_hour[3]);
        assert_eq!(ages.rate_within(3.0, f64::INFINITY), ages.per_hour[3]);
    }
}
