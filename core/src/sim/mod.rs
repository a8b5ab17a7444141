//! The placement simulator: replays measured spot availability through the
//! placer and baseline policies, and computes the clairvoyant optimum.
//!
//! ## The model (shared by every policy and the optimum)
//!
//! Time moves in the traces' ticks (10 minutes in the 2022 traces; any length,
//! read from the timestamps). At each tick a job is idle,
//! on on-demand, or on spot in one pool. Every start, restart or move pays a
//! *changeover* (rounded up to whole ticks): paid, no progress. A spot instance
//! whose pool is unavailable at a tick is preempted (no charge for that tick);
//! as in Wu et al. (NSDI 2024), progress survives a preemption, so what a
//! preemption costs is the changeover of the next start. On-demand is always
//! available. A job is done when its work is done; it meets its deadline
//! if that is by the deadline tick.
//!
//! Pools may differ in speed (an any-of job over several instance types): each
//! pool's `throughput` (reference work-hours per hour) converts the job's
//! reference hours into work units per tick. The on-demand fallback is the
//! manifest's type with the lowest on-demand price per unit of work that can
//! meet the deadline (the fastest when none can).
//!
//! Every online policy runs behind the same deadline safety net: an action
//! that would leave too little slack to finish on on-demand after one more
//! changeover is replaced by on-demand. So no online policy misses a deadline
//! that on-demand alone could meet. SkyPilot's recovery strategies, the
//! baselines of what its users get, are the exception: SkyPilot knows no
//! deadline, so they run as it would, until the job is done (past the
//! deadline if need be, and when the traces end first, the rest on
//! on-demand, counted as a miss).

mod generate;
mod gpufleet;
pub mod grid;
mod optimal;
mod policy;
mod serve;
mod trace;

pub use generate::{generate, GenerateSpec, Generated, Regime, MAX_GENERATED_FLAGS};
pub use grid::{Cell, Grid, ScenarioResult};
pub use optimal::MAX_OPTIMUM_CELLS;
pub use policy::PolicyKind;
pub use serve::{
    simulate_serve, Demand, ServePolicy, ServeReport, ServeResult, ServeScenario,
    DEFAULT_SIM_SERVICE, MAX_DEMAND_MINUTES, SET_ASIDE,
};
pub use trace::{
    alignment_note, choose, format_trace, load, parse_manifest, parse_manifest_named, parse_trace,
    SimPool, Trace,
};

/// The most start offsets one scenario replays.
pub const MAX_STARTS: usize = 10_000;

use serde::Serialize;

use crate::Money;
use crate::{Error, Result};

/// One simulated job: its length, deadline and changeover, replayed from
/// `starts` offsets spread evenly over the traces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scenario {
    /// Hours of work.
    pub job_hours: f64,
    /// Hours from the start to the deadline.
    pub deadline_hours: f64,
    /// Hours per start, restart or move (no progress, paid).
    pub changeover_hours: f64,
    /// How many start offsets (at least 1).
    pub starts: usize,
}

/// How one policy did over every start offset of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyResult {
    /// The policy.
    pub policy: String,
    /// Runs.
    pub runs: usize,
    /// Mean cost, USD.
    pub mean_cost_usd: f64,
    /// 90th percentile cost, USD.
    pub p90_cost_usd: f64,
    /// Mean cost over the optimum's mean cost.
    pub cost_vs_optimum: f64,
    /// Runs that finished after the deadline.
    pub deadline_misses: usize,
    /// Mean hours past the deadline of the runs that missed it (0 when none
    /// did).
    pub mean_hours_late: f64,
    /// Mean preemptions per run.
    pub mean_preemptions: f64,
    /// Mean policy-initiated moves between running modes per run.
    pub mean_moves: f64,
    /// Runs the traces ended before (SkyPilot's strategies only: they know
    /// no deadline); the rest of each was priced on on-demand.
    pub past_traces: usize,
}

/// One run's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunOutcome {
    /// Cost in micro-dollars.
    pub cost_micros: i64,
    /// Ticks to finish.
    pub ticks: usize,
    /// Missed the deadline.
    pub missed: bool,
    /// Spot preemptions.
    pub preemptions: u32,
    /// Moves between running modes.
    pub moves: u32,
    /// The traces ended before the job did (a policy without the deadline
    /// safety net); the rest was priced on on-demand.
    pub past_traces: bool,
}

