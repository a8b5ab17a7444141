//! The expected-cost model behind a decision: a Markov decision process over
//! (step, progress, mode, availability of the shortlisted pools), solved
//! backwards once per decision (or once per re-plan in the simulator).
//!
//! Modes: 0 idle, 1 on-demand, 2.. the shortlisted spot pools. Each spot pool
//! has four availability states (see [`super::AvailState`] and
//! [`super::chain`]); pools are independent,
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
//!
//! ## What the backward pass computes, and what it does not
//!
//! - **Forced states** (less slack than one changeover) have one allowed
//!   course, on-demand to the end, so their value is written in closed form
//!   ([`Mdp::forced_value`]) and never tabulated.
//! - **Unreachable states** (more progress than the fastest mode can have made
//!   since the solve) are never read, so they are skipped.
//! - **Expectations are computed once per state of the next step**: the
//!   expected value one step (and one changeover) on, for every (progress,
//!   mode, availability), is what idling, running on and switching all read,
//!   so each step's values are turned into expectations once and looked up.
//!
//! A value is bit for bit what [`Mdp::options`] gives from the same table
//! (a test checks every reachable state), so the decision read off a solved
//! model is the one the backward pass valued.

use super::chain::{digit, expect_block, identity, matmul, up, Sparse};
use super::StepRates;

/// The most modes a model has: idle, on-demand and the shortlist.
const MAX_MODES: usize = 2 + super::MAX_SHORTLIST;

