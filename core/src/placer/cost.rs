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
        poisson_cdf(k_max, mu)
    }
}

/// P(X ≤ `k`) for X ~ Poisson(`mu`), summed in log space: each term is
/// `exp(k ln mu − mu − ln k! − m)` with `m` the largest log term, so nothing
/// underflows however large `mu` is (a product from `e^−mu` underflows to 0
/// past mu ≈ 745). O(k).
pub fn poisson_cdf(k: f64, mu: f64) -> f64 {
    if k.is_nan() || k < 0.0 {
        return 0.0;
    }
    if mu <= 0.0 || k == f64::INFINITY {
        return 1.0;
    }
    let k = k.floor();
    // The largest term is at the mode, floor(mu), or at k below it; its log,
    // peak·ln(mu) − mu − ln(peak!), is taken with Stirling's series written
    // so that nothing large cancels: peak·ln(mu/peak) + peak − mu − ½ln(2π·peak)
    // − 1/(12·peak) + 1/(360·peak³) − 1/(1260·peak⁵).
    let peak = mu.floor().min(k);
    let m = if peak < 20.0 {
        let mut ln_fact = 0.0;
        let mut i = 2.0;
        while i <= peak {
            ln_fact += f64::ln(i);
            i += 1.0;
        }
        peak * mu.ln() - mu - ln_fact
    } else {
        let n = peak;
        n * (mu / n).ln() + (n - mu) - 0.5 * (std::f64::consts::TAU * n).ln() - 1.0 / (12.0 * n)
            + 1.0 / (360.0 * n.powi(3))
            - 1.0 / (1260.0 * n.powi(5))
    };
    // Sum outwards from the peak: down to 0 and up to k, each term from its
    // neighbour (t(j-1) = t(j) · j / mu), relative to the peak's term.
    let mut sum = 1.0;
    let mut t = 1.0;
    let mut j = peak;
    while j >= 1.0 {
        t *= j / mu;
        sum += t;
        if t < sum * 1e-18 {
            break;
        }
        j -= 1.0;
    }
    t = 1.0;
    j = peak + 1.0;
    while j <= k {
        t *= mu / j;
        sum += t;
        if t < sum * 1e-18 {
            break;
        }
        j += 1.0;
    }
    (m + sum.ln()).exp().min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact references: the CDF summed term by term from e^−mu in 80-digit
    /// decimal arithmetic (Python's `decimal` module).
    #[test]
    fn the_poisson_cdf_matches_an_exact_reference_at_any_size() {
        let cases = [
            (10.0, 0.0, 4.539_992_976_248_485e-5),
            (10.0, 6.0, 1.301_414_208_824_829_5e-1),
            (10.0, 10.0, 5.830_397_501_929_855e-1),
            (10.0, 16.0, 9.729_583_902_151_989e-1),
            (1_000.0, 905.0, 1.214_625_507_946_587_8e-3),
            (1_000.0, 968.0, 1.595_964_641_614_837_4e-1),
            (1_000.0, 1_000.0, 5.084_093_671_685_06e-1),
            (1_000.0, 1_063.0, 9.768_448_768_569_717e-1),
            (100_000.0, 99_051.0, 1.333_797_355_818_268_8e-3),
            (100_000.0, 99_683.0, 1.584_467_153_312_698e-1),
            (100_000.0, 100_000.0, 5.008_410_430_993_401e-1),
            (100_000.0, 100_632.0, 9.771_722_347_429_173e-1),
        ];
        for (mu, k, want) in cases {
            let got = poisson_cdf(k, mu);
            assert!(
                ((got - want) / want).abs() < 1e-9,
                "P(X <= {k} | mu {mu}) = {got}, exact {want}"
            );
        }
        assert_eq!(poisson_cdf(-1.0, 5.0), 0.0);
        assert_eq!(poisson_cdf(3.0, 0.0), 1.0);
    }

    /// A 5,000 h job expecting about 1,114 interruptions (past the ~745 where
    /// e^−mu underflows): with 5,600 h it very likely makes it (k_max 1,230,
    /// 3.5 standard deviations above the mean; this was 0 before), with
    /// 5,500 h it very likely does not.
    #[test]
    fn a_long_job_with_room_to_spare_is_likely_to_make_its_deadline() {
        let long = RunModel {
            work: 5_000.0,
            hazard: 0.2,
            interval: 0.25,
            checkpoint_cost: 1.0 / 60.0,
            restart: 5.0 / 60.0,
        };
        assert!(long.hazard * long.expected_hours() > 745.0);
        let p = long.p_within(5_600.0);
        assert!(p > 0.99, "P = {p}");
        let p = long.p_within(5_500.0);
        assert!(p < 0.01, "P = {p}");
    }

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
