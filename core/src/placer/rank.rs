//! Ranking: a pure function from a job, offers and evidence to plans sorted by
//! expected cost to completion.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::Serialize;
use time::OffsetDateTime;

use super::cost::{optimal_interval, RunModel};
use super::duration::format_duration;
use super::hazard::{HazardEstimate, HazardModel, PoolEvidence};
use super::job::{CheckpointInterval, JobSpec};
use crate::{Capacity, Offer, Pool};
use crate::{Money, Price};

/// Everything ranking reads besides the job and the offers.
#[derive(Debug, Clone, Copy)]
pub struct RankContext<'a> {
    /// Now.
    pub now: OffsetDateTime,
    /// The hazard estimator.
    pub model: &'a HazardModel,
    /// What gpufleet observed, per pool.
    pub evidence: &'a HashMap<Pool, PoolEvidence>,
    /// Keep at most this many plans (explanations are written for these only).
    pub limit: usize,
}

/// One way to run the job: a pool, and what it is expected to cost.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The offer (pool, price, source).
    pub offer: Offer,
    /// Which of the job's GPU options it satisfies.
    pub gpu_option: usize,
    /// Hours of work in this pool, after throughput conversion.
    pub work_hours: f64,
    /// The checkpoint interval used, in hours.
    pub checkpoint_interval_hours: f64,
    /// The hazard used.
    pub hazard: HazardEstimate,
    /// Expected wall-clock hours to finish.
    pub expected_hours: f64,
    /// Expected cost to finish.
    pub expected_cost: Money,
    /// Expected interruptions.
    pub expected_interruptions: f64,
    /// Probability of meeting the deadline (1 without one).
    pub p_deadline: f64,
    /// Whether the plan meets every constraint.
    pub feasible: bool,
    /// Why not, when it does not.
    pub problems: Vec<String>,
    /// One line a person can check.
    pub explanation: String,
}

/// The ranked plans, and what was excluded by which constraint.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ranking {
    /// Plans, feasible ones first, each group by expected cost.
    pub plans: Vec<Plan>,
    /// How many offers each constraint excluded before costing.
    pub excluded: BTreeMap<String, usize>,
    /// How many plans were costed but miss the deadline or the budget.
    pub infeasible: BTreeMap<String, usize>,
    /// How many offers were looked at.
    pub considered: usize,
}

impl Ranking {
    /// The feasible plans.
    pub fn feasible(&self) -> impl Iterator<Item = &Plan> {
        self.plans.iter().filter(|p| p.feasible)
    }

    /// Why nothing is feasible, constraint by constraint, for an error message.
    pub fn why_nothing(&self) -> String {
        let mut parts: Vec<String> = self
            .excluded
            .iter()
            .map(|(why, n)| format!("{n} offers: {why}"))
            .collect();
        parts.extend(
            self.infeasible
                .iter()
                .map(|(why, n)| format!("{n} plans: {why}")),
        );
        if let Some(best) = self.plans.first() {
            parts.push(format!(
                "closest: {} (run there alone: expected ${}, {:.1} h, P(deadline) {:.2})",
                best.offer.pool,
                best.expected_cost.display(2),
                best.expected_hours,
                best.p_deadline
            ));
        }
        if parts.is_empty() {
            // Nothing came back to rank: the offers were filtered where they
            // were asked for (a zone no cloud has, a GPU no allowed region sells).
            return "no offer satisfies the job: no offer was found for its GPU options in its \
                    allowed clouds, regions and zones"
                .into();
        }
        format!(
            "no offer satisfies the job among {} considered: {}",
            self.considered,
            parts.join("; ")
        )
    }
}

/// Why an offer is not even costed; on success, the GPU option and the work
/// hours in it.
fn candidate(job: &JobSpec, offer: &Offer) -> Result<(usize, f64), Cow<'static, str>> {
    let pool = &offer.pool;
    if !job.clouds.is_empty() && !job.clouds.contains(&pool.cloud) {
        return Err(Cow::Borrowed("cloud not allowed"));
    }
    if !job.regions.is_empty() && !job.regions.contains(&pool.region) {
        return Err(Cow::Borrowed("region not allowed"));
    }
    if !job.zones.is_empty() && !pool.zone.as_ref().is_some_and(|z| job.zones.contains(z)) {
        return Err(Cow::Borrowed("zone not allowed"));
    }
    let Some(gpu) = offer.instance_type.gpu.as_ref() else {
        return Err(Cow::Borrowed("no GPU"));
    };
    let Some(idx) = job
        .gpus
        .iter()
        .position(|o| o.model == gpu.model && o.count == gpu.count)
    else {
        return Err(Cow::Borrowed(
            "GPU model or count not among the job's options",
        ));
    };
    if job.gpus[idx]
        .min_memory_gib
        .is_some_and(|min| gpu.memory_gib < min)
    {
        return Err(Cow::Borrowed("GPU memory below the job's minimum"));
    }
    if pool.capacity == Capacity::Spot && !job.interruptible {
        return Err(Cow::Borrowed("spot, but the job is not interruptible"));
    }
    if job.placement_group
        && !offer.instance_type.interconnect.multi_node_capable()
        && gpu.count < 8
    {
        // A placement group only matters for multi-node jobs; refuse shapes
        // without a multi-node fabric.
        return Err(Cow::Borrowed(
            "no EFA/InfiniBand/GPUDirect fabric for a placement group",
        ));
    }
    let work = job.work_hours_on(&gpu.model, gpu.count).ok_or_else(|| {
        format!(
            "no throughput factor for {} (give one in the job's [throughput])",
            gpu.model
        )
    })?;
    Ok((idx, work))
}

