//! The one placer: every input of a placement decision in one value, built
//! once, and one entry point that every caller goes through.
//!
//! `gpufleet place`, `gpufleet tf-external`, the executor (a start, a
//! failover, a re-placement after an interruption, a move review), the job
//! controller and the simulator all decide through a [`Placer`]. It holds
//! what used to be chosen by each caller: the hazard model, the policy's
//! settings, how many of the ranking index's plans the policy sees (the
//! width), how far back the ledger's evidence is read and how long a failure
//! keeps a pool in an outage. So `place` and `run` rank the same candidate
//! set for the same job, and what `place` shows for a pool is the figure the
//! decision compared.
//!
//! ```
//! use gpufleet_core::placer::{JobSpec, PlaceRequest, Placer};
//! use gpufleet_core::{GpuModel, Snapshot};
//! use std::collections::HashMap;
//! use std::time::Duration;
//!
//! let placer = Placer::default();
//! let job = JobSpec::builder("train", GpuModel::H100, 8, 20.0)
//!     .deadline(Duration::from_secs(48 * 3600))
//!     .build()?;
//! let now = time::OffsetDateTime::now_utc();
//! let evidence = HashMap::new();
//! let placement = placer.place(&PlaceRequest::new(&job, Snapshot::embedded().offers(), &evidence, now))?;
//! let (i, plan) = placement.chosen().expect("the catalog sells 8xH100");
//! // The decision's figure for the chosen pool is the one a table shows.
//! let cost = placement.expected_cost(i).expect("the chosen option was evaluated");
//! println!("start {} at ${} expected to finish", plan.offer.pool, cost.display(2));
//! # Ok::<(), gpufleet_core::Error>(())
//! ```

use std::collections::HashMap;
use std::time::Duration;

use time::OffsetDateTime;

use super::hazard::{HazardModel, PoolEvidence};
use super::job::JobSpec;
use super::policy::{
    self, plans, Action, AvailState, Candidate, Decision, JobState, OutageAges, PolicyConfig,
    Solution, MAX_SHORTLIST,
};
use super::rank::{Plan, RankContext, Ranking};
use crate::Money;
use crate::{Error, ErrorKind, Result};
use crate::{Offer, Pool};

/// The default [`PlacerConfig::width`]: the ranking index's 64 best plans.
pub const DEFAULT_WIDTH: usize = 64;

/// The default [`PlacerConfig::evidence_window`]: 14 days.
pub const DEFAULT_EVIDENCE_WINDOW: Duration = Duration::from_secs(14 * 86_400);

/// Everything a [`Placer`] decides with besides the job, the offers and the
/// evidence.
#[derive(Debug, Clone, PartialEq, derive_setters::Setters)]
#[setters(prefix = "with_")]
#[non_exhaustive]
pub struct PlacerConfig {
    /// The hazard estimator (priors, evidence half-life, burst weight).
    pub hazard: HazardModel,
    /// The placement policy's settings (planning step, shortlist, budget).
    pub policy: PolicyConfig,
    /// How many of the ranking index's best usable plans the policy sees
    /// (default [`DEFAULT_WIDTH`]); on-demand plans are added when none made
    /// the cut, so a spot-heavy ranking keeps its fallback.
    pub width: usize,
    /// How far back the ledger's evidence is read (default 14 days; never
    /// less than the cooldown).
    pub evidence_window: Duration,
    /// How long an interruption or a capacity failure keeps a pool in an
    /// outage for placement (default [`plans::DEFAULT_COOLDOWN`], 30 min).
    pub cooldown: Duration,
}

impl Default for PlacerConfig {
    fn default() -> Self {
        PlacerConfig {
            hazard: HazardModel::default(),
            policy: PolicyConfig::default(),
            width: DEFAULT_WIDTH,
            evidence_window: DEFAULT_EVIDENCE_WINDOW,
            cooldown: plans::DEFAULT_COOLDOWN,
        }
    }
}

