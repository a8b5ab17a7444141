//! The clairvoyant optimum: the lower bound every policy is measured against.

use super::policy::prices;
use super::{RunOutcome, SimPool, Ticks};

/// The largest table the optimum allocates, in cells of 8 bytes (192 MiB);
/// a scenario that needs more is refused before it runs.
pub const MAX_OPTIMUM_CELLS: usize = 24 << 20;

/// A cost no finishing course reaches: a state that cannot finish in time.
const INF: i64 = i64::MAX / 4;

/// The optimum's outcome from its cost at the start over `ticks` ticks: a
/// cost of [`INF`] or more is a missed deadline.
fn outcome(cost: i64, ticks: usize) -> RunOutcome {
    RunOutcome {
        cost_micros: cost.min(INF),
        ticks,
        missed: cost >= INF,
        preemptions: 0,
        moves: 0,
    }
}

/// Tick layers the optimum holds at once: the values one tick and one
/// changeover ahead, and the tick being solved.
fn layers(ticks: &Ticks) -> usize {
    ticks.changeover.max(1) + 1
}

/// Cells the optimum's table needs for a scenario.
pub(crate) fn cells(ticks: &Ticks, pools: usize) -> usize {
    layers(ticks)
        .saturating_mul(ticks.work + 1)
        .saturating_mul(2 + pools)
}

/// What running in a mode costs and gains per tick (0 idle, 1 on-demand,
/// 2.. the spot pools).
struct Modes<'a> {
    spot: Vec<i64>,
    od: i64,
    ticks: &'a Ticks,
}

impl<'a> Modes<'a> {
    fn new(pools: &[SimPool], ticks: &'a Ticks) -> Self {
        let (spot, od) = prices(pools, ticks);
        Modes { spot, od, ticks }
    }

    fn price(&self, mode: usize) -> i64 {
        if mode == 1 {
            self.od
        } else {
            self.spot[mode - 2]
        }
    }

    fn gain(&self, mode: usize) -> usize {
        if mode == 1 {
            self.ticks.od_units
        } else {
            self.ticks.units[mode - 2]
        }
    }
}

