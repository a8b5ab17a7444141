//! Tests of the placement policy.

use super::*;

const TICK_H: f64 = 1.0 / 6.0;

/// A per-hour rate from a per-10-minute-tick chance.
fn rate(p: f64) -> f64 {
    -(-p).ln_1p() / TICK_H
}

fn spot(label: &str, per_tick_micros: i64, state: AvailState, a: [f64; 4]) -> Candidate {
    Candidate {
        label: label.into(),
        price: Price::from_micros_per_hour(per_tick_micros * 6),
        work_rate: 1.0,
        capacity: Capacity::Spot,
        availability: Availability {
            state,
            fresh_fail_per_hour: rate(a[0]),
            fail_per_hour: rate(a[1]),
            recover_young_per_hour: rate(a[2]),
            recover_old_per_hour: rate(a[3]),
            outage_hours: None,
        },
        basis: HazardBasis::Measured("test".into()),
    }
}

fn on_demand(per_tick_micros: i64) -> Candidate {
    Candidate {
        label: "on-demand".into(),
        price: Price::from_micros_per_hour(per_tick_micros * 6),
        work_rate: 1.0,
        capacity: Capacity::OnDemand,
        availability: Availability::from_hazard(AvailState::Up, 0.0, 0.0),
        basis: HazardBasis::OnDemand,
    }
}

fn idle_job(work_ticks: usize, deadline_ticks: usize, changeover_ticks: usize) -> JobState {
    JobState {
        work_left_hours: work_ticks as f64 * TICK_H,
        time_left_hours: Some(deadline_ticks as f64 * TICK_H),
        changeover_hours: changeover_ticks as f64 * TICK_H,
        current: None,
    }
}

/// `job` running on candidate `candidate`, past its changeover.
fn running_on(job: JobState, candidate: usize) -> JobState {
    JobState {
        current: Some(Running {
            candidate,
            changeover_left_hours: 0.0,
        }),
        ..job
    }
}

fn config() -> PolicyConfig {
    PolicyConfig {
        step_hours: TICK_H,
        ..PolicyConfig::default()
    }
}

/// Pool 0 is in an outage but recovers quickly and is stable once back;
/// pool 1 is available now, costs `price` per tick against pool 0's 100,
/// and loses capacity with chance `flaky` per tick. Returns the model's own
/// choice, the policy's choice, and how much dearer taking pool 1 is than
/// idling, in changeovers of pool 1.
fn hedge(flaky: f64, price: i64) -> (usize, Action, f64) {
    let cands = vec![
        spot(
            "stable",
            100,
            AvailState::OutageOld,
            [0.01, 0.001, 0.6, 0.5],
        ),
        spot("flappy", price, AvailState::Up, [flaky, flaky, 0.9, 0.9]),
        on_demand(300),
    ];
    let (best, action, idle, take) = idle_or_take_pool_1(&cands, &idle_job(6, 40, 1));
    (best, action, (take - idle) / price as f64)
}

/// Solves `job` over `cands` (two spot pools and on-demand) and returns the
/// model's own choice at the root, the policy's action, and the model's
/// expected cost of idling and of taking pool 1 now.
fn idle_or_take_pool_1(cands: &[Candidate], job: &JobState) -> (usize, Action, f64, f64) {
    let sol = Solution::solve(job, cands, &config()).unwrap();
    assert_eq!(sol.shortlist.len(), 2);
    let mdp = sol.mdp.as_ref().unwrap();
    let avail: Vec<AvailState> = sol
        .shortlist
        .iter()
        .map(|i| cands[*i].availability.state)
        .collect();
    let a = chain::joint(&avail);
    let mode_1 = 2 + sol.shortlist.iter().position(|i| *i == 1).unwrap();
    let best = mdp.best(0, 0, 0, a).map(|(m, _)| m).unwrap_or(1);
    let (mut idle, mut take) = (0.0, 0.0);
    mdp.options(0, 0, 0, a, |m, c| {
        if m == 0 {
            idle = c;
        } else if m == mode_1 {
            take = c;
        }
    });
    let d = decide(job, cands, &config()).unwrap();
    (best, d.action, idle, take)
}

