//! The simulator's `gpufleet` policy: the product's own [`Placer`] (its
//! [`Solution`] and decision), fed by an availability model
//! learnt from what the trace has shown so far.
//!
//! The only simulator-specific part is the learner: a deployed placer reads
//! interruptions and capacity failures from its ledger, while the simulator
//! sees each pool's availability every tick. Both end as the same
//! [`Candidate`]s with per-hour rates, so the decision is the same function.

use super::policy::View;
use super::{Place, SimPool, Ticks};
use crate::placer::hazard::{bucket_rate, HazardModel};
use crate::placer::policy::{
    Action, AvailState, Availability, Candidate, HazardBasis, JobState, OutageAges, PolicyConfig,
    Running, Solution, FRESH_WINDOW_HOURS, OUTAGE_AGE_BANDS, PRIOR_RECOVER_OLD_PER_HOUR,
    PRIOR_RECOVER_YOUNG_PER_HOUR, YOUNG_WINDOW_HOURS,
};
use crate::placer::{Placer, PlacerConfig};
use crate::Capacity;
use crate::InterruptionBucket;

/// How often the placer re-estimates and re-plans during a job when nothing
/// else changes (a change of shortlist re-plans at once).
pub(crate) const RESOLVE_HOURS: f64 = 12.0;

/// Decaying counts of one pool's availability transitions, in ticks.
#[derive(Debug, Clone, Copy, Default)]
struct Transitions {
    /// Ticks seen in each state (indexed by [`AvailState::digit`]).
    ticks: [f64; 4],
    /// Of those, the ones that ended it: the pool went down from up or
    /// fresh, came back from a young or an old outage.
    left: [f64; 4],
    /// Ticks the current outage has lasted (0 when available).
    outage: usize,
    /// Ticks the current available run has lasted (0 when unavailable).
    run: usize,
    seen: bool,
}

/// The learner's windows in ticks.
#[derive(Debug, Clone, Copy)]
struct Windows {
    fresh: usize,
    young: usize,
}

const UP: usize = AvailState::Up.digit();
const FRESH: usize = AvailState::Fresh.digit();
const YOUNG: usize = AvailState::OutageYoung.digit();
const OLD: usize = AvailState::OutageOld.digit();

impl Transitions {
    fn state(&self, w: Windows) -> AvailState {
        if self.run >= 1 && self.run <= w.fresh {
            AvailState::Fresh
        } else if self.outage == 0 {
            AvailState::Up
        } else if self.outage <= w.young {
            AvailState::OutageYoung
        } else {
            AvailState::OutageOld
        }
    }
}

/// gpufleet's online placer in the simulator.
pub(crate) struct Gpufleet {
    model: HazardModel,
    decay: f64,
    windows: Windows,
    tick_h: f64,
    pools: Vec<Transitions>,
    candidates: Vec<Candidate>,
    /// The on-demand candidate's index (after the spot pools).
    od: usize,
    /// The product's placer, planning on the trace's tick (its outage-age
    /// bands are learnt: [`Placer::set_outage_ages`]).
    placer: Placer,
    plan: Option<Solved>,
    /// Instance-hours of evidence the settled hazard's prior is worth.
    prior_hours: f64,
    /// The counts are fixed (known rates): observing only tracks state.
    frozen: bool,
    /// Decayed ticks and recoveries of every pool's later outages together,
    /// by the outage's age band ([`OutageAges::band`]).
    ages: [(f64, f64); OUTAGE_AGE_BANDS],
}

struct Solved {
    plan: Solution,
    at: usize,
    progress: usize,
    /// Ticks per planning step.
    ticks_per_step: usize,
}