/// The clairvoyant optimum by dynamic programming over (tick, progress, mode),
/// with the same changeover and preemption rules as the runner, solved
/// backwards from the deadline. Each (tick, progress) finds the cheapest and
/// second-cheapest mode to switch to once, so every mode's choice is O(1):
/// O(T·W·m) time. Only the tick layers still to be read are kept: O(c·W·m)
/// memory for a changeover of c ticks, whatever the deadline.
pub(crate) fn optimal(pools: &[SimPool], offset: usize, ticks: &Ticks) -> RunOutcome {
    let modes = Modes::new(pools, ticks);
    let (price, gain) = (|mode| modes.price(mode), |mode| modes.gain(mode));
    let (big_t, w, c) = (ticks.deadline, ticks.work, ticks.changeover);
    let k = pools.len();
    let m = 2 + k;
    // Consecutive available ticks from each tick, per pool.
    let mut run_len = vec![vec![0usize; big_t + 2]; k];
    for (kk, p) in pools.iter().enumerate() {
        for t in (0..=big_t).rev() {
            let a = p.trace.available.get(offset + t).copied().unwrap_or(false);
            run_len[kk][t] = if a { run_len[kk][t + 1] + 1 } else { 0 };
        }
    }
    let avail = |mode: usize, t: usize, n: usize| {
        mode == 1 || (mode >= 2 && run_len[mode - 2][t] >= n.max(1))
    };
    let held = layers(ticks);
    let idx = |t: usize, p: usize, mode: usize| ((t % held) * (w + 1) + p) * m + mode;
    let mut v = vec![INF; held * (w + 1) * m];
    for mode in 0..m {
        v[idx(big_t, w, mode)] = 0;
    }
    for t in (0..big_t).rev() {
        // This layer last held tick t + held: every cell below is written
        // again; the finished row is worth nothing more.
        for mode in 0..m {
            v[idx(t, w, mode)] = 0;
        }
        for p in 0..w {
            // The cheapest switch into each mode, and the best two of them.
            let (mut first, mut first_mode, mut second) = (INF, usize::MAX, INF);
            for next in 1..m {
                let cand = if c == 0 {
                    if !avail(next, t, 1) {
                        continue;
                    }
                    let q = (p + gain(next)).min(w);
                    price(next).saturating_add(v[idx(t + 1, q, next)])
                } else {
                    if t + c > big_t || !avail(next, t, c) {
                        continue;
                    }
                    (price(next) * c as i64).saturating_add(v[idx(t + c, p, next)])
                };
                if cand < first {
                    (second, first, first_mode) = (first, cand, next);
                } else if cand < second {
                    second = cand;
                }
            }
            for mode in 0..m {
                // A spot mode whose pool is gone at t is preempted: idle.
                let eff = if mode >= 2 && !avail(mode, t, 1) {
                    0
                } else {
                    mode
                };
                let mut best = v[idx(t + 1, p, 0)];
                if eff != 0 {
                    let q = (p + gain(eff)).min(w);
                    best = best.min(price(eff).saturating_add(v[idx(t + 1, q, eff)]));
                }
                best = best.min(if first_mode == eff { second } else { first });
                v[idx(t, p, mode)] = best;
            }
        }
    }
    outcome(v[idx(0, 0, 0)], big_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Capacity, Pool};
    use crate::sim::Trace;
    use crate::{Cloud, Price, Region, Zone};
    use std::sync::Arc;

    /// The optimum as first written: the whole (tick, progress, mode) table,
    /// and every switch target scanned for every mode.
    fn reference(pools: &[SimPool], offset: usize, ticks: &Ticks) -> RunOutcome {
        let modes = Modes::new(pools, ticks);
        let (price, gain) = (|mode| modes.price(mode), |mode| modes.gain(mode));
        let (big_t, w, c) = (ticks.deadline, ticks.work, ticks.changeover);
        let m = 2 + pools.len();
        let up = |mode: usize, t: usize, n: usize| {
            mode == 1
                || (mode >= 2
                    && (t..t + n.max(1)).all(|u| {
                        pools[mode - 2]
                            .trace
                            .available
                            .get(offset + u)
                            .copied()
                            .unwrap_or(false)
                    }))
        };
        let idx = |t: usize, p: usize, mode: usize| (t * (w + 1) + p) * m + mode;
        let mut v = vec![INF; (big_t + 1) * (w + 1) * m];
        for t in 0..=big_t {
            for mode in 0..m {
                v[idx(t, w, mode)] = 0;
            }
        }
        for t in (0..big_t).rev() {
            for p in 0..w {
                for mode in 0..m {
                    let eff = if mode >= 2 && !up(mode, t, 1) {
                        0
                    } else {
                        mode
                    };
                    let mut best = v[idx(t + 1, p, 0)];
                    if eff != 0 {
                        let q = (p + gain(eff)).min(w);
                        best = best.min(price(eff).saturating_add(v[idx(t + 1, q, eff)]));
                    }
                    for next in (1..m).filter(|n| *n != eff) {
                        let cand = if c == 0 {
                            if !up(next, t, 1) {
                                continue;
                            }
                            price(next).saturating_add(v[idx(t + 1, (p + gain(next)).min(w), next)])
                        } else {
                            if t + c > big_t || !up(next, t, c) {
                                continue;
                            }
                            (price(next) * c as i64).saturating_add(v[idx(t + c, p, next)])
                        };
                        best = best.min(cand);
                    }
                    v[idx(t, p, mode)] = best;
                }
            }
        }
        outcome(v[idx(0, 0, 0)], big_t)
    }

    /// A small deterministic generator (the test needs no crate for it).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    fn pool(rng: &mut Lcg, k: usize, len: usize) -> SimPool {
        // Runs of availability and outage of random lengths.
        let mut available = Vec::with_capacity(len);
        while available.len() < len {
            let up = rng.below(3) > 0;
            let n = 1 + rng.below(6) as usize;
            available.extend(std::iter::repeat_n(up, n));
        }
        available.truncate(len);
        SimPool {
            pool: Pool {
                cloud: Cloud::Aws,
                region: Region::new("us-west-2"),
                zone: Some(Zone::new(format!("us-west-2{}", (b'a' + k as u8) as char))),
                instance_type: "p3.2xlarge".into(),
                capacity: Capacity::Spot,
            },
            on_demand: Price::from_micros_per_hour(3_060_000),
            spot: Price::from_micros_per_hour(400_000 + 150_000 * rng.below(8) as i64),
            trace: Arc::new(Trace {
                name: format!("p{k}"),
                start: time::macros::datetime!(2022-10-26 00:00 UTC),
                tick_seconds: 600,
                available,
            }),
            throughput: 1.0,
        }
    }

    /// The rolling, linear-per-state solver finds exactly the cost the full
    /// table does, over random pools, speeds, changeovers and deadlines
    /// (infeasible ones included).
    #[test]
    fn the_rolling_optimum_equals_the_full_table() {
        let mut rng = Lcg(0x5eed);
        let mut feasible = 0;
        for case in 0..300 {
            let k = 1 + rng.below(5) as usize;
            let od_units = 1 + rng.below(3) as usize;
            let units: Vec<usize> = (0..k).map(|_| 1 + rng.below(4) as usize).collect();
            let work_ticks = 1 + rng.below(12) as usize;
            let deadline = work_ticks + rng.below(20) as usize;
            let changeover = rng.below(4) as usize;
            let len = deadline + 30;
            let pools: Vec<SimPool> = (0..k).map(|i| pool(&mut rng, i, len)).collect();
            let ticks = Ticks {
                work: work_ticks * od_units,
                deadline,
                changeover,
                tick_seconds: 600,
                od_units,
                units,
                od_pool: 0,
            };
            let offset = rng.below(25) as usize;
            let want = reference(&pools, offset, &ticks);
            let got = optimal(&pools, offset, &ticks);
            assert_eq!(
                (got.cost_micros, got.missed),
                (want.cost_micros, want.missed),
                "case {case}: {k} pools, {ticks:?}, offset {offset}"
            );
            feasible += usize::from(!want.missed);
        }
        // Most cases can finish, some cannot: both paths are compared.
        assert!((150..300).contains(&feasible), "{feasible} of 300 feasible");
    }

    /// Memory no longer grows with the deadline: a week-long deadline over a
    /// hundred pools fits where the whole table would not.
    #[test]
    fn the_table_holds_only_the_changeover_window() {
        let ticks = Ticks {
            work: 288 * 5,
            deadline: 1008,
            changeover: 3,
            tick_seconds: 600,
            od_units: 5,
            units: vec![5; 100],
            od_pool: 0,
        };
        assert_eq!(cells(&ticks, 100), 4 * 1441 * 102);
        // The whole table would be 1009 x 1441 x 102 = 148 M cells, six
        // times the limit.
        assert!(cells(&ticks, 100) < MAX_OPTIMUM_CELLS);
    }
}