#[test]
fn idles_beside_spot_only_when_waiting_saves_a_changeover() {
    // A flappy pool at the same price: the model prefers to wait for the
    // stable one, but waiting saves less than a changeover, so the policy
    // takes the spot capacity that is there.
    let (best, action, gap) = hedge(0.3, 100);
    assert_eq!(best, 0, "the model alone would idle (gap {gap:.2})");
    assert!(gap < 1.0, "gap {gap:.2}");
    assert_eq!(action, Action::Run(1));
    // At twice the price waiting for the cheap one saves more than a
    // changeover: it waits.
    let (best, action, gap) = hedge(0.3, 200);
    assert_eq!(best, 0);
    assert!(gap >= 1.0, "gap {gap:.2}");
    assert_eq!(action, Action::Wait);
}

/// A cheap pool in an outage that recovers with chance `recover` per tick,
/// and a pool at `price` per tick (the cheap one costs 100) that is up now and
/// fails with chance `flaky` per tick; a 30-tick job, 60 ticks to the
/// deadline, 3-tick changeovers. Returns the policy's action and what
/// waiting saves against taking the dear pool, in changeovers of the cheap
/// pool and of the dear one.
fn dear_or_wait(price: i64, recover: f64, flaky: f64) -> (Action, f64, f64) {
    let cands = vec![
        spot(
            "cheap",
            100,
            AvailState::OutageOld,
            [0.01, 0.001, recover, recover],
        ),
        spot("dear", price, AvailState::Up, [flaky, flaky, 0.9, 0.9]),
        on_demand(3000),
    ];
    let (_, action, idle, take) = idle_or_take_pool_1(&cands, &idle_job(30, 60, 3));
    let saved = take - idle;
    (action, saved / 300.0, saved / (3.0 * price as f64))
}

#[test]
fn the_idle_bar_is_a_changeover_on_the_cheapest_pool_whichever_it_would_take() {
    // Waiting for the cheap pool saves more than one of its changeovers but
    // less than one of the dear pool's: it waits. (Priced on the pool it
    // would take, the bar let a dear pool win here, and the job paid a
    // changeover to come back when the cheap pool returned.)
    for (price, recover, flaky) in [(200, 0.02, 0.01), (400, 0.05, 0.05), (800, 0.02, 0.05)] {
        let (action, cheap, dear) = dear_or_wait(price, recover, flaky);
        assert!(
            cheap >= 1.0 && dear < 1.0,
            "price {price}: saves {cheap:.2} cheap and {dear:.2} dear changeovers"
        );
        assert_eq!(action, Action::Wait, "price {price}");
    }
    // Saving less than one changeover of the cheap pool: it takes the dear
    // pool that is there.
    let (action, cheap, _) = dear_or_wait(200, 0.05, 0.05);
    assert!(cheap > 0.0 && cheap < 1.0, "saves {cheap:.2}");
    assert_eq!(action, Action::Run(1));
}

#[test]
fn takes_on_demand_when_slack_runs_out_and_waits_when_there_is_plenty() {
    let down = [0.05, 0.02, 0.6, 0.05];
    let cands = vec![spot("s", 100, AvailState::OutageOld, down), on_demand(300)];
    // No slack beyond a changeover: on-demand.
    let d = decide(&idle_job(30, 31, 1), &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(1), "{}", d.explanation);
    assert!(
        d.explanation.starts_with("start on-demand"),
        "{}",
        d.explanation
    );
    // Days of slack for a short job: wait for spot.
    let d = decide(&idle_job(6, 400, 1), &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Wait, "{}", d.explanation);
    // An impossible deadline: on-demand, and it says so.
    let d = decide(&idle_job(30, 20, 1), &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(1));
    assert!(d.explanation.contains("cannot be met"), "{}", d.explanation);
}

