//! The placement policy: one pure decision, made the same way by `gpufleet
//! place`, by the executor at every decision point and by the simulator's
//! `gpufleet` policy.
//!
//! Given the job's state (work left, time left, where it runs now, what a
//! changeover costs) and every candidate pool with its price, speed and
//! availability model, [`decide`] says what to do now: wait, stay, or run in
//! one candidate (start, restart or move there, spot or on-demand), with the
//! expected cost of each option and one line saying why.
//!
//! ## How it decides, and why it is linear in the candidates
//!
//! 1. **On-demand fallback**: the on-demand candidate with the lowest cost per
//!    unit of work among those that can still meet the deadline (the fastest
//!    when none can).
//! 2. **Shortlist** by a per-pool index (O(n)): the expected cost per
//!    reference work-hour, `price / speed × (1 + λ·changeover)`, divided by the
//!    chance the pool is available within a changeover (1 when it is up). The
//!    pool the job runs on now is always on it. At most
//!    [`PolicyConfig::shortlist`] pools (default 2).
//! 3. **Expected cost** over the shortlist by a Markov decision process on
//!    (step, progress, mode, joint availability): each pool's availability is
//!    a four-state chain — up, just came back, first minutes of an outage,
//!    later in an outage — because outages are heavy-tailed and a pool that
//!    just came back is lost again far more often than a settled one. The
//!    joint chain has 4^k states for the k shortlisted pools, a constant, so a
//!    decision costs O(n) for the index plus a solve whose size depends only on
//!    the horizon and the step, never on n.
//! 4. **Choice**: the cheapest option, except that it does not idle beside
//!    available spot capacity unless waiting saves at least one changeover on
//!    that pool (idle time spends slack that insures against outages the model
//!    has not seen).
//!
//! Every rate is per hour and every window is in hours, so the decision does
//! not depend on how often it is asked: the model is solved on steps of
//! [`PolicyConfig::step_hours`], coarsened so the horizon fits in
//! [`PolicyConfig::max_steps`] and the value table in [`MAX_TABLE_BYTES`].

mod mdp;
pub mod plans;

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::Capacity;
use crate::money::{Money, Price};

use mdp::{Mdp, Setup};

/// How long after capacity returns a pool counts as "just came back": 30
/// minutes. In the 2022 traces an 8-GPU pool that came back was lost again in
/// its first, second and third 10-minute tick 39 %, 26 % and 20 % of the time,
/// against a few percent later on.
pub const FRESH_WINDOW_HOURS: f64 = 0.5;

/// How long an outage counts as young: 10 minutes. In the 2022 traces the
/// chance of recovering within the next 10 minutes was 60 % after 10 minutes of
/// outage, 27 % after 20 and 1.7 % after two hours.
pub const YOUNG_WINDOW_HOURS: f64 = 1.0 / 6.0;

/// The largest value table one decision may allocate (192 MiB); the planning
/// step is coarsened until the table fits.
pub const MAX_TABLE_BYTES: usize = 192 << 20;

/// The largest shortlist the joint model takes (4^3 availability states).
pub const MAX_SHORTLIST: usize = 3;

/// A spot pool's availability state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AvailState {
    /// Available for a while (or not known to be otherwise).
    Up,
    /// Came back within the last [`FRESH_WINDOW_HOURS`].
    Fresh,
    /// Unavailable for at most [`YOUNG_WINDOW_HOURS`].
    OutageYoung,
    /// Unavailable for longer.
    OutageOld,
}

impl AvailState {
    fn digit(self) -> usize {
        match self {
            AvailState::Up => 0,
            AvailState::Fresh => 1,
            AvailState::OutageYoung => 2,
            AvailState::OutageOld => 3,
        }
    }

    /// Whether capacity is there.
    pub fn is_up(self) -> bool {
        matches!(self, AvailState::Up | AvailState::Fresh)
    }
}

