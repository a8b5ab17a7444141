//! The baseline policies and the runner that replays every online policy.
//! gpufleet's own policy is the product's (see [`super::gpufleet`]).

use serde::Serialize;

use super::gpufleet::Gpufleet;
use super::{Place, RunOutcome, SimPool, Ticks};

/// A policy the simulator can replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// On-demand from start to finish.
    OnDemand,
    /// Spot whenever any pool has it, wait otherwise; on-demand (and stay
    /// there) only when the deadline forces it.
    Greedy,
    /// Uniform Progress (Wu et al., NSDI 2024) on the first pool only, as
    /// published: keep progress at or above the line work·t/(deadline −
    /// changeover); below it use on-demand, otherwise spot when available or
    /// wait. Hysteresis: leave on-demand for spot only when ahead by one
    /// changeover, and for idling only when ahead by two.
    UniformProgress,
    /// Uniform Progress that may use any available pool.
    UniformProgressMulti,
    /// gpufleet's placement policy, the one `place` and the executor run
    /// ([`crate::placer::policy`]): expected cost over a shortlist of pools
    /// picked by a per-pool index, with availability models learnt from what
    /// it has seen (the week before the job and the job so far).
    Gpufleet,
    /// A diagnostic, run only when asked for: gpufleet's policy with each
    /// pool's availability rates counted over the job's own window (from the
    /// start to the deadline, undecayed) instead of learnt from the past.
    /// Clairvoyant about how often each pool fails and recovers, not about
    /// when: its distance from `gpufleet` is what better prediction of the
    /// rates could win, and its distance from `optimal` is what only knowing
    /// the timing is worth.
    GpufleetKnownRates,
    /// The clairvoyant optimum (knows the whole trace): the lower bound.
    Optimal,
    /// SkyPilot's managed-job recovery strategy `FAILOVER`, spot only, as it
    /// runs without an on-demand fallback: launch on the available spot pool
    /// with the lowest price per hour (SkyPilot's optimizer with its default
    /// one-hour time estimate), keep it until it is preempted, then relaunch
    /// in the same region first and anywhere after that, retrying every tick
    /// until capacity returns. No deadline: it never turns to on-demand.
    SkypilotFailover,
    /// SkyPilot's `EAGER_NEXT_REGION` (its default), spot only: after a
    /// preemption, relaunch in any region but the one just preempted first,
    /// then anywhere, retrying every tick.
    SkypilotEagerNextRegion,
    /// [`PolicyKind::SkypilotFailover`] with on-demand in the job's resource
    /// set (`any_of` spot and on-demand): when no spot pool the step may use
    /// has capacity, it launches on-demand and stays there until the job
    /// ends.
    SkypilotFailoverOnDemand,
    /// [`PolicyKind::SkypilotEagerNextRegion`] with on-demand in the job's
    /// resource set: after a preemption, spot in another region, else
    /// on-demand (the region just preempted is blocked for spot only).
    SkypilotEagerNextRegionOnDemand,
}

impl PolicyKind {
    /// The policies `simulate` compares unless asked for others: the
    /// baselines, gpufleet and the optimum.
    pub const STANDARD: [PolicyKind; 6] = [
        PolicyKind::OnDemand,
        PolicyKind::Greedy,
        PolicyKind::UniformProgress,
        PolicyKind::UniformProgressMulti,
        PolicyKind::Gpufleet,
        PolicyKind::Optimal,
    ];

    /// Every policy: the standard ones and the diagnostic
    /// [`PolicyKind::GpufleetKnownRates`].
    pub const ALL: [PolicyKind; 11] = [
        PolicyKind::OnDemand,
        PolicyKind::Greedy,
        PolicyKind::UniformProgress,
        PolicyKind::UniformProgressMulti,
        PolicyKind::Gpufleet,
        PolicyKind::GpufleetKnownRates,
        PolicyKind::Optimal,
        PolicyKind::SkypilotFailover,
        PolicyKind::SkypilotEagerNextRegion,
        PolicyKind::SkypilotFailoverOnDemand,
        PolicyKind::SkypilotEagerNextRegionOnDemand,
    ];

    /// SkyPilot's recovery strategies, spot only and with on-demand in the
    /// resource set: the baselines of what SkyPilot's users get.
    pub const SKYPILOT: [PolicyKind; 4] = [
        PolicyKind::SkypilotFailover,
        PolicyKind::SkypilotEagerNextRegion,
        PolicyKind::SkypilotFailoverOnDemand,
        PolicyKind::SkypilotEagerNextRegionOnDemand,
    ];