#[test]
fn stays_while_starting_and_on_a_good_pool() {
    let up = [0.05, 0.01, 0.6, 0.05];
    let cands = vec![
        spot("a", 100, AvailState::Up, up),
        spot("b", 95, AvailState::Up, up),
        on_demand(300),
    ];
    let mut job = idle_job(30, 60, 2);
    job.current = Some(Running {
        candidate: 0,
        changeover_left_hours: TICK_H,
    });
    let d = decide(&job, &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(0));
    assert!(
        d.explanation.contains("still starting"),
        "{}",
        d.explanation
    );
    // Running: a 5 % cheaper pool does not pay for a two-tick changeover.
    job.current = Some(Running {
        candidate: 0,
        changeover_left_hours: 0.0,
    });
    let d = decide(&job, &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(0), "{}", d.explanation);
    assert!(
        d.shortlist.contains(&0),
        "the current pool is always modelled"
    );
    // The alternatives are first moves: on-demand is named as one, not as a
    // course to the end.
    assert!(
        d.explanation.contains(" on-demand for now)"),
        "{}",
        d.explanation
    );
    // On on-demand, staying there is named as staying.
    let on_od = running_on(idle_job(30, 60, 2), 2);
    let d = decide(&on_od, &cands, &config()).unwrap();
    assert_ne!(d.action, Action::Run(2), "{}", d.explanation);
    assert!(
        d.explanation.contains("staying on on-demand"),
        "{}",
        d.explanation
    );
}

#[test]
fn no_deadline_uses_spot_and_never_aborts() {
    let cands = vec![
        spot("s", 100, AvailState::Up, [0.05, 0.01, 0.6, 0.05]),
        on_demand(300),
    ];
    let mut job = idle_job(6 * 500, 0, 1);
    job.time_left_hours = None;
    let d = decide(&job, &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(0), "{}", d.explanation);
    // A 500-hour job on 10-minute steps is planned on coarser steps.
    assert!(d.step_hours > TICK_H, "step {}", d.step_hours);
}

#[test]
fn the_shortlist_is_small_and_picks_by_price_per_work_and_availability() {
    let up = [0.05, 0.01, 0.6, 0.05];
    let mut cands: Vec<Candidate> = (0..1000)
        .map(|i| spot(&format!("p{i}"), 200 + (i % 97) as i64, AvailState::Up, up))
        .collect();
    // The cheapest pool is in a long outage; a cheap one is twice as fast.
    cands[500] = spot("down", 50, AvailState::OutageOld, [0.05, 0.01, 0.6, 0.001]);
    cands[700].work_rate = 2.0;
    cands.push(on_demand(900));
    let d = decide(&idle_job(36, 72, 1), &cands, &config()).unwrap();
    assert_eq!(d.shortlist.len(), 3, "a 6 h job's solve fits a third pool");
    assert_eq!(d.shortlist[0], 700, "cheapest per unit of work that is up");
    assert!(!d.shortlist.contains(&500));
    assert_eq!(d.action, Action::Run(700), "{}", d.explanation);
    assert!(d
        .options
        .windows(2)
        .all(|w| w[0].expected_cost <= w[1].expected_cost));
    // A 48 h job with a 72 h deadline does not: two pools, the same first.
    let long = decide(&idle_job(48 * 6, 72 * 6, 1), &cands, &config()).unwrap();
    assert_eq!(long.shortlist.len(), 2);
    assert_eq!(long.shortlist[0], 700);
    // Nor does a short one when the budget is spent, and a narrower setting
    // is kept.
    for (shortlist, solve_budget, want) in [(3, 0, 2), (1, usize::MAX, 1), (2, usize::MAX, 2)] {
        let c = PolicyConfig {
            shortlist,
            solve_budget,
            ..config()
        };
        let d = decide(&idle_job(36, 72, 1), &cands, &c).unwrap();
        assert_eq!(
            d.shortlist.len(),
            want,
            "shortlist {shortlist}, budget {solve_budget}"
        );
    }
}