/// One spot pool's availability model: its state and per-hour rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// The state now.
    pub state: AvailState,
    /// Losses of capacity per hour once settled (the hazard).
    pub fail_per_hour: f64,
    /// Losses per hour within [`FRESH_WINDOW_HOURS`] of coming back.
    pub fresh_fail_per_hour: f64,
    /// Recoveries per hour in a young outage.
    pub recover_young_per_hour: f64,
    /// Recoveries per hour later in an outage.
    pub recover_old_per_hour: f64,
}

/// Priors for the recovery rates where nothing was measured: the 2022 traces'
/// pooled chances per 10-minute tick (60 % in the first tick of an outage, 5 %
/// later), as per-hour rates.
pub const PRIOR_RECOVER_YOUNG_PER_HOUR: f64 = 5.497_744;
/// See [`PRIOR_RECOVER_YOUNG_PER_HOUR`].
pub const PRIOR_RECOVER_OLD_PER_HOUR: f64 = 0.307_760;

impl Availability {
    /// A pool with hazard `fail_per_hour`, up now, a fresh-return risk of
    /// `1 + burst` times the hazard and the prior recovery rates.
    pub fn from_hazard(state: AvailState, fail_per_hour: f64, burst: f64) -> Self {
        Availability {
            state,
            fail_per_hour,
            fresh_fail_per_hour: fail_per_hour * (1.0 + burst.max(0.0)),
            recover_young_per_hour: PRIOR_RECOVER_YOUNG_PER_HOUR,
            recover_old_per_hour: PRIOR_RECOVER_OLD_PER_HOUR,
        }
    }

    fn valid(&self) -> bool {
        [
            self.fail_per_hour,
            self.fresh_fail_per_hour,
            self.recover_young_per_hour,
            self.recover_old_per_hour,
        ]
        .iter()
        .all(|r| r.is_finite() && *r >= 0.0)
    }

    /// The chance the pool has capacity within `hours` from now.
    fn up_within(&self, hours: f64) -> f64 {
        match self.state {
            AvailState::Up | AvailState::Fresh => 1.0,
            AvailState::OutageYoung => -(-self.recover_young_per_hour * hours).exp_m1(),
            AvailState::OutageOld => -(-self.recover_old_per_hour * hours).exp_m1(),
        }
    }
}

/// Where a candidate's hazard comes from, for the explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum HazardBasis {
    /// On-demand: not preempted.
    OnDemand,
    /// Measured: gpufleet's own observations (ledger or trace) dominate.
    Measured(String),
    /// A published signal: a Spot Advisor bucket, an eviction band, a
    /// placement score, a provider's rate.
    Published(String),
    /// An assumed default: nothing was published or measured for this pool.
    Assumed(String),
}

impl std::fmt::Display for HazardBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HazardBasis::OnDemand => f.write_str("on-demand"),
            HazardBasis::Measured(s) => write!(f, "measured: {s}"),
            HazardBasis::Published(s) => write!(f, "published: {s}"),
            HazardBasis::Assumed(s) => write!(f, "assumed: {s}"),
        }
    }
}

/// One pool the job could run in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// A short name for explanations (`spot p3.2xlarge us-west-2b`).
    pub label: String,
    /// What the job pays per hour here (every node).
    pub price: Price,
    /// Reference work-hours done per hour here (the throughput factor).
    pub work_rate: f64,
    /// Spot or on-demand.
    pub capacity: Capacity,
    /// The availability model (on-demand: ignored, always available).
    pub availability: Availability,
    /// Where the hazard comes from.
    pub basis: HazardBasis,
}

/// Where the job runs now.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Running {
    /// The candidate (index into the candidates).
    pub candidate: usize,
    /// Hours of the current (re)start's changeover still to go (0 when it is
    /// making progress).
    pub changeover_left_hours: f64,
}

