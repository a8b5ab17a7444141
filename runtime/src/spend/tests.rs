//! The ledger of spend's unit tests.

#![allow(clippy::unwrap_used)]
use super::*;
use gpufleet_core::fake::FAKE_EPOCH;
use gpufleet_core::ledger::MemoryLedger;

/// One cost per completed job (issue 79): `costs` and `jobs ls` say the
/// same figure for the same ledger, every job's spend (the failed one's
/// too) over the jobs that succeeded, a service's spend no job's; the
/// mean cost of a succeeded job is a figure of its own.
#[test]
fn one_cost_per_completed_job() {
    let pool = gpufleet_core::Pool {
        cloud: Cloud::Aws,
        region: gpufleet_core::Region::new("us-east-1"),
        zone: None,
        instance_type: "g5.xlarge".into(),
        capacity: Capacity::OnDemand,
    };
    let h = |n: i64| FAKE_EPOCH + time::Duration::hours(n);
    let spent = |id: &str, job: &str, usd_per_hour: f64, hours: i64| InstanceSpend {
        id: InstanceId::new(id),
        pool: pool.clone(),
        job_id: job.into(),
        owner: None,
        team: None,
        gpu: None,
        gpus: 0,
        price: Price::from_usd_per_hour_f64(usd_per_hour),
        started_at: h(0),
        ended_at: Some(h(hours)),
        ended_by: None,
        end_detail: String::new(),
    };
    // ok: $1, broken: $2 (failed), svc: $5 (a service).
    let spend = vec![
        spent("i-1", "ok", 1.0, 1),
        spent("i-2", "broken", 1.0, 2),
        spent("i-3", "service:svc", 5.0, 1),
    ];
    let jobs = vec![
        JobRecord::new("ok", "ok", JobState::Succeeded, h(1)),
        JobRecord::new("broken", "broken", JobState::Failed, h(2)),
    ];
    let r = cost_report(&spend, &jobs, CostBy::Job, FAKE_EPOCH, h(3), &|_| None).unwrap();
    assert_eq!(r.completed_jobs, 1);
    assert_eq!(
        r.cost_per_completed_job,
        Some(Money::from_usd_f64(3.0).unwrap())
    );
    assert_eq!(
        r.mean_cost_of_a_succeeded_job,
        Some(Money::from_usd_f64(1.0).unwrap())
    );
    assert_eq!(r.total.cost, Money::from_usd_f64(8.0).unwrap());
    let per = crate::jobs::per_completed_job([
        (Money::from_usd_f64(1.0).unwrap(), true),
        (Money::from_usd_f64(2.0).unwrap(), false),
    ])
    .unwrap();
    assert_eq!(per, r.cost_per_completed_job);
}

/// A launch-only job a dead `launch` left launching half an hour ago is
/// failed; a fresh one (in flight) and a managed job waiting for a
/// controller are left alone; a dry run only reports.
#[tokio::test]
async fn launches_left_unfinished_are_failed_and_nothing_else() {
    let l = MemoryLedger::new();
    let at = |mins: i64| FAKE_EPOCH + time::Duration::minutes(mins);
    l.record_job(&JobRecord::new("left", "left", JobState::Launching, at(0)))
        .await
        .unwrap();
    l.record_job(&JobRecord::new(
        "fresh",
        "fresh",
        JobState::Launching,
        at(50),
    ))
    .await
    .unwrap();
    l.save_job_spec("managed", "{}").await.unwrap();
    l.record_job(&JobRecord::new("managed", "m", JobState::Placing, at(0)))
        .await
        .unwrap();
    let seen = Observed {
        providers: &[],
        read: Vec::new(),
        listed: &[],
        now: at(60),
    };
    let none = Default::default();
    let dry = reconcile(&l, &seen, Some("alice"), &none, Apply::NOTHING)
        .await
        .unwrap();
    let stuck: Vec<&str> = dry.stuck.iter().map(|s| s.job.as_str()).collect();
    assert_eq!(stuck, ["left"]);
    assert_eq!(
        l.job_latest("left").await.unwrap().unwrap().state,
        JobState::Launching
    );
    let done = reconcile(&l, &seen, Some("alice"), &none, Apply::ALL)
        .await
        .unwrap();
    assert_eq!(done.stuck.len(), 1);
    let last = l.job_latest("left").await.unwrap().unwrap();
    assert_eq!(last.state, JobState::Failed);
    assert!(
        last.detail.contains("failed by reconcile"),
        "{}",
        last.detail
    );
    for job in ["fresh", "managed"] {
        assert!(
            !l.job_latest(job)
                .await
                .unwrap()
                .unwrap()
                .state
                .is_terminal(),
            "{job}"
        );
    }
}

/// A launch-only job whose launch failed ends failed, saying why; a
/// managed job, or one with an instance alive, is left as it is.
#[tokio::test]
async fn an_unfinished_launch_ends_the_launch_only_job() {
    let l = MemoryLedger::new();
    let now = FAKE_EPOCH;
    l.record_job(&JobRecord::new("a", "a", JobState::Placing, now))
        .await
        .unwrap();
    assert!(
        end_unfinished_launch(&l, "a", JobState::Failed, "launch failed: no capacity", now)
            .await
            .unwrap()
    );
    let last = l.job_latest("a").await.unwrap().unwrap();
    assert_eq!(
        (last.state, last.detail.as_str()),
        (JobState::Failed, "launch failed: no capacity")
    );
    l.save_job_spec("m", "{}").await.unwrap();
    l.record_job(&JobRecord::new("m", "m", JobState::Placing, now))
        .await
        .unwrap();
    assert!(!end_unfinished_launch(&l, "m", JobState::Failed, "x", now)
        .await
        .unwrap());
    assert!(
        !end_unfinished_launch(&l, "none", JobState::Failed, "x", now)
            .await
            .unwrap()
    );
}

