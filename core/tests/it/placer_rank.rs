//! Ranking on the embedded catalog: order, deadlines, constraints, evidence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use gpufleet_core::fake::FAKE_EPOCH;
use gpufleet_core::placer::*;
use gpufleet_core::*;

fn ctx<'a>(model: &'a HazardModel, evidence: &'a HashMap<Pool, PoolEvidence>) -> RankContext<'a> {
    RankContext {
        now: FAKE_EPOCH,
        model,
        evidence,
        limit: 10_000,
    }
}

fn h(hours: u64) -> Duration {
    Duration::from_secs(hours * 3600)
}

/// 20 hours of fine-tuning on eight H100s, due within `deadline_hours`.
fn h100s_due_in(deadline_hours: u64) -> JobSpecBuilder {
    JobSpec::builder("ft", GpuModel::H100, 8, 20.0).deadline(h(deadline_hours))
}

/// `job` ranked on the embedded catalog by the default hazard model, with
/// nothing observed.
fn rank_fresh(job: &JobSpec) -> Ranking {
    rank(
        job,
        Snapshot::embedded().offers(),
        &ctx(&HazardModel::default(), &HashMap::new()),
    )
}

#[test]
fn plans_are_sorted_by_expected_cost_and_explained() {
    let job = h100s_due_in(72).build().unwrap();
    let r = rank_fresh(&job);
    let feasible: Vec<&Plan> = r.feasible().collect();
    assert!(feasible.len() > 20);
    assert!(feasible
        .windows(2)
        .all(|w| w[0].expected_cost <= w[1].expected_cost));
    let best = feasible[0];
    assert_eq!(
        best.offer.pool.capacity,
        Capacity::Spot,
        "with 52 h of slack, spot wins: {}",
        best.explanation
    );
    assert!(
        best.explanation.contains("interruptions/h")
            && best.explanation.contains("under the on-demand price"),
        "{}",
        best.explanation
    );
    // Expected cost is price x expected hours, and more than the list price x work.
    assert!(best.expected_hours > 20.0);
    assert_eq!(
        best.expected_cost,
        best.offer
            .price
            .cost_for_hours(best.expected_hours)
            .unwrap()
    );
    // Deterministic.
    let again = rank_fresh(&job);
    let pools = |r: &Ranking| {
        r.plans
            .iter()
            .map(|p| p.offer.pool.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(pools(&r), pools(&again));
}

#[test]
fn a_tight_deadline_forces_on_demand() {
    // 20 h of work, 10 min restart, 2 min checkpoints: a 21 h deadline leaves
    // no room for spot interruptions at 8-GPU hazards.
    let job = h100s_due_in(21).build().unwrap();
    let r = rank_fresh(&job);
    let best = r.feasible().next().expect("on-demand is feasible");
    assert_eq!(
        best.offer.pool.capacity,
        Capacity::OnDemand,
        "{}",
        best.explanation
    );
    assert!(r.feasible().all(|p| p.p_deadline >= 0.95));
    assert!(
        r.infeasible
            .keys()
            .any(|k| k.starts_with("misses the 21h deadline")),
        "{:?}",
        r.infeasible
    );
}

#[test]
fn not_interruptible_jobs_never_get_spot() {
    let job = JobSpec::builder("db", GpuModel::A10G, 1, 5.0)
        .not_interruptible()
        .build()
        .unwrap();
    let r = rank_fresh(&job);
    assert!(r
        .plans
        .iter()
        .all(|p| p.offer.pool.capacity == Capacity::OnDemand));
    assert!(r.excluded["spot, but the job is not interruptible"] > 0);
}

#[test]
fn work_converts_across_gpu_options_by_throughput() {
    let job = JobSpec::builder("ft", GpuModel::H100, 8, 10.0)
        .or_gpu(GpuModel::A100_80GB, 8)
        .or_gpu(GpuModel::T4, 4)
        .build()
        .unwrap();
    let r = rank_fresh(&job);
    let a100 = r
        .plans
        .iter()
        .find(|p| p.gpu_option == 1)
        .expect("an A100-80GB plan");
    assert!((a100.work_hours - 10.0 * 4.417 / 2.635).abs() < 1e-9);
    assert!(
        r.plans.iter().all(|p| p.gpu_option != 2),
        "T4 has no default factor"
    );
    assert!(
        r.excluded
            .contains_key("no throughput factor for T4 (give one in the job's [throughput])"),
        "{:?}",
        r.excluded
    );
    // With a factor, T4 becomes eligible.
    let job = JobSpec::builder("ft", GpuModel::H100, 8, 10.0)
        .or_gpu(GpuModel::T4, 4)
        .throughput(GpuModel::T4, 0.5)
        .unwrap()
        .build()
        .unwrap();
    let r = rank_fresh(&job);
    assert!(r.plans.iter().any(|p| p.gpu_option == 1));
}

#[test]
fn observed_interruptions_demote_a_pool_and_a_stable_week_promotes_it() {
    let job = JobSpec::builder("ft", GpuModel::A100, 8, 12.0)
        .cloud(Cloud::Aws)
        .build()
        .unwrap();
    let m = HazardModel::default();
    let base = rank_fresh(&job);
    let best = base.plans[0].clone();
    assert_eq!(best.offer.pool.capacity, Capacity::Spot);
    let mut ev = HashMap::new();
    let mut e = PoolEvidence::default();
    for k in 1..=3 {
        e.record(
            FAKE_EPOCH - time::Duration::minutes(10 * k),
            PoolEventKind::Interruption,
        );
    }
    e.ran(FAKE_EPOCH - time::Duration::hours(1), FAKE_EPOCH);
    ev.insert(best.offer.pool.clone(), e);
    let after = rank(&job, Snapshot::embedded().offers(), &ctx(&m, &ev));
    let moved = after
        .plans
        .iter()
        .find(|p| p.offer.pool == best.offer.pool)
        .unwrap();
    assert!(moved.hazard.rate_per_hour > best.hazard.rate_per_hour * 2.0);
    assert!(moved.expected_cost > best.expected_cost);
}

#[test]
fn why_nothing_names_the_constraints() {
    let job = h100s_due_in(10)
        .budget(Money::from_cents(5_000))
        .build()
        .unwrap();
    let r = rank_fresh(&job);
    assert_eq!(r.feasible().count(), 0);
    let why = r.why_nothing();
    assert!(
        why.contains("GPU model or count not among the job's options"),
        "{why}"
    );
    assert!(why.contains("misses the 10h deadline"), "{why}");
    assert!(why.contains("over the $50.00 budget"), "{why}");
    // Nothing to rank at all (the offers were filtered where they were
    // asked for): said, not "among 0 considered: " and nothing after it.
    let why = rank(&job, &[], &ctx(&HazardModel::default(), &HashMap::new())).why_nothing();
    assert!(
        why.ends_with(
            "no offer was found for its GPU options in its allowed clouds, regions and zones"
        ),
        "{why}"
    );
}

/// A pool whose capacity failed a while ago, with no run since, is in a
/// later outage of that age for the policy, and the policy hopes for it as
/// outages of its age recover over the job's slack (the 2022 traces' age
/// bands), not at one average rate.
#[test]
fn a_pool_in_an_outage_recovers_as_outages_of_its_age_do() {
    use gpufleet_core::placer::policy::{plans, AvailState, OutageAges, PolicyConfig};
    let job = h100s_due_in(72).build().unwrap();
    let m = HazardModel::default();
    let config = PolicyConfig::default();
    let candidates_after = |minutes: i64| {
        let best = rank_fresh(&job).plans[0].clone();
        let mut e = PoolEvidence::default();
        e.record(
            FAKE_EPOCH - time::Duration::minutes(minutes),
            PoolEventKind::CapacityFailure,
        );
        let ev = HashMap::from([(best.offer.pool.clone(), e)]);
        let ctx = plans::Context {
            nodes: 1,
            model: &m,
            evidence: &ev,
            now: FAKE_EPOCH,
            cooldown: Duration::from_secs(6 * 3600),
            config: &config,
        };
        plans::candidates(&job, &[best], &ctx).unwrap()[0].availability
    };
    let ages = OutageAges::default();
    assert_eq!(config.outage_ages, ages);
    let young = candidates_after(20);
    let old = candidates_after(300);
    assert_eq!(young.state, AvailState::OutageOld);
    assert_eq!(old.state, AvailState::OutageOld);
    let hours = |a: &gpufleet_core::placer::policy::Availability| a.outage_hours.unwrap();
    assert!((hours(&young) - 20.0 / 60.0).abs() < 1e-9);
    assert!((hours(&old) - 5.0).abs() < 1e-9);
    // 52 hours of slack: 72 h to the deadline, 20 h of work.
    let want = |age: f64| ages.rate_within(age, 52.0);
    let (young, old) = (
        young.aged(&config.outage_ages, 52.0),
        old.aged(&config.outage_ages, 52.0),
    );
    assert!((young.recover_old_per_hour - want(20.0 / 60.0)).abs() < 1e-9);
    assert!((old.recover_old_per_hour - want(5.0)).abs() < 1e-9);
    assert!(young.recover_old_per_hour > old.recover_old_per_hour);
    // A failure nine minutes ago is a young outage: no age is carried and
    // its rates stay the priors.
    let fresh = candidates_after(9);
    assert_eq!(fresh.state, AvailState::OutageYoung);
    assert_eq!(fresh.outage_hours, None);
    assert_eq!(
        fresh.aged(&config.outage_ages, 52.0).recover_old_per_hour,
        gpufleet_core::placer::policy::PRIOR_RECOVER_OLD_PER_HOUR
    );
}
