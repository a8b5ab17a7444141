//! The autoscaler: from the proxy's load samples to a target number of
//! replicas, each change with its reason. Pure: time comes in the samples.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::file::{AutoscaleSettings, ReplicaBounds, ServiceSpec};
use crate::placer::format_duration;

/// What the proxy measured since the previous sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadSample {
    /// When the sample was taken.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Requests in flight on average since the previous sample, those held
    /// in the proxy's queue included.
    pub in_flight: f64,
    /// Requests held in the queue now (no replica ready to take them).
    pub queued: u32,
    /// Requests that arrived since the previous sample.
    pub arrived: u64,
}

/// Why the target moved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScaleReason {
    /// More requests in flight per replica than the target, for `up_after`.
    Busy {
        /// Mean requests in flight per replica of the old target.
        per_replica: f64,
        /// The target per replica.
        target: f64,
        /// How long it has been over.
        for_secs: u64,
    },
    /// Fewer than the target for `down_after`.
    Quiet {
        /// The highest per-replica load of the window, on the old target.
        per_replica: f64,
        /// The target per replica.
        target: f64,
        /// How long it has been under.
        for_secs: u64,
    },
    /// No request for `idle`: to zero.
    Idle {
        /// How long without a request.
        quiet_secs: u64,
    },
    /// A request arrived while at zero.
    Woken {
        /// Requests waiting.
        queued: u32,
    },
}

/// One change of the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleDecision {
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The old target.
    pub from: u32,
    /// The new target.
    pub to: u32,
    /// Why.
    pub reason: ScaleReason,
}

impl fmt::Display for ScaleDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = |s: u64| format_duration(Duration::from_secs(s));
        write!(f, "{} -> {} replicas: ", self.from, self.to)?;
        match &self.reason {
            ScaleReason::Busy {
                per_replica,
                target,
                for_secs,
            } => write!(
                f,
                "{per_replica:.1} requests in flight per replica, over the target {target} for {}",
                secs(*for_secs)
            ),
            ScaleReason::Quiet {
                per_replica,
                target,
                for_secs,
            } => write!(
                f,
                "at most {per_replica:.1} requests in flight per replica, under the target {target} for {}",
                secs(*for_secs)
            ),
            ScaleReason::Idle { quiet_secs } => {
                write!(f, "no request for {}: scaled to zero", secs(*quiet_secs))
            }
            ScaleReason::Woken { queued } => {
                write!(f, "a request arrived at zero ({queued} waiting)")
            }
        }
    }
}

/// The autoscaler of one service.
///
/// The load it compares with `target_in_flight` is per replica *of the
/// target* (ready or still starting): while the replicas of the last
/// decision start, the requests they will take are not counted again, so a
/// cold start does not scale up twice. The wanted count is
/// ⌈in flight ÷ target_in_flight⌉ within the bounds; up once it has been
/// over the target for `up_after` (to the wanted count of the last sample),
/// down once under for `down_after` (to the highest count wanted in that
/// window, so a dip does not undershoot), to zero after `idle` with no
/// request, and from zero at the first request.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    settings: AutoscaleSettings,
    bounds: ReplicaBounds,
    target: u32,
    over_since: Option<OffsetDateTime>,
    under_since: Option<(OffsetDateTime, u32, f64)>,
    last_request: OffsetDateTime,
}

impl Autoscaler {
    /// A service's autoscaler, starting at its floor at `now` (a service
    /// that may scale to zero starts with one replica, and idles down if no
    /// request comes).
    pub fn new(spec: &ServiceSpec, now: OffsetDateTime) -> Self {
        Self::with(spec.autoscale, spec.replicas, spec.floor(), now)
    }

    /// An autoscaler with these settings, starting at `target` (a
    /// controller resuming a service starts from its recorded target).
    pub fn with(
        settings: AutoscaleSettings,
        bounds: ReplicaBounds,
        target: u32,
        now: OffsetDateTime,
    ) -> Self {
        Autoscaler {
            settings,
            bounds,
            target: target.min(bounds.max),
            over_since: None,
            under_since: None,
            last_request: now,
        }
    }

    /// The current target.
    pub fn target(&self) -> u32 {
        self.target
    }

    fn floor(&self) -> u32 {
        self.bounds.min.max(1)
    }