/// The context key that marks [`Remaining::deadline_passed`].
const DEADLINE_PASSED: &str = "deadline_passed";

/// What is left of a job: reference work-hours and the deadline as an
/// instant. The one conversion between a job's relative deadline and the
/// time left at a decision point, with one error when it has passed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Remaining {
    /// Reference work-hours left (on the job's first GPU option).
    pub work_hours: f64,
    /// When the job must be done (`None`: no deadline).
    pub deadline_at: Option<OffsetDateTime>,
}

impl Remaining {
    /// A job started at `start` with none of its work done: all its work,
    /// its deadline from `start` (a deadline past what a date can hold is
    /// none). The one place a job's relative deadline becomes an instant:
    /// the placer, the executor and a controller resuming from the ledger
    /// (from the job's first record) all read it here.
    pub fn of(job: &JobSpec, start: OffsetDateTime) -> Remaining {
        Remaining {
            work_hours: job.hours,
            deadline_at: job
                .deadline
                .and_then(|d| time::Duration::try_from(d).ok())
                .and_then(|d| start.checked_add(d)),
        }
    }

    /// `total` hours of work of which `done` are done, due at `deadline_at`.
    /// Errors (invalid input) when nothing is left: the job is complete.
    pub fn after(total: f64, done: f64, deadline_at: Option<OffsetDateTime>) -> Result<Remaining> {
        let left = total - done.clamp(0.0, total.max(0.0));
        if left.is_nan() || left <= 1e-9 {
            return Err(Error::invalid_input(format!(
                "no work left ({done:.2} of {total:.2} hours done): complete the job instead"
            )));
        }
        Ok(Remaining {
            work_hours: left,
            deadline_at,
        })
    }

    /// Hours to the deadline at `now` (`None`: no deadline). A deadline at
    /// or before `now` is an error of kind [`ErrorKind::Timeout`], whoever
    /// asks: the job cannot be placed any more.
    pub fn time_left_hours(&self, now: OffsetDateTime) -> Result<Option<f64>> {
        let Some(at) = self.deadline_at else {
            return Ok(None);
        };
        let secs = (at - now).as_seconds_f64();
        if secs <= 0.0 {
            return Err(Remaining::deadline_passed(format!(
                "the deadline passed {} ago with {:.2} hours of work left",
                super::format_duration(Duration::from_secs_f64(-secs)),
                self.work_hours
            )));
        }
        Ok(Some(secs / 3600.0))
    }

    /// The one error for a deadline that has passed: kind
    /// [`ErrorKind::Timeout`], not retryable, marked so that
    /// [`Remaining::is_deadline_passed`] tells it from a call that timed out.
    pub fn deadline_passed(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Timeout, message)
            .with_retryable(false)
            .with_context(DEADLINE_PASSED, "true")
    }

    /// Whether `e` says a job's deadline has passed (and not that a call
    /// timed out, which is worth retrying).
    pub fn is_deadline_passed(e: &Error) -> bool {
        e.kind() == ErrorKind::Timeout && e.context().iter().any(|(k, _)| *k == DEADLINE_PASSED)
    }

    /// `job` with this much work left and its deadline relative to `now`:
    /// what ranking and the policy read.
    pub fn spec(&self, job: &JobSpec, now: OffsetDateTime) -> Result<JobSpec> {
        let mut spec = job.clone();
        spec.hours = self.work_hours;
        spec.deadline = self
            .time_left_hours(now)?
            .map(|h| Duration::from_secs_f64(h * 3600.0));
        Ok(spec)
    }
}

/// Where the job runs now, for a move review.
#[derive(Debug, Clone, Copy)]
pub struct Current<'a> {
    /// The plan it runs on (kept as a candidate even when the ranking no
    /// longer holds it, and up: it is running).
    pub plan: &'a Plan,
}