/// One costed candidate, before it becomes a [`Plan`] (kept small: ranking
/// scores every matching offer but builds plans only for the best).
struct Scored {
    index: usize,
    gpu_option: usize,
    work: f64,
    interval: f64,
    hours: f64,
    cost: Money,
    interruptions: f64,
    p_deadline: f64,
    misses_deadline: bool,
    over_budget: bool,
    hopeless: bool,
    unrepresentable: bool,
}

impl Scored {
    fn feasible(&self) -> bool {
        !(self.misses_deadline || self.over_budget || self.hopeless)
    }
}

/// Costs one candidate.
fn score(
    job: &JobSpec,
    offer: &Offer,
    index: usize,
    gpu_option: usize,
    work: f64,
    hazard: f64,
) -> Scored {
    let c = job.checkpoint_cost.as_secs_f64() / 3600.0;
    let r = job.restart_overhead.as_secs_f64() / 3600.0;
    let interval = match job.checkpoint_interval {
        CheckpointInterval::Every(d) => d.as_secs_f64() / 3600.0,
        CheckpointInterval::Auto => optimal_interval(work, hazard, c),
    };
    let run = RunModel {
        work,
        hazard,
        interval,
        checkpoint_cost: c,
        restart: r,
    };
    let hours = run.expected_hours();
    // A cost money cannot hold is a problem the plan names, not a figure
    // clamped to $9.2 trillion (it sorts last).
    let (cost, unrepresentable) = match hours.is_finite().then(|| offer.price.cost_for_hours(hours))
    {
        Some(Ok(c)) => (c, false),
        Some(Err(_)) => (Money::from_micros(i64::MAX), true),
        None => (Money::from_micros(i64::MAX), false),
    };
    let p_deadline = job
        .deadline
        .map_or(1.0, |d| run.p_within(d.as_secs_f64() / 3600.0));
    Scored {
        index,
        gpu_option,
        work,
        interval,
        hours,
        cost,
        interruptions: run.expected_interruptions(),
        p_deadline,
        misses_deadline: job.deadline.is_some() && p_deadline < job.deadline_confidence,
        over_budget: job.budget.is_some_and(|b| cost > b),
        hopeless: !hours.is_finite() || unrepresentable,
        unrepresentable,
    }
}

/// The problems of a scored candidate, as people read them.
fn problems(job: &JobSpec, s: &Scored) -> Vec<String> {
    let mut out = Vec::new();
    if let (true, Some(d)) = (s.misses_deadline, job.deadline) {
        out.push(format!(
            "misses the {} deadline (P {:.2} < {:.2})",
            format_duration(d),
            s.p_deadline,
            job.deadline_confidence
        ));
    }
    if let (true, Some(b)) = (s.over_budget, job.budget) {
        out.push(format!("over the ${} budget", b.display(2)));
    }
    if s.unrepresentable {
        out.push(format!(
            "its expected cost ({:.0} h at this price) is beyond the $9.2 trillion an amount can hold",
            s.hours
        ));
    } else if s.hopeless {
        out.push("cannot finish: interrupted faster than it checkpoints".into());
    }
    out
}

