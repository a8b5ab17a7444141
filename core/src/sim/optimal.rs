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
        past_traces: false,
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

/// The optimum's value table and what it reads.
struct Dp<'a> {
    modes: Modes<'a>,
    /// Consecutive available ticks from each tick, per pool.
    run_len: Vec<Vec<usize>>,
    /// Tick layers held (all of them when a path is wanted).
    held: usize,
    m: usize,
    v: Vec<i64>,
}

impl Dp<'_> {
    fn idx(&self, t: usize, p: usize, mode: usize) -> usize {
        ((t % self.held) * (self.modes.ticks.work + 1) + p) * self.m + mode
    }

    fn value(&self, t: usize, p: usize, mode: usize) -> i64 {
        self.v[self.idx(t, p, mode)]
    }

    /// Whether `mode` can run from tick `t` for `n` ticks.
    fn avail(&self, mode: usize, t: usize, n: usize) -> bool {
        mode == 1 || (mode >= 2 && self.run_len[mode - 2][t] >= n.max(1))
    }

    /// What switching into `next` at (t, p) costs to finish, if it can.
    fn switch(&self, t: usize, p: usize, next: usize) -> Option<i64> {
        let (price, c, w) = (
            self.modes.price(next),
            self.modes.ticks.changeover,
            self.modes.ticks.work,
        );
        if c == 0 {
            self.avail(next, t, 1).then(|| {
                let q = (p + self.modes.gain(next)).min(w);
                price.saturating_add(self.value(t + 1, q, next))
            })
        } else {
            (t + c <= self.modes.ticks.deadline && self.avail(next, t, c))
                .then(|| (price * c as i64).saturating_add(self.value(t + c, p, next)))
        }
    }

    /// The mode the job is in at tick `t` after a preemption: a spot mode
    /// whose pool is gone is idle.
    fn effective(&self, t: usize, mode: usize) -> usize {
        if mode >= 2 && !self.avail(mode, t, 1) {
            0
        } else {
            mode
        }
    }

    /// What staying in `eff` (idling when 0) for one tick costs to finish.
    fn stay(&self, t: usize, p: usize, eff: usize) -> i64 {
        if eff == 0 {
            self.value(t + 1, p, 0)
        } else {
            let q = (p + self.modes.gain(eff)).min(self.modes.ticks.work);
            self.modes
                .price(eff)
                .saturating_add(self.value(t + 1, q, eff))
        }
    }

    /// Solves backwards from the deadline, holding `held` tick layers.
    fn solve<'a>(pools: &[SimPool], offset: usize, ticks: &'a Ticks, held: usize) -> Dp<'a> {
        let (big_t, w) = (ticks.deadline, ticks.work);
        let k = pools.len();
        let mut run_len = vec![vec![0usize; big_t + 2]; k];
        for (kk, p) in pools.iter().enumerate() {
            for t in (0..=big_t).rev() {
                let a = p.trace.available.get(offset + t).copied().unwrap_or(false);
                run_len[kk][t] = if a { run_len[kk][t + 1] + 1 } else { 0 };
            }
        }
        let m = 2 + k;
        let mut dp = Dp {
            modes: Modes::new(pools, ticks),
            run_len,
            held,
            m,
            v: vec![INF; held * (w + 1) * m],
        };
        for mode in 0..m {
            let i = dp.idx(big_t, w, mode);
            dp.v[i] = 0;
        }
        for t in (0..big_t).rev() {
            // This layer last held tick t + held: every cell below is written
            // again; the finished row is worth nothing more.
            for mode in 0..m {
                let i = dp.idx(t, w, mode);
                dp.v[i] = 0;
            }
            for p in 0..w {
                // The cheapest switch into each mode, and the best two of them.
                let (mut first, mut first_mode, mut second) = (INF, usize::MAX, INF);
                for next in 1..m {
                    let Some(cand) = dp.switch(t, p, next) else {
                        continue;
                    };
                    if cand < first {
                        (second, first, first_mode) = (first, cand, next);
                    } else if cand < second {
                        second = cand;
                    }
                }
                for mode in 0..m {
                    let eff = dp.effective(t, mode);
                    let mut best = dp.stay(t, p, 0);
                    if eff != 0 {
                        best = best.min(dp.stay(t, p, eff));
                    }
                    best = best.min(if first_mode == eff { second } else { first });
                    let i = dp.idx(t, p, mode);
                    dp.v[i] = best;
                }
            }
        }
        dp
    }
}