    /// Takes a new version's settings and bounds (a promoted update), the
    /// target kept within the new bounds.
    pub fn reconfigure(&mut self, settings: AutoscaleSettings, bounds: ReplicaBounds) {
        self.settings = settings;
        self.bounds = bounds;
        self.target = self.target.clamp(self.floor().min(bounds.max), bounds.max);
        self.over_since = None;
        self.under_since = None;
    }

    fn wanted(&self, in_flight: f64) -> u32 {
        // ⌈load ÷ target⌉, exact at whole multiples: a quotient within a
        // few parts in 10^12 of an integer is that integer (3 in flight
        // against a target of 1.0000000000000004, or a time-averaged
        // 3.0000000000000004 against 1, is 3 replicas, not 4).
        let q = in_flight / self.settings.target_in_flight;
        let near = q.round();
        let q = if (q - near).abs() <= 1e-12 * near.abs().max(1.0) {
            near
        } else {
            q
        };
        let n = q.ceil();
        let n = if n.is_finite() && n > 0.0 {
            n.min(f64::from(self.bounds.max)) as u32
        } else {
            0
        };
        n.clamp(self.floor(), self.bounds.max)
    }

    fn decide(&mut self, at: OffsetDateTime, to: u32, reason: ScaleReason) -> ScaleDecision {
        let d = ScaleDecision {
            at,
            from: self.target,
            to,
            reason,
        };
        self.target = to;
        self.over_since = None;
        self.under_since = None;
        d
    }