/// A scenario turned into ticks and work units.
#[derive(Debug, Clone)]
pub(crate) struct Ticks {
    /// Work in units.
    pub work: usize,
    pub deadline: usize,
    pub changeover: usize,
    pub tick_seconds: u64,
    /// Units of work per tick on the on-demand fallback.
    pub od_units: usize,
    /// Units of work per tick on each spot pool.
    pub units: Vec<usize>,
    /// The pool whose instance type is the on-demand fallback.
    pub od_pool: usize,
}

impl Ticks {
    pub(crate) fn tick_hours(&self) -> f64 {
        self.tick_seconds as f64 / 3600.0
    }

    /// Pool `k`'s speed relative to the on-demand fallback.
    pub(crate) fn speed(&self, k: usize) -> f64 {
        self.units[k] as f64 / self.od_units as f64
    }
}

/// The smallest number of units per on-demand tick (up to 20) that gives
/// every pool's speed within 5 % as a whole number of units per tick (the
/// closest up to 20 when none does). Every policy and the optimum see the same
/// quantised speeds.
fn units_per_tick(speeds: &[f64]) -> (usize, Vec<usize>) {
    let quantise = |s: usize| -> (f64, Vec<usize>) {
        let units: Vec<usize> = speeds
            .iter()
            .map(|f| ((f * s as f64).round() as usize).max(1))
            .collect();
        let err = speeds
            .iter()
            .zip(&units)
            .map(|(f, u)| (*u as f64 / (f * s as f64) - 1.0).abs())
            .fold(0.0, f64::max);
        (err, units)
    };
    let mut best = (f64::INFINITY, 1, Vec::new());
    for s in 1..=20 {
        let (err, units) = quantise(s);
        if err <= 0.05 {
            return (s, units);
        }
        if err < best.0 {
            best = (err, s, units);
        }
    }
    (best.1, best.2)
}

/// The share of a tick a time may be off a whole number of ticks and still
/// count as that number (0.1667 h is 10 minutes).
const TICK_SLACK: f64 = 0.01;

