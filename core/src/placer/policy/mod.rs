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
//!    pool the job runs on now is always on it, and so is one pool at least as
//!    fast as the on-demand fallback when any spot pool is (the index alone
//!    can fill the shortlist with slow pools, which only spend slack). Two
//!    pools, or three when the solve with three stays within
//!    [`PolicyConfig::solve_budget`]
//!    (cells visited, a function of the horizon, the work and the step
//!    alone): shorter jobs get the wider model, and no decision grows with
//!    the number of candidates.
//! 3. **Expected cost** over the shortlist by a Markov decision process on
//!    (step, progress, mode, joint availability): each pool's availability is
//!    a four-state chain — up, just came back, first minutes of an outage,
//!    later in an outage — because outages are heavy-tailed and a pool that
//!    just came back is lost again far more often than a settled one. A pool
//!    later in an outage recovers at the rate outages of its age give over
//!    the job's slack ([`OutageAges`]): one three hours old is hoped for far
//!    less than one twenty minutes old. The
//!    joint chain has 4^k states for the k shortlisted pools, a constant, so a
//!    decision costs O(n) for the index plus a solve whose size depends only on
//!    the horizon and the step, never on n.
//! 4. **Choice**: the cheapest option, except that it does not idle beside
//!    available spot capacity unless waiting saves at least one changeover on
//!    the shortlisted pool with the lowest price per hour, whichever pool it
//!    would take (idle time spends slack that insures against outages the
//!    model has not seen).
//!
//! Every rate is per hour and every window is in hours, so the decision does
//! not depend on how often it is asked: the model is solved on steps of
//! [`PolicyConfig::step_hours`], coarsened so the horizon fits in
//! [`PolicyConfig::max_steps`] and the value table in [`MAX_TABLE_BYTES`].

mod chain;
mod mdp;
mod outage;
pub mod plans;
mod shortlist;
mod solution;

use serde::{Deserialize, Serialize};

use crate::Capacity;
use crate::Result;
use crate::{Money, Price};

pub use outage::{OutageAges, OUTAGE_AGE_BANDS, OUTAGE_AGE_EDGES_HOURS};
pub use solution::Solution;

use solution::{explain, mode_of};

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

/// The default [`PolicyConfig::solve_budget`]: 3.3 million cells. A solve
/// with three pools costs about 2.7 ns a cell on the 2-core machines the
/// benchmark runs on (two pools: 1.7 ns), so a third pool never makes a
/// decision dearer than the benchmark's 48-hour job with a 72-hour deadline
/// over two (5.3 million cells, about 9 ms). At the 10-minute step a third
/// pool is modelled from the start for jobs of up to 12 hours with a 30-hour
/// deadline or 20 hours with a 24-hour one, and for longer jobs once the
/// time left has shrunk that far.
pub const DEFAULT_SOLVE_BUDGET: usize = 3_300_000;