impl Gpufleet {
    pub(crate) fn new(pools: &[SimPool], ticks: &Ticks) -> Self {
        let model = HazardModel::default();
        let tick_h = ticks.tick_hours();
        let half = model.half_life.as_secs_f64() / 3600.0;
        let mut candidates: Vec<Candidate> = pools
            .iter()
            .enumerate()
            .map(|(k, p)| Candidate {
                label: format!("spot {} {}", p.pool.instance_type, p.pool.location()),
                price: p.spot,
                work_rate: ticks.speed(k),
                capacity: Capacity::Spot,
                availability: Availability::from_hazard(AvailState::Up, 0.0, 0.0),
                basis: HazardBasis::Measured("availability trace".into()),
            })
            .collect();
        let od = &pools[ticks.od_pool];
        candidates.push(Candidate {
            label: format!("on-demand {}", od.pool.instance_type),
            price: od.on_demand,
            work_rate: 1.0,
            capacity: Capacity::OnDemand,
            availability: Availability::from_hazard(AvailState::Up, 0.0, 0.0),
            basis: HazardBasis::OnDemand,
        });
        Gpufleet {
            decay: 0.5_f64.powf(tick_h / half),
            windows: Windows {
                fresh: (FRESH_WINDOW_HOURS / tick_h).round().max(1.0) as usize,
                young: (YOUNG_WINDOW_HOURS / tick_h).round().max(1.0) as usize,
            },
            tick_h,
            pools: vec![Transitions::default(); pools.len()],
            od: candidates.len() - 1,
            candidates,
            prior_hours: model.prior_strength_hours,
            model,
            placer: Placer::new(PlacerConfig::default().with_policy(PolicyConfig {
                step_hours: tick_h,
                keep_hours: RESOLVE_HOURS,
                ..PolicyConfig::default()
            }))
            .unwrap_or_default(),
            plan: None,
            frozen: false,
            ages: Default::default(),
        }
    }

    /// The same policy with each pool's rates counted, undecayed, over
    /// `window` (the job's own ticks, from the start to the deadline) and
    /// fixed there, every prior worth one hour: see
    /// [`PolicyKind::GpufleetKnownRates`](super::PolicyKind::GpufleetKnownRates).
    /// What it observes afterwards only tells it each pool's state.
    pub(crate) fn with_known_rates(
        pools: &[SimPool],
        ticks: &Ticks,
        window: impl Iterator<Item = Vec<bool>>,
    ) -> Self {
        let mut g = Gpufleet::new(pools, ticks);
        g.decay = 1.0;
        g.prior_hours = 1.0;
        for avail in window {
            g.observe(&avail);
        }
        for p in &mut g.pools {
            *p = Transitions {
                outage: 0,
                run: 0,
                seen: false,
                ..*p
            };
        }
        g.frozen = true;
        g
    }

    pub(crate) fn observe(&mut self, avail: &[bool]) {
        let w = self.windows;
        for (ticks, recovered) in &mut self.ages {
            *ticks *= self.decay;
            *recovered *= self.decay;
        }
        for (p, &a) in self.pools.iter_mut().zip(avail) {
            for x in p.ticks.iter_mut().chain(p.left.iter_mut()) {
                *x *= self.decay;
            }
            if p.seen && !self.frozen {
                let state = p.state(w);
                p.ticks[state.digit()] += 1.0;
                p.left[state.digit()] += f64::from(u8::from(state.is_up() != a));
                if state == AvailState::OutageOld {
                    let band = &mut self.ages[OutageAges::band(p.outage as f64 * self.tick_h)];
                    band.0 += 1.0;
                    band.1 += f64::from(u8::from(a));
                }
            }
            p.outage = if a { 0 } else { p.outage + 1 };
            p.run = match (a, p.seen) {
                (false, _) => 0,
                (true, true) => p.run + 1,
                // First seen with capacity: when it came back is unknown, so
                // it counts as settled, as the product counts a pool its
                // ledger holds no failure for (not as just back, which at the
                // first tick of a trace made every pool look flappy).
                (true, false) => w.fresh + 1,
            };
            p.seen = true;
        }
    }