pub(crate) fn to_ticks(pools: &[SimPool], s: &Scenario) -> Result<(Ticks, usize)> {
    let first = pools
        .first()
        .ok_or_else(|| Error::invalid_input("a simulation needs at least one pool"))?;
    let tick_h = first.trace.tick_seconds as f64 / 3600.0;
    let len = pools
        .iter()
        .map(|p| p.trace.available.len())
        .min()
        .unwrap_or(0);
    let span_h = len.saturating_sub(1) as f64 * tick_h;
    for (v, what) in [
        (s.job_hours, "job hours"),
        (s.deadline_hours, "deadline hours"),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= span_h) {
            return Err(Error::invalid_input(format!(
                "invalid {what} {v}: expected a positive number of hours up to the traces' span ({span_h:.1} h)"
            )));
        }
    }
    if !(s.changeover_hours.is_finite()
        && s.changeover_hours >= 0.0
        && s.changeover_hours <= span_h)
    {
        return Err(Error::invalid_input(format!(
            "invalid changeover hours {}: expected 0 to {span_h:.1}",
            s.changeover_hours
        )));
    }
    if s.starts == 0 || s.starts > MAX_STARTS {
        return Err(Error::invalid_input(format!(
            "invalid number of starts {}: expected 1 to {MAX_STARTS}",
            s.starts
        )));
    }
    // The on-demand fallback: cheapest per unit of work among the types that
    // can meet the deadline on on-demand, else the fastest.
    let od_hours = |p: &SimPool| s.job_hours / p.throughput + s.changeover_hours;
    let per_work = |p: &SimPool| p.on_demand.usd_per_hour_f64() / p.throughput;
    let od_pool = (0..pools.len())
        .filter(|k| od_hours(&pools[*k]) <= s.deadline_hours)
        .min_by(|a, b| {
            per_work(&pools[*a])
                .total_cmp(&per_work(&pools[*b]))
                .then(a.cmp(b))
        })
        .or_else(|| {
            (0..pools.len()).max_by(|a, b| {
                pools[*a]
                    .throughput
                    .total_cmp(&pools[*b].throughput)
                    .then(b.cmp(a))
            })
        })
        .unwrap_or(0);
    let od_thr = pools[od_pool].throughput;
    let speeds: Vec<f64> = pools.iter().map(|p| p.throughput / od_thr).collect();
    let (od_units, units) = units_per_tick(&speeds);
    // Whole ticks; within 1 % of a tick counts as that tick (0.1667 h is 10 min).
    let work_ticks = (s.job_hours / od_thr / tick_h - TICK_SLACK).ceil().max(1.0) as usize;
    let t = Ticks {
        work: work_ticks * od_units,
        deadline: (s.deadline_hours / tick_h + TICK_SLACK).floor() as usize,
        changeover: (s.changeover_hours / tick_h - TICK_SLACK).ceil().max(0.0) as usize,
        tick_seconds: first.trace.tick_seconds,
        od_units,
        units,
        od_pool,
    };
    // Every pool's cost over the whole deadline must be money the runner
    // can hold (a scenario whose costs cannot be added up is refused, not
    // clamped).
    let whole = (t.deadline as u64)
        .saturating_add(1)
        .saturating_mul(t.tick_seconds);
    for p in pools {
        for price in [p.spot, p.on_demand] {
            price.cost_for_seconds(whole).map_err(|e| {
                Error::invalid_input(format!("pool {}: {}", p.trace.name, e.message()))
            })?;
        }
    }
    if work_ticks + t.changeover > t.deadline {
        return Err(Error::invalid_input(format!(
            "the deadline ({} h) leaves no time to do {} h of work plus a {} h changeover even on on-demand",
            s.deadline_hours, s.job_hours / od_thr, s.changeover_hours
        )));
    }
    if len < t.deadline + 1 {
        return Err(Error::invalid_input(format!(
            "the traces hold {len} ticks ({:.1} h), shorter than the {} h deadline",
            len as f64 * tick_h,
            s.deadline_hours
        )));
    }
    let cells = optimal::cells(&t, pools.len());
    if cells > MAX_OPTIMUM_CELLS {
        return Err(Error::invalid_input(format!(
            "the scenario is too large for the optimum: {} work units x {} modes x {} tick layers (a changeover of {} ticks, plus one) = {cells} cells, over the limit of {MAX_OPTIMUM_CELLS}; use fewer pools, a shorter job or changeover, or traces with longer ticks",
            t.work + 1,
            pools.len() + 2,
            t.changeover.max(1) + 1,
            t.changeover
        )));
    }
    Ok((t, len))
}

/// Start offsets spread evenly over the traces, leaving room for the deadline.
fn offsets(len: usize, deadline: usize, starts: usize) -> Vec<usize> {
    let span = len.saturating_sub(deadline + 1);
    let n = starts.max(1);
    if n == 1 {
        return vec![0];
    }
    (0..n).map(|i| i * span / (n - 1)).collect()
}

/// A scenario's times as the simulator runs them: whole ticks of the traces,
/// the work and the changeover rounded up and the deadline down (within 1 %
/// of a tick counts as that tick, so 0.1667 h is 10 minutes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimulatedTimes {
    /// The traces' tick, seconds.
    pub tick_seconds: u64,
    /// Hours of work (on the first instance type's scale, as `job_hours`).
    pub job_hours: f64,
    /// Hours of work one tick on the on-demand fallback's type does (the
    /// unit the work is rounded in).
    pub work_hours_per_tick: f64,
    /// Hours from the start to the deadline.
    pub deadline_hours: f64,
    /// Hours per start, restart or move.
    pub changeover_hours: f64,
}

impl SimulatedTimes {
    /// What `scenario` becomes on `pools`' ticks, or why it cannot run.
    pub fn of(pools: &[SimPool], scenario: &Scenario) -> Result<Self> {
        let (t, _) = to_ticks(pools, scenario)?;
        let tick_h = t.tick_hours();
        let work_hours_per_tick = tick_h * pools[t.od_pool].throughput;
        Ok(SimulatedTimes {
            tick_seconds: t.tick_seconds,
            job_hours: (t.work / t.od_units) as f64 * work_hours_per_tick,
            work_hours_per_tick,
            deadline_hours: t.deadline as f64 * tick_h,
            changeover_hours: t.changeover as f64 * tick_h,
        })
    }

