//! From ranked plans and the ledger's evidence to the policy's inputs: what
//! `place` and the executor hand to [`decide`](super::decide).

use std::collections::HashMap;
use std::time::Duration;

use time::OffsetDateTime;

use super::{
    AvailState, Availability, Candidate, Decision, HazardBasis, JobState, PolicyConfig, Running,
    YOUNG_WINDOW_HOURS,
};
use crate::placer::hazard::{HazardModel, PoolEvidence};
use crate::placer::job::JobSpec;
use crate::placer::rank::{rank, Plan, RankContext, Ranking};
use crate::{Capacity, Offer, Pool};
use crate::{Error, Result};

/// A pool's availability state from what the ledger saw: an interruption or
/// capacity failure within [`YOUNG_WINDOW_HOURS`] is a young outage, one
/// within `cooldown` an older one (no success has been seen since), otherwise
/// up (nothing says it is not).
pub fn state_from_evidence(
    evidence: Option<&PoolEvidence>,
    now: OffsetDateTime,
    cooldown: Duration,
) -> AvailState {
    let Some(age) = outage_age_hours(evidence, now) else {
        return AvailState::Up;
    };
    if age <= YOUNG_WINDOW_HOURS {
        AvailState::OutageYoung
    } else if age <= cooldown.as_secs_f64() / 3600.0 {
        AvailState::OutageOld
    } else {
        AvailState::Up
    }
}

/// Hours since the ledger's last interruption or capacity failure in the
/// pool, when no run has started there since (`None`: no outage on record).
pub fn outage_age_hours(evidence: Option<&PoolEvidence>, now: OffsetDateTime) -> Option<f64> {
    let evidence = evidence?;
    let last = evidence
        .events
        .iter()
        .map(|e| e.at)
        .filter(|at| *at <= now)
        .max()?;
    // A run that started after the event shows capacity came back.
    if evidence.exposure.iter().any(|(from, _)| *from > last) {
        return None;
    }
    Some((now - last).as_seconds_f64() / 3600.0)
}

/// Where a plan's hazard comes from.
pub fn basis(plan: &Plan) -> HazardBasis {
    let h = &plan.hazard;
    if plan.offer.pool.capacity == Capacity::OnDemand {
        return HazardBasis::OnDemand;
    }
    if h.observed_hours >= 24.0 || h.observed_events >= 1.0 {
        return HazardBasis::Measured(format!(
            "{:.1} events in {:.0} instance-hours observed",
            h.observed_events, h.observed_hours
        ));
    }
    let published: Vec<&str> = h
        .signals
        .iter()
        .map(String::as_str)
        .filter(|s| *s != "default-spot-prior" && !s.starts_with("observed:"))
        .collect();
    if published.is_empty() {
        HazardBasis::Assumed(format!(
            "no published interruption rate for {} in {}; default prior",
            plan.offer.pool.instance_type, plan.offer.pool.region
        ))
    } else {
        HazardBasis::Published(published.join(", "))
    }
}

/// One candidate per plan: price for `nodes` instances, speed in reference
/// work-hours per hour net of checkpoint overhead, availability from the
/// plan's hazard (with the model's burst weight for a pool that just came
/// back) and the evidence, with the age of a pool's outage where the ledger
/// shows one ([`outage_age_hours`]; the policy prices it with
/// [`PolicyConfig::outage_ages`]).
pub fn candidates(job: &JobSpec, plans: &[Plan], ctx: &Context<'_>) -> Result<Vec<Candidate>> {
    let (nodes, model) = (ctx.nodes, ctx.model);
    let c = job.checkpoint_cost.as_secs_f64() / 3600.0;
    plans
        .iter()
        .map(|p| {
            let pool = &p.offer.pool;
            let tau = p.checkpoint_interval_hours.max(1e-6);
            let rate = job.hours / p.work_hours.max(1e-9) * tau / (tau + c);
            let evidence = ctx.evidence.get(pool);
            let state = state_from_evidence(evidence, ctx.now, ctx.cooldown);
            let availability = Availability {
                outage_hours: outage_age_hours(evidence, ctx.now)
                    .filter(|_| state == AvailState::OutageOld),
                ..Availability::from_hazard(state, p.hazard.rate_per_hour, model.burst_weight)
            };
            let price = p.offer.price.checked_mul(nodes.max(1)).ok_or_else(|| {
                Error::invalid_input(format!(
                    "{} nodes at ${}/h overflow a price",
                    nodes,
                    p.offer.price.display(2)
                ))
            })?;
            Ok(Candidate {
                label: format!(
                    "{} {} {}",
                    pool.capacity,
                    pool.instance_type,
                    pool.location()
                ),
                price,
                work_rate: rate,
                capacity: pool.capacity,
                availability,
                basis: basis(p),
            })
        })
        .collect()
}