/// The job's state at a decision point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    /// Reference work-hours left.
    pub work_left_hours: f64,
    /// Hours to the deadline (`None`: no deadline).
    pub time_left_hours: Option<f64>,
    /// Hours each start, restart or move costs (paid, no progress).
    pub changeover_hours: f64,
    /// Where it runs now (`None`: nowhere).
    pub current: Option<Running>,
}

/// The policy's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// The planning step, hours (default 10 minutes; the simulator uses its
    /// traces' tick).
    pub step_hours: f64,
    /// At most this many steps to the horizon; longer horizons use a coarser
    /// step (default 600).
    pub max_steps: usize,
    /// Pools modelled jointly (1 to [`MAX_SHORTLIST`], default 2).
    pub shortlist: usize,
    /// Hours after a solve during which [`Solution::action_at`] can answer
    /// without solving again (default 0: a decision needs only its own step;
    /// the simulator keeps its re-planning period).
    pub keep_hours: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            step_hours: 1.0 / 6.0,
            max_steps: 600,
            shortlist: 2,
            keep_hours: 0.0,
        }
    }
}

/// What to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "action", content = "candidate")]
pub enum Action {
    /// Run nowhere for now.
    Wait,
    /// Run in this candidate: stay when it is where the job runs, otherwise
    /// start, restart or move there.
    Run(usize),
}

/// One option and what the model expects it to cost to finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptionValue {
    /// The option.
    pub action: Action,
    /// Expected cost to finish the job after taking it.
    pub expected_cost: Money,
}

/// The decision and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// The on-demand fallback (index into the candidates), if any.
    pub on_demand: Option<usize>,
    /// The pools modelled jointly, best index first.
    pub shortlist: Vec<usize>,
    /// Every allowed option with its expected cost, cheapest first.
    pub options: Vec<OptionValue>,
    /// The planning step used, hours.
    pub step_hours: f64,
    /// Hours of slack: time left minus what finishing on on-demand needs.
    pub slack_hours: Option<f64>,
    /// One line a person can check.
    pub explanation: String,
}

/// Per-step chances of one shortlisted pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepRates {
    fail: f64,
    fresh_fail: f64,
    young: f64,
    old: f64,
    leave_fresh: f64,
    young_to_old: f64,
    fresh_steps: usize,
}

fn per_step(rate: f64, step: f64) -> f64 {
    (-(-rate * step).exp_m1()).clamp(0.0, 1.0)
}

impl StepRates {
    fn new(a: &Availability, step: f64) -> Self {
        StepRates {
            fail: per_step(a.fail_per_hour, step),
            fresh_fail: per_step(a.fresh_fail_per_hour, step),
            young: per_step(a.recover_young_per_hour, step),
            old: per_step(a.recover_old_per_hour, step),
            leave_fresh: (step / FRESH_WINDOW_HOURS).min(1.0),
            young_to_old: (step / YOUNG_WINDOW_HOURS).min(1.0),
            fresh_steps: (FRESH_WINDOW_HOURS / step - 1e-9).ceil().max(1.0) as usize,
        }
    }

    fn transition(&self, from: usize, to: usize) -> f64 {
        let r = self;
        match (from, to) {
            (0, 0) => 1.0 - r.fail,
            (0, 2) => r.fail,
            (1, 0) => (1.0 - r.fresh_fail) * r.leave_fresh,
            (1, 1) => (1.0 - r.fresh_fail) * (1.0 - r.leave_fresh),
            (1, 2) => r.fresh_fail,
            (2, 1) => r.young,
            (2, 2) => (1.0 - r.young) * (1.0 - r.young_to_old),
            (2, 3) => (1.0 - r.young) * r.young_to_old,
            (3, 1) => r.old,
            (3, 3) => 1.0 - r.old,
            _ => 0.0,
        }
    }