    /// Whether the policy runs behind the deadline safety net (every policy
    /// but SkyPilot's, which know no deadline and may miss it).
    pub fn keeps_deadline(self) -> bool {
        !PolicyKind::SKYPILOT.contains(&self)
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::OnDemand => "on-demand",
            PolicyKind::Greedy => "greedy",
            PolicyKind::UniformProgress => "uniform-progress",
            PolicyKind::UniformProgressMulti => "uniform-progress-multi",
            PolicyKind::Gpufleet => "gpufleet",
            PolicyKind::GpufleetKnownRates => "gpufleet-known-rates",
            PolicyKind::Optimal => "optimal",
            PolicyKind::SkypilotFailover => "skypilot-failover",
            PolicyKind::SkypilotEagerNextRegion => "skypilot-eager-next-region",
            PolicyKind::SkypilotFailoverOnDemand => "skypilot-failover-od",
            PolicyKind::SkypilotEagerNextRegionOnDemand => "skypilot-eager-next-region-od",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> crate::Result<Self> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                crate::Error::invalid_input(format!(
                    "unknown policy '{s}'; valid: {}",
                    PolicyKind::ALL.map(|p| p.name()).join(", ")
                ))
            })
    }

    fn skypilot(self) -> Option<SkyStrategy> {
        let (eager, on_demand) = match self {
            PolicyKind::SkypilotFailover => (false, false),
            PolicyKind::SkypilotEagerNextRegion => (true, false),
            PolicyKind::SkypilotFailoverOnDemand => (false, true),
            PolicyKind::SkypilotEagerNextRegionOnDemand => (true, true),
            _ => return None,
        };
        Some(SkyStrategy { eager, on_demand })
    }
}

/// What a policy sees at the start of a tick. Progress and work are in work
/// units (`ticks.od_units` per on-demand tick).
pub(crate) struct View<'a> {
    pub t: usize,
    pub progress: usize,
    pub mode: Place,
    pub changeover_left: usize,
    pub avail: &'a [bool],
    pub ticks: &'a Ticks,
    pub spot_tick: &'a [i64],
}

impl View<'_> {
    /// Ticks to spare if every tick from now on made on-demand progress.
    pub fn slack(&self) -> i64 {
        let left = self.ticks.work.saturating_sub(self.progress);
        self.ticks.deadline as i64 - self.t as i64 - left.div_ceil(self.ticks.od_units) as i64
    }

    /// Progress in on-demand ticks.
    fn progress_ticks(&self) -> f64 {
        self.progress as f64 / self.ticks.od_units as f64
    }
}

trait Policy {
    fn decide(&mut self, v: &View<'_>) -> Place;

    /// Sees the availability before the job starts (the past a deployed
    /// placer has in its ledger).
    fn warm_up(&mut self, _avail: &[bool], _tick_h: f64) {}
}

/// How much history before a start offset the online placer sees: a week.
pub(crate) const WARM_UP_HOURS: f64 = 7.0 * 24.0;

/// Whether taking `want` now still leaves on-demand able to meet the deadline.
/// A tick on a pool slower than on-demand spends slack (like idling), so it
/// needs one tick more of it.
fn safe(want: Place, v: &View<'_>) -> bool {
    let (s, c) = (v.slack(), v.ticks.changeover as i64);
    let slow = |k: usize| i64::from(v.ticks.units[k] < v.ticks.od_units);
    match want {
        Place::OnDemand => true,
        Place::Idle => s > c,
        Place::Spot(k) if v.mode == Place::Spot(k) => {
            if v.changeover_left == 0 {
                s >= c + slow(k)
            } else {
                s > c
            }
        }
        Place::Spot(k) => s >= 2 * c + slow(k),
    }
}

/// The available spot pool with the lowest price per unit of work.
fn cheapest_available(v: &View<'_>, allowed: usize) -> Option<usize> {
    let per_work = |k: usize| i128::from(v.spot_tick[k]) * 1_000_000 / v.ticks.units[k] as i128;
    (0..allowed)
        .filter(|k| v.avail[*k])
        .min_by_key(|k| (per_work(*k), *k))
}

struct OnDemandOnly;

impl Policy for OnDemandOnly {
    fn decide(&mut self, _v: &View<'_>) -> Place {
        Place::OnDemand
    }
}

struct Greedy;

impl Policy for Greedy {
    fn decide(&mut self, v: &View<'_>) -> Place {
        match v.mode {
            Place::OnDemand => Place::OnDemand,
            Place::Spot(k) => Place::Spot(k),
            Place::Idle => cheapest_available(v, v.avail.len()).map_or(Place::Idle, Place::Spot),
        }
    }
}

struct UniformProgress {
    pools: usize,
}

impl Policy for UniformProgress {
    fn decide(&mut self, v: &View<'_>) -> Place {
        let c = v.ticks.changeover as f64;
        let horizon = (v.ticks.deadline as f64 - c).max(1.0);
        let work = v.ticks.work as f64 / v.ticks.od_units as f64;
        let target = work * v.t as f64 / horizon;
        let ahead = v.progress_ticks() - target;
        let spot = cheapest_available(v, self.pools);
        match (v.mode, spot) {
            (Place::Spot(k), _) => Place::Spot(k),
            (Place::OnDemand, Some(k)) if ahead >= c.max(1.0) => Place::Spot(k),
            (Place::OnDemand, None) if ahead >= 2.0 * c.max(1.0) => Place::Idle,
            (Place::OnDemand, _) => Place::OnDemand,
            (Place::Idle, Some(k)) => Place::Spot(k),
            (Place::Idle, None) if ahead < 0.0 => Place::OnDemand,
            (Place::Idle, None) => Place::Idle,
        }
    }
}

impl Policy for Gpufleet {
    fn warm_up(&mut self, avail: &[bool], _tick_h: f64) {
        self.observe(avail);
    }