/// The clairvoyant optimum by dynamic programming over (tick, progress, mode),
/// with the same changeover and preemption rules as the runner, solved
/// backwards from the deadline. Each (tick, progress) finds the cheapest and
/// second-cheapest mode to switch to once, so every mode's choice is O(1):
/// O(T·W·m) time. Only the tick layers still to be read are kept: O(c·W·m)
/// memory for a changeover of c ticks, whatever the deadline.
pub(crate) fn optimal(pools: &[SimPool], offset: usize, ticks: &Ticks) -> RunOutcome {
    let dp = Dp::solve(pools, offset, ticks, layers(ticks));
    outcome(dp.value(0, 0, 0), ticks.deadline)
}

/// The optimum with its path, tick by tick: the whole table is held
/// (O(T·W·m) memory), so a scenario larger than [`MAX_OPTIMUM_CELLS`] gets
/// its cost and no path.
pub(crate) fn optimal_path(
    pools: &[SimPool],
    offset: usize,
    ticks: &Ticks,
) -> (RunOutcome, Vec<super::Tick>) {
    let full = ticks.deadline + 1;
    let cells = full
        .saturating_mul(ticks.work + 1)
        .saturating_mul(2 + pools.len());
    if cells > MAX_OPTIMUM_CELLS {
        return (optimal(pools, offset, ticks), Vec::new());
    }
    let dp = Dp::solve(pools, offset, ticks, full);
    let mut out = outcome(dp.value(0, 0, 0), ticks.deadline);
    let mut path = Vec::new();
    if out.missed {
        return (out, path);
    }
    let place = |mode: usize| match mode {
        0 => super::Place::Idle,
        1 => super::Place::OnDemand,
        k => super::Place::Spot(k - 2),
    };
    let (mut t, mut p, mut mode) = (0, 0, 0);
    let (w, c) = (ticks.work, ticks.changeover);
    while p < w && t < ticks.deadline {
        let eff = dp.effective(t, mode);
        if eff != mode {
            out.preemptions += 1;
        }
        let want = dp.value(t, p, mode);
        // Staying (or idling) first, then the switches, as the solve
        // compared them: the first course that achieves the value.
        let next = [0, eff]
            .into_iter()
            .find(|&s| (s == 0 || eff != 0) && dp.stay(t, p, s) == want);
        if let Some(s) = next {
            path.push(super::Tick {
                at: place(s),
                changeover: false,
            });
            if s != 0 {
                p = (p + dp.modes.gain(s)).min(w);
            }
            (t, mode) = (t + 1, s);
            continue;
        }
        let Some(next) = (1..dp.m)
            .filter(|n| *n != eff)
            .find(|&n| dp.switch(t, p, n) == Some(want))
        else {
            break;
        };
        if eff != 0 {
            out.moves += 1;
        }
        // A switch pays its changeover (no progress), or with none runs at
        // once.
        let tick = super::Tick {
            at: place(next),
            changeover: c > 0,
        };
        path.extend(std::iter::repeat_n(tick, c.max(1)));
        if c == 0 {
            p = (p + dp.modes.gain(next)).min(w);
        }
        (t, mode) = (t + c.max(1), next);
    }
    out.ticks = t;
    (out, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Trace;
    use crate::sim::{Place, Tick};
    use crate::{Capacity, Pool};
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

    /// A random scenario: 1 to `max_pools` pools of random speeds, a job of 1
    /// to 12 on-demand ticks, a deadline `min_slack` to `min_slack` + 19 ticks
    /// longer, a changeover of 0 to 3 ticks, traces `spare` ticks longer than
    /// the deadline, and a start offset in the first 25 ticks.
    fn random_scenario(
        rng: &mut Lcg,
        max_pools: u64,
        min_slack: usize,
        spare: usize,
    ) -> (Vec<SimPool>, Ticks, usize) {
        let k = 1 + rng.below(max_pools) as usize;
        let od_units = 1 + rng.below(3) as usize;
        let units: Vec<usize> = (0..k).map(|_| 1 + rng.below(4) as usize).collect();
        let work_ticks = 1 + rng.below(12) as usize;
        let deadline = work_ticks + rng.below(20) as usize + min_slack;
        let changeover = rng.below(4) as usize;
        let pools: Vec<SimPool> = (0..k).map(|i| pool(rng, i, deadline + spare)).collect();
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
        (pools, ticks, offset)
    }

    /// The rolling, linear-per-state solver finds exactly the cost the full
    /// table does, over random pools, speeds, changeovers and deadlines
    /// (infeasible ones included).
    #[test]
    fn the_rolling_optimum_equals_the_full_table() {
        let mut rng = Lcg(0x5eed);
        let mut feasible = 0;
        for case in 0..300 {
            let (pools, ticks, offset) = random_scenario(&mut rng, 5, 0, 30);
            let k = pools.len();
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

    /// Checks a recorded path against the runner's rules and its outcome:
    /// what its ticks cost is what the run cost, spot runs only where the pool
    /// has capacity, progress is made only after a whole changeover (a
    /// preemption may cut one short), and a finished run did its work.
    fn check_path(
        pools: &[SimPool],
        offset: usize,
        ticks: &Ticks,
        out: &RunOutcome,
        path: &[Tick],
    ) {
        let (spot, od) = super::super::policy::prices(pools, ticks);
        let (mut cost, mut progress, mut co_run) = (0i64, 0usize, 0usize);
        let mut prev = Place::Idle;
        for (t, tick) in path.iter().enumerate() {
            let (price, gain) = match tick.at {
                Place::Idle => (0, 0),
                Place::OnDemand => (od, ticks.od_units),
                Place::Spot(k) => {
                    assert!(
                        pools[k].trace.available[offset + t],
                        "tick {t}: pool {k} had no capacity"
                    );
                    (spot[k], ticks.units[k])
                }
            };
            cost += price;
            if tick.changeover {
                co_run = if prev == tick.at { co_run + 1 } else { 1 };
                assert!(co_run <= ticks.changeover, "tick {t}: changeover too long");
            } else if tick.at != Place::Idle {
                assert!(
                    prev == tick.at && (co_run == 0 || co_run == ticks.changeover)
                        || ticks.changeover == 0,
                    "tick {t}: progress at {:?} without a whole changeover",
                    tick.at
                );
                co_run = 0;
                progress += gain;
            }
            prev = tick.at;
        }
        assert_eq!(cost, out.cost_micros, "the path's cost");
        if !out.missed {
            assert!(
                progress >= ticks.work,
                "progress {progress} of {}",
                ticks.work
            );
            assert!(path.len() <= ticks.deadline);
        }
    }

    /// The drill-down's paths are the runs: the optimum's path costs the
    /// optimum and obeys the runner's rules, and so does every online
    /// policy's recorded replay.
    #[test]
    fn every_path_replays_to_its_cost_under_the_runners_rules() {
        use crate::sim::policy::{replay, PolicyKind};
        let mut rng = Lcg(0xd1ce);
        let mut paths = 0;
        for case in 0..150 {
            let (pools, ticks, offset) = random_scenario(&mut rng, 4, 4, 60);
            let (out, path) = optimal_path(&pools, offset, &ticks);
            assert_eq!(
                out.cost_micros,
                optimal(&pools, offset, &ticks).cost_micros,
                "case {case}"
            );
            if !out.missed {
                check_path(&pools, offset, &ticks, &out, &path);
                paths += 1;
            }
            for kind in [
                PolicyKind::Greedy,
                PolicyKind::UniformProgressMulti,
                PolicyKind::Gpufleet,
            ] {
                // Every scenario here leaves on-demand time to finish.
                let mut rec = Vec::new();
                let out = replay(kind, &pools, offset, &ticks, Some(&mut rec));
                check_path(&pools, offset, &ticks, &out, &rec);
            }
        }
        assert!(paths >= 100, "{paths} optimum paths checked");
    }
}