/// The provider of one fake AWS and what it lists.
fn fake_seen(
    fake: &Arc<gpufleet_core::fake::FakeCloud>,
) -> (Vec<Arc<dyn Provider>>, Vec<Instance>) {
    (vec![fake.clone()], fake.live_instances())
}

/// What a reconciliation at `now` saw: AWS read, `listed` on it.
fn observed<'a>(
    providers: &'a [Arc<dyn Provider>],
    listed: &'a [Instance],
    now: OffsetDateTime,
) -> Observed<'a> {
    Observed {
        providers,
        read: vec![Cloud::Aws],
        listed,
        now,
    }
}

/// An instance still running for a cancelled job (its launch answered
/// after the cancel, its controller gone) is terminated by the next
/// reconciliation (as `jobs serve` runs it), and only when applied;
/// another owner's launch under the same job name is left alone.
#[tokio::test]
async fn a_cancelled_jobs_leftover_is_terminated() {
    use gpufleet_core::fake::FakeCloud;
    use gpufleet_core::{Cloud, Compute, IdempotencyKey, LaunchRequest, Pool};
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
    let pool: Pool = "aws:us-east-1/use1-az1:g5.xlarge:on-demand"
        .parse()
        .unwrap();
    let req = |key: &str, owner: &str| {
        LaunchRequest::new(pool.clone(), "ami-1", IdempotencyKey::new(key).unwrap())
            .with_tag(tags::MANAGED, "true")
            .with_tag(tags::JOB, "late")
            .with_tag(tags::OWNER, owner)
    };
    let made = fake.launch(&req("late-a1", "alice")).await.unwrap();
    // Bob's launch under the same name is not Alice's job.
    fake.launch(&req("late-b1", "bob")).await.unwrap();
    let l = MemoryLedger::new();
    l.record_job(&JobRecord::new(
        "late",
        "late",
        JobState::Cancelled,
        FAKE_EPOCH,
    ))
    .await
    .unwrap();
    let (providers, listed) = fake_seen(&fake);
    let seen = observed(&providers, &listed, FAKE_EPOCH);
    let none = Default::default();
    let dry = reconcile(&l, &seen, Some("alice"), &none, Apply::NOTHING)
        .await
        .unwrap();
    assert_eq!(
        dry.leftovers
            .iter()
            .map(|l| &l.instance)
            .collect::<Vec<_>>(),
        vec![&format!("aws:{}", made[0].id)]
    );
    assert_eq!(fake.live_instances().len(), 2, "a dry run touches nothing");
    let done = reconcile(&l, &seen, Some("alice"), &none, Apply::SERVE)
        .await
        .unwrap();
    assert_eq!(done.leftovers.len(), 1);
    let left = fake.live_instances();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].tags[tags::OWNER], "bob");
}

/// An instance of this owner past its expiry whose managed job no
/// controller drives (its controller died, so nobody extends it) is
/// terminated by reconcile; one whose job holds a live lease, another
/// owner's, one not yet expired, and a `launch`'s past its time to live
/// (`reap`'s to honour) are left alone.
#[tokio::test]
async fn an_expired_instance_nobody_drives_is_terminated() {
    use gpufleet_core::fake::FakeCloud;
    use gpufleet_core::{clock::Clock, Cloud, Compute, IdempotencyKey, LaunchRequest, Pool};
    use std::time::Duration;
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
    let pool: Pool = "aws:us-east-1/use1-az1:g5.xlarge:on-demand"
        .parse()
        .unwrap();
    let now = fake.clock().now();
    let mut ids = Vec::new();
    for (job, owner, ttl) in [
        ("orphan", "alice", 60),
        ("launched", "alice", 60),
        ("driven", "alice", 60),
        ("bobs", "bob", 60),
        ("fresh", "alice", 3600),
    ] {
        let mut req = LaunchRequest::new(
            pool.clone(),
            "ami-1",
            IdempotencyKey::new(format!("{job}-a1")).unwrap(),
        )
        .with_tag(tags::JOB, job)
        .with_tag(tags::OWNER, owner);
        req.ttl = Some(Duration::from_secs(ttl));
        ids.push(fake.launch(&req).await.unwrap()[0].id.clone());
    }
    fake.clock().advance(Duration::from_secs(120));
    let now2 = fake.clock().now();
    assert!(now2 > now);
    let l = MemoryLedger::new();
    // Managed jobs (a controller's, with a saved job file) but one
    // launched by `launch`, whose expiry is its time to live: reap's.
    for job in ["orphan", "driven", "bobs", "fresh"] {
        l.save_job_spec(job, "{}").await.unwrap();
    }
    l.acquire_lease("driven", "ctl", Duration::from_secs(3600))
        .await
        .unwrap();
    let (providers, listed) = fake_seen(&fake);
    let seen = observed(&providers, &listed, now2);
    let none = Default::default();
    let done = reconcile(&l, &seen, Some("alice"), &none, Apply::SERVE)
        .await
        .unwrap();
    assert_eq!(
        done.leftovers
            .iter()
            .map(|l| l.job.as_str())
            .collect::<Vec<_>>(),
        vec!["orphan"],
        "{:?}",
        done.leftovers
    );
    assert!(done.leftovers[0].why.contains("no controller drives"));
    let live: Vec<_> = fake.live_instances().into_iter().map(|i| i.id).collect();
    assert!(!live.contains(&ids[0]));
    assert_eq!(live.len(), 4);
}