    fn decide(&mut self, v: &View<'_>) -> Place {
        Gpufleet::decide(self, v)
    }
}

/// Which of SkyPilot's recovery strategies, and whether on-demand is in the
/// job's resource set.
#[derive(Debug, Clone, Copy)]
struct SkyStrategy {
    /// `EAGER_NEXT_REGION` (else `FAILOVER`).
    eager: bool,
    /// On-demand is a candidate (`any_of` spot and on-demand).
    on_demand: bool,
}

/// SkyPilot's managed-job controller, from its documented behaviour
/// (`sky/jobs/recovery_strategy.py`): its optimizer ranks candidates by
/// price per hour (with no time estimate, every task counts as one hour),
/// the provisioner fails over through them in that order, and a job that
/// finds nothing retries with a back-off of 60 s growing to 5 minutes, so at
/// least once a tick at the 10-minute tick. A running job is never moved.
///
/// On a preemption, `FAILOVER` first relaunches in the region it ran in (any
/// zone; spot, as it ran); `EAGER_NEXT_REGION` first relaunches with that
/// region's spot blocked (any other region, or on-demand when it is in the
/// set). Either then searches everything, and keeps searching every tick.
/// On-demand is dearer than any spot pool here, so with it in the set it is
/// taken only when no spot candidate of the step has capacity, and kept
/// until the job ends.
struct SkyPilot {
    strategy: SkyStrategy,
    /// Each pool's region, as an index.
    region: Vec<usize>,
    /// Pools by spot price per hour, then manifest order.
    order: Vec<usize>,
    /// The pool the job ran on when last seen running.
    on: Option<usize>,
}

impl SkyPilot {
    fn new(strategy: SkyStrategy, pools: &[SimPool]) -> Self {
        let mut regions: Vec<&str> = Vec::new();
        let region = pools
            .iter()
            .map(|p| {
                let r = p.pool.region.as_str();
                regions.iter().position(|x| *x == r).unwrap_or_else(|| {
                    regions.push(r);
                    regions.len() - 1
                })
            })
            .collect();
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by_key(|k| (pools[*k].spot.micros_per_hour(), *k));
        SkyPilot {
            strategy,
            region,
            order,
            on: None,
        }
    }