/// An any-of job whose cheapest pools per work-hour are slow (speed 0.2
/// against an on-demand fallback of 1): the shortlist keeps one pool that
/// keeps pace with the fallback, so the model sees a way to earn slack back
/// and to move when a faster pool is up. The pool the job runs on stays, and
/// with no spot pool as fast as the fallback nothing changes.
#[test]
fn the_shortlist_keeps_a_pool_as_fast_as_the_fallback() {
    let up = [0.05, 0.01, 0.6, 0.05];
    let slow = |label: &str| Candidate {
        work_rate: 0.2,
        ..spot(label, 45, AvailState::Up, up)
    };
    let fast = |label: &str, price: i64| Candidate {
        work_rate: 1.35,
        ..spot(label, price, AvailState::Up, up)
    };
    let mut cands = vec![
        slow("k80 a"),
        slow("k80 b"),
        slow("k80 c"),
        fast("p2.8xlarge a", 360),
        fast("p2.8xlarge b", 400),
        on_demand(510),
    ];
    let job = idle_job(48 * 6, 60 * 6, 3);
    // Running on a slow pool: it stays, and the other place is the fast one.
    assert_eq!(shortlists_of_two(&cands, job, 1), [vec![0, 3], vec![1, 3]]);
    // A fast pool the index ranks in anyway is not doubled.
    cands[4] = fast("p2.8xlarge b", 30);
    assert_eq!(shortlists_of_two(&cands, job, 1)[0], vec![4, 0]);
    // No spot pool keeps pace: the index alone.
    cands.truncate(3);
    cands.push(on_demand(510));
    assert_eq!(shortlists_of_two(&cands, job, 1)[0], vec![0, 1]);
}

/// The shortlists of two a job gets idle and running on `running`.
fn shortlists_of_two(cands: &[Candidate], job: JobState, running: usize) -> [Vec<usize>; 2] {
    let two = PolicyConfig {
        shortlist: 2,
        ..config()
    };
    [job, running_on(job, running)].map(|j| decide(&j, cands, &two).unwrap().shortlist)
}

/// A loss costs what the slack cannot absorb. Three cheap pools that lose
/// capacity often (hazard 0.2/h) and two dearer steady ones (0.05/h), for
/// 10 h of work due in 12 with a 45-minute changeover: the slack pays for one
/// loss, and a second sends the rest to on-demand, so the steady pools are
/// the ones worth modelling, and the job starts on one (the product's 8xA100
/// case, where the old index, price per work-hour × (1 + hazard ×
/// changeover), shortlisted the three risky pools and expected $266 against
/// $208). With a day of slack every loss is only a changeover, and the
/// cheap pools come first again.
#[test]
fn the_shortlist_index_prices_a_loss_the_slack_cannot_absorb() {
    let hazard = |label: &str, price: i64, per_hour: f64| Candidate {
        availability: Availability::from_hazard(AvailState::Up, per_hour, 4.0),
        ..spot(label, price, AvailState::Up, [0.0; 4])
    };
    let cands = vec![
        hazard("risky a", 50, 0.2),
        hazard("risky b", 50, 0.2),
        hazard("risky c", 60, 0.2),
        hazard("steady a", 71, 0.05),
        hazard("steady b", 72, 0.05),
        on_demand(450),
    ];
    let tight = JobState {
        work_left_hours: 10.0,
        time_left_hours: Some(12.0),
        changeover_hours: 0.75,
        current: None,
    };
    let d = decide(&tight, &cands, &config()).unwrap();
    assert_eq!(&d.shortlist[..2], &[3, 4], "{}", d.explanation);
    assert_eq!(d.action, Action::Run(3), "{}", d.explanation);
    let loose = JobState {
        time_left_hours: Some(36.0),
        ..tight
    };
    let d = decide(&loose, &cands, &config()).unwrap();
    assert_eq!(&d.shortlist[..2], &[0, 1], "{}", d.explanation);
    // No deadline: the same order as a day of slack.
    let open = JobState {
        time_left_hours: None,
        ..tight
    };
    let d = decide(&open, &cands, &config()).unwrap();
    assert_eq!(&d.shortlist[..2], &[0, 1], "{}", d.explanation);
}

/// The wait for a pool in an outage, against the survival curve summed in
/// small steps: the chance it is back by then, and the mean wait given that.
#[test]
fn the_wait_for_capacity_matches_its_survival_curve() {
    let spans = [
        (AvailState::OutageYoung, [0.1, 3.0]),
        (AvailState::OutageOld, [3.0, 40.0]),
    ];
    for (state, s) in spans.iter().flat_map(|(st, ss)| ss.map(|s| (*st, s))) {
        let a = spot("p", 100, state, [0.1, 0.01, 0.6, 0.05]).availability;
        let survive = |t: f64| match state {
            AvailState::OutageOld => (-a.recover_old_per_hour * t).exp(),
            _ if t <= YOUNG_WINDOW_HOURS => (-a.recover_young_per_hour * t).exp(),
            _ => {
                (-a.recover_young_per_hour * YOUNG_WINDOW_HOURS).exp()
                    * (-a.recover_old_per_hour * (t - YOUNG_WINDOW_HOURS)).exp()
            }
        };
        let n = 200_000;
        let dt = s / n as f64;
        let waited: f64 = (0..n).map(|i| survive((i as f64 + 0.5) * dt) * dt).sum();
        let reach = 1.0 - survive(s);
        let given = (waited - survive(s) * s) / reach;
        let (r, w) = a.wait_within(s);
        assert!((r - reach).abs() < 1e-9, "{state:?} {s}: {r} vs {reach}");
        assert!((w - given).abs() < 1e-6, "{state:?} {s}: {w} vs {given}");
        assert!(w > 0.0 && w < s);
    }
    let up = spot("p", 100, AvailState::Up, [0.1, 0.01, 0.6, 0.05]).availability;
    assert_eq!(up.wait_within(5.0), (1.0, 0.0));
}