/// One line for a plan, by the ranking index's model of running the whole
/// job in that pool alone. It states no expected cost: the figure a decision
/// compares is the placement policy's ([`Placer`](super::Placer)). The
/// price comparison says what it compares: this pool's spot price against
/// the on-demand price of the same instance type in the same location.
fn explain(plan: &Plan, on_demand: Option<Price>) -> String {
    let o = &plan.offer;
    let mut s = format!(
        "{} {} {}: ${}/h",
        o.pool.capacity,
        o.pool.instance_type,
        o.pool.location(),
        o.price.display(2)
    );
    if o.pool.capacity == Capacity::Spot {
        let rework = ((plan.expected_hours - plan.work_hours) / plan.work_hours * 100.0).max(0.0);
        // Where the hazard comes from, when it is not a published or measured
        // figure: a person must see that it is an assumption.
        let assumed = plan
            .hazard
            .signals
            .iter()
            .any(|x| x == "default-spot-prior")
            && plan.hazard.observed_events < 1.0;
        let _ = write!(
            s,
            ", ~{:.2} interruptions/h{}, ckpt {} -> +{rework:.0}% time",
            plan.hazard.rate_per_hour,
            if assumed {
                " (assumed: no published rate)"
            } else {
                ""
            },
            format_duration(std::time::Duration::from_secs_f64(
                plan.checkpoint_interval_hours * 3600.0
            )),
        );
        if let Some(od) = on_demand.filter(|od| *od > Price::ZERO) {
            let saving = 1.0 - o.price.usd_per_hour_f64() / od.usd_per_hour_f64();
            if saving >= 0.0 {
                let _ = write!(
                    s,
                    "; spot price {:.0}% under the on-demand price",
                    saving * 100.0
                );
            } else {
                let _ = write!(
                    s,
                    "; spot price {:.0}% over the on-demand price",
                    -saving * 100.0
                );
            }
        }
    }
    let _ = write!(s, "; ~{:.1} h if run here alone", plan.expected_hours);
    if plan.p_deadline < 1.0 {
        let _ = write!(s, ", P(deadline) {:.2}", plan.p_deadline);
    }
    if !plan.problems.is_empty() {
        let _ = write!(s, " [{}]", plan.problems.join("; "));
    }
    s
}

/// Ranks `offers` for `job`: plans sorted by expected cost to completion,
/// feasible ones first. Pure: no I/O, deterministic for its inputs.
pub fn rank(job: &JobSpec, offers: &[Offer], ctx: &RankContext<'_>) -> Ranking {
    let mut ranking = Ranking {
        considered: offers.len(),
        ..Ranking::default()
    };
    let mut scored = Vec::new();
    for (index, offer) in offers.iter().enumerate() {
        match candidate(job, offer) {
            Err(why) => match ranking.excluded.get_mut(why.as_ref()) {
                Some(n) => *n += 1,
                None => {
                    ranking.excluded.insert(why.into_owned(), 1);
                }
            },
            Ok((option, work)) => {
                let hazard = ctx
                    .model
                    .rate(offer, ctx.evidence.get(&offer.pool), ctx.now);
                scored.push(score(job, offer, index, option, work, hazard));
            }
        }
    }
    let deadline_key = job
        .deadline
        .map(|d| format!("misses the {} deadline", format_duration(d)));
    let budget_key = job
        .budget
        .map(|b| format!("over the ${} budget", b.display(2)));
    for s in scored.iter().filter(|s| !s.feasible()) {
        for (hit, key) in [
            (s.misses_deadline, deadline_key.as_deref()),
            (s.over_budget, budget_key.as_deref()),
            (
                s.hopeless,
                Some("cannot finish: interrupted faster than it checkpoints"),
            ),
        ] {
            if let (true, Some(key)) = (hit, key) {
                *ranking.infeasible.entry(key.to_string()).or_default() += 1;
            }
        }
    }
    // The on-demand price of each instance type in each location, for the
    // price comparison.
    // (The zone is left out: on-demand is often sold per region.)
    let type_key = |p: &Pool| (p.cloud, p.region.clone(), p.instance_type.clone());
    let mut on_demand = HashMap::new();
    for o in offers
        .iter()
        .filter(|o| o.pool.capacity == Capacity::OnDemand)
    {
        on_demand
            .entry(type_key(&o.pool))
            .and_modify(|p: &mut Price| *p = (*p).min(o.price))
            .or_insert(o.price);
    }
    let order = |a: &Scored, b: &Scored| {
        b.feasible()
            .cmp(&a.feasible())
            .then(a.cost.cmp(&b.cost))
            .then(b.p_deadline.total_cmp(&a.p_deadline))
            // At an equal expected cost and chance, spot first: the saving is
            // the same and it frees on-demand capacity.
            .then_with(|| {
                let spot = |s: &Scored| offers[s.index].pool.capacity != Capacity::Spot;
                spot(a).cmp(&spot(b))
            })
            .then_with(|| offers[a.index].pool.cmp(&offers[b.index].pool))
    };
    let limit = ctx.limit.max(1);
    if scored.len() > limit {
        scored.select_nth_unstable_by(limit - 1, order);
        scored.truncate(limit);
    }
    scored.sort_by(order);
    ranking.plans = scored
        .iter()
        .map(|s| {
            let offer = &offers[s.index];
            let problems = problems(job, s);
            let mut plan = Plan {
                offer: offer.clone(),
                gpu_option: s.gpu_option,
                work_hours: s.work,
                checkpoint_interval_hours: s.interval,
                hazard: ctx
                    .model
                    .estimate(offer, ctx.evidence.get(&offer.pool), ctx.now),
                expected_hours: s.hours,
                expected_cost: s.cost,
                expected_interruptions: s.interruptions,
                p_deadline: s.p_deadline,
                feasible: problems.is_empty(),
                problems,
                explanation: String::new(),
            };
            plan.explanation = explain(&plan, on_demand.get(&type_key(&offer.pool)).copied());
            plan
        })
        .collect();
    ranking
}