    /// The chance of staying up through `steps` steps from state `digit`: the
    /// fresh window's risk for as long as it is expected to last, then the
    /// settled rate.
    fn survive(&self, digit: usize, steps: usize) -> f64 {
        let fresh = if digit == 1 {
            steps.min(self.fresh_steps)
        } else {
            0
        };
        (1.0 - self.fresh_fail).powi(fresh as i32) * (1.0 - self.fail).powi((steps - fresh) as i32)
    }
}

/// The expected cost per reference work-hour of a spot candidate, counting a
/// changeover per loss, over the chance it has capacity within a changeover:
/// the index that picks the shortlist.
fn index(c: &Candidate, changeover: f64, step: f64) -> f64 {
    let per_work = c.price.usd_per_hour_f64() / c.work_rate.max(1e-12);
    let a = &c.availability;
    let lossy = per_work * (1.0 + a.fail_per_hour * changeover);
    lossy / a.up_within(changeover.max(step)).max(1e-6)
}

fn check(job: &JobState, candidates: &[Candidate], config: &PolicyConfig) -> Result<()> {
    let bad = |what: &str, v: f64, valid: &str| {
        Err(Error::invalid_input(format!(
            "invalid {what} {v}: expected {valid}"
        )))
    };
    if !(job.work_left_hours.is_finite() && job.work_left_hours > 0.0) {
        return bad(
            "work left (hours)",
            job.work_left_hours,
            "a positive number",
        );
    }
    if let Some(t) = job.time_left_hours {
        if !(t.is_finite() && t >= 0.0) {
            return bad("time left (hours)", t, "zero or more");
        }
    }
    if !(job.changeover_hours.is_finite() && job.changeover_hours >= 0.0) {
        return bad("changeover (hours)", job.changeover_hours, "zero or more");
    }
    if !(config.step_hours.is_finite() && config.step_hours > 0.0) {
        return bad(
            "planning step (hours)",
            config.step_hours,
            "a positive number",
        );
    }
    if config.max_steps < 2 {
        return Err(Error::invalid_input(format!(
            "invalid max steps {}: expected at least 2",
            config.max_steps
        )));
    }
    if candidates.is_empty() {
        return Err(Error::invalid_input("no candidate pools to decide between"));
    }
    for c in candidates {
        if !(c.work_rate.is_finite() && c.work_rate > 0.0) {
            return bad(
                &format!("work rate of {}", c.label),
                c.work_rate,
                "a positive number",
            );
        }
        if c.price < Price::ZERO {
            return Err(Error::invalid_input(format!(
                "invalid price of {}: ${}/h is negative",
                c.label,
                c.price.display(4)
            )));
        }
        if c.capacity == Capacity::Spot && !c.availability.valid() {
            return Err(Error::invalid_input(format!(
                "invalid availability model of {}: rates must be finite and not negative",
                c.label
            )));
        }
    }
    if let Some(r) = job.current {
        if r.candidate >= candidates.len() {
            return Err(Error::invalid_input(format!(
                "the current pool is candidate {} of {}",
                r.candidate,
                candidates.len()
            )));
        }
        if !(r.changeover_left_hours.is_finite() && r.changeover_left_hours >= 0.0) {
            return bad(
                "changeover left (hours)",
                r.changeover_left_hours,
                "zero or more",
            );
        }
    }
    Ok(())
}

/// The on-demand fallback: cheapest per unit of work among those that can
/// still finish in time, else the fastest; the current one if it runs there.
fn pick_on_demand(job: &JobState, candidates: &[Candidate]) -> Option<usize> {
    let od = |i: &usize| candidates[*i].capacity == Capacity::OnDemand;
    if let Some(r) = job.current.filter(|r| od(&r.candidate)) {
        return Some(r.candidate);
    }
    let all: Vec<usize> = (0..candidates.len()).filter(od).collect();
    let fits = |i: &usize| {
        job.time_left_hours.is_none_or(|t| {
            job.work_left_hours / candidates[*i].work_rate + job.changeover_hours <= t + 1e-9
        })
    };
    let per_work = |i: &usize| candidates[*i].price.usd_per_hour_f64() / candidates[*i].work_rate;
    all.iter()
        .copied()
        .filter(fits)
        .min_by(|a, b| per_work(a).total_cmp(&per_work(b)).then(a.cmp(b)))
        .or_else(|| {
            all.iter().copied().max_by(|a, b| {
                candidates[*a]
                    .work_rate
                    .total_cmp(&candidates[*b].work_rate)
                    .then(b.cmp(a))
            })
        })
}