/// The steady pool the job ran on has just lost capacity; it usually
/// comes back within the hour, and the job has 9.5 h of slack. Three pools
/// that are up but lose capacity every hour or two are dearer to finish on
/// than waiting for it, so it stays on the shortlist (the index charges the
/// wait to the slack, not to the price) and the model waits for it. A pool
/// whose outages last a week drops off; with 20 minutes of slack the job
/// goes to on-demand.
#[test]
fn the_shortlist_keeps_a_steady_pool_worth_waiting_for() {
    let steady = |state, recover: f64| spot("steady", 100, state, [0.002, 0.002, recover, recover]);
    let flaky = |label: &str, price| spot(label, price, AvailState::Up, [0.1, 0.1, 0.3, 0.3]);
    let mut cands = vec![
        steady(AvailState::OutageYoung, 0.15),
        flaky("flaky a", 110),
        flaky("flaky b", 115),
        flaky("flaky c", 120),
        on_demand(300),
    ];
    let job = idle_job(60, 120, 3);
    let d = decide(&job, &cands, &config()).unwrap();
    assert_eq!(d.shortlist[0], 0, "{}", d.explanation);
    assert_eq!(d.action, Action::Wait, "{}", d.explanation);
    // Later in the outage: the same.
    cands[0] = steady(AvailState::OutageOld, 0.15);
    let d = decide(&job, &cands, &config()).unwrap();
    assert_eq!(d.shortlist[0], 0, "{}", d.explanation);
    // An outage of a week on average is not worth waiting for.
    cands[0] = steady(AvailState::OutageOld, 0.001);
    let d = decide(&job, &cands, &config()).unwrap();
    assert!(!d.shortlist.contains(&0), "{}", d.explanation);
    // Nor is an hour's outage with 20 minutes of slack: on-demand.
    cands[0] = steady(AvailState::OutageOld, 0.15);
    let tight = JobState {
        time_left_hours: Some(10.0 + 0.5 + 1.0 / 3.0),
        ..job
    };
    let d = decide(&tight, &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(4), "{}", d.explanation);
}

/// Two fast pools are down but worth waiting for; the one pool with
/// capacity is slow. A shortlist of two keeps the slow pool in the second
/// place, so the model can run on it while it waits; the first place is the
/// pool worth waiting for, and the pool the job runs on is never displaced.
#[test]
fn the_shortlist_keeps_a_pool_that_is_up() {
    let down =
        |label: &str, price| spot(label, price, AvailState::OutageOld, [0.01, 0.005, 0.1, 0.1]);
    let mut cands = vec![
        down("fast a", 100),
        down("fast b", 105),
        spot("slow", 30, AvailState::Up, [0.05, 0.02, 0.3, 0.3]),
        on_demand(300),
    ];
    cands[2].work_rate = 0.2;
    // Running on the slow pool: it stays first, and a fast pool is beside it.
    let job = idle_job(48 * 6, 72 * 6, 3);
    assert_eq!(shortlists_of_two(&cands, job, 2), [vec![0, 2], vec![2, 0]]);
}

