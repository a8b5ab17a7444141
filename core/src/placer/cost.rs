//! The expected cost of finishing a job in one pool.
//!
//! With hazard λ per hour (mean time between interruptions M = 1/λ), work W
//! hours, checkpoint interval τ, checkpoint cost c and restart overhead R, the
//! expected wall time is Daly's (2006) first-order model plus the first start:
//!
//! ```text
//! T = R + M·e^(R/M)·(e^((τ+c)/M) − 1)·W/τ        (λ > 0)
//! T = R + W·(1 + c/τ)                            (λ = 0, on-demand)
//! ```
//!
//! Each interruption loses about (τ+c)/2 of rework plus R; the instance is paid
//! for the whole wall time, so the expected cost is price·T. The optimal
//! interval is near τ* = √(2c/λ) (Young). The probability of meeting a deadline
//! D treats interruptions as Poisson with mean λ·T over a run of base length
//! R + W(1 + c/τ), each adding (τ+c)/2 + R.

/// The inputs of the cost model, in hours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunModel {
    /// Hours of work in this pool.
    pub work: f64,
    /// Interruptions per hour.
    pub hazard: f64,
    /// Checkpoint interval.
    pub interval: f64,
    /// Hours per checkpoint.
    pub checkpoint_cost: f64,
    /// Hours per (re)start.
    pub restart: f64,
}

/// The shortest checkpoint interval gpufleet picks automatically: 5 minutes.
pub const MIN_AUTO_INTERVAL_HOURS: f64 = 5.0 / 60.0;

/// The Young/Daly optimal checkpoint interval √(2c/λ), clamped to
/// [5 minutes, the work]; the whole work when nothing interrupts.
pub fn optimal_interval(work: f64, hazard: f64, checkpoint_cost: f64) -> f64 {
    if hazard <= 0.0 {
        return work.max(MIN_AUTO_INTERVAL_HOURS);
    }
    (2.0 * checkpoint_cost / hazard)
        .sqrt()
        .clamp(MIN_AUTO_INTERVAL_HOURS, work.max(MIN_AUTO_INTERVAL_HOURS))
}

impl RunModel {
    fn interval(&self) -> f64 {
        self.interval.clamp(1e-6, self.work.max(1e-6))
    }

    /// Expected wall-clock hours to finish (infinite when hopeless).
    pub fn expected_hours(&self) -> f64 {
        let tau = self.interval();
        let segments = self.work / tau;
        if self.hazard <= 0.0 {
            return self.restart + self.work + segments * self.checkpoint_cost;
        }
        let m = 1.0 / self.hazard;
        let t = self.restart
            + m * (self.restart / m).exp()
                * (((tau + self.checkpoint_cost) / m).exp_m1())
                * segments;
        if t.is_finite() {
            t
        } else {
            f64::INFINITY
        }
    }

    /// Expected number of interruptions.
    pub fn expected_interruptions(&self) -> f64 {
        self.hazard.max(0.0) * self.expected_hours()
    }

    /// Hours spent on checkpoints and lost work, as a share of the work.
    pub fn overhead_share(&self) -> f64 {
        (self.expected_hours() - self.restart - self.work) / self.work
    }

    /// The probability of finishing within `deadline` hours.
    pub fn p_within(&self, deadline: f64) -> f64 {
        let tau = self.interval();
        let base = self.restart + self.work * (1.0 + self.checkpoint_cost / tau);
        if self.hazard <= 0.0 {
            return if base <= deadline { 1.0 } else { 0.0 };
        }
        if base > deadline {
            return 0.0;
        }
        let loss = (tau + self.checkpoint_cost) / 2.0 + self.restart;
        let mu = self.hazard * self.expected_hours().min(deadline * 10.0);
        if !mu.is_finite() {
            return 0.0;
        }
        let k_max = ((deadline - base) / loss.max(1e-9)).floor();
        if k_max > mu + 12.0 * mu.sqrt() + 30.0 {
            return 1.0;
        }
        // Poisson CDF up to k_max.
        let (mut term, mut sum) = ((-mu).exp(), 0.0);
        let mut k = 0.0;
        while k <= k_max {
            sum += term;
            k += 1.0;
            term *= mu / k;
        }
        sum.min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(hazard: f64) -> RunModel {
        RunModel {
            work: 10.0,
            hazard,
            interval: 0.5,
            checkpoint_cost: 2.0 / 60.0,
            restart: 10.0 / 60.0,
        }
    }

    #[test]
    fn no_hazard_is_work_plus_overheads() {
        let r = run(0.0);
        let expected = 10.0 / 60.0 + 10.0 + 20.0 * 2.0 / 60.0;
        assert!((r.expected_hours() - expected).abs() < 1e-12);
        assert_eq!(r.p_within(expected), 1.0);
        assert_eq!(r.p_within(expected - 0.01), 0.0);
    }

    #[test]
    fn hazard_raises_time_and_lowers_deadline_odds_monotonically() {
        let mut last_t = run(0.0).expected_hours();
        let mut last_p = 1.0;
        for h in [0.01, 0.05, 0.1, 0.3, 1.0, 3.0] {
            let r = run(h);
            assert!(r.expected_hours() > last_t, "hazard {h}");
            let p = r.p_within(14.0);
            assert!(p <= last_p + 1e-12, "hazard {h}: {p} > {last_p}");
            last_t = r.expected_hours();
            last_p = p;
        }
        // Small hazard: close to the first-order rework of λ·W·(τ/2+R) hours.
        let r = run(0.01);
        let first_order =
            run(0.0).expected_hours() + 0.01 * 10.0 * (0.25 + 1.0 / 60.0 + 10.0 / 60.0);
        assert!(
            (r.expected_hours() - first_order).abs() < 0.02,
            "{} vs {first_order}",
            r.expected_hours()
        );
    }

    #[test]
    fn young_daly_interval() {
        // √(2 · (2/60) / 0.1) ≈ 0.816 h.
        assert!((optimal_interval(10.0, 0.1, 2.0 / 60.0) - 0.8165).abs() < 1e-3);
        assert_eq!(optimal_interval(10.0, 0.0, 0.1), 10.0);
        assert_eq!(optimal_interval(10.0, 100.0, 0.0), MIN_AUTO_INTERVAL_HOURS);
        // The optimum is (near) the cheapest interval.
        let at = |tau: f64| {
            RunModel {
                interval: tau,
                ..run(0.1)
            }
            .expected_hours()
        };
        let best = optimal_interval(10.0, 0.1, 2.0 / 60.0);
        assert!(at(best) <= at(best * 2.0) && at(best) <= at(best / 2.0));
    }
}
