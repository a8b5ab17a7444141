//! The clairvoyant optimum: the lower bound every policy is measured against.

use super::policy::prices;
use super::{RunOutcome, SimPool, Ticks};

/// The largest table the optimum allocates, in cells of 8 bytes (192 MiB);
/// a scenario that needs more is refused before it runs.
pub const MAX_OPTIMUM_CELLS: usize = 24 << 20;

/// Cells the optimum's table needs for a scenario.
pub(crate) fn cells(ticks: &Ticks, pools: usize) -> usize {
    (ticks.deadline + 1)
        .saturating_mul(ticks.work + 1)
        .saturating_mul(2 + pools)
}

/// The clairvoyant optimum by dynamic programming over (tick, progress, mode),
/// with the same changeover and preemption rules as the runner. Linear in the
/// pools for each (tick, progress, mode): O(T·W·m²) time, O(T·W·m) memory.
pub(crate) fn optimal(pools: &[SimPool], offset: usize, ticks: &Ticks) -> RunOutcome {
    const INF: i64 = i64::MAX / 4;
    let (spot_tick, od_tick) = prices(pools, ticks);
    let (big_t, w, c) = (ticks.deadline, ticks.work, ticks.changeover);
    let k = pools.len();
    let m = 2 + k; // 0 idle, 1 on-demand, 2.. spot pools
    let price = |mode: usize| {
        if mode == 1 {
            od_tick
        } else {
            spot_tick[mode - 2]
        }
    };
    let gain = |mode: usize| {
        if mode == 1 {
            ticks.od_units
        } else {
            ticks.units[mode - 2]
        }
    };
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
                for next in 1..m {
                    if next == eff {
                        continue;
                    }
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
                    best = best.min(cand);
                }
                v[idx(t, p, mode)] = best;
            }
        }
    }
    let cost = v[idx(0, 0, 0)];
    RunOutcome {
        cost_micros: cost.min(INF),
        ticks: big_t,
        missed: cost >= INF,
        preemptions: 0,
        moves: 0,
    }
}