/// The job's state for the policy: work and time left from the spec, a
/// changeover of the restart overhead plus half a checkpoint interval of lost
/// work (the cheapest spot plan's, when there is one), and where it runs.
pub fn job_state(job: &JobSpec, plans: &[Plan], current: Option<usize>) -> JobState {
    let spot_interval = plans
        .iter()
        .find(|p| p.offer.pool.capacity == Capacity::Spot)
        .map_or(0.0, |p| p.checkpoint_interval_hours);
    JobState {
        work_left_hours: job.hours,
        time_left_hours: job.deadline.map(|d| d.as_secs_f64() / 3600.0),
        changeover_hours: job.restart_overhead.as_secs_f64() / 3600.0 + spot_interval / 2.0,
        current: current.map(|candidate| Running {
            candidate,
            changeover_left_hours: 0.0,
        }),
    }
}

/// The plans the policy may choose from: costed and finishable. A spot
/// plan that alone might miss the deadline stays: the policy keeps
/// on-demand as the fallback and watches the slack itself. A plan that
/// alone would cost more than the budget stays too (the on-demand fallback
/// most of all: without it the policy would price a fallback it does not
/// have): the budget bounds the policy's expected cost to finish, checked
/// against its decision ([`crate::placer::Placement::over_budget`]), never
/// added to it.
pub fn usable(_job: &JobSpec, plans: impl IntoIterator<Item = Plan>) -> Vec<Plan> {
    plans
        .into_iter()
        .filter(|p| p.feasible || p.expected_hours.is_finite())
        .collect()
}

/// How long a pool that interrupted or refused capacity stays in an outage
/// for placement: 30 min (in the 2022 traces a pool that preempted stayed
/// unavailable for a mean of 1 h).
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30 * 60);

/// Everything turning plans into candidates reads besides the job and the
/// plans, and the policy's settings.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Instances per launch.
    pub nodes: u32,
    /// The hazard model (its burst weight shapes the fresh-return risk).
    pub model: &'a HazardModel,
    /// What the ledger observed.
    pub evidence: &'a HashMap<Pool, PoolEvidence>,
    /// Now.
    pub now: OffsetDateTime,
    /// How long a failure keeps a pool in an outage.
    pub cooldown: Duration,
    /// The policy's settings.
    pub config: &'a PolicyConfig,
}

/// The policy's decision for a job that runs nowhere yet, over `plans`
/// (`Action::Run(i)` names `plans[i]`): what `place` shows and the executor
/// acts on.
pub fn decide_from_nowhere(job: &JobSpec, plans: &[Plan], ctx: &Context<'_>) -> Result<Decision> {
    let cands = candidates(job, plans, ctx)?;
    super::decide(&job_state(job, plans, None), &cands, ctx.config)
}

/// Ranks `offers` for the policy: the usable plans among the ranking's best
/// `ctx.limit`, plus the cheapest on-demand plans when none made that cut (a
/// spot-heavy ranking must not lose its fallback). Returns the ranking as
/// [`rank`] made it, for its counts and messages, and the plans.
pub fn rank_for_policy(
    job: &JobSpec,
    offers: &[Offer],
    ctx: &RankContext<'_>,
) -> (Ranking, Vec<Plan>) {
    let ranking = rank(job, offers, ctx);
    let mut plans = usable(job, ranking.plans.iter().cloned());
    if job.interruptible
        && !plans
            .iter()
            .any(|p| p.offer.pool.capacity == Capacity::OnDemand)
    {
        let mut od_job = job.clone();
        od_job.interruptible = false;
        let od = rank(&od_job, offers, &RankContext { limit: 8, ..*ctx });
        plans.extend(usable(job, od.plans));
    }
    (ranking, plans)
}