/// One question to the placer: a job, what is left of it, the offers, the
/// ledger's evidence and now, with where it runs and which pools it may not
/// use.
#[derive(Clone, Copy)]
pub struct PlaceRequest<'a> {
    /// The job (its GPU options, checkpointing, constraints; its `hours` and
    /// `deadline` are read through [`PlaceRequest::remaining`]).
    pub job: &'a JobSpec,
    /// What is left of it.
    pub remaining: Remaining,
    /// The offers to choose from (the embedded catalog, a cache, or the
    /// providers' live offers with their stability signals).
    pub offers: &'a [Offer],
    /// The ledger's evidence, read since [`Placer::evidence_since`].
    pub evidence: &'a HashMap<Pool, PoolEvidence>,
    /// Now.
    pub now: OffsetDateTime,
    /// Instances per launch (the price is for all of them).
    pub nodes: u32,
    /// Where it runs now (`None`: nowhere).
    pub current: Option<Current<'a>>,
    /// A pool not to use this time (the one that was just lost).
    pub exclude: Option<&'a Pool>,
    /// Which pools can be launched in (a provider and an image for the
    /// cloud); all when `None`.
    pub launchable: Option<&'a (dyn Fn(&Pool) -> bool + Sync)>,
}

impl std::fmt::Debug for PlaceRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaceRequest")
            .field("job", &self.job.name)
            .field("remaining", &self.remaining)
            .field("offers", &self.offers.len())
            .field("evidence", &self.evidence.len())
            .field("now", &self.now)
            .field("nodes", &self.nodes)
            .field("current", &self.current.map(|c| &c.plan.offer.pool))
            .field("exclude", &self.exclude)
            .finish_non_exhaustive()
    }
}

impl<'a> PlaceRequest<'a> {
    /// A job not started yet, one instance, from nowhere.
    pub fn new(
        job: &'a JobSpec,
        offers: &'a [Offer],
        evidence: &'a HashMap<Pool, PoolEvidence>,
        now: OffsetDateTime,
    ) -> Self {
        PlaceRequest {
            job,
            remaining: Remaining::of(job, now),
            offers,
            evidence,
            now,
            nodes: 1,
            current: None,
            exclude: None,
            launchable: None,
        }
    }

    /// Sets what is left of the job.
    pub fn remaining(mut self, remaining: Remaining) -> Self {
        self.remaining = remaining;
        self
    }

    /// Sets the instances per launch.
    pub fn nodes(mut self, nodes: u32) -> Self {
        self.nodes = nodes;
        self
    }

    /// Sets where the job runs now.
    pub fn current(mut self, plan: &'a Plan) -> Self {
        self.current = Some(Current { plan });
        self
    }

    /// Sets a pool not to use.
    pub fn exclude(mut self, pool: Option<&'a Pool>) -> Self {
        self.exclude = pool;
        self
    }

    /// Sets which pools can be launched in.
    pub fn launchable(mut self, f: &'a (dyn Fn(&Pool) -> bool + Sync)) -> Self {
        self.launchable = Some(f);
        self
    }
}

/// The placer: built once (from settings or code), asked at every decision
/// point by every caller: `place`, `tf-external`, the executor, the controller
/// and the simulator.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placer {
    config: PlacerConfig,
}

impl Placer {
    /// A placer with `config`, checked: a width of at least 1, a planning
    /// step that is a positive number of hours, at least two steps, a
    /// shortlist of 1 to [`MAX_SHORTLIST`], outage-age rates that are rates.
    pub fn new(config: PlacerConfig) -> Result<Placer> {
        let p = &config.policy;
        if config.width == 0 {
            return Err(Error::invalid_input(
                "invalid placer width 0: expected at least 1 plan",
            ));
        }
        p.check()?;
        if !(1..=MAX_SHORTLIST).contains(&p.shortlist) {
            return Err(Error::invalid_input(format!(
                "invalid shortlist {}: expected 1 to {MAX_SHORTLIST} pools",
                p.shortlist
            )));
        }
        Ok(Placer { config })
    }