    /// Per-tick chances estimated from the counts, as per-hour rates: the
    /// hazard with the `>20%` bucket prior worth `prior_hours`, the
    /// others with the traces' pooled chances worth one hour. A prior's
    /// per-hour rate becomes a per-tick chance as 1 − e^(−rate × tick), so it
    /// says the same at any tick length (a rate × tick approximation, clamped
    /// below 1, made one-hour ticks' priors far gloomier than ten-minute
    /// ones). Each pool's outage carries its age, and the policy's outage-age
    /// bands are the ones every pool's outages have shown together, so a pool
    /// in a later outage recovers as outages of its age have here.
    fn refresh_candidates(&mut self) {
        let tick_h = self.tick_h;
        let chance = |rate: f64| -(-rate * tick_h).exp_m1();
        let prior_rate = bucket_rate(InterruptionBucket::Over20);
        let prior_fail = chance(prior_rate);
        let prior_ticks = self.prior_hours / tick_h;
        let hour = 1.0 / tick_h;
        let post =
            |prior: f64, n: f64, k: f64| ((prior * hour + k) / (hour + n)).clamp(1e-4, 0.999);
        let to_rate = |p: f64| -(-p).ln_1p() / tick_h;
        let young_prior = chance(PRIOR_RECOVER_YOUNG_PER_HOUR);
        let old_prior = chance(PRIOR_RECOVER_OLD_PER_HOUR);
        for (k, p) in self.pools.iter().enumerate() {
            let c = &mut self.candidates[k];
            c.availability = Availability {
                state: p.state(self.windows),
                fail_per_hour: to_rate(
                    ((prior_fail * prior_ticks + p.left[UP]) / (prior_ticks + p.ticks[UP]))
                        .clamp(1e-4, 0.999),
                ),
                fresh_fail_per_hour: to_rate(post(
                    chance(prior_rate * (1.0 + self.model.burst_weight)),
                    p.ticks[FRESH],
                    p.left[FRESH],
                )),
                recover_young_per_hour: to_rate(post(young_prior, p.ticks[YOUNG], p.left[YOUNG])),
                recover_old_per_hour: to_rate(post(old_prior, p.ticks[OLD], p.left[OLD])),
                outage_hours: (p.outage > 0).then_some(p.outage as f64 * tick_h),
            };
        }
        // The bands, from every pool's outages by age (each band's prior is
        // the pooled later-outage rate, worth one hour).
        let (n, k) = self
            .ages
            .iter()
            .fold((0.0, 0.0), |(n, k), (t, r)| (n + t, k + r));
        let pooled = post(old_prior, n, k);
        self.placer.set_outage_ages(OutageAges {
            per_hour: self.ages.map(|(n, k)| to_rate(post(pooled, n, k))),
        });
    }

    fn candidate_of(&self, mode: Place) -> Option<usize> {
        match mode {
            Place::Idle => None,
            Place::OnDemand => Some(self.od),
            Place::Spot(k) => Some(k),
        }
    }

    /// The job's state as the policy reads it.
    pub(crate) fn job_state(&self, v: &View<'_>) -> JobState {
        let t = v.ticks;
        let units_left = t.work.saturating_sub(v.progress) as f64;
        JobState {
            work_left_hours: units_left / t.od_units as f64 * self.tick_h,
            time_left_hours: Some(t.deadline.saturating_sub(v.t) as f64 * self.tick_h),
            changeover_hours: t.changeover as f64 * self.tick_h,
            current: self.candidate_of(v.mode).map(|candidate| Running {
                candidate,
                changeover_left_hours: v.changeover_left as f64 * self.tick_h,
            }),
        }
    }

    /// The candidates and the policy's settings (its outage-age bands
    /// learnt) as they stand after `observe`.
    #[cfg(test)]
    pub(crate) fn inputs(&mut self) -> (&[Candidate], &Placer) {
        self.refresh_candidates();
        (&self.candidates, &self.placer)
    }

    pub(crate) fn to_mode(&self, a: Action) -> Place {
        match a {
            Action::Wait => Place::Idle,
            Action::Run(i) if i == self.od => Place::OnDemand,
            Action::Run(i) => Place::Spot(i),
        }
    }