fn default_solve_budget() -> usize {
    DEFAULT_SOLVE_BUDGET
}

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
    /// The state's index, 0 to 3: up, fresh, young outage, old outage (a
    /// digit of the joint chain's state number; the simulator's learner
    /// keeps its counts by it).
    pub(crate) const fn digit(self) -> usize {
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// The state now.
    pub state: AvailState,
    /// Losses of capacity per hour once settled (the hazard).
    pub fail_per_hour: f64,
    /// Losses per hour within [`FRESH_WINDOW_HOURS`] of coming back.
    pub fresh_fail_per_hour: f64,
    /// Recoveries per hour in a young outage.
    pub recover_young_per_hour: f64,
    /// Recoveries per hour later in an outage, for an outage of unknown age.
    pub recover_old_per_hour: f64,
    /// How long the current outage has lasted, hours, when known. A pool
    /// later in an outage of known age recovers at the rate outages of that
    /// age give over the job's slack ([`OutageAges::rate_within`] with
    /// [`PolicyConfig::outage_ages`]) instead of `recover_old_per_hour`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outage_hours: Option<f64>,
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
            outage_hours: None,
        }
    }

    fn valid(&self) -> bool {
        [
            self.fail_per_hour,
            self.fresh_fail_per_hour,
            self.recover_young_per_hour,
            self.recover_old_per_hour,
            self.outage_hours.unwrap_or(0.0),
        ]
        .iter()
        .all(|r| r.is_finite() && *r >= 0.0)
    }

    /// The model the chain and the index read for a job that can wait
    /// `horizon_hours` (the policy passes the job's slack, at least one
    /// planning step): a pool later in an outage of known age recovers at
    /// the rate `ages` give an outage of that age over the horizon; any
    /// other model is returned as it is.
    pub fn aged(&self, ages: &OutageAges, horizon_hours: f64) -> Availability {
        match (self.state, self.outage_hours) {
            (AvailState::OutageOld, Some(age)) => Availability {
                recover_old_per_hour: ages.rate_within(age, horizon_hours),
                ..*self
            },
            _ => *self,
        }
    }

    /// The chance the pool has capacity within `hours` from now.
    fn up_within(&self, hours: f64) -> f64 {
        match self.state {
            AvailState::Up | AvailState::Fresh => 1.0,
            AvailState::OutageYoung => -(-self.recover_young_per_hour * hours).exp_m1(),
            AvailState::OutageOld => -(-self.recover_old_per_hour * hours).exp_m1(),
        }
    }

    /// Waiting up to `hours` for capacity: the chance it comes back by then,
    /// and the expected wait given that it does. A young outage recovers at
    /// its rate for [`YOUNG_WINDOW_HOURS`] (counted from now: its age within
    /// the window is not known here), then at the old rate.
    fn wait_within(&self, hours: f64) -> (f64, f64) {
        let s = hours.max(0.0);
        // ∫₀ᵗ e^(−r·u) du: the expected time spent waiting in a phase of
        // length t at recovery rate r.
        let phase = |r: f64, t: f64| {
            if r * t < 1e-12 {
                t
            } else {
                -(-r * t).exp_m1() / r
            }
        };
        let (ry, ro) = (self.recover_young_per_hour, self.recover_old_per_hour);
        let (survive, waited) = match self.state {
            AvailState::Up | AvailState::Fresh => return (1.0, 0.0),
            AvailState::OutageOld => ((-ro * s).exp(), phase(ro, s)),
            AvailState::OutageYoung if s <= YOUNG_WINDOW_HOURS => ((-ry * s).exp(), phase(ry, s)),
            AvailState::OutageYoung => {
                let young = (-ry * YOUNG_WINDOW_HOURS).exp();
                let old = s - YOUNG_WINDOW_HOURS;
                (
                    young * (-ro * old).exp(),
                    phase(ry, YOUNG_WINDOW_HOURS) + young * phase(ro, old),
                )
            }
        };
        let reach = 1.0 - survive;
        if reach < 1e-12 {
            return (0.0, s);
        }
        // E[min(W, s)] = reach · E[W | W ≤ s] + (1 − reach) · s.
        (reach, ((waited - survive * s) / reach).clamp(0.0, s))
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

impl Candidate {
    /// Dollars per reference work-hour here: the price over the work rate.
    pub fn usd_per_work_hour(&self) -> f64 {
        self.price.usd_per_hour_f64() / self.work_rate
    }
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

impl JobState {
    /// Hours the job can spend not working at the reference speed and still
    /// meet its deadline (infinite without one): the wait an outage's
    /// recovery is priced over ([`Availability::aged`], floored at one
    /// planning step).
    pub fn slack_hours(&self) -> f64 {
        self.time_left_hours
            .map_or(f64::INFINITY, |t| t - self.work_left_hours)
    }

    /// The wait an outage's recovery is priced over under `config`: the
    /// slack, at least one planning step.
    pub(crate) fn outage_horizon(&self, config: &PolicyConfig) -> f64 {
        self.slack_hours().max(config.step_hours)
    }
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
    /// Pools modelled jointly, at most (1 to [`MAX_SHORTLIST`], default 3):
    /// two whenever there are two spot pools, a third when the solve with it
    /// stays within [`PolicyConfig::solve_budget`].
    pub shortlist: usize,
    /// The most cells (step, progress, mode, joint availability) a solve may
    /// visit with a shortlist wider than two (default
    /// [`DEFAULT_SOLVE_BUDGET`]).
    #[serde(default = "default_solve_budget")]
    pub solve_budget: usize,
    /// Hours after a solve during which [`Solution::action_at`] can answer
    /// without solving again (default 0: a decision needs only its own step;
    /// the simulator keeps its re-planning period).
    pub keep_hours: f64,
    /// How an outage's chance of ending falls with its age (default: the
    /// 2022 traces' bands, [`OutageAges::default`]; the simulator's learner
    /// counts its own): read for every candidate whose
    /// [`Availability::outage_hours`] is known.
    #[serde(default)]
    pub outage_ages: OutageAges,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            step_hours: 1.0 / 6.0,
            max_steps: 600,
            shortlist: MAX_SHORTLIST,
            solve_budget: DEFAULT_SOLVE_BUDGET,
            keep_hours: 0.0,
            outage_ages: OutageAges::default(),
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
    /// Every candidate's shortlist index, dollars per reference work-hour
    /// (index for index with the candidates): the O(n) figure that chose
    /// the shortlist, not an expected cost. Only [`Decision::options`] are
    /// what the decision compared.
    #[serde(default)]
    pub index_usd_per_work_hour: Vec<f64>,
}

impl Decision {
    /// The expected cost to finish after `action` as the decision compared
    /// it, when the policy evaluated that option.
    pub fn value_of(&self, action: Action) -> Option<Money> {
        self.options
            .iter()
            .find(|o| o.action == action)
            .map(|o| o.expected_cost)
    }
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
        .map(|mode| plan.root_options(mode, chain::joint(&avail)))
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
    let index_usd_per_work_hour =
        shortlist::indexes(job, candidates, plan.on_demand, plan.step_hours, config);
    Ok(Decision {
        index_usd_per_work_hour,
        action,
        on_demand: plan.on_demand,
        shortlist: plan.shortlist.clone(),
        options,
        step_hours: plan.step_hours,
        slack_hours,
        explanation,
    })
}

#[cfg(test)]
mod tests;