    /// Its settings.
    pub fn config(&self) -> &PlacerConfig {
        &self.config
    }

    /// The hazard model.
    pub fn hazard(&self) -> &HazardModel {
        &self.config.hazard
    }

    /// Sets how an outage's chance of ending falls with its age: evidence
    /// (the simulator learns it from what its traces showed so far), not a
    /// setting.
    pub fn set_outage_ages(&mut self, ages: OutageAges) {
        self.config.policy.outage_ages = ages;
    }

    /// From when the ledger's evidence is read at `now`: the evidence window
    /// or the cooldown, whichever is longer.
    pub fn evidence_since(&self, now: OffsetDateTime) -> OffsetDateTime {
        let window = self.config.evidence_window.max(self.config.cooldown);
        now - time::Duration::try_from(window).unwrap_or(time::Duration::days(14))
    }

    /// Places a job: ranks the offers by the index (the width's best usable
    /// plans, with on-demand kept as the fallback), turns them into the
    /// policy's candidates (price for every node, speed net of
    /// checkpointing, availability from the hazard and the evidence) and
    /// asks the policy. A request whose deadline has passed is an error of
    /// kind [`ErrorKind::Timeout`] ([`Remaining::time_left_hours`]).
    pub fn place(&self, req: &PlaceRequest<'_>) -> Result<Placement> {
        let spec = req.remaining.spec(req.job, req.now)?;
        let (ranking, plans) = plans::rank_for_policy(
            &spec,
            req.offers,
            &RankContext {
                now: req.now,
                model: &self.config.hazard,
                evidence: req.evidence,
                limit: self.config.width,
            },
        );
        let mut plans: Vec<Plan> = plans
            .into_iter()
            .filter(|p| Some(&p.offer.pool) != req.exclude)
            .filter(|p| req.launchable.is_none_or(|f| f(&p.offer.pool)))
            .collect();
        let current = req.current.map(|c| {
            match plans.iter().position(|p| p.offer.pool == c.plan.offer.pool) {
                Some(i) => i,
                None => {
                    plans.push(c.plan.clone());
                    plans.len() - 1
                }
            }
        });
        let candidates = plans::candidates(
            &spec,
            &plans,
            &plans::Context {
                nodes: req.nodes,
                model: &self.config.hazard,
                evidence: req.evidence,
                now: req.now,
                cooldown: self.config.cooldown,
                config: &self.config.policy,
            },
        )?;
        let mut placement = Placement {
            spec,
            ranking,
            plans,
            candidates,
            current,
            state: None,
            decision: None,
        };
        if let Some(c) = current {
            // It is running there, so capacity is there.
            placement.candidates[c].availability.state = AvailState::Up;
        }
        placement.decide(self)?;
        Ok(placement)
    }

    /// The policy's decision over candidates built elsewhere (the
    /// simulator's, from its traces), with this placer's settings.
    pub fn decide(&self, state: &JobState, candidates: &[Candidate]) -> Result<Decision> {
        policy::decide(state, candidates, &self.config.policy)
    }

    /// The policy's solved model, for a caller that answers later states of
    /// the same job from it (the simulator re-plans on a schedule).
    pub fn solve(&self, state: &JobState, candidates: &[Candidate]) -> Result<Solution> {
        Solution::solve(state, candidates, &self.config.policy)
    }

    /// Whether `solution` still models the shortlist the index would pick
    /// for `state` now.
    pub fn same_shortlist(
        &self,
        solution: &Solution,
        state: &JobState,
        candidates: &[Candidate],
    ) -> bool {
        solution.same_shortlist(state, candidates, &self.config.policy)
    }
}