    /// One line saying which of `scenario`'s times the ticks changed by more
    /// than the share of a tick that counts as rounding, or `None`.
    pub fn rounding(&self, scenario: &Scenario) -> Option<String> {
        let tick_h = self.tick_seconds as f64 / 3600.0;
        let changed: Vec<String> = [
            (
                "the job",
                scenario.job_hours,
                self.job_hours,
                self.work_hours_per_tick,
            ),
            (
                "the deadline",
                scenario.deadline_hours,
                self.deadline_hours,
                tick_h,
            ),
            (
                "the changeover",
                scenario.changeover_hours,
                self.changeover_hours,
                tick_h,
            ),
        ]
        .into_iter()
        // In ticks of its own unit, as `to_ticks` rounded it (a little
        // margin for the float arithmetic).
        .filter(|(_, asked, ran, unit)| (asked - ran).abs() / unit > TICK_SLACK + 1e-6)
        .map(|(what, asked, ran, _)| format!("{what} {} h as {} h", hours(asked), hours(ran)))
        .collect();
        (!changed.is_empty()).then(|| {
            format!(
                "at {}-second ticks, {} (whole ticks: work and changeover rounded up, the deadline down)",
                self.tick_seconds,
                changed.join(", ")
            )
        })
    }
}

/// Hours to at most four decimals, without trailing zeros (0.1667, 13, 0.5).
fn hours(h: f64) -> String {
    let s = format!("{h:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Runs every policy over every start offset of a scenario, plus the optimum.
pub fn simulate(
    pools: &[SimPool],
    scenario: &Scenario,
    policies: &[PolicyKind],
) -> Result<Vec<PolicyResult>> {
    let (ticks, len) = to_ticks(pools, scenario)?;
    let offs = offsets(len, ticks.deadline, scenario.starts);
    let optimum: Vec<RunOutcome> = parallel_map(&offs, |o| optimal::optimal(pools, o, &ticks));
    let opt_mean = mean(optimum.iter().map(|r| r.cost_micros as f64));
    let mut results = Vec::new();
    for kind in policies {
        let runs: Vec<RunOutcome> = if *kind == PolicyKind::Optimal {
            optimum.clone()
        } else {
            parallel_map(&offs, |o| policy::run(*kind, pools, o, &ticks))
        };
        let mut costs: Vec<i64> = runs.iter().map(|r| r.cost_micros).collect();
        costs.sort_unstable();
        let p90 = costs[((costs.len() as f64 * 0.9).ceil() as usize).clamp(1, costs.len()) - 1];
        let m = mean(costs.iter().map(|c| *c as f64));
        results.push(PolicyResult {
            policy: kind.name().to_string(),
            runs: runs.len(),
            mean_cost_usd: Money::from_micros(m.round() as i64).as_usd_f64(),
            p90_cost_usd: Money::from_micros(p90).as_usd_f64(),
            cost_vs_optimum: if opt_mean > 0.0 { m / opt_mean } else { 1.0 },
            deadline_misses: runs.iter().filter(|r| r.missed).count(),
            mean_hours_late: {
                let late = runs.iter().filter(|r| r.missed);
                let over = |r: &RunOutcome| r.ticks.saturating_sub(ticks.deadline) as f64;
                let n = late.clone().count();
                if n == 0 {
                    0.0
                } else {
                    late.map(over).sum::<f64>() / n as f64 * ticks.tick_hours()
                }
            },
            mean_preemptions: mean(runs.iter().map(|r| f64::from(r.preemptions))),
            mean_moves: mean(runs.iter().map(|r| f64::from(r.moves))),
            past_traces: runs.iter().filter(|r| r.past_traces).count(),
        });
    }
    Ok(results)
}

/// Runs one policy from one offset (for tests and drill-down).
pub fn run_once(
    kind: PolicyKind,
    pools: &[SimPool],
    scenario: &Scenario,
    offset: usize,
) -> Result<RunOutcome> {
    let (ticks, len) = to_ticks(pools, scenario)?;
    if offset + ticks.deadline >= len {
        return Err(Error::invalid_input(format!(
            "offset {offset} leaves less than the deadline in the traces"
        )));
    }
    Ok(if kind == PolicyKind::Optimal {
        optimal::optimal(pools, offset, &ticks)
    } else {
        policy::run(kind, pools, offset, &ticks)
    })
}

/// Where a job was during one tick of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "at", content = "pool")]
pub enum Place {
    /// Nowhere (not started, waiting, or just preempted).
    Idle,
    /// On the on-demand fallback.
    OnDemand,
    /// On spot in this pool (index into the pools).
    Spot(usize),
}

/// One tick of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tick {
    /// Where the job was.
    #[serde(flatten)]
    pub at: Place,
    /// Paying a start, restart or move there (no progress).
    pub changeover: bool,
}

/// One policy's run from one start, tick by tick: the drill-down behind a
/// scenario's mean.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// The policy.
    pub policy: String,
    /// What the run cost and did.
    pub cost_usd: f64,
    /// Spot preemptions.
    pub preemptions: u32,
    /// Moves between running modes.
    pub moves: u32,
    /// Missed the deadline.
    pub missed: bool,
    /// Where the job was at each tick from the start until it finished
    /// (empty only for an optimum too large to hold its whole table: more
    /// than [`MAX_OPTIMUM_CELLS`] cells of tick x progress x mode).
    pub ticks: Vec<Tick>,
}

