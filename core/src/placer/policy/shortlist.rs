//! Choosing what the model covers: the input checks, the on-demand fallback
//! and the shortlist by the per-pool index (all O(n) in the candidates).

use super::{Availability, Candidate, JobState, PolicyConfig, MAX_SHORTLIST};
use crate::Capacity;
use crate::Price;
use crate::{Error, Result};

/// What the shortlist index reads besides the candidate: the work left, the
/// slack the on-demand fallback leaves, and what finishing there costs.
struct Horizon {
    /// Reference work-hours left.
    work: f64,
    /// Hours each start, restart or move costs.
    changeover: f64,
    /// The planning step, hours.
    step: f64,
    /// The fallback's dollars per hour and per work-hour, and the slack it
    /// leaves (time left minus what finishing there needs): `None` with no
    /// deadline or no fallback, when a loss costs only its changeover.
    fallback: Option<(f64, f64, f64)>,
    /// The outage-age bands ([`Availability::aged`])...
    ages: super::OutageAges,
    /// ...and the wait they are read over, hours.
    age_horizon: f64,
}

impl Horizon {
    fn new(
        job: &JobState,
        candidates: &[Candidate],
        on_demand: Option<usize>,
        step: f64,
        config: &PolicyConfig,
    ) -> Self {
        let fallback = on_demand.zip(job.time_left_hours).map(|(od, left)| {
            let c = &candidates[od];
            let slack =
                left - (job.work_left_hours / c.work_rate.max(1e-12) + job.changeover_hours);
            (c.price.usd_per_hour_f64(), c.usd_per_work_hour(), slack)
        });
        Horizon {
            work: job.work_left_hours.max(1e-9),
            changeover: job.changeover_hours,
            step,
            fallback,
            ages: config.outage_ages,
            age_horizon: job.outage_horizon(config),
        }
    }

    /// `c`'s availability as the index reads it (its outage's age priced).
    fn availability(&self, c: &Candidate) -> Availability {
        c.availability.aged(&self.ages, self.age_horizon)
    }
}

/// At most this many losses are summed in the index (a pool expected to
/// lose capacity more often than this within the job is as bad as it gets).
const MAX_LOSSES: usize = 512;

/// The shortlist index of a spot candidate: the expected cost per reference
/// work-hour of running the rest of the job there alone.
///
/// Each loss of capacity costs a changeover. With no deadline that is all
/// (the price per work-hour times 1 + hazard × changeover, over the chance
/// the pool has capacity within a changeover). With one, the slack the
/// on-demand fallback leaves pays for `k` changeovers, and the (k+1)-th loss
/// sends the rest of the work to on-demand. Losses are a Poisson process at
/// the pool's hazard, so the time run here is E[min(T_{k+1}, t)] =
/// Σ_{j≤k} P(N(t) > j) / hazard. A cheap pool that loses capacity often ranks
/// below a dearer, steadier one exactly when the slack cannot absorb its
/// losses. A pool without capacity now is waited for out of the slack: it
/// counts as up after the expected wait (given that it comes back within the
/// slack) with that much less slack, and as on-demand for the rest of the
/// work with the chance it does not come back in time. So a steady pool
/// that lost capacity an hour ago stays on the shortlist while the slack
/// can wait for it, and the model can choose to (before, its price was
/// divided by the chance of capacity within one changeover, and the job
/// hopped to flapping pools while it was down). A pool slower than the
/// fallback is not charged for the slack its running spends: the model uses
/// such a pool as a bridge while a faster one is down, not to finish on (and
/// [`keep_pace`] keeps a fast pool beside it). O(min(k, the mean losses))
/// per candidate.
fn index(c: &Candidate, h: &Horizon) -> f64 {
    let a = &h.availability(c);
    let Some((od_price, od_per_work, slack)) = h.fallback else {
        let reachable = a.up_within(h.changeover.max(h.step)).max(1e-6);
        let lambda = a.fail_per_hour.max(0.0);
        return c.usd_per_work_hour() * (1.0 + lambda * h.changeover) / reachable;
    };
    // A pool without capacity now is waited for out of the slack: with the
    // chance it comes back in time, it is the same pool with that much less
    // slack; else the work goes to on-demand.
    let (reach, wait) = a.wait_within(slack);
    let there = run_alone(c, h, (od_price, od_per_work, slack - wait));
    (reach * there + (1.0 - reach) * od_per_work * h.work) / h.work
}

