//! Ranking: a pure function from a job, offers and evidence to plans sorted by
//! expected cost to completion.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::Serialize;
use time::OffsetDateTime;

use super::cost::{optimal_interval, RunModel};
use super::duration::format_duration;
use super::hazard::{HazardEstimate, HazardModel, PoolEvidence};
use super::job::{CheckpointInterval, JobSpec};
use crate::model::{Capacity, Offer, Pool};
use crate::money::Money;

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
                "closest: {} (expected ${}, {:.1} h, P(deadline) {:.2})",
                best.offer.pool,
                best.expected_cost.display(2),
                best.expected_hours,
                best.p_deadline
            ));
        }
        format!(
            "no offer satisfies the job among {} considered: {}",
            self.considered,
            parts.join("; ")
        )
    }
}

/// Why an offer is not even costed, or `None` when it is a candidate; on
/// success, the GPU option and the work hours in it.
fn candidate(job: &JobSpec, offer: &Offer) -> Result<(usize, f64), String> {
    let pool = &offer.pool;
    if !job.clouds.is_empty() && !job.clouds.contains(&pool.cloud) {
        return Err("cloud not allowed".into());
    }
    if !job.regions.is_empty() && !job.regions.contains(&pool.region) {
        return Err("region not allowed".into());
    }
    if !job.zones.is_empty() && !pool.zone.as_ref().is_some_and(|z| job.zones.contains(z)) {
        return Err("zone not allowed".into());
    }
    let Some(gpu) = offer.instance_type.gpu.as_ref() else {
        return Err("no GPU".into());
    };
    let Some(idx) = job
        .gpus
        .iter()
        .position(|o| o.model == gpu.model && o.count == gpu.count)
    else {
        return Err("GPU model or count not among the job's options".into());
    };
    if job.gpus[idx]
        .min_memory_gib
        .is_some_and(|min| gpu.memory_gib < min)
    {
        return Err("GPU memory below the job's minimum".into());
    }
    if pool.capacity == Capacity::Spot && !job.interruptible {
        return Err("spot, but the job is not interruptible".into());
    }
    if job.placement_group
        && !offer.instance_type.interconnect.multi_node_capable()
        && gpu.count < 8
    {
        // A placement group only matters for multi-node jobs; refuse shapes
        // without a multi-node fabric.
        return Err("no EFA/InfiniBand/GPUDirect fabric for a placement group".into());
    }
    let work = job.work_hours_on(&gpu.model, gpu.count).ok_or_else(|| {
        format!(
            "no throughput factor for {} (give one in the job's [throughput])",
            gpu.model
        )
    })?;
    Ok((idx, work))
}

/// Costs one candidate.
fn cost(
    job: &JobSpec,
    offer: &Offer,
    gpu_option: usize,
    work: f64,
    hazard: HazardEstimate,
) -> Plan {
    let c = job.checkpoint_cost.as_secs_f64() / 3600.0;
    let r = job.restart_overhead.as_secs_f64() / 3600.0;
    let interval = match job.checkpoint_interval {
        CheckpointInterval::Every(d) => d.as_secs_f64() / 3600.0,
        CheckpointInterval::Auto => optimal_interval(work, hazard.rate_per_hour, c),
    };
    let run = RunModel {
        work,
        hazard: hazard.rate_per_hour,
        interval,
        checkpoint_cost: c,
        restart: r,
    };
    let expected_hours = run.expected_hours();
    let expected_cost = if expected_hours.is_finite() {
        offer.price.cost_for_hours(expected_hours)
    } else {
        Money::from_micros(i64::MAX)
    };
    let p_deadline = job
        .deadline
        .map_or(1.0, |d| run.p_within(d.as_secs_f64() / 3600.0));
    let mut problems = Vec::new();
    if let Some(d) = job.deadline {
        if p_deadline < job.deadline_confidence {
            problems.push(format!(
                "misses the {} deadline (P {:.2} < {:.2})",
                format_duration(d),
                p_deadline,
                job.deadline_confidence
            ));
        }
    }
    if let Some(b) = job.budget {
        if expected_cost > b {
            problems.push(format!("over the ${} budget", b.display(2)));
        }
    }
    if !expected_hours.is_finite() {
        problems.push("cannot finish: interrupted faster than it checkpoints".into());
    }
    Plan {
        offer: offer.clone(),
        gpu_option,
        work_hours: work,
        checkpoint_interval_hours: interval,
        expected_interruptions: run.expected_interruptions(),
        feasible: problems.is_empty(),
        problems,
        hazard,
        expected_hours,
        expected_cost,
        p_deadline,
        explanation: String::new(),
    }
}

/// The on-demand pool at the same place as `p`.
fn location_key(p: &Pool) -> Pool {
    Pool {
        capacity: Capacity::OnDemand,
        ..p.clone()
    }
}

fn explain(plan: &Plan, on_demand: Option<Money>) -> String {
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
        let _ = write!(
            s,
            ", ~{:.2} interruptions/h, ckpt {} -> +{rework:.0}% time",
            plan.hazard.rate_per_hour,
            format_duration(std::time::Duration::from_secs_f64(
                plan.checkpoint_interval_hours * 3600.0
            )),
        );
        if let Some(od) = on_demand.filter(|od| *od > Money::ZERO) {
            let saving = 1.0 - plan.expected_cost.as_usd_f64() / od.as_usd_f64();
            if saving >= 0.0 {
                let _ = write!(s, "; {:.0}% cheaper than on-demand", saving * 100.0);
            } else {
                let _ = write!(s, "; {:.0}% dearer than on-demand", -saving * 100.0);
            }
        }
    }
    let _ = write!(
        s,
        "; ${} expected over {:.1} h",
        plan.expected_cost.display(2),
        plan.expected_hours
    );
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
    let mut plans = Vec::new();
    for offer in offers {
        match candidate(job, offer) {
            Err(why) => *ranking.excluded.entry(why).or_default() += 1,
            Ok((idx, work)) => {
                let hazard = ctx
                    .model
                    .estimate(offer, ctx.evidence.get(&offer.pool), ctx.now);
                plans.push(cost(job, offer, idx, work, hazard));
            }
        }
    }
    for p in plans.iter().filter(|p| !p.feasible) {
        for why in &p.problems {
            let key = why.split(" (").next().unwrap_or(why).to_string();
            *ranking.infeasible.entry(key).or_default() += 1;
        }
    }
    // Cheapest on-demand cost per location, and overall, for the comparison.
    let mut on_demand: HashMap<Pool, Money> = HashMap::new();
    let mut cheapest_od: Option<Money> = None;
    for p in plans
        .iter()
        .filter(|p| p.offer.pool.capacity == Capacity::OnDemand)
    {
        on_demand.insert(location_key(&p.offer.pool), p.expected_cost);
        cheapest_od = Some(cheapest_od.map_or(p.expected_cost, |c| c.min(p.expected_cost)));
    }
    plans.sort_by(|a, b| {
        b.feasible
            .cmp(&a.feasible)
            .then(a.expected_cost.cmp(&b.expected_cost))
            .then(b.p_deadline.total_cmp(&a.p_deadline))
            .then_with(|| a.offer.pool.cmp(&b.offer.pool))
    });
    plans.truncate(ctx.limit.max(1));
    for p in &mut plans {
        let od = on_demand
            .get(&location_key(&p.offer.pool))
            .copied()
            .or(cheapest_od);
        p.explanation = explain(p, od);
    }
    ranking.plans = plans;
    ranking
}