/// Per-(step, progress) work space of the backward pass, per joint state:
/// staying in and switching to each mode, the switches allowed, and the
/// cheapest of those before and after each mode; and which joint states
/// give each shortlisted pool capacity (fixed for the solve). Kept across
/// cells so that only the rows a cell writes are written.
struct Scratch<const S: usize> {
    stay: [[f64; S]; MAX_MODES],
    sw: [[f64; S]; MAX_MODES],
    allowed: [[f64; S]; MAX_MODES],
    before: [[f64; S]; MAX_MODES + 1],
    after: [[f64; S]; MAX_MODES + 1],
    up_rows: [[bool; S]; super::MAX_SHORTLIST],
}

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
    /// The most progress any mode can make in a step.
    vmax: usize,
    /// Availability transitions for one step and for a changeover.
    step: Sparse,
    step_c: Sparse,
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

    /// Slack at step `t` with progress `p`, in steps: time left minus the
    /// work left on on-demand.
    fn slack(&self, t: usize, p: usize) -> i64 {
        self.steps as i64 - t as i64 - (self.work as i64 - p as i64)
    }

    /// Whether a state is forced: less slack than a changeover, so idling and
    /// every spot pool are ruled out and on-demand is the only course.
    fn forced(&self, t: usize, p: usize) -> bool {
        self.slack(t, p) < self.changeover as i64
    }

    /// The lowest progress at step `t` that is not forced.
    fn lowest(&self, t: usize) -> usize {
        lowest_unforced(self.steps, self.work, self.changeover, t)
    }

    /// The highest progress reachable at step `t` from the solve's state.
    fn highest(&self, t: usize) -> usize {
        t.saturating_mul(self.vmax).min(self.work.saturating_sub(1))
    }

    /// Whether a state can follow the solve's: no more progress than the
    /// fastest mode makes in `t` steps (other states are not tabulated).
    pub fn reachable(&self, t: usize, p: usize) -> bool {
        p <= t.saturating_mul(self.vmax)
    }

    /// Whether the solve tabulated a state (reachable, not done, not past the
    /// horizon, not forced).
    #[cfg(test)]
    pub fn tabulated(&self, t: usize, p: usize) -> bool {
        t < self.steps && p < self.work && self.reachable(t, p) && !self.forced(t, p)
    }

    /// The cost of missing the deadline with `p` done: on-demand for the rest
    /// with a tenfold penalty (a missed deadline is never a bargain).
    fn penalty(&self, p: usize) -> f64 {
        self.prices[1] * (self.work - p + self.changeover) as f64 * 10.0
    }

    /// On-demand from (t, p) to the end: done, or the penalty at the horizon.
    fn od_to_end(&self, t: usize, p: usize) -> f64 {
        if p >= self.work {
            return 0.0;
        }
        if t >= self.steps {
            return self.penalty(p);
        }
        let (left, time) = (self.work - p, self.steps - t);
        if left <= time {
            self.prices[1] * left as f64
        } else {
            self.prices[1] * time as f64 + self.penalty(p + time)
        }
    }

    /// The value of a forced state: on-demand to the end, after a changeover
    /// unless it already runs there.
    fn forced_value(&self, t: usize, p: usize, mode: usize) -> f64 {
        if mode == 1 || self.changeover == 0 {
            self.od_to_end(t, p)
        } else {
            self.prices[1] * self.changeover as f64 + self.od_to_end(t + self.changeover, p)
        }
    }

    /// The value of a state (done, past the horizon, forced or tabulated).
    pub fn value(&self, t: usize, p: usize, mode: usize, a: usize) -> f64 {
        match self.row(t, p, mode) {
            Row::Const(v) => v,
            Row::Kept(i) => self.values[i + a],
            Row::Ring(i) => self.ring[i + a],
        }
    }

    /// Steps after the solve at which the plan can still be read.
    pub fn kept(&self) -> usize {
        self.keep
    }

    fn expect(&self, next: &Sparse, a: usize, f: impl Fn(usize) -> f64) -> f64 {
        next.row(a).iter().map(|&(b, p)| p * f(b)).sum()
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
        let slack = self.slack(t, p);
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
        let vmax = whole
            .iter()
            .zip(&frac)
            .map(|(w, f)| w + usize::from(*f > 0.0))
            .max()
            .unwrap_or(1)
            .max(1);
        let modes = 2 + k;
        let mut mdp = Mdp {
            steps: s.steps,
            work: s.work,
            changeover: s.changeover,
            modes,
            states,
            whole,
            frac,
            vmax,
            step: Sparse::from_dense(&step, states),
            step_c: Sparse::from_dense(&step_c, states),
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
    /// ring), or a constant (done, past the horizon, or forced).
    fn row(&self, t: usize, p: usize, mode: usize) -> Row {
        if p >= self.work {
            Row::Const(0.0)
        } else if t >= self.steps {
            Row::Const(self.penalty(p))
        } else if self.forced(t, p) {
            Row::Const(self.forced_value(t, p, mode))
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
    fn ex(&self, next: &Sparse, a: usize, row: Row) -> f64 {
        let r = next.row(a);
        match row {
            Row::Const(c) => r.iter().map(|&(_, p)| p * c).sum(),
            Row::Kept(base) => r.iter().map(|&(b, p)| p * self.values[base + b]).sum(),
            Row::Ring(base) => r.iter().map(|&(b, p)| p * self.ring[base + b]).sum(),
        }
    }

    /// The expectations over `next` of step `t`'s values, for progress
    /// `from..=to` (every mode and state), into `out` (laid out as a slice).
    /// Each sum runs over its state's transitions in [`Sparse`] order, as
    /// [`Mdp::ex`] does, so the two agree bit for bit.
    fn expectations(&self, next: &Sparse, t: usize, from: usize, to: usize, out: &mut [f64]) {
        let (modes, states) = (self.modes, self.states);
        let block = modes * states;
        for p in from..=to.min(self.work.saturating_sub(1)) {
            let o = &mut out[p * block..(p + 1) * block];
            match self.row(t, p, 0) {
                Row::Const(_) => {
                    for m in 0..modes {
                        let row = self.row(t, p, m);
                        for (a, v) in o[m * states..(m + 1) * states].iter_mut().enumerate() {
                            *v = self.ex(next, a, row);
                        }
                    }
                }
                Row::Kept(i) => expect_block(next, states, &self.values[i..i + block], o),
                Row::Ring(i) => expect_block(next, states, &self.ring[i..i + block], o),
            }
        }
    }

    /// The backward pass. For each (step, progress) the expectations every
    /// mode shares (idle, running on, landing in each mode) are read from the
    /// next steps' expectation slices, and the cheapest switch per state is
    /// found once for every current mode; each state then takes the cheapest
    /// of its allowed options, computed with the arithmetic of
    /// [`Mdp::options`], so a value here is bit for bit the minimum `options`
    /// gives.
    fn backward(&mut self) {
        match self.states {
            1 => self.backward_for::<1>(),
            4 => self.backward_for::<4>(),
            16 => self.backward_for::<16>(),
            _ => self.backward_for::<64>(),
        }
    }

    /// [`Mdp::backward`] for `S` joint states.
    fn backward_for<const S: usize>(&mut self) {
        let (modes, states, c) = (self.modes, self.states, self.changeover);
        self.values = vec![0.0; self.keep * self.slice_len()];
        self.ring = vec![0.0; (c + 2) * self.slice_len()];
        // Expectation slices hold progress up to `work` (that row stays 0:
        // done; progress past it reads it).
        let elen = self.slice_len();
        let mut e1 = [vec![0.0; elen], vec![0.0; elen]];
        let ring_c = if c >= 2 { c + 1 } else { 0 };
        let mut ec = vec![vec![0.0; elen]; ring_c];
        // Rows of step `t`'s one-step expectations that step `t - 1` reads,
        // and of its changeover expectations that step `t - c` reads.
        let e1_rows = |m: &Mdp, t: usize| (m.lowest(t).saturating_sub(1), t.saturating_mul(m.vmax));
        let ec_rows = |m: &Mdp, t: usize| {
            (
                m.lowest(t).saturating_sub(c),
                t.saturating_sub(c).saturating_mul(m.vmax),
            )
        };
        // Past the horizon: constants.
        let (lo, hi) = e1_rows(self, self.steps);
        self.expectations(&self.step, self.steps, lo, hi, &mut e1[self.steps % 2]);
        for t in self.steps..self.steps + ring_c.saturating_sub(1) {
            let (lo, hi) = ec_rows(self, t);
            self.expectations(&self.step_c, t, lo, hi, &mut ec[t % ring_c]);
        }
        let mut cell = vec![0.0; modes * states];
        let mut scratch = Scratch {
            stay: [[0.0; S]; MAX_MODES],
            sw: [[0.0; S]; MAX_MODES],
            allowed: [[f64::INFINITY; S]; MAX_MODES],
            before: [[f64::INFINITY; S]; MAX_MODES + 1],
            after: [[f64::INFINITY; S]; MAX_MODES + 1],
            up_rows: std::array::from_fn(|k| std::array::from_fn(|a| up(a, k))),
        };
        for t in (0..self.steps).rev() {
            let next = &e1[(t + 1) % 2];
            let land: &[f64] = match c {
                0 => &[],
                1 => next,
                _ => &ec[(t + c) % ring_c],
            };
            let hi = self.highest(t);
            for p in self.lowest(t)..=hi {
                if p >= self.work {
                    break;
                }
                self.cell_values::<S>(t, p, next, land, &mut scratch, &mut cell);
                let (kept, base) = self.locate(t);
                let i = base + p * modes * states;
                let dst = if kept {
                    &mut self.values
                } else {
                    &mut self.ring
                };
                dst[i..i + modes * states].copy_from_slice(&cell);
            }
            // This step's values as the earlier steps read them.
            let (lo, hi) = e1_rows(self, t);
            let mut out = std::mem::take(&mut e1[t % 2]);
            self.expectations(&self.step, t, lo, hi, &mut out);
            e1[t % 2] = out;
            if ring_c > 0 {
                let (lo, hi) = ec_rows(self, t);
                let mut out = std::mem::take(&mut ec[t % ring_c]);
                self.expectations(&self.step_c, t, lo, hi, &mut out);
                ec[t % ring_c] = out;
            }
        }
    }

    /// The values of every (mode, state) at step `t` with progress `p`, from
    /// the next step's expectations (`next`) and those a changeover on
    /// (`land`), into `out`: the cheapest allowed option of each, with the
    /// arithmetic of [`Mdp::options`]. `S` is the number of joint states.
    fn cell_values<const S: usize>(
        &self,
        t: usize,
        p: usize,
        next: &[f64],
        land: &[f64],
        Scratch {
            stay,
            sw,
            allowed,
            before,
            after,
            up_rows,
        }: &mut Scratch<S>,
        out: &mut [f64],
    ) {
        let (modes, c) = (self.modes, self.changeover);
        let (next, _) = next.as_chunks::<S>();
        let (land, _) = land.as_chunks::<S>();
        let (out, _) = out.as_chunks_mut::<S>();
        let row = |q: usize, m: usize| q.min(self.work) * modes + m;
        let slack = self.slack(t, p);
        let ci = c as i64;
        let idle = &next[row(p, 0)];
        // Staying in and switching to each mode, per state: shared by every
        // current mode.
        for m in 1..modes {
            let lo = p + self.whole[m];
            let f = self.frac[m];
            let price = self.prices[m];
            let (lo_row, hi_row) = (&next[row(lo, m)], &next[row(lo + 1, m)]);
            for a in 0..S {
                let run = if f <= 0.0 {
                    lo_row[a]
                } else {
                    (1.0 - f) * lo_row[a] + f * hi_row[a]
                };
                stay[m][a] = price + run;
            }
            if c == 0 {
                sw[m] = stay[m];
            } else {
                let paid = price * c as f64;
                let landed = &land[row(p, m)];
                if m == 1 {
                    for a in 0..S {
                        sw[m][a] = paid + landed[a];
                    }
                } else {
                    let lost = &land[row(p, 0)];
                    let survive = &self.survive_c[m - 2];
                    for a in 0..S {
                        let sv = survive[a];
                        sw[m][a] = paid + sv * landed[a] + (1.0 - sv) * lost[a];
                    }
                }
            }
        }
        // Which options the slack allows (see `options`).
        let idle_ok = slack > ci;
        let mut stay_ok = [true; MAX_MODES];
        let mut switch_ok = [true; MAX_MODES];
        for m in 2..modes {
            stay_ok[m] = slack >= ci + self.slow(m);
            switch_ok[m] = slack >= 2 * ci + self.slow(m);
        }
        // The switches each state allows (infinity where the slack does not
        // allow one or the pool has no capacity), and for each mode the
        // cheapest switch to another mode (a mode cannot switch to itself):
        // the lesser of the minima over the modes before it and after it.
        // Every loop runs over a whole row of states, without branches, so
        // the compiler vectorises it; `lower` is `min` for values that are
        // never NaN, so each value is the minimum `options` finds.
        let inf = [f64::INFINITY; S];
        for m in 1..modes {
            if m == 1 {
                allowed[m] = sw[m];
            } else if switch_ok[m] {
                let has = &up_rows[m - 2];
                for a in 0..S {
                    allowed[m][a] = if has[a] { sw[m][a] } else { f64::INFINITY };
                }
            } else {
                allowed[m] = inf;
            }
        }
        // before[m]: the cheapest of modes 1..m; after[m]: of modes m..modes
        // (before[1] and after[modes] stay infinite: no mode).
        for m in 1..modes {
            for a in 0..S {
                before[m + 1][a] = lower(before[m][a], allowed[m][a]);
            }
        }
        for m in (1..modes).rev() {
            for a in 0..S {
                after[m][a] = lower(after[m + 1][a], allowed[m][a]);
            }
        }
        let idle_v = if idle_ok { *idle } else { inf };
        let penalty = self.penalty(p);
        let settle = |v: f64| if v.is_finite() { v } else { penalty };
        // Idle, or on a spot pool without capacity (preempted: in effect
        // idle): wait or take the cheapest switch.
        let mut down = inf;
        for a in 0..S {
            down[a] = settle(lower(idle_v[a], before[modes][a]));
        }
        out[0] = down;
        for m in 1..modes {
            let stay_v = if stay_ok[m] { stay[m] } else { inf };
            let has = if m >= 2 { &up_rows[m - 2] } else { &[true; S] };
            for a in 0..S {
                let others = lower(before[m][a], after[m + 1][a]);
                let v = settle(lower(lower(idle_v[a], stay_v[a]), others));
                out[m][a] = if has[a] { v } else { down[a] };
            }
        }
    }

    /// Bytes the value tables of a solve with these sizes take (`keep`
    /// kept steps, the ring and the expectation slices).
    pub fn table_bytes(keep: usize, changeover: usize, work: usize, shortlist: usize) -> usize {
        (keep.max(1) + 2 * changeover + 5)
            .saturating_mul(work + 1)
            .saturating_mul(cells_per_progress(shortlist))
            .saturating_mul(std::mem::size_of::<f64>())
    }

    /// The cells (step, progress, mode, joint availability) a solve over
    /// `steps` steps with `work` steps of work to do may visit, for a
    /// shortlist of `shortlist` pools: every (step, progress) pair that is not
    /// forced, times the modes and joint states. An upper bound (the solve
    /// skips unreachable progress), and a function of the job alone, so the
    /// width it allows does not depend on which pools are shortlisted.
    pub fn solve_cells(steps: usize, work: usize, changeover: usize, shortlist: usize) -> usize {
        let pairs: usize = (0..steps)
            .map(|t| work.saturating_sub(lowest_unforced(steps, work, changeover, t)))
            .sum();
        pairs.saturating_mul(cells_per_progress(shortlist))
    }
}

/// The lesser of two values that are never NaN (finite costs or infinity):
/// one compare and select, where `f64::min` also handles NaN on every call
/// of the solver's innermost loop.
#[inline(always)]
fn lower(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// The lowest progress at step `t` that is not forced, in a solve over
/// `steps` steps with `work` steps of work and a changeover of `changeover`.
fn lowest_unforced(steps: usize, work: usize, changeover: usize, t: usize) -> usize {
    (work + t + changeover).saturating_sub(steps)
}

/// Cells per (step, progress) pair for a shortlist of `shortlist` pools:
/// 2 + k modes times 4^k joint availability states.
fn cells_per_progress(shortlist: usize) -> usize {
    (2 + shortlist).saturating_mul(4usize.pow(shortlist as u32))
}
