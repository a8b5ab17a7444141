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
    /// Steps whose values are kept after the solve (`0..keep`); later steps
    /// live in a ring of `changeover + 2` slices during the backward pass.
    keep: usize,
    values: Vec<f64>,
    ring: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
enum Row {
    Const(f64),
    Kept(usize),
    Ring(usize),
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

/// Whether spot pool `k` is available in joint state `a`: bit `k` of
/// `UP[a]` for up to [`super::MAX_SHORTLIST`] pools (no division in the
/// solver's inner loop).
fn up(a: usize, k: usize) -> bool {
    UP[a] >> k & 1 == 1
}

const UP: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut a = 0;
    while a < 64 {
        let mut k = 0;
        while k < 3 {
            if (a >> (2 * k)) & 3 < 2 {
                t[a] |= 1 << k;
            }
            k += 1;
        }
        a += 1;
    }
    t
};

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
    fn slice_len(&self) -> usize {
        (self.work + 1) * self.modes * self.states
    }

    /// Where a step's values are: the kept table or the ring.
    fn locate(&self, t: usize) -> (bool, usize) {
        if t < self.keep {
            (true, t * self.slice_len())
        } else {
            (false, (t % (self.changeover + 2)) * self.slice_len())
        }
    }

    fn cell(&self, t: usize, p: usize, mode: usize, a: usize) -> f64 {
        let (kept, base) = self.locate(t);
        let i = base + (p * self.modes + mode) * self.states + a;
        if kept {
            self.values[i]
        } else {
            self.ring[i]
        }
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
        self.cell(t, p, mode, a)
    }

    /// Steps after the solve at which the plan can still be read.
    pub fn kept(&self) -> usize {
        self.keep
    }

    fn expect(&self, next: &[Vec<(usize, f64)>], a: usize, f: impl Fn(usize) -> f64) -> f64 {
        next[a].iter().map(|&(b, p)| p * f(b)).sum()
    }

    /// 1 when `mode` is slower than on-demand: a step there spends slack, so
    /// staying or starting there needs a step more of it.
    fn slow(&self, mode: usize) -> i64 {
        i64::from(self.whole[mode] == 0)
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
        if eff != 0 && (eff == 1 || slack >= c + self.slow(eff)) {
            out(eff, self.prices[eff] + self.run(t, p, eff, a));
        }
        for next in 1..self.modes {
            if next == eff || (next >= 2 && (!up(a, next - 2) || slack < 2 * c + self.slow(next))) {
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
    #[cfg(test)]
    pub fn best(&self, t: usize, p: usize, mode: usize, a: usize) -> Option<(usize, f64)> {
        let mut best: Option<(usize, f64)> = None;
        self.options(t, p, mode, a, |m, c| {
            if best.is_none_or(|(_, b)| c < b) {
                best = Some((m, c));
            }
        });
        best
    }

    /// Solves the model backwards over the whole horizon, keeping the values
    /// of the first `keep` steps (at least 1) for later look-ups.
    pub fn solve(s: &Setup<'_>, keep: usize) -> Mdp {
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
            keep: keep.clamp(1, s.steps.max(1)),
            values: Vec::new(),
            ring: Vec::new(),
        };
        mdp.backward();
        mdp
    }

    /// A value row (`states` values from an index of the kept table or the
    /// ring), or a constant (done, or past the horizon).
    fn row(&self, t: usize, p: usize, mode: usize) -> Row {
        if p >= self.work {
            Row::Const(0.0)
        } else if t >= self.steps {
            Row::Const(self.prices[1] * (self.work - p + self.changeover) as f64 * 10.0)
        } else {
            let (kept, base) = self.locate(t);
            let i = base + (p * self.modes) * self.states + mode * self.states;
            if kept {
                Row::Kept(i)
            } else {
                Row::Ring(i)
            }
        }
    }

    /// `expect` over a row, with the same arithmetic in the same order.
    fn ex(&self, next: &[Vec<(usize, f64)>], a: usize, row: Row) -> f64 {
        match row {
            Row::Const(c) => next[a].iter().map(|&(_, p)| p * c).sum(),
            Row::Kept(base) => next[a]
                .iter()
                .map(|&(b, p)| p * self.values[base + b])
                .sum(),
            Row::Ring(base) => next[a].iter().map(|&(b, p)| p * self.ring[base + b]).sum(),
        }
    }

    /// The backward pass. For each (step, progress) the expectations every
    /// mode shares (idle, running on, landing in each mode) are computed once;
    /// each state then takes the cheapest of its allowed options in the order
    /// [`Mdp::options`] visits them, with the same arithmetic, so a value here
    /// is bit for bit the value `options` gives.
    fn backward(&mut self) {
        let (modes, states, c) = (self.modes, self.states, self.changeover);
        self.values = vec![0.0; self.keep * self.slice_len()];
        self.ring = vec![0.0; (c + 2) * self.slice_len()];
        let mut idle = vec![0.0; states];
        let mut run = vec![0.0; modes * states];
        let mut land = vec![0.0; modes * states];
        let mut cell = vec![0.0; modes * states];
        let mut stay = vec![0.0; modes * states];
        let mut sw = vec![0.0; modes * states];
        for t in (0..self.steps).rev() {
            for p in 0..self.work {
                let slack = self.steps as i64 - t as i64 - (self.work - p) as i64;
                let ci = c as i64;
                let r0 = self.row(t + 1, p, 0);
                for (a, v) in idle.iter_mut().enumerate() {
                    *v = self.ex(&self.step, a, r0);
                }
                for m in 1..modes {
                    let lo = p + self.whole[m];
                    let f = self.frac[m];
                    let (rl, rh) = (self.row(t + 1, lo, m), self.row(t + 1, lo + 1, m));
                    for a in 0..states {
                        let at_lo = self.ex(&self.step, a, rl);
                        run[m * states + a] = if f <= 0.0 {
                            at_lo
                        } else {
                            (1.0 - f) * at_lo + f * self.ex(&self.step, a, rh)
                        };
                    }
                }
                if c > 0 {
                    for m in 0..modes {
                        let rl = self.row(t + c, p, m);
                        for a in 0..states {
                            land[m * states + a] = self.ex(&self.step_c, a, rl);
                        }
                    }
                }
                // Staying in and switching to each mode, per state: shared by
                // every current mode.
                for m in 1..modes {
                    for a in 0..states {
                        stay[m * states + a] = self.prices[m] + run[m * states + a];
                        sw[m * states + a] = if c == 0 {
                            self.prices[m] + run[m * states + a]
                        } else {
                            let paid = self.prices[m] * c as f64;
                            if m == 1 {
                                paid + land[states + a]
                            } else {
                                let sv = self.survive_c[m - 2][a];
                                paid + sv * land[m * states + a] + (1.0 - sv) * land[a]
                            }
                        };
                    }
                }
                let idle_ok = slack > ci;
                for mode in 0..modes {
                    for a in 0..states {
                        let eff = if mode >= 2 && !up(a, mode - 2) {
                            0
                        } else {
                            mode
                        };
                        let mut best = f64::NAN;
                        let mut any = false;
                        let mut take = |v: f64| {
                            if !any || v < best {
                                best = v;
                                any = true;
                            }
                        };
                        if idle_ok {
                            take(idle[a]);
                        }
                        if eff != 0 && (eff == 1 || slack >= ci + self.slow(eff)) {
                            take(stay[eff * states + a]);
                        }
                        for next in 1..modes {
                            if next == eff
                                || (next >= 2
                                    && (!up(a, next - 2) || slack < 2 * ci + self.slow(next)))
                            {
                                continue;
                            }
                            take(sw[next * states + a]);
                        }
                        cell[mode * states + a] = if any && best.is_finite() {
                            best
                        } else {
                            self.value(self.steps, p, 1, a)
                        };
                    }
                }
                let (kept, base) = self.locate(t);
                let at = base + p * modes * states;
                let dst = if kept {
                    &mut self.values
                } else {
                    &mut self.ring
                };
                dst[at..at + modes * states].copy_from_slice(&cell);
            }
        }
    }

    /// Bytes the value tables of a solve with these sizes take (`keep`
    /// kept steps and the ring).
    pub fn table_bytes(keep: usize, changeover: usize, work: usize, shortlist: usize) -> usize {
        (keep.max(1) + changeover + 2)
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