    pub(crate) fn decide(&mut self, v: &View<'_>) -> Place {
        self.observe(v.avail);
        if v.changeover_left > 0 {
            return v.mode;
        }
        let job = self.job_state(v);
        self.refresh_candidates();
        let current = self.candidate_of(v.mode);
        let resolve = (RESOLVE_HOURS / self.tick_h).round().max(1.0) as usize;
        let stale = match &self.plan {
            None => true,
            Some(s) => {
                v.t >= s.at + resolve
                    || !s.plan.answers_at((v.t - s.at) / s.ticks_per_step)
                    || !s.plan.covers(current)
                    || !self.placer.same_shortlist(&s.plan, &job, &self.candidates)
            }
        };
        if stale {
            let Ok(plan) = self.placer.solve(&job, &self.candidates) else {
                return Place::OnDemand;
            };
            let ticks_per_step = (plan.step_hours / self.tick_h).round().max(1.0) as usize;
            self.plan = Some(Solved {
                plan,
                at: v.t,
                progress: v.progress,
                ticks_per_step,
            });
        }
        let Some(s) = &self.plan else {
            return Place::OnDemand;
        };
        let avail: Vec<AvailState> = s
            .plan
            .shortlist
            .iter()
            .map(|k| self.candidates[*k].availability.state)
            .collect();
        let steps = (v.t - s.at) / s.ticks_per_step;
        let progress = (v.progress - s.progress) / (s.ticks_per_step * v.ticks.od_units);
        self.to_mode(s.plan.action_at(steps, progress, current, &avail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{parse_manifest, to_ticks, Scenario};

    fn pools() -> Vec<SimPool> {
        pools_every(10)
    }

    /// The three pools, with ticks of `minutes`.
    fn pools_every(minutes: i64) -> Vec<SimPool> {
        let manifest = "file,cloud,region,zone,instance_type,on_demand_price,spot_price\n\
                        a.csv,aws,us-west-2,us-west-2a,p3.2xlarge,3.06,1.01\n\
                        b.csv,aws,us-west-2,us-west-2b,p3.2xlarge,3.06,0.94\n\
                        c.csv,aws,us-west-2,us-west-2c,p3.2xlarge,3.06,0.90\n";
        parse_manifest(manifest, |f| {
            // Different deterministic flapping per pool.
            let (period, down) = match f {
                "a.csv" => (13, 3),
                "b.csv" => (29, 11),
                _ => (7, 4),
            };
            let mut s = String::from("index,time,preempted\n");
            let start = time::macros::datetime!(2022-10-26 00:00 UTC);
            for i in 0..2000 {
                let at = start + time::Duration::minutes(minutes * i as i64);
                let flag = u8::from(i % period < down);
                s.push_str(&format!(
                    "{i},{},{flag}\n",
                    at.format(&time::format_description::well_known::Rfc3339)
                        .map_err(|e| crate::Error::invalid_input(e.to_string()))?
                ));
            }
            Ok(s)
        })
        .expect("manifest")
    }

    /// The three pools and a 6 h job with a 10 h deadline over them.
    fn scenario() -> (Vec<SimPool>, Ticks) {
        let pools = pools();
        let scenario = Scenario {
            job_hours: 6.0,
            deadline_hours: 10.0,
            changeover_hours: 1.0 / 6.0,
            starts: 1,
        };
        let (ticks, _) = to_ticks(&pools, &scenario).expect("ticks");
        (pools, ticks)
    }

    /// A job with `slack` hours to spare.
    fn job(slack: f64) -> JobState {
        JobState {
            work_left_hours: 6.0,
            time_left_hours: Some(6.0 + slack),
            changeover_hours: 1.0 / 6.0,
            current: None,
        }
    }

    /// The spot pools' availability models as the learner stands, as the
    /// policy reads them for a job with 4 h of slack (an outage's age
    /// priced).
    fn models(g: &mut Gpufleet) -> Vec<Availability> {
        let job = job(4.0);
        let (candidates, placer) = g.inputs();
        let config = &placer.config().policy;
        candidates
            .iter()
            .take(3)
            .map(|c| {
                c.availability
                    .aged(&config.outage_ages, job.outage_horizon(config))
            })
            .collect()
    }

    /// Before it has counted anything the learner holds its priors, which
    /// are per-hour rates: the same with 10-minute and one-hour ticks. A
    /// pool first seen with capacity is settled (when it came back is
    /// unknown); one seen coming back is fresh.
    #[test]
    fn priors_do_not_depend_on_the_tick_and_a_pool_first_seen_up_is_settled() {
        let learnt = |minutes: i64| {
            let pools = pools_every(minutes);
            let scenario = Scenario {
                job_hours: 6.0,
                deadline_hours: 10.0,
                changeover_hours: 1.0,
                starts: 1,
            };
            let (ticks, _) = to_ticks(&pools, &scenario).expect("ticks");
            assert!((ticks.tick_hours() - minutes as f64 / 60.0).abs() < 1e-9);
            let mut g = Gpufleet::new(&pools, &ticks);
            g.observe(&[true, true, false]);
            let first: Vec<Availability> =
                g.inputs().0[..3].iter().map(|c| c.availability).collect();
            g.observe(&[true, false, true]);
            let states: Vec<AvailState> = g.inputs().0[..3]
                .iter()
                .map(|c| c.availability.state)
                .collect();
            (first, states)
        };
        let (ten, ten_states) = learnt(10);
        let (hour, hour_states) = learnt(60);
        for states in [&ten_states, &hour_states] {
            assert_eq!(
                states,
                &[AvailState::Up, AvailState::OutageYoung, AvailState::Fresh]
            );
        }
        for (a, b) in ten.iter().zip(&hour) {
            assert_eq!(a.state, b.state);
            for (x, y, what) in [
                (a.fail_per_hour, b.fail_per_hour, "hazard"),
                (a.fresh_fail_per_hour, b.fresh_fail_per_hour, "fresh"),
                (a.recover_young_per_hour, b.recover_young_per_hour, "young"),
                (a.recover_old_per_hour, b.recover_old_per_hour, "old"),
            ] {
                assert!((x - y).abs() < 1e-9 * x.max(1.0), "{what}: {x} vs {y}");
            }
        }
        let up = ten[0];
        let prior = bucket_rate(InterruptionBucket::Over20);
        assert!((up.fail_per_hour - prior).abs() < 1e-9);
        assert!(
            (up.fresh_fail_per_hour - prior * (1.0 + HazardModel::default().burst_weight)).abs()
                < 1e-9
        );
    }

    /// The simulator's policy and the function the executor calls take the
    /// same decision in the same state, at every tick of a run.
    #[test]
    fn the_simulator_decides_as_the_executor_does() {
        let (pools, ticks) = scenario();
        let mut g = Gpufleet::new(&pools, &ticks);
        let (spot_tick, _) = crate::sim::policy::prices(&pools, &ticks);
        for at in 0..200 {
            g.observe(&crate::sim::policy::available(&pools, at));
        }
        let mut compared = 0;
        for (t, progress, mode) in [
            (0, 0, Place::Idle),
            (5, 3, Place::Spot(0)),
            (10, 6, Place::Spot(2)),
            (20, 10, Place::OnDemand),
            (40, 12, Place::Idle),
            (50, 20, Place::Spot(1)),
        ] {
            let avail = crate::sim::policy::available(&pools, 200 + t);
            let view = View {
                t,
                progress,
                mode,
                changeover_left: 0,
                avail: &avail,
                ticks: &ticks,
                spot_tick: &spot_tick,
            };
            // What the simulator does at a decision point (a fresh plan)...
            let mut sim = Gpufleet::new(&pools, &ticks);
            sim.pools = g.pools.clone();
            sim.ages = g.ages;
            let sim_mode = sim.decide(&view);
            // ...and what the executor's call says, from the same state.
            let mut probe = Gpufleet::new(&pools, &ticks);
            probe.pools = sim.pools.clone();
            probe.ages = sim.ages;
            let job = probe.job_state(&view);
            let (candidates, placer) = probe.inputs();
            let d = placer.decide(&job, candidates).expect("decide");
            assert_eq!(
                sim_mode,
                probe.to_mode(d.action),
                "t {t}: {}",
                d.explanation
            );
            compared += 1;
        }
        assert_eq!(compared, 6);
    }

    /// The diagnostic learner counts the window it is given, undecayed, and
    /// keeps those rates: later ticks move each pool's state (and with an
    /// outage's age, the recovery its fixed age bands give), never its rates.
    #[test]
    fn known_rates_are_the_windows_and_stay_fixed() {
        let (pools, ticks) = scenario();
        let window = (0..600).map(|at| crate::sim::policy::available(&pools, at));
        let mut g = Gpufleet::with_known_rates(&pools, &ticks, window);
        let rates = models(&mut g);
        // Pool a is up 10 ticks in 13 and lost once a cycle: 7 of its up
        // ticks are settled (after the 3-tick fresh window), so the settled
        // chance of loss is 1 in 7 a tick (the one-hour prior moves it <2%).
        let per_tick = 1.0 - (-rates[0].fail_per_hour * g.tick_h).exp();
        assert!((per_tick - 1.0 / 7.0).abs() < 0.01, "{per_tick}");
        // Pool c is up 3 ticks in 7: every run ends inside the fresh window.
        let fresh = 1.0 - (-rates[2].fresh_fail_per_hour * g.tick_h).exp();
        assert!((fresh - 1.0 / 3.0).abs() < 0.02, "{fresh}");
        // What it sees afterwards (an outage everywhere) moves the states...
        for _ in 0..20 {
            g.observe(&[false, false, false]);
        }
        let ages = g.ages;
        let after = models(&mut g);
        for (a, b) in rates.iter().zip(&after) {
            assert_eq!(b.state, AvailState::OutageOld);
            // ...and not the rates.
            assert_eq!(
                (a.fail_per_hour, a.fresh_fail_per_hour),
                (b.fail_per_hour, b.fresh_fail_per_hour)
            );
        }
        assert_eq!(ages, g.ages);
        // The ordinary learner, from the same ticks, still leans on its
        // 24-hour prior.
        let mut learnt = Gpufleet::new(&pools, &ticks);
        for at in 0..600 {
            learnt.observe(&crate::sim::policy::available(&pools, at));
        }
        let per_tick = 1.0 - (-models(&mut learnt)[0].fail_per_hour * g.tick_h).exp();
        assert!((per_tick - 1.0 / 7.0).abs() > 0.02, "{per_tick}");
    }

    /// Outages that have lasted long are hoped for less than young ones: the
    /// learner reads the recovery of a pool's current outage from the
    /// outages of its age, not from the average of all outages.
    #[test]
    fn a_long_outage_is_expected_to_last() {
        let (pools, ticks) = scenario();
        let mut learnt = Gpufleet::new(&pools, &ticks);
        // On the first pool, two outages of 30 minutes then one of 20 hours,
        // four times, with 4 hours up after each (the other pools stay up).
        for k in 0..12 {
            let down = if k % 3 == 2 { 120 } else { 3 };
            for i in 0..down + 24 {
                learnt.observe(&[i >= down, true, true]);
            }
        }
        let outage_of = |down: usize| {
            let mut g = Gpufleet {
                pools: learnt.pools.clone(),
                ages: learnt.ages,
                ..Gpufleet::new(&pools, &ticks)
            };
            for _ in 0..down {
                g.observe(&[false, true, true]);
            }
            models(&mut g)[0]
        };
        let (young, old) = (outage_of(3), outage_of(36));
        assert_eq!(young.state, AvailState::OutageOld);
        assert_eq!(old.state, AvailState::OutageOld);
        // A 30-minute outage has usually ended within the next hour here;
        // one six hours old has four hours to go.
        assert!(
            young.recover_old_per_hour > 4.0 * old.recover_old_per_hour,
            "{} vs {}",
            young.recover_old_per_hour,
            old.recover_old_per_hour
        );
        // The pool's own average over all its later outages lies between.
        let average = models(&mut learnt)[0].recover_old_per_hour;
        assert!(
            young.recover_old_per_hour > average && average > old.recover_old_per_hour,
            "{} > {average} > {}",
            young.recover_old_per_hour,
            old.recover_old_per_hour
        );
    }
}