#[test]
fn the_solve_cells_count_every_unforced_pair_once() {
    // 3 steps, 2 of work, no changeover: t 0 has progress 0 and 1 unforced
    // (slack 1 and 2), t 1 has progress 0 (slack 0) and 1, t 2 only 1.
    assert_eq!(mdp::Mdp::solve_cells(3, 2, 0, 1), (2 + 2 + 1) * 4 * 3);
    // The benchmark's decision: 48 h of work, 72 h deadline, 10-minute steps.
    assert_eq!(mdp::Mdp::solve_cells(432, 288, 1, 2), 5_299_200);
    assert!(mdp::Mdp::solve_cells(432, 288, 1, 3) > super::DEFAULT_SOLVE_BUDGET);
    // A third pool from the start: 12 h / 24 h and 20 h / 24 h, not
    // 24 h / 30 h.
    for (steps, work, fits) in [(144, 72, true), (144, 120, true), (180, 144, false)] {
        let cells = mdp::Mdp::solve_cells(steps, work, 1, 3);
        assert_eq!(
            cells <= super::DEFAULT_SOLVE_BUDGET,
            fits,
            "{steps} steps, {work} of work: {cells}"
        );
    }
}

#[test]
fn a_decision_does_not_depend_on_the_step_in_clear_cases() {
    let up = [0.1, 0.02, 0.6, 0.05];
    let cands = vec![
        spot("a", 100, AvailState::Up, up),
        spot("b", 120, AvailState::OutageYoung, up),
        on_demand(300),
    ];
    for step in [TICK_H, 195.0 / 3600.0, 60.0 / 3600.0, 0.5] {
        let c = PolicyConfig {
            step_hours: step,
            ..PolicyConfig::default()
        };
        let d = decide(&idle_job(24 * 6, 36 * 6, 1), &cands, &c).unwrap();
        assert_eq!(d.action, Action::Run(0), "step {step}: {}", d.explanation);
        let d = decide(&idle_job(24 * 6, 24 * 6 + 1, 1), &cands, &c).unwrap();
        assert_eq!(d.action, Action::Run(2), "step {step}: {}", d.explanation);
    }
}

#[test]
fn bad_input_names_the_value() {
    let cands = vec![on_demand(300)];
    let mut job = idle_job(6, 12, 1);
    job.work_left_hours = f64::NAN;
    let e = decide(&job, &cands, &config()).unwrap_err();
    assert!(e.to_string().contains("invalid work left"), "{e}");
    let mut job = idle_job(6, 12, 1);
    job.time_left_hours = Some(-1.0);
    let e = decide(&job, &cands, &config()).unwrap_err();
    assert!(e.to_string().contains("-1"), "{e}");
    let e = decide(&idle_job(6, 12, 1), &[], &config()).unwrap_err();
    assert!(e.to_string().contains("no candidate"), "{e}");
    let mut job = idle_job(6, 12, 1);
    job.current = Some(Running {
        candidate: 5,
        changeover_left_hours: 0.0,
    });
    let e = decide(&job, &cands, &config()).unwrap_err();
    assert!(e.to_string().contains("candidate 5 of 1"), "{e}");
    // A huge deadline is planned on coarse steps within the memory bound.
    let mut job = idle_job(6, 12, 1);
    job.time_left_hours = Some(1e12);
    let d = decide(&job, &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(0));
}

#[test]
fn the_explanation_says_where_the_hazard_comes_from() {
    let mut a = spot("spot azure", 100, AvailState::Up, [0.05, 0.03, 0.6, 0.05]);
    a.basis = HazardBasis::Assumed("no published eviction rate".into());
    let mut b = spot("spot aws", 130, AvailState::Up, [0.02, 0.005, 0.6, 0.05]);
    b.basis = HazardBasis::Published("interruption-bucket:<5%".into());
    let cands = vec![a, b, on_demand(400)];
    let d = decide(&idle_job(12, 36, 1), &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(0), "{}", d.explanation);
    assert!(
        d.explanation
            .contains("assumed: no published eviction rate"),
        "{}",
        d.explanation
    );
    assert!(
        d.explanation
            .contains("cheaper per unit of work than the safer spot aws"),
        "{}",
        d.explanation
    );
}