/// A placement: the ranking the index made, the plans the policy chose
/// between (index for index with its candidates) and the decision, with the
/// expected cost of every first move it evaluated.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The job as placed: the work left and the deadline from the decision's
    /// now.
    pub spec: JobSpec,
    /// The ranking index's view of every offer (its counts and messages).
    pub ranking: Ranking,
    /// The plans the policy chose between.
    pub plans: Vec<Plan>,
    /// The policy's candidates, one per plan.
    pub candidates: Vec<Candidate>,
    /// Where the job runs (index into the plans).
    pub current: Option<usize>,
    state: Option<JobState>,
    decision: Option<Decision>,
}

impl Placement {
    /// Decides again over the plans as they stand.
    fn decide(&mut self, placer: &Placer) -> Result<()> {
        if self.plans.is_empty() {
            self.state = None;
            self.decision = None;
            return Ok(());
        }
        let state = plans::job_state(&self.spec, &self.plans, self.current);
        self.decision = Some(placer.decide(&state, &self.candidates)?);
        self.state = Some(state);
        Ok(())
    }

    /// Drops the plans `drop` names (a pool that refused capacity, a cloud
    /// that refused the credentials) and decides again over the rest: the
    /// executor's failover, with the same placer.
    pub fn drop_and_decide(
        &mut self,
        placer: &Placer,
        drop: impl Fn(usize, &Plan) -> bool,
    ) -> Result<()> {
        for i in (0..self.plans.len()).rev() {
            if drop(i, &self.plans[i]) {
                self.plans.remove(i);
                self.candidates.remove(i);
                self.current = match self.current {
                    Some(c) if c == i => None,
                    Some(c) if c > i => Some(c - 1),
                    other => other,
                };
            }
        }
        self.decide(placer)
    }

    /// The decision (`None` when no plan was usable).
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// The job's state as the policy read it.
    pub fn state(&self) -> Option<&JobState> {
        self.state.as_ref()
    }

    /// When the job has a budget and the policy expects no first move to
    /// finish within it: the budget and the cheapest expected cost to
    /// finish the policy found. Then nothing is chosen (`place` exits 3
    /// naming both, a controller does not start the job): a budget excludes,
    /// it is never added to a price.
    pub fn over_budget(&self) -> Option<(Money, Money)> {
        let budget = self.spec.budget?;
        let d = self.decision.as_ref()?;
        let cheapest = d.options.iter().map(|o| o.expected_cost).min()?;
        (cheapest > budget).then_some((budget, cheapest))
    }

    /// The chosen plan and its number (`None`: wait, nothing usable, or
    /// nothing within the budget).
    pub fn chosen(&self) -> Option<(usize, &Plan)> {
        if self.over_budget().is_some() {
            return None;
        }
        match self.decision.as_ref()?.action {
            Action::Run(i) => Some((i, &self.plans[i])),
            Action::Wait => None,
        }
    }

    /// The policy's expected cost to finish when the first move is to run in
    /// `plans[i]` (stay, when it runs there): the figure the decision
    /// compared. `None` for a plan the policy did not evaluate (outside its
    /// shortlist and not the on-demand fallback).
    pub fn expected_cost(&self, i: usize) -> Option<Money> {
        self.decision.as_ref()?.value_of(Action::Run(i))
    }

    /// The policy's expected cost to finish when the first move is to wait.
    pub fn wait_cost(&self) -> Option<Money> {
        self.decision.as_ref()?.value_of(Action::Wait)
    }

    /// The shortlist index of `plans[i]`, dollars per reference work-hour:
    /// what chose the shortlist, not an expected cost.
    pub fn index(&self, i: usize) -> Option<f64> {
        self.decision
            .as_ref()?
            .index_usd_per_work_hour
            .get(i)
            .copied()
    }

