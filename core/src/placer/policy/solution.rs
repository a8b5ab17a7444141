//! A solved model: the action in any kept state, the options at the root, and
//! the one-line explanation of a decision.

use std::fmt::Write as _;

use super::chain;
use super::mdp::{Mdp, Setup};
use super::shortlist::{check, pick_on_demand, pick_shortlist};
use super::{
    Action, AvailState, Candidate, JobState, OptionValue, PolicyConfig, StepRates, MAX_SHORTLIST,
    MAX_TABLE_BYTES,
};
use crate::Capacity;
use crate::Result;
use crate::{Money, Price};

/// A solved model, reusable for later states of the same job while its inputs
/// hold (the simulator re-plans on a schedule; the executor solves per
/// decision).
#[derive(Debug, Clone)]
pub struct Solution {
    pub(super) mdp: Option<Mdp>,
    /// The spot candidates modelled, in mode order.
    pub shortlist: Vec<usize>,
    /// The on-demand fallback.
    pub on_demand: Option<usize>,
    /// The planning step, hours.
    pub step_hours: f64,
    spot_step_prices: Vec<f64>,
    changeover: usize,
    size: usize,
}

/// How the plan's modes map to candidates.
pub(super) fn mode_of(plan: &Solution, current: Option<usize>) -> Option<usize> {
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
        let widest = config.shortlist.clamp(1, MAX_SHORTLIST).min(
            candidates
                .iter()
                .filter(|c| c.capacity == Capacity::Spot)
                .count(),
        );
        let size = widest.min(FLOOR_SHORTLIST);
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
        // A third pool when its solve fits the budget at this step (the
        // step is the one the floor of two needs: a wider shortlist never
        // coarsens it).
        let size = (size + 1..=widest)
            .rev()
            .find(|&k| {
                Mdp::solve_cells(steps, work, changeover, k) <= config.solve_budget
                    && Mdp::table_bytes(keep, changeover.min(steps), work.min(steps), k)
                        <= MAX_TABLE_BYTES
            })
            .unwrap_or(size);
        let shortlist = pick_shortlist(job, candidates, on_demand, size, step, config);
        let step_price = |p: Price| {
            p.cost_for_seconds((step * 3600.0).round() as u64)
                .map_or(f64::INFINITY, |m| m.micros() as f64)
        };
        let spot_step_prices: Vec<f64> = shortlist
            .iter()
            .map(|i| step_price(candidates[*i].price))
            .collect();
        // Without on-demand, a penalty price that no plan would choose.
        let od_price = on_demand.map_or(1e15, |i| step_price(candidates[i].price));
        let mdp = (work + changeover <= steps).then(|| {
            let age_horizon = job.outage_horizon(config);
            let rates: Vec<StepRates> = shortlist
                .iter()
                .map(|i| {
                    let aged = candidates[*i]
                        .availability
                        .aged(&config.outage_ages, age_horizon);
                    StepRates::new(&aged, step)
                })
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
            spot_step_prices,
            changeover,
            size,
        })
    }

    /// Whether the shortlist the index would pick now is the one this plan
    /// models (as a set): when it is not, the plan is stale.
    pub fn same_shortlist(
        &self,
        job: &JobState,
        candidates: &[Candidate],
        config: &PolicyConfig,
    ) -> bool {
        let now = pick_shortlist(
            job,
            candidates,
            pick_on_demand(job, candidates),
            self.size,
            self.step_hours,
            config,
        );
        now.len() == self.shortlist.len() && now.iter().all(|i| self.shortlist.contains(i))
    }

    /// Whether the plan covers a job running in `current` (the shortlist holds
    /// it, or it is the fallback).
    pub fn covers(&self, current: Option<usize>) -> bool {
        mode_of(self, current).is_some()
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
        if steps >= mdp.kept() || !mdp.reachable(steps, progress) {
            // Not kept, or more progress than the plan allows for: the caller
            // should have solved again.
            return fallback();
        }
        let a = chain::joint(avail);
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
    /// changeover on the shortlisted pool with the lowest price per hour;
    /// otherwise it takes the cheapest spot option. A preemption soon after a
    /// start costs about the changeover already paid, so waiting out a flappy
    /// pool rarely clears that bar; waiting for a clearly cheaper pool that is
    /// about to return does. The bar is the same whichever pool it would take:
    /// priced on that pool, a dear fast pool (a p3.16xlarge's changeover costs
    /// about eight times a p3.2xlarge's) cleared it so easily that the job
    /// left a cheap pool for a short outage and paid a changeover to come
    /// back. On-demand when no action is allowed.
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
            (Some((0, _)), Some((m, c))) if c - idle < self.idle_bar() => m,
            (Some((m, _)), _) => m,
            (None, _) => 1,
        }
    }

    /// What waiting beside available spot capacity must save to be chosen:
    /// one changeover on the shortlisted spot pool with the lowest price per
    /// hour, in micro-dollars.
    fn idle_bar(&self) -> f64 {
        let cheapest = self
            .spot_step_prices
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        cheapest * self.changeover.max(1) as f64
    }

    /// Every allowed option at the root and its expected cost, cheapest first.
    pub(super) fn root_options(&self, mode: usize, a: usize) -> Vec<OptionValue> {
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

pub(super) fn explain(
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
    // Each alternative is a first move followed by the best course after
    // it, so on-demand is named as a first move: "on-demand" alone would read
    // as running there to the end, which costs far more.
    let name = |a: Action| match a {
        Action::Wait => "waiting".to_string(),
        Action::Run(i) if Some(i) == current => format!("staying on {}", candidates[i].label),
        Action::Run(i) if Some(i) == plan.on_demand => "on-demand for now".to_string(),
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
            // Why a riskier pool beat a safer one: the cheapest per unit of
            // work of the spot candidates with a lower hazard, shortlisted or
            // not.
            let safer = candidates
                .iter()
                .enumerate()
                .filter(|(j, d)| {
                    *j != i
                        && d.capacity == Capacity::Spot
                        && d.availability.fail_per_hour < c.availability.fail_per_hour
                })
                .map(|(_, d)| d)
                .min_by(|x, y| x.usd_per_work_hour().total_cmp(&y.usd_per_work_hour()));
            if let Some(d) = safer {
                let (dh, dw, cw) = (
                    d.availability.fail_per_hour,
                    d.usd_per_work_hour(),
                    c.usd_per_work_hour(),
                );
                if dw > cw {
                    let _ = write!(
                        s,
                        "; cheaper per unit of work than the safer {} ({dh:.2}/h): ${cw:.3} vs ${dw:.3}",
                        d.label
                    );
                } else {
                    let why = match d.availability.state {
                        AvailState::OutageYoung | AvailState::OutageOld => "has no capacity now",
                        AvailState::Fresh => "has only just come back",
                        AvailState::Up if current == Some(i) => "is not worth a changeover",
                        AvailState::Up => "costs more to finish on in expectation",
                    };
                    let _ = write!(
                        s,
                        "; the safer and cheaper {} ({dh:.2}/h, ${dw:.3} per unit of work) {why}",
                        d.label
                    );
                }
            }
        }
    }
    if let Some(sl) = slack {
        let _ = write!(s, "; slack {sl:.1} h");
    }
    s
}

/// Pools every solve models jointly when there are that many, whatever the
/// budget (the step is coarsened for long horizons instead).
const FLOOR_SHORTLIST: usize = 2;