    /// Reads one sample; the decision when the target moves.
    pub fn observe(&mut self, s: &LoadSample) -> Option<ScaleDecision> {
        let busy = s.arrived > 0 || s.queued > 0 || s.in_flight > 0.0;
        if busy {
            self.last_request = s.at;
        }
        if self.target == 0 {
            if s.arrived > 0 || s.queued > 0 {
                let to = self.wanted(s.in_flight.max(f64::from(s.queued)));
                return Some(self.decide(s.at, to, ScaleReason::Woken { queued: s.queued }));
            }
            return None;
        }
        if let Some(idle) = self.settings.idle {
            let quiet = s.at - self.last_request;
            if !busy && quiet >= idle {
                let quiet_secs = quiet.whole_seconds().max(0) as u64;
                return Some(self.decide(s.at, 0, ScaleReason::Idle { quiet_secs }));
            }
        }
        let wanted = self.wanted(s.in_flight);
        let per_replica = s.in_flight / f64::from(self.target);
        let target = self.settings.target_in_flight;
        if wanted > self.target {
            self.under_since = None;
            let since = *self.over_since.get_or_insert(s.at);
            let over = s.at - since;
            if over >= self.settings.up_after {
                let for_secs = over.whole_seconds().max(0) as u64;
                return Some(self.decide(
                    s.at,
                    wanted,
                    ScaleReason::Busy {
                        per_replica,
                        target,
                        for_secs,
                    },
                ));
            }
        } else if wanted < self.target {
            self.over_since = None;
            let (since, highest, peak) =
                self.under_since.get_or_insert((s.at, wanted, per_replica));
            *highest = (*highest).max(wanted);
            *peak = peak.max(per_replica);
            let (since, highest, peak) = (*since, *highest, *peak);
            let under = s.at - since;
            if under >= self.settings.down_after {
                let for_secs = under.whole_seconds().max(0) as u64;
                return Some(self.decide(
                    s.at,
                    highest,
                    ScaleReason::Quiet {
                        per_replica: peak,
                        target,
                        for_secs,
                    },
                ));
            }
        } else {
            self.over_since = None;
            self.under_since = None;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::ServiceSpec;

    fn spec(extra: &str) -> ServiceSpec {
        ServiceSpec::from_toml(&format!(
            "name = \"s\"\nrun = \"serve\"\nreadiness = \"/\"\n[[gpu]]\nmodel = \"L4\"\n{extra}"
        ))
        .unwrap()
    }

    /// Whole multiples of the target are exact: float noise in the load
    /// or the target never asks for one replica more (issue 79).
    #[test]
    fn the_wanted_count_is_exact_at_integer_boundaries() {
        let mut s = spec(
            "[replicas]\nmin = 1\nmax = 10\n[autoscale]\ntarget_in_flight = 1.0000000000000004\n",
        );
        let a = Autoscaler::new(&s, at(0));
        assert_eq!(a.wanted(3.0), 3);
        assert_eq!(a.wanted(3.000001), 4);
        s.autoscale.target_in_flight = 1.0;
        let a = Autoscaler::new(&s, at(0));
        assert_eq!(a.wanted(3.0000000000000004), 3);
        assert_eq!(a.wanted(0.1 + 0.2 + 2.7), 3);
        assert_eq!(a.wanted(2.5), 3);
    }

    /// A promoted update's bounds and settings are the autoscaler's.
    #[test]
    fn reconfigured_bounds_move_the_target() {
        let old = spec("[replicas]\nmin = 1\nmax = 4\n");
        let new = spec("[replicas]\nmin = 3\nmax = 6\n");
        let mut a = Autoscaler::new(&old, at(0));
        assert_eq!(a.target(), 1);
        a.reconfigure(new.autoscale, new.replicas);
        assert_eq!(a.target(), 3);
        let small = spec("[replicas]\nmin = 1\nmax = 2\n");
        a.reconfigure(small.autoscale, small.replicas);
        assert_eq!(a.target(), 2);
    }

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(secs)
    }

    fn load(secs: i64, in_flight: f64) -> LoadSample {
        LoadSample {
            at: at(secs),
            in_flight,
            queued: 0,
            arrived: if in_flight > 0.0 { 10 } else { 0 },
        }
    }

    #[test]
    fn scales_up_after_up_after_and_down_after_down_after() {
        let s = spec("[replicas]\nmin = 1\nmax = 3\n[autoscale]\ntarget_in_flight = 4\nup_after = \"30s\"\ndown_after = \"60s\"\n");
        let mut a = Autoscaler::new(&s, at(0));
        assert_eq!(a.target(), 1);
        // 10 in flight on one replica: over for 20 s, nothing; at 30 s, up to 3.
        assert_eq!(a.observe(&load(10, 10.0)), None);
        assert_eq!(a.observe(&load(30, 10.0)), None);
        let up = a.observe(&load(40, 10.0)).unwrap();
        assert_eq!((up.from, up.to), (1, 3));
        assert!(
            matches!(up.reason, ScaleReason::Busy { for_secs: 30, .. }),
            "{up:?}"
        );
        assert!(up.to_string().contains("over the target 4 for 30s"), "{up}");
        // More load is capped at max.
        assert_eq!(a.observe(&load(50, 100.0)), None);
        // Under the target: down only after 60 s, to the highest wanted in the window.
        assert_eq!(a.observe(&load(60, 6.0)), None);
        assert_eq!(a.observe(&load(90, 1.0)), None);
        let down = a.observe(&load(120, 1.0)).unwrap();
        assert_eq!((down.from, down.to), (3, 2));
        let down = (0..10)
            .find_map(|i| a.observe(&load(130 + i * 10, 0.5)))
            .unwrap();
        assert_eq!((down.from, down.to), (2, 1));
        // Never under min without idle.
        assert!((0..20).all(|i| a.observe(&load(300 + i * 10, 0.0)).is_none()));
        assert_eq!(a.target(), 1);
    }

    #[test]
    fn a_brief_spike_does_not_scale() {
        let s =
            spec("[replicas]\nmax = 3\n[autoscale]\ntarget_in_flight = 4\nup_after = \"30s\"\n");
        let mut a = Autoscaler::new(&s, at(0));
        assert_eq!(a.observe(&load(10, 12.0)), None);
        assert_eq!(a.observe(&load(20, 2.0)), None);
        assert_eq!(a.observe(&load(30, 12.0)), None);
        assert_eq!(a.observe(&load(50, 12.0)), None);
        assert_eq!(a.target(), 1);
    }

    #[test]
    fn idles_to_zero_and_wakes_on_the_next_request() {
        let s = spec("[replicas]\nmin = 0\nmax = 2\n[autoscale]\nidle = \"5m\"\n");
        let mut a = Autoscaler::new(&s, at(0));
        assert_eq!(a.target(), 1);
        assert_eq!(a.observe(&load(100, 1.0)), None);
        assert_eq!(a.observe(&load(300, 0.0)), None);
        let zero = a.observe(&load(400, 0.0)).unwrap();
        assert_eq!((zero.from, zero.to), (1, 0));
        assert!(matches!(zero.reason, ScaleReason::Idle { quiet_secs: 300 }));
        assert_eq!(a.observe(&load(500, 0.0)), None);
        let woken = a
            .observe(&LoadSample {
                at: at(600),
                in_flight: 0.0,
                queued: 1,
                arrived: 1,
            })
            .unwrap();
        assert_eq!((woken.from, woken.to), (0, 1));
        assert!(woken.to_string().contains("a request arrived at zero"));
    }
}
