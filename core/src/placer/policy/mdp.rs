//! The expected-cost model behind a decision: a Markov decision process over
//! (step, progress, mode, availability of the shortlisted pools), solved
//! backwards once per decision (or once per re-plan in the simulator).
//!
//! Modes: 0 idle, 1 on-demand, 2.. the shortlisted spot pools. Each spot pool
//! has four availability states (see [`AvailState`]); pools are independent,
//! so the joint chain has 4^k states for a shortlist of k (k ≤ 3 by
//! construction, which is what keeps a decision linear in the candidates).
//!
//! Every start, restart or move pays a changeover (paid, no progress); a spot
//! pool that is unavailable at a step preempts (progress survives, the next
//! start pays a changeover); on-demand is always available. Progress is counted
//! in on-demand steps: a spot pool that does `f` on-demand steps of work per
//! step advances by ⌊f⌋ and one more with probability f − ⌊f⌋ (the expectation
//! is exact). The deadline's safety rule is the simulator's: nothing may leave
//! less slack than finishing on on-demand after one more changeover needs.

use super::{AvailState, StepRates};

/// The solved model.
#[derive(Debug, Clone)]
pub(crate) struct Mdp {
    /// Steps to the deadline (the horizon).
    pub steps: usize,
    /// Work in on-demand steps.
    pub work: usize,
    /// Changeover in steps.
    pub changeover: usize,
    modes: usize,
    states: usize,
    /// Per mode: progress per step (on-demand steps), split into whole and
    /// fractional parts.
    whole: Vec<usize>,
    frac: Vec<f64>,
    /// Availability transitions for one step and for a changeover: the
    /// non-zero (next state, probability) pairs of each state.
    step: Vec<Vec<(usize, f64)>>,
    step_c: Vec<Vec<(usize, f64)>>,
    /// Chance spot pool k stays available through a changeover, per state.
    survive_c: Vec<Vec<f64>>,
    /// Price per step per mode (micro-dollars).
    prices: Vec<f64>,
    values: Vec<f64>,
}

/// Pool `k`'s availability digit in joint state `a`.
pub(crate) fn digit(a: usize, k: usize) -> usize {
    a / 4usize.pow(k as u32) % 4
}

/// The joint state of several pools' availability.
pub(crate) fn joint(states: &[AvailState]) -> usize {
    states
        .iter()
        .enumerate()
        .map(|(k, s)| s.digit() * 4usize.pow(k as u32))
        .sum()
}

/// Whether spot pool `k` is available in joint state `a`.
fn up(a: usize, k: usize) -> bool {
    digit(a, k) < 2
}

/// The inputs of one solve, in steps.
pub(crate) struct Setup<'a> {
    pub steps: usize,
    pub work: usize,
    pub changeover: usize,
    /// Per-step chances of each shortlisted pool.
    pub rates: &'a [StepRates],
    /// Price per step: on-demand, then each shortlisted pool.
    pub od_price: f64,
    pub spot_prices: &'a [f64],
    /// Progress per step of each shortlisted pool, in on-demand steps.
    pub spot_speed: &'a [f64],
}

impl Mdp {
    fn idx(&self, t: usize, p: usize, mode: usize, a: usize) -> usize {
        ((t * (self.work + 1) + p) * self.modes + mode) * self.states + a
    }

    /// The value of a state; past the horizon, on-demand for the rest with a
    /// tenfold penalty (a missed deadline is never a bargain).
    pub fn value(&self, t: usize, p: usize, mode: usize, a: usize) -> f64 {
        if p >= self.work {
            return 0.0;
        }
        if t >= self.steps {
            return self.prices[1] * (self.work - p + self.changeover) as f64 * 10.0;
        }
        self.values[self.idx(t, p, mode, a)]
    }

    fn expect(&self, next: &[Vec<(usize, f64)>], a: usize, f: impl Fn(usize) -> f64) -> f64 {
        next[a].iter().map(|&(b, p)| p * f(b)).sum()
    }

    /// Expected value after one step running in `mode` from progress `p`.
    fn run(&self, t: usize, p: usize, mode: usize, a: usize) -> f64 {
        let lo = p + self.whole[mode];
        let f = self.frac[mode];
        let at = |q: usize| self.expect(&self.step, a, |b| self.value(t + 1, q, mode, b));
        if f <= 0.0 {
            at(lo)
        } else {
            (1.0 - f) * at(lo) + f * at(lo + 1)
        }
    }