/// A safer and cheaper pool that was not chosen is named with the reason.
#[test]
fn the_explanation_names_a_safer_cheaper_pool_and_why_it_lost() {
    let risky = spot("spot risky", 100, AvailState::Up, [0.3, 0.05, 0.6, 0.1]);
    let down = spot(
        "spot down",
        60,
        AvailState::OutageOld,
        [0.02, 0.005, 0.6, 0.01],
    );
    let cands = vec![risky, down, on_demand(400)];
    let d = decide(&idle_job(12, 36, 1), &cands, &config()).unwrap();
    assert_eq!(d.action, Action::Run(0), "{}", d.explanation);
    assert!(
        d.explanation.contains("the safer and cheaper spot down (")
            && d.explanation.contains(") has no capacity now"),
        "{}",
        d.explanation
    );
}

#[test]
fn the_backward_pass_is_the_options_minimum_bit_for_bit() {
    let cands = vec![
        spot("a", 100, AvailState::Up, [0.3, 0.05, 0.6, 0.1]),
        spot("b", 90, AvailState::OutageYoung, [0.2, 0.1, 0.5, 0.05]),
        on_demand(300),
    ];
    for (c, work) in [(0, 10), (1, 12), (3, 9)] {
        let job = idle_job(work, 30, c);
        let keep_all = PolicyConfig {
            keep_hours: 100.0,
            ..config()
        };
        let sol = Solution::solve(&job, &cands, &keep_all).unwrap();
        assert_eq!(sol.mdp.as_ref().unwrap().kept(), 30);
        let mdp = sol.mdp.as_ref().unwrap();
        let mut tabulated = 0;
        for t in 0..mdp.steps {
            for p in 0..mdp.work {
                for mode in 0..4 {
                    for a in 0..16 {
                        let want = match mdp.best(t, p, mode, a) {
                            Some((_, v)) if v.is_finite() => v,
                            _ => mdp.value(mdp.steps, p, 1, a),
                        };
                        let got = mdp.value(t, p, mode, a);
                        if mdp.tabulated(t, p) {
                            tabulated += 1;
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "c {c} t {t} p {p} mode {mode} a {a}"
                            );
                        } else if p <= t {
                            // Forced (on-demand to the end, in closed form):
                            // the same value up to rounding.
                            assert!(
                                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                                "forced c {c} t {t} p {p} mode {mode} a {a}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
        assert!(tabulated > 1000, "{tabulated}");
    }
}

/// The policy prices a later outage by its age ([`PolicyConfig::outage_ages`]
/// over the job's slack): of two pools alike but for price, both in a later
/// outage, the cheaper one ranks first while neither outage's age is known,
/// and drops below the dearer one when it has lasted ten hours and the
/// other twenty minutes (outages that old rarely end within the 12 h of
/// slack).
#[test]
fn the_policy_prices_an_outage_by_its_age() {
    let down = |label: &str, price: i64, hours: Option<f64>| {
        let mut c = spot(label, price, AvailState::OutageOld, [0.05, 0.01, 0.6, 0.05]);
        c.availability.outage_hours = hours;
        c
    };
    let two = PolicyConfig {
        shortlist: 2,
        ..config()
    };
    let job = idle_job(72, 144, 1);
    let cands = |young: Option<f64>, old: Option<f64>| {
        vec![
            down("young", 100, young),
            down("old", 95, old),
            spot("up", 200, AvailState::Up, [0.05, 0.01, 0.6, 0.05]),
            on_demand(300),
        ]
    };
    let aged = cands(Some(1.0 / 3.0), Some(10.0));
    let shortlist =
        |cands: &[Candidate], config: &PolicyConfig| decide(&job, cands, config).unwrap().shortlist;
    assert_eq!(shortlist(&cands(None, None), &two), vec![1, 2]);
    assert_eq!(shortlist(&aged, &two), vec![0, 2]);
    // An outage's age is read only through the bands: with every band at
    // the pooled later-outage rate, the ages change nothing.
    let flat = PolicyConfig {
        outage_ages: OutageAges {
            per_hour: [rate(0.05); OUTAGE_AGE_BANDS],
        },
        ..two
    };
    assert_eq!(shortlist(&aged, &flat), vec![1, 2]);
    // Bands that are not rates are refused before any solve.
    let bad = PolicyConfig {
        outage_ages: OutageAges {
            per_hour: [f64::NAN; OUTAGE_AGE_BANDS],
        },
        ..two
    };
    let err = decide(&job, &aged, &bad).unwrap_err();
    assert!(err.to_string().contains("outage-age"), "{err}");
}