/// The shortlist: the current spot pool, then the best by [`index`].
fn pick_shortlist(job: &JobState, candidates: &[Candidate], size: usize, step: f64) -> Vec<usize> {
    let size = size.clamp(1, MAX_SHORTLIST);
    let mut out = Vec::with_capacity(size);
    if let Some(r) = job.current {
        if candidates[r.candidate].capacity == Capacity::Spot {
            out.push(r.candidate);
        }
    }
    let mut scored: Vec<(f64, usize)> = candidates
        .iter()
        .enumerate()
        .filter(|(i, c)| c.capacity == Capacity::Spot && !out.contains(i))
        .map(|(i, c)| (index(c, job.changeover_hours, step), i))
        .collect();
    let want = size.saturating_sub(out.len());
    let order = |a: &(f64, usize), b: &(f64, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    if scored.len() > want && want > 0 {
        scored.select_nth_unstable_by(want - 1, order);
        scored.truncate(want);
    }
    scored.sort_by(order);
    out.extend(scored.into_iter().take(want).map(|(_, i)| i));
    out
}

/// A solved model, reusable for later states of the same job while its inputs
/// hold (the simulator re-plans on a schedule; the executor solves per
/// decision).
#[derive(Debug, Clone)]
pub struct Solution {
    mdp: Option<Mdp>,
    /// The spot candidates modelled, in mode order.
    pub shortlist: Vec<usize>,
    /// The on-demand fallback.
    pub on_demand: Option<usize>,
    /// The planning step, hours.
    pub step_hours: f64,
    /// Reference work-hours per step of progress (the fallback's speed times
    /// the step).
    pub work_per_step: f64,
    spot_step_prices: Vec<f64>,
    changeover: usize,
    size: usize,
}

/// How the plan's modes map to candidates.
fn mode_of(plan: &Solution, current: Option<usize>) -> Option<usize> {
    match current {
        None => Some(0),
        Some(c) if Some(c) == plan.on_demand => Some(1),
        Some(c) => plan.shortlist.iter().position(|s| *s == c).map(|i| 2 + i),
    }
}

impl Solution {
    /// Solves the model for the job's state now.
    pub fn solve(
        job: &JobState,
        candidates: &[Candidate],
        config: &PolicyConfig,
    ) -> Result<Solution> {
        check(job, candidates, config)?;
        let on_demand = pick_on_demand(job, candidates);
        let od_rate = on_demand.map_or_else(
            || {
                candidates
                    .iter()
                    .map(|c| c.work_rate)
                    .fold(f64::MIN_POSITIVE, f64::max)
            },
            |i| candidates[i].work_rate,
        );
        // Without a deadline the horizon is three times the on-demand run.
        let horizon = job.time_left_hours.unwrap_or(
            3.0 * (job.work_left_hours / od_rate) + 4.0 * job.changeover_hours + config.step_hours,
        );
        let size = config.shortlist.clamp(1, MAX_SHORTLIST).min(
            candidates
                .iter()
                .filter(|c| c.capacity == Capacity::Spot)
                .count(),
        );
        let base = config.step_hours;
        let mut m = ((horizon / base) / config.max_steps as f64).ceil().max(1.0);
        let mut step;
        let (mut steps, mut work, mut changeover, mut keep);
        loop {
            step = base * m;
            steps = (horizon / step + 0.01).floor().max(0.0) as usize;
            work = ((job.work_left_hours / od_rate) / step - 0.01)
                .ceil()
                .max(1.0) as usize;
            changeover = (job.changeover_hours / step - 0.01).ceil().max(0.0) as usize;
            keep = ((config.keep_hours.max(0.0) / step).ceil() as usize + 1).min(steps.max(1));
            if Mdp::table_bytes(keep, changeover.min(steps), work.min(steps), size)
                <= MAX_TABLE_BYTES
            {
                break;
            }
            m *= 2.0;
        }
        let shortlist = pick_shortlist(job, candidates, size.max(1), step);
        let shortlist: Vec<usize> = shortlist.into_iter().take(size).collect();
        let step_price =
            |p: Price| p.cost_for_seconds((step * 3600.0).round() as u64).micros() as f64;
        let spot_step_prices: Vec<f64> = shortlist
            .iter()
            .map(|i| step_price(candidates[*i].price))
            .collect();
        // Without on-demand, a penalty price that no plan would choose.
        let od_price = on_demand.map_or(1e15, |i| step_price(candidates[i].price));
        let mdp = (work + changeover <= steps).then(|| {
            let rates: Vec<StepRates> = shortlist
                .iter()
                .map(|i| StepRates::new(&candidates[*i].availability, step))
                .collect();
            let speed: Vec<f64> = shortlist
                .iter()
                .map(|i| candidates[*i].work_rate / od_rate)
                .collect();
            Mdp::solve(
                &Setup {
                    steps,
                    work,
                    changeover,
                    rates: &rates,
                    od_price,
                    spot_prices: &spot_step_prices,
                    spot_speed: &speed,
                },
                keep,
            )
        });
        Ok(Solution {
            mdp,
            shortlist,
            on_demand,
            step_hours: step,
            work_per_step: od_rate * step,
            spot_step_prices,
            changeover,
            size,
        })
    }

    /// Whether the shortlist the index would pick now is the one this plan
    /// models (as a set): when it is not, the plan is stale.
    pub fn same_shortlist(&self, job: &JobState, candidates: &[Candidate]) -> bool {
        let mut now = pick_shortlist(job, candidates, self.size.max(1), self.step_hours);
        now.truncate(self.size);
        now.len() == self.shortlist.len() && now.iter().all(|i| self.shortlist.contains(i))
    }

    /// Whether the plan covers a job running in `current` (the shortlist holds
    /// it, or it is the fallback).
    pub fn covers(&self, current: Option<usize>) -> bool {
        mode_of(self, current).is_some()
    }

    /// Whether a pool outside the plan's shortlist now beats the job's
    /// current pool on the shortlist index by more than `margin` (0.2: 20 %
    /// cheaper per unit of work, counting losses and availability): a reason
    /// to plan again while the job runs.
    pub fn better_elsewhere(&self, job: &JobState, candidates: &[Candidate], margin: f64) -> bool {
        let Some(cur) = job.current.map(|r| r.candidate) else {
            return false;
        };
        let score = |i: usize| index(&candidates[i], job.changeover_hours, self.step_hours);
        let mine = score(cur);
        candidates
            .iter()
            .enumerate()
            .filter(|(i, c)| c.capacity == Capacity::Spot && !self.shortlist.contains(i))
            .any(|(i, _)| score(i) < mine * (1.0 - margin))
    }

    /// Whether the plan can answer `steps` steps after its solve (see
    /// [`PolicyConfig::keep_hours`]).
    pub fn answers_at(&self, steps: usize) -> bool {
        self.mdp.as_ref().is_none_or(|m| steps < m.kept())
    }

    /// The action in the state `steps` steps after the solve with `progress`
    /// steps of progress made since, running in `current`, with the
    /// shortlisted pools in `avail` (in shortlist order).
    pub fn action_at(
        &self,
        steps: usize,
        progress: usize,
        current: Option<usize>,
        avail: &[AvailState],
    ) -> Action {
        let fallback = || self.on_demand.map_or(Action::Wait, Action::Run);
        let Some(mdp) = &self.mdp else {
            return fallback();
        };
        let Some(mode) = mode_of(self, current) else {
            return fallback();
        };
        if progress >= mdp.work {
            return current.map_or(Action::Wait, Action::Run);
        }
        if steps >= mdp.kept() {
            // Not kept: the caller should have solved again.
            return fallback();
        }
        let a = mdp::joint(avail);
        match self.choose(mdp, steps, progress, mode, a) {
            0 => Action::Wait,
            1 => fallback(),
            k => Action::Run(self.shortlist[k - 2]),
        }
    }

    /// The model's cheapest action, with one exception: idling while spot
    /// capacity is there spends slack, which insures against outages the
    /// availability model has not seen (it learns from recent history, and
    /// regimes change: late in December 2022 the 8-GPU pools went through
    /// outages of 11 to 95 hours that the week before never had). So it idles
    /// beside an available spot pool only when waiting saves at least one
    /// changeover on that pool; otherwise it takes the cheapest spot option. A
    /// preemption soon after a start costs about the changeover already paid,
    /// so waiting out a flappy pool rarely clears that bar; waiting for a
    /// clearly cheaper pool that is about to return does. On-demand when no
    /// action is allowed.
    fn choose(&self, mdp: &Mdp, t: usize, p: usize, mode: usize, a: usize) -> usize {
        let mut best: Option<(usize, f64)> = None;
        let mut spot: Option<(usize, f64)> = None;
        let mut run: Option<(usize, f64)> = None;
        let mut idle = f64::INFINITY;
        mdp.options(t, p, mode, a, |m, c| {
            if best.is_none_or(|(_, b)| c < b) {
                best = Some((m, c));
            }
            if m == 0 {
                idle = c;
            } else {
                if run.is_none_or(|(_, b)| c < b) {
                    run = Some((m, c));
                }
                if m >= 2 && spot.is_none_or(|(_, b)| c < b) {
                    spot = Some((m, c));
                }
            }
        });
        // Waiting that saves nothing (only on-demand is left, and it costs the
        // same later) is not worth the slack it spends.
        if let (Some((0, _)), Some((m, c))) = (best, run) {
            if c - idle <= 1e-9 * c.abs().max(1.0) {
                return m;
            }
        }
        match (best, spot) {
            (Some((0, _)), Some((m, c)))
                if c - idle < self.spot_step_prices[m - 2] * self.changeover.max(1) as f64 =>
            {
                m
            }
            (Some((m, _)), _) => m,
            (None, _) => 1,
        }
    }

    /// Every allowed option at the root and its expected cost, cheapest first.
    fn root_options(&self, mode: usize, a: usize) -> Vec<OptionValue> {
        let Some(mdp) = &self.mdp else {
            return Vec::new();
        };
        let mut out = Vec::new();
        mdp.options(0, 0, mode, a, |m, c| {
            let action = match m {
                0 => Action::Wait,
                1 => match self.on_demand {
                    Some(i) => Action::Run(i),
                    None => return,
                },
                k => Action::Run(self.shortlist[k - 2]),
            };
            if c.is_finite() && c < 1e18 {
                out.push(OptionValue {
                    action,
                    expected_cost: Money::from_micros(c.round() as i64),
                });
            }
        });
        out.sort_by_key(|o| o.expected_cost);
        out
    }
}

/// Decides what to do now: see the [module docs](self).
pub fn decide(job: &JobState, candidates: &[Candidate], config: &PolicyConfig) -> Result<Decision> {
    let plan = Solution::solve(job, candidates, config)?;
    let avail: Vec<AvailState> = plan
        .shortlist
        .iter()
        .map(|i| candidates[*i].availability.state)
        .collect();
    let current = job.current.map(|r| r.candidate);
    let od_hours = plan
        .on_demand
        .map(|i| job.work_left_hours / candidates[i].work_rate + job.changeover_hours);
    let slack_hours = job.time_left_hours.zip(od_hours).map(|(t, n)| t - n);
    let starting = job.current.filter(|r| r.changeover_left_hours > 1e-9);
    let action = match starting {
        // Still starting: nothing to decide until it runs.
        Some(r) => Action::Run(r.candidate),
        None => plan.action_at(0, 0, current, &avail),
    };
    let options = mode_of(&plan, current)
        .map(|mode| plan.root_options(mode, mdp::joint(&avail)))
        .unwrap_or_default();
    let explanation = explain(
        job,
        candidates,
        &plan,
        action,
        &options,
        slack_hours,
        starting.is_some(),
    );
    Ok(Decision {
        action,
        on_demand: plan.on_demand,
        shortlist: plan.shortlist.clone(),
        options,
        step_hours: plan.step_hours,
        slack_hours,
        explanation,
    })
}

fn explain(
    job: &JobState,
    candidates: &[Candidate],
    plan: &Solution,
    action: Action,
    options: &[OptionValue],
    slack: Option<f64>,
    starting: bool,
) -> String {
    let current = job.current.map(|r| r.candidate);
    let cost_of = |a: Action| {
        options
            .iter()
            .find(|o| o.action == a)
            .map(|o| o.expected_cost)
    };
    let mut s = match action {
        Action::Wait => "wait".to_string(),
        Action::Run(i) if Some(i) == current => format!("stay on {}", candidates[i].label),
        Action::Run(i) if current.is_some() => format!(
            "move from {} to {}",
            candidates[current.unwrap_or(i)].label,
            candidates[i].label
        ),
        Action::Run(i) => format!("start {}", candidates[i].label),
    };
    if starting {
        s.push_str(" (still starting)");
        return s;
    }
    if plan.mdp.is_none() {
        s.push_str(": the deadline cannot be met even on on-demand; finishing as soon as possible");
        return s;
    }
    if let Some(c) = cost_of(action) {
        let _ = write!(s, ": ${} expected to finish", c.display(2));
    }
    // The best alternative, and on-demand, for comparison.
    let name = |a: Action| match a {
        Action::Wait => "waiting".to_string(),
        Action::Run(i) if Some(i) == plan.on_demand => "on-demand".to_string(),
        Action::Run(i) => candidates[i].label.clone(),
    };
    let od = plan.on_demand.map(Action::Run);
    let mut alts: Vec<&OptionValue> = options
        .iter()
        .filter(|o| o.action != action && Some(o.action) != od)
        .take(1)
        .collect();
    alts.extend(
        options
            .iter()
            .filter(|o| o.action != action && Some(o.action) == od),
    );
    if !alts.is_empty() {
        let parts: Vec<String> = alts
            .iter()
            .map(|o| format!("${} {}", o.expected_cost.display(2), name(o.action)))
            .collect();
        let _ = write!(s, " (vs {})", parts.join(", "));
    }
    if let Action::Run(i) = action {
        let c = &candidates[i];
        if c.capacity == Capacity::Spot {
            let _ = write!(
                s,
                "; hazard {:.2}/h ({})",
                c.availability.fail_per_hour, c.basis
            );
            // Why a riskier pool beat a safer one on the shortlist.
            if let Some(safer) = plan.shortlist.iter().copied().find(|j| {
                *j != i && candidates[*j].availability.fail_per_hour < c.availability.fail_per_hour
            }) {
                let d = &candidates[safer];
                let _ = write!(
                    s,
                    "; beats {} ({:.2}/h) on price per unit of work: ${:.3} vs ${:.3}",
                    d.label,
                    d.availability.fail_per_hour,
                    c.price.usd_per_hour_f64() / c.work_rate,
                    d.price.usd_per_hour_f64() / d.work_rate,
                );
            }
        }
    }
    if let Some(sl) = slack {
        let _ = write!(s, "; slack {sl:.1} h");
    }
    s
}

#[cfg(test)]
mod tests;