    /// Visits the allowed actions (as modes) and their expected costs.
    pub fn options(
        &self,
        t: usize,
        p: usize,
        mode: usize,
        a: usize,
        mut out: impl FnMut(usize, f64),
    ) {
        let slack = self.steps as i64 - t as i64 - (self.work - p) as i64;
        let c = self.changeover as i64;
        let eff = if mode >= 2 && !up(a, mode - 2) {
            0
        } else {
            mode
        };
        if slack > c {
            out(
                0,
                self.expect(&self.step, a, |b| self.value(t + 1, p, 0, b)),
            );
        }
        if eff != 0 && (eff == 1 || slack >= c) {
            out(eff, self.prices[eff] + self.run(t, p, eff, a));
        }
        for next in 1..self.modes {
            if next == eff || (next >= 2 && (!up(a, next - 2) || slack < 2 * c)) {
                continue;
            }
            let cost = if self.changeover == 0 {
                self.prices[next] + self.run(t, p, next, a)
            } else {
                let land = t + self.changeover;
                let paid = self.prices[next] * self.changeover as f64;
                if next == 1 {
                    paid + self.expect(&self.step_c, a, |b| self.value(land, p, 1, b))
                } else {
                    // It may be preempted during the changeover.
                    let s = self.survive_c[next - 2][a];
                    paid + s * self.expect(&self.step_c, a, |b| self.value(land, p, next, b))
                        + (1.0 - s) * self.expect(&self.step_c, a, |b| self.value(land, p, 0, b))
                }
            };
            out(next, cost);
        }
    }

    /// The cheapest allowed action and its expected cost.
    pub fn best(&self, t: usize, p: usize, mode: usize, a: usize) -> Option<(usize, f64)> {
        let mut best: Option<(usize, f64)> = None;
        self.options(t, p, mode, a, |m, c| {
            if best.is_none_or(|(_, b)| c < b) {
                best = Some((m, c));
            }
        });
        best
    }

    /// Solves the model backwards over the whole horizon.
    pub fn solve(s: &Setup<'_>) -> Mdp {
        let k = s.rates.len();
        let states = 4usize.pow(k as u32);
        let mut step = vec![0.0; states * states];
        for a in 0..states {
            for b in 0..states {
                step[a * states + b] = (0..k)
                    .map(|i| s.rates[i].transition(digit(a, i), digit(b, i)))
                    .product();
            }
        }
        let mut step_c = identity(states);
        for _ in 0..s.changeover {
            step_c = matmul(&step_c, &step, states);
        }
        let sparse = |m: &[f64]| -> Vec<Vec<(usize, f64)>> {
            (0..states)
                .map(|a| {
                    (0..states)
                        .filter(|b| m[a * states + b] > 0.0)
                        .map(|b| (b, m[a * states + b]))
                        .collect()
                })
                .collect()
        };
        let (step, step_c) = (sparse(&step), sparse(&step_c));
        let survive_c = (0..k)
            .map(|i| {
                (0..states)
                    .map(|a| {
                        if up(a, i) {
                            s.rates[i].survive(digit(a, i), s.changeover)
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        let mut prices = vec![0.0, s.od_price];
        prices.extend_from_slice(s.spot_prices);
        let mut whole = vec![0, 1];
        let mut frac = vec![0.0, 0.0];
        for &f in s.spot_speed {
            let f = if f.is_finite() { f.max(0.0) } else { 0.0 };
            whole.push(f.floor() as usize);
            frac.push(f - f.floor());
        }
        let modes = 2 + k;
        let mut mdp = Mdp {
            steps: s.steps,
            work: s.work,
            changeover: s.changeover,
            modes,
            states,
            whole,
            frac,
            step,
            step_c,
            survive_c,
            prices,
            values: vec![0.0; s.steps * (s.work + 1) * modes * states],
        };
        for t in (0..s.steps).rev() {
            for p in 0..s.work {
                for mode in 0..modes {
                    for a in 0..states {
                        let i = mdp.idx(t, p, mode, a);
                        mdp.values[i] = match mdp.best(t, p, mode, a) {
                            Some((_, cost)) if cost.is_finite() => cost,
                            _ => mdp.value(s.steps, p, 1, a),
                        };
                    }
                }
            }
        }
        mdp
    }

    /// Bytes the value table of a solve with these sizes takes.
    pub fn table_bytes(steps: usize, work: usize, shortlist: usize) -> usize {
        steps
            .saturating_mul(work + 1)
            .saturating_mul(2 + shortlist)
            .saturating_mul(4usize.pow(shortlist as u32))
            .saturating_mul(std::mem::size_of::<f64>())
    }
}

fn identity(n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect()
}

fn matmul(x: &[f64], y: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            out[i * n + j] = (0..n).map(|l| x[i * n + l] * y[l * n + j]).sum();
        }
    }
    out
}