    /// Whether the policy modelled `plans[i]` jointly (its shortlist).
    pub fn shortlisted(&self, i: usize) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|d| d.shortlist.contains(&i))
    }

    /// Whether `plans[i]` is the on-demand fallback.
    pub fn fallback(&self, i: usize) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|d| d.on_demand == Some(i))
    }

    /// The plans in the order a person reads them: those the policy
    /// evaluated by their expected cost to finish, then the rest by the
    /// shortlist index.
    pub fn order(&self) -> Vec<usize> {
        let mut evaluated: Vec<(Money, usize)> = (0..self.plans.len())
            .filter_map(|i| self.expected_cost(i).map(|c| (c, i)))
            .collect();
        evaluated.sort();
        let mut rest: Vec<(f64, usize)> = (0..self.plans.len())
            .filter(|i| self.expected_cost(*i).is_none())
            .map(|i| (self.index(i).unwrap_or(f64::INFINITY), i))
            .collect();
        rest.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        evaluated
            .into_iter()
            .map(|(_, i)| i)
            .chain(rest.into_iter().map(|(_, i)| i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::{GpuModel, Snapshot};

    fn job(deadline_h: u64) -> JobSpec {
        JobSpec::builder("t", GpuModel::H100, 8, 20.0)
            .or_gpu(GpuModel::A100_80GB, 8)
            .deadline(Duration::from_secs(deadline_h * 3600))
            .build()
            .unwrap()
    }

    /// The placement's decision is the one the simulator's path makes from
    /// the same state and candidates (a fresh solve, then the action at its
    /// root), and every evaluated option's figure is the decision's.
    #[test]
    fn the_placement_decides_as_the_simulator_does() {
        let placer = Placer::default();
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let evidence = HashMap::new();
        let job = job(48);
        let p = placer
            .place(&PlaceRequest::new(
                &job,
                Snapshot::embedded().offers(),
                &evidence,
                now,
            ))
            .unwrap();
        let d = p.decision().unwrap();
        let state = p.state().unwrap();
        let solution = placer.solve(state, &p.candidates).unwrap();
        let avail: Vec<AvailState> = solution
            .shortlist
            .iter()
            .map(|i| p.candidates[*i].availability.state)
            .collect();
        assert_eq!(solution.action_at(0, 0, None, &avail), d.action);
        let (i, _) = p.chosen().unwrap();
        assert_eq!(p.expected_cost(i), d.value_of(d.action));
        assert_eq!(p.order()[0], i, "the cheapest evaluated option leads");
        assert_eq!(d.index_usd_per_work_hour.len(), p.plans.len());
    }

    /// One conversion, one error: a deadline that has passed is `Timeout`,
    /// marked, from the placer as from `Remaining`.
    #[test]
    fn a_passed_deadline_is_one_error() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let job = job(48);
        let r = Remaining::after(20.0, 5.0, Some(now - time::Duration::hours(1))).unwrap();
        let e = r.time_left_hours(now).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(Remaining::is_deadline_passed(&e));
        assert!(!e.is_retryable());
        let evidence = HashMap::new();
        let e = Placer::default()
            .place(
                &PlaceRequest::new(&job, Snapshot::embedded().offers(), &evidence, now)
                    .remaining(r),
            )
            .unwrap_err();
        assert!(Remaining::is_deadline_passed(&e), "{e}");
        // A call that timed out is not a passed deadline.
        assert!(!Remaining::is_deadline_passed(&Error::new(
            ErrorKind::Timeout,
            "no answer"
        )));
        assert_eq!(
            Remaining::after(20.0, 20.0, None).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let fresh = Remaining::of(&job, now);
        assert_eq!(fresh.work_hours, 20.0);
        assert_eq!(fresh.time_left_hours(now).unwrap(), Some(48.0));
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let e = Placer::new(PlacerConfig::default().with_width(0)).unwrap_err();
        assert!(e.message().contains("width 0"), "{e}");
        let policy = PolicyConfig {
            step_hours: -1.0,
            ..PolicyConfig::default()
        };
        let e = Placer::new(PlacerConfig::default().with_policy(policy)).unwrap_err();
        assert!(e.message().contains("planning step -1"), "{e}");
    }
}