/// The expected cost of running the rest of the job on `c` from now (up),
/// with `slack` hours of slack over the on-demand fallback (its price per
/// hour and per work-hour in `od`): see [`index`].
fn run_alone(c: &Candidate, h: &Horizon, (od_price, od_per_work, slack): (f64, f64, f64)) -> f64 {
    let lambda = c.availability.fail_per_hour.max(0.0);
    let rate = c.work_rate.max(1e-12);
    let run = h.work / rate;
    let k = (slack.max(0.0) / h.changeover.max(h.step)).floor();
    let k = if k.is_finite() {
        (k as usize).min(MAX_LOSSES)
    } else {
        MAX_LOSSES
    };
    let mu = lambda * run;
    // Hours run here, changeovers paid here, and the chance the rest goes to
    // on-demand.
    let (ran, losses, to_od) = if mu < 1e-12 {
        (run, 0.0, 0.0)
    } else {
        let (mut pmf, mut cdf) = ((-mu).exp(), 0.0);
        let (mut tails, mut losses, mut tail) = (0.0, 0.0, 1.0);
        for j in 0..=k {
            cdf += pmf;
            tail = (1.0 - cdf).max(0.0); // P(N > j)
            tails += tail;
            if j < k {
                losses += tail;
            }
            if tail < 1e-12 {
                break;
            }
            pmf *= mu / (j + 1) as f64;
        }
        ((tails / lambda).min(run), losses, tail)
    };
    let price = c.price.usd_per_hour_f64();
    price * (ran + losses * h.changeover)
        + od_per_work * (h.work - rate * ran).max(0.0)
        + to_od * od_price * h.changeover
}

pub(super) fn check(job: &JobState, candidates: &[Candidate], config: &PolicyConfig) -> Result<()> {
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
    config.check()?;
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
pub(super) fn pick_on_demand(job: &JobState, candidates: &[Candidate]) -> Option<usize> {
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
    let per_work = |i: &usize| candidates[*i].usd_per_work_hour();
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

/// The shortlist: the current spot pool, then the best by [`index`], with
/// one pool that keeps pace with the on-demand fallback `on_demand` (see
/// [`keep_pace`]) and one that has capacity now (see [`keep_up`]). Each
/// spot pool's index is computed once.
pub(super) fn pick_shortlist(
    job: &JobState,
    candidates: &[Candidate],
    on_demand: Option<usize>,
    size: usize,
    step: f64,
    config: &PolicyConfig,
) -> Vec<usize> {
    let size = size.min(MAX_SHORTLIST);
    let mut out = Vec::with_capacity(size);
    if let Some(r) = job.current {
        if candidates[r.candidate].capacity == Capacity::Spot {
            out.push(r.candidate);
        }
    }
    let horizon = Horizon::new(job, candidates, on_demand, step, config);
    let scores = Scores(
        candidates
            .iter()
            .map(|c| (c.capacity == Capacity::Spot).then(|| index(c, &horizon)))
            .collect(),
    );
    let mut scored: Vec<(f64, usize)> = scores.spot().filter(|(_, i)| !out.contains(i)).collect();
    let want = size.saturating_sub(out.len());
    if scored.len() > want && want > 0 {
        scored.select_nth_unstable_by(want - 1, by_index);
        scored.truncate(want);
    }
    scored.sort_by(by_index);
    out.extend(scored.into_iter().map(|(_, i)| i));
    let pace = on_demand.map(|od| candidates[od].work_rate * (1.0 - 1e-9));
    let fast = |i: usize| pace.is_some_and(|p| candidates[i].work_rate >= p);
    if pace.is_some() {
        keep_pace(job, candidates, &scores, &fast, &mut out);
    }
    keep_up(job, candidates, &scores, &fast, &mut out);
    out
}

/// Every candidate's shortlist index, in dollars per reference work-hour:
/// [`index`] for a spot pool, the price per work-hour for an on-demand one
/// (it is never lost). What `place` shows beside the policy's expected
/// costs, labelled as the index that chose the shortlist.
pub(super) fn indexes(
    job: &JobState,
    candidates: &[Candidate],
    on_demand: Option<usize>,
    step: f64,
    config: &PolicyConfig,
) -> Vec<f64> {
    let horizon = Horizon::new(job, candidates, on_demand, step, config);
    candidates
        .iter()
        .map(|c| match c.capacity {
            Capacity::Spot => index(c, &horizon),
            Capacity::OnDemand => c.usd_per_work_hour(),
        })
        .collect()
}

/// Every candidate's shortlist index (`None` for on-demand ones).
struct Scores(Vec<Option<f64>>);

impl Scores {
    /// The spot candidates' `(index, candidate)`.
    fn spot(&self) -> impl Iterator<Item = (f64, usize)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| (s, i)))
    }

    /// The spot candidate with the lowest index among those `keep` keeps
    /// (ties to the lower number).
    fn best(&self, keep: impl Fn(usize) -> bool) -> Option<usize> {
        self.spot()
            .filter(|(_, i)| keep(*i))
            .min_by(by_index)
            .map(|(_, i)| i)
    }
}