    /// The first candidate in price order that has capacity and `allowed`.
    fn first(&self, v: &View<'_>, allowed: impl Fn(usize) -> bool) -> Option<usize> {
        self.order
            .iter()
            .copied()
            .find(|k| v.avail[*k] && allowed(*k))
    }
}

impl Policy for SkyPilot {
    fn decide(&mut self, v: &View<'_>) -> Place {
        match v.mode {
            Place::OnDemand => return Place::OnDemand,
            Place::Spot(k) => {
                self.on = Some(k);
                return Place::Spot(k);
            }
            Place::Idle => {}
        }
        let od = self.strategy.on_demand;
        if let Some(lost) = self.on.take() {
            let r = self.region[lost];
            if self.strategy.eager {
                if let Some(k) = self.first(v, |k| self.region[k] != r) {
                    return Place::Spot(k);
                }
                if od {
                    return Place::OnDemand;
                }
            } else if let Some(k) = self.first(v, |k| self.region[k] == r) {
                return Place::Spot(k);
            }
        }
        match self.first(v, |_| true) {
            Some(k) => Place::Spot(k),
            None if od => Place::OnDemand,
            None => Place::Idle,
        }
    }
}

/// Spot prices per tick, and the on-demand fallback's.
pub(crate) fn prices(pools: &[SimPool], ticks: &Ticks) -> (Vec<i64>, i64) {
    // `to_ticks` refused scenarios whose cost over the deadline cannot be
    // held, so one tick's always can.
    let tick = |p: crate::Price| {
        p.cost_for_seconds(ticks.tick_seconds)
            .map_or(i64::MAX / 4, |m| m.micros())
    };
    let spot: Vec<i64> = pools.iter().map(|p| tick(p.spot)).collect();
    let od = tick(pools[ticks.od_pool].on_demand);
    (spot, od)
}

pub(crate) fn available(pools: &[SimPool], at: usize) -> Vec<bool> {
    pools
        .iter()
        .map(|p| p.trace.available.get(at).copied().unwrap_or(false))
        .collect()
}

/// Replays one online policy from one offset.
pub(crate) fn run(kind: PolicyKind, pools: &[SimPool], offset: usize, ticks: &Ticks) -> RunOutcome {
    replay(kind, pools, offset, ticks, None)
}

/// Replays one online policy from one offset, writing where the job was at
/// every tick into `record` when given.
pub(crate) fn replay(
    kind: PolicyKind,
    pools: &[SimPool],
    offset: usize,
    ticks: &Ticks,
    mut record: Option<&mut Vec<super::Tick>>,
) -> RunOutcome {
    let mut policy: Box<dyn Policy> = match kind {
        PolicyKind::OnDemand | PolicyKind::Optimal => Box::new(OnDemandOnly),
        PolicyKind::Greedy => Box::new(Greedy),
        PolicyKind::UniformProgress => Box::new(UniformProgress { pools: 1 }),
        PolicyKind::UniformProgressMulti => Box::new(UniformProgress { pools: pools.len() }),
        PolicyKind::Gpufleet => Box::new(Gpufleet::new(pools, ticks)),
        PolicyKind::GpufleetKnownRates => Box::new(Gpufleet::with_known_rates(
            pools,
            ticks,
            (offset..offset + ticks.deadline).map(|at| available(pools, at)),
        )),
        PolicyKind::SkypilotFailover
        | PolicyKind::SkypilotEagerNextRegion
        | PolicyKind::SkypilotFailoverOnDemand
        | PolicyKind::SkypilotEagerNextRegionOnDemand => match kind.skypilot() {
            Some(strategy) => Box::new(SkyPilot::new(strategy, pools)),
            None => Box::new(OnDemandOnly),
        },
    };
    let net = kind.keeps_deadline();
    let (spot_tick, od_tick) = prices(pools, ticks);
    let warm = (WARM_UP_HOURS / ticks.tick_hours()) as usize;
    for at in offset.saturating_sub(warm)..offset {
        policy.warm_up(&available(pools, at), ticks.tick_hours());
    }
    let mut out = RunOutcome::default();
    let (mut t, mut progress, mut mode, mut co_left) = (0usize, 0usize, Place::Idle, 0usize);
    // A policy without the safety net runs on until the traces end.
    let limit = if net {
        ticks.deadline + ticks.work.div_ceil(ticks.od_units) + ticks.changeover + 1
    } else {
        let len = pools.iter().map(|p| p.trace.available.len()).max();
        len.unwrap_or(0).saturating_sub(offset)
    };
    while progress < ticks.work && t < limit {
        let avail = available(pools, offset + t);
        if let Place::Spot(k) = mode {
            if !avail[k] {
                out.preemptions += 1;
                mode = Place::Idle;
                co_left = 0;
            }
        }
        let view = View {
            t,
            progress,
            mode,
            changeover_left: co_left,
            avail: &avail,
            ticks,
            spot_tick: &spot_tick,
        };
        let mut want = if net && t >= ticks.deadline {
            Place::OnDemand
        } else {
            policy.decide(&view)
        };
        if let Place::Spot(k) = want {
            if !avail.get(k).copied().unwrap_or(false) {
                want = Place::Idle;
            }
        }
        if net && kind != PolicyKind::OnDemand && !safe(want, &view) {
            want = Place::OnDemand;
        }
        if want != mode {
            if want != Place::Idle {
                if mode != Place::Idle {
                    out.moves += 1;
                }
                co_left = ticks.changeover;
            }
            mode = want;
        }
        if let Some(r) = record.as_deref_mut() {
            r.push(super::Tick {
                at: mode,
                changeover: mode != Place::Idle && co_left > 0,
            });
        }
        match mode {
            Place::Idle => {}
            Place::OnDemand => out.cost_micros += od_tick,
            Place::Spot(k) => out.cost_micros += spot_tick[k],
        }
        if mode != Place::Idle {
            if co_left > 0 {
                co_left -= 1;
            } else {
                progress += match mode {
                    Place::Spot(k) => ticks.units[k],
                    _ => ticks.od_units,
                };
            }
        }
        t += 1;
    }
    if progress < ticks.work {
        // The traces ended first (only a policy without the safety net gets
        // here): the rest is done on on-demand after one changeover, and
        // counted as a miss.
        let rest = (ticks.work - progress).div_ceil(ticks.od_units) + ticks.changeover;
        out.cost_micros += od_tick * rest as i64;
        t += rest;
        out.past_traces = true;
    }
    out.ticks = t;
    out.missed = progress < ticks.work || t > ticks.deadline;
    out
}