/// The start offsets of a scenario (the ticks [`simulate`] replays from).
pub fn start_offsets(pools: &[SimPool], scenario: &Scenario) -> Result<Vec<usize>> {
    let (ticks, len) = to_ticks(pools, scenario)?;
    Ok(offsets(len, ticks.deadline, scenario.starts))
}

/// Every policy's run from one start of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    /// The start's tick in the traces.
    pub offset: usize,
    /// The deadline, in ticks from the start.
    pub deadline_ticks: usize,
    /// One run per policy, in the order asked.
    pub runs: Vec<Timeline>,
}

/// Replays each policy from start `start` (0-based, of the scenario's
/// `starts`) and says where the job was at every tick.
pub fn timelines(
    pools: &[SimPool],
    scenario: &Scenario,
    policies: &[PolicyKind],
    start: usize,
) -> Result<Replay> {
    let (ticks, len) = to_ticks(pools, scenario)?;
    let offs = offsets(len, ticks.deadline, scenario.starts);
    let offset = *offs.get(start).ok_or_else(|| {
        Error::invalid_input(format!(
            "invalid start {start}: expected 0 to {} (the scenario has {} starts)",
            offs.len() - 1,
            offs.len()
        ))
    })?;
    let runs = policies
        .iter()
        .map(|&kind| {
            let (out, path) = if kind == PolicyKind::Optimal {
                optimal::optimal_path(pools, offset, &ticks)
            } else {
                let mut path = Vec::new();
                let out = policy::replay(kind, pools, offset, &ticks, Some(&mut path));
                (out, path)
            };
            Timeline {
                policy: kind.name().to_string(),
                cost_usd: Money::from_micros(out.cost_micros).as_usd_f64(),
                preemptions: out.preemptions,
                moves: out.moves,
                missed: out.missed,
                ticks: path,
            }
        })
        .collect();
    Ok(Replay {
        offset,
        deadline_ticks: ticks.deadline,
        runs,
    })
}

/// Maps over the offsets on every core, keeping their order (the results are
/// the same as a sequential map: each run is independent and deterministic).
fn parallel_map(offsets: &[usize], f: impl Fn(usize) -> RunOutcome + Sync) -> Vec<RunOutcome> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(offsets.len())
        .max(1);
    if threads == 1 {
        return offsets.iter().map(|&o| f(o)).collect();
    }
    let chunk = offsets.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = offsets
            .chunks(chunk)
            .map(|part| {
                let f = &f;
                scope.spawn(move || part.iter().map(|&o| f(o)).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn mean(it: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for x in it {
        sum += x;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}