/// Lower index first, ties to the lower candidate number.
fn by_index(a: &(f64, usize), b: &(f64, usize)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// Keeps one pool on the shortlist that has capacity now, when any spot pool
/// has. The index lets a pool in an outage rank high when the slack can
/// wait for it, which can fill the shortlist with pools that are all down; a
/// model that sees only those can wait or buy on-demand, but cannot run on
/// a pool that is up meanwhile (a slow one as a bridge, say). So the best
/// pool with capacity by the same index takes the last place it can take
/// without displacing the pool the job runs on or the one pool that keeps
/// pace with the fallback (`fast`).
fn keep_up(
    job: &JobState,
    candidates: &[Candidate],
    scores: &Scores,
    fast: &dyn Fn(usize) -> bool,
    out: &mut [usize],
) {
    let up = |i: usize| candidates[i].availability.state.is_up();
    if out.iter().any(|i| up(*i)) {
        return;
    }
    let Some(best) = scores.best(|i| up(i) && !out.contains(&i)) else {
        return;
    };
    let running = job.current.map(|r| r.candidate);
    let fast_count = out.iter().filter(|i| fast(**i)).count();
    let place = (0..out.len())
        .rev()
        .find(|&k| Some(out[k]) != running && (fast(best) || !fast(out[k]) || fast_count > 1));
    if let Some(k) = place {
        out[k] = best;
    }
}

/// Keeps one pool on the shortlist at least as fast as the on-demand
/// fallback (`fast`), when any spot pool is. The index ranks by cost per work-hour,
/// which can fill the shortlist with slow pools (an any-of job's K80s are the
/// cheapest per work-hour in the 2022 data); a model that sees only pools
/// slower than the fallback can only spend slack, never earn it back, and
/// cannot move to a faster pool that comes up. So the last place the index
/// filled goes to the best such pool by the same index. The pool the job runs
/// on is never displaced.
fn keep_pace(
    job: &JobState,
    candidates: &[Candidate],
    scores: &Scores,
    fast: &dyn Fn(usize) -> bool,
    out: &mut [usize],
) {
    let running = job
        .current
        .is_some_and(|r| candidates[r.candidate].capacity == Capacity::Spot);
    if out.len() <= usize::from(running) || out.iter().any(|i| fast(*i)) {
        return;
    }
    if let (Some(i), Some(last)) = (scores.best(fast), out.last_mut()) {
        *last = i;
    }
}

impl PolicyConfig {
    /// Checks the settings on their own (the planning step, the steps to the
    /// horizon, the outage-age rates): what every decision and
    /// [`Placer::new`](crate::placer::Placer::new) refuse alike.
    pub fn check(&self) -> Result<()> {
        if !(self.step_hours.is_finite() && self.step_hours > 0.0) {
            return Err(Error::invalid_input(format!(
                "invalid planning step {} h: expected a positive number of hours",
                self.step_hours
            )));
        }
        if self.max_steps < 2 {
            return Err(Error::invalid_input(format!(
                "invalid max steps {}: expected at least 2",
                self.max_steps
            )));
        }
        if !self.outage_ages.valid() {
            return Err(Error::invalid_input(format!(
                "invalid outage-age recovery rates {:?}: expected finite rates of zero or more",
                self.outage_ages.per_hour
            )));
        }
        Ok(())
    }
}
