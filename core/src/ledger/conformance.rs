//! The checks every [`Ledger`] backend passes, public so a backend outside
//! this project can run them too: [`ledger_conformance!`](crate::ledger_conformance)
//! makes one test per check.
//!
//! Each check takes a fresh, empty ledger. The lease checks wait for a
//! 1-second lease to expire, so the suite takes a few seconds.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::{
    service_lease, Claim, EndedBy, InstanceEnd, InstanceSpend, JobRecord, JobState, Lease, Ledger,
    ServiceEntry, ServiceEntryKind, ServiceRow,
};
use crate::placer::{PoolEvent, PoolEventKind};
use crate::ErrorKind;
use crate::Price;
use crate::{Capacity, Cloud, InstanceId, Pool};

fn pool(zone: &str) -> Pool {
    Pool {
        cloud: Cloud::Aws,
        region: "us-east-1".into(),
        zone: Some(zone.into()),
        instance_type: "p3.2xlarge".into(),
        capacity: Capacity::Spot,
    }
}

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_767_225_600 + secs).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn rec(job: &str, state: JobState, secs: i64) -> JobRecord {
    JobRecord::new(job, format!("{job}-name"), state, at(secs))
}

fn held(claim: Claim, what: &str) -> Lease {
    match claim {
        Claim::Acquired(l) => l,
        Claim::Held(l) => panic!("{what}: expected the lease, but {} holds it", l.holder),
    }
}

fn conflict<T: std::fmt::Debug>(r: crate::Result<T>, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected a conflict, got {v:?}"),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Conflict, "{what}: {e}"),
    }
}

fn ok<T>(r: crate::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Job records come back in the order written, every field intact, per job
/// and in all.
pub async fn check_job_records(l: &dyn Ledger) {
    let mut a = rec("job-a", JobState::Placing, 0);
    a.detail = "submitted: 2.00 hours of work, 'quoted' \"text\" ✓".into();
    let mut b = rec("job-a", JobState::Running, 60);
    b.pool = Some(pool("use1-az1"));
    b.instances = vec![InstanceId::from("i-0123"), InstanceId::from("i-4567")];
    b.attempt = 3;
    b.progress_hours = 1.25;
    b.price = Some(Price::from_micros_per_hour(918_000));
    let c = rec("job-b", JobState::Placing, 30);
    for r in [&a, &c, &b] {
        ok(l.record_job(r).await, "record_job");
    }
    assert_eq!(
        ok(l.jobs().await, "jobs"),
        vec![a.clone(), c.clone(), b.clone()]
    );
    assert_eq!(
        ok(l.job_history("job-a").await, "job_history"),
        vec![a, b.clone()]
    );
    assert_eq!(
        ok(l.job_latest("job-a").await, "job_latest"),
        Some(b.clone())
    );
    assert_eq!(ok(l.job_latest("nope").await, "job_latest"), None);
    let ids = ["job-a", "nope", "job-b"].map(String::from);
    assert_eq!(
        ok(l.jobs_latest(&ids).await, "jobs_latest"),
        HashMap::from([("job-a".to_string(), b), ("job-b".to_string(), c)])
    );
    assert!(ok(l.jobs_latest(&[]).await, "jobs_latest").is_empty());
    assert!(ok(l.job_history("nope").await, "job_history").is_empty());
}

/// A job's definition is kept once: the same one again is fine, another is
/// `AlreadyExists` and leaves the first.
pub async fn check_job_specs(l: &dyn Ledger) {
    assert_eq!(ok(l.job_spec("j").await, "job_spec"), None);
    ok(l.save_job_spec("j", "{\"hours\":2}").await, "save");
    ok(l.save_job_spec("j", "{\"hours\":2}").await, "save again");
    match l.save_job_spec("j", "{\"hours\":3}").await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}"),
        Ok(()) => panic!("another definition under the same id was accepted"),
    }
    assert_eq!(
        ok(l.job_spec("j").await, "job_spec").as_deref(),
        Some("{\"hours\":2}")
    );
}

/// A job's GPU use is one value per job: read back as written, replaced by
/// the next write, kept apart from other jobs'.
pub async fn check_usage(l: &dyn Ledger) {
    assert_eq!(ok(l.job_usage("u").await, "job_usage"), None);
    let mut u = crate::usage::JobUsage {
        gpus: 8,
        instances: 2,
        instance_type: "p4d.24xlarge".into(),
        observed_secs: 900,
        util_pct_secs: 900 * 37,
        max_util_pct: 81,
        peak_memory_mib: 20_480,
        memory_total_mib: 40_960,
        updated_at: at(900),
    };
    ok(l.record_usage("u", &u).await, "record_usage");
    assert_eq!(ok(l.job_usage("u").await, "job_usage").as_ref(), Some(&u));
    u.observed_secs = 960;
    u.peak_memory_mib = 30_000;
    u.updated_at = at(960);
    ok(l.record_usage("u", &u).await, "record_usage again");
    assert_eq!(ok(l.job_usage("u").await, "job_usage").as_ref(), Some(&u));
    assert_eq!(ok(l.job_usage("other").await, "job_usage"), None);
}

/// Evidence since a time: events at or after it, exposure ending at or after
/// it; an empty span records nothing.
pub async fn check_evidence(l: &dyn Ledger) {
    let (p, q) = (pool("use1-az1"), pool("use1-az2"));
    for (secs, kind) in [
        (10, PoolEventKind::Interruption),
        (100, PoolEventKind::CapacityFailure),
        (200, PoolEventKind::Interruption),
    ] {
        ok(
            l.record_event(&p, PoolEvent { at: at(secs), kind }).await,
            "event",
        );
    }
    ok(l.record_exposure(&p, at(0)..at(50)).await, "exposure");
    ok(l.record_exposure(&p, at(60)..at(300)).await, "exposure");
    ok(
        l.record_exposure(&q, at(70)..at(70)).await,
        "empty exposure",
    );
    ok(
        l.record_exposure(&q, at(90)..at(80)).await,
        "reversed exposure",
    );
    let all = ok(l.evidence(at(0)).await, "evidence");
    let ev = &all[&p];
    assert_eq!(ev.events.len(), 3);
    assert_eq!(ev.exposure, vec![(at(0), at(50)), (at(60), at(300))]);
    assert!(all
        .get(&q)
        .is_none_or(|e| e.exposure.is_empty() && e.events.is_empty()));
    let recent = ok(l.evidence(at(100)).await, "evidence since");
    let ev = &recent[&p];
    assert_eq!(
        ev.events.iter().map(|e| e.at).collect::<Vec<_>>(),
        vec![at(100), at(200)]
    );
    assert_eq!(ev.events[0].kind, PoolEventKind::CapacityFailure);
    assert_eq!(ev.exposure, vec![(at(60), at(300))]);
}

/// Active jobs: managed (a definition) and not ended, oldest first.
pub async fn check_active_jobs(l: &dyn Ledger) {
    for (id, secs) in [("old", 0), ("new", 10), ("done", 5), ("one-off", 1)] {
        if id != "one-off" {
            ok(l.save_job_spec(id, "{}").await, "save");
        }
        ok(
            l.record_job(&rec(id, JobState::Placing, secs)).await,
            "record",
        );
    }
    ok(
        l.record_job(&rec("done", JobState::Succeeded, 20)).await,
        "record",
    );
    ok(
        l.record_job(&rec("old", JobState::Running, 30)).await,
        "record",
    );
    assert_eq!(
        ok(l.active_jobs().await, "active_jobs"),
        vec!["old".to_string(), "new".to_string()]
    );
}

/// Leases: taken when free, refused while another holds them, renewed by
/// their holder, handed on with a larger token after release or expiry.
pub async fn check_leases(l: &dyn Ledger) {
    let ttl = Duration::from_secs(30);
    let a = held(
        ok(l.acquire_lease("j", "ctl-a", ttl).await, "acquire"),
        "first acquire",
    );
    assert_eq!((a.holder.as_str(), a.token), ("ctl-a", 1));
    let now = ok(l.now().await, "now");
    assert!(
        a.expires_at > now + time::Duration::seconds(25),
        "{a:?} at {now}"
    );
    match ok(l.acquire_lease("j", "ctl-b", ttl).await, "acquire held") {
        Claim::Held(h) => assert_eq!((h.holder.as_str(), h.token), ("ctl-a", 1)),
        Claim::Acquired(l) => panic!("a held lease was given to ctl-b: {l:?}"),
    }
    let again = held(
        ok(l.acquire_lease("j", "ctl-a", ttl).await, "re-acquire"),
        "own",
    );
    assert_eq!(again.token, 1, "the holder re-acquiring keeps its token");
    let renewed = ok(l.renew_lease(&a, ttl).await, "renew");
    assert_eq!(renewed.token, 1);
    ok(l.release_lease(&a).await, "release");
    let b = held(
        ok(l.acquire_lease("j", "ctl-b", ttl).await, "after release"),
        "b",
    );
    assert_eq!((b.holder.as_str(), b.token), ("ctl-b", 2));
    conflict(l.renew_lease(&a, ttl).await, "renewing a lease handed on");
    ok(
        l.release_lease(&a).await,
        "releasing a lost lease does nothing",
    );
    assert_eq!(
        ok(l.leases().await, "leases")
            .iter()
            .map(|x| (x.job_id.as_str(), x.holder.as_str(), x.token))
            .collect::<Vec<_>>(),
        vec![("j", "ctl-b", 2)]
    );
    // Expiry, by the ledger's clock.
    let short = held(
        ok(
            l.acquire_lease("k", "ctl-a", Duration::from_secs(1)).await,
            "acquire",
        ),
        "short",
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    conflict(
        l.renew_lease(&short, ttl).await,
        "renewing an expired lease",
    );
    let c = held(
        ok(l.acquire_lease("k", "ctl-c", ttl).await, "after expiry"),
        "c",
    );
    assert_eq!((c.holder.as_str(), c.token), ("ctl-c", 2));
    assert!(c.acquired_at > short.acquired_at);
    // Bad requests name the bad value.
    for (holder, ttl) in [("x", Duration::ZERO), ("", Duration::from_secs(5))] {
        match l.acquire_lease("j", holder, ttl).await {
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}"),
            Ok(c) => panic!("lease ({holder:?}, {ttl:?}) accepted: {c:?}"),
        }
    }
}

/// Fencing: the ledger itself refuses a leased job's transition unless it
/// carries the current token of an unexpired lease; a cancel without one
/// always goes through.
pub async fn check_fencing(l: &dyn Ledger) {
    let ttl = Duration::from_secs(30);
    ok(
        l.record_job(&rec("j", JobState::Placing, 0)).await,
        "unleased",
    );
    let a = held(ok(l.acquire_lease("j", "ctl-a", ttl).await, "acquire"), "a");
    let mut launching = rec("j", JobState::Launching, 10);
    launching.fence = Some(a.token);
    ok(l.record_job(&launching).await, "fenced write by the holder");
    conflict(
        l.record_job(&rec("j", JobState::Running, 20)).await,
        "an unfenced write to a leased job",
    );
    let mut wrong = rec("j", JobState::Running, 20);
    wrong.fence = Some(a.token + 7);
    conflict(
        l.record_job(&wrong).await,
        "a write under a token never issued",
    );
    // ctl-a's lease runs out; ctl-b takes over; ctl-a's writes are refused.
    let short = held(
        ok(
            l.acquire_lease("k", "ctl-a", Duration::from_secs(1)).await,
            "acquire",
        ),
        "short",
    );
    let mut k1 = rec("k", JobState::Launching, 0);
    k1.fence = Some(short.token);
    ok(l.record_job(&k1).await, "fenced write");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let mut late = rec("k", JobState::Running, 5);
    late.fence = Some(short.token);
    conflict(l.record_job(&late).await, "a write after the lease expired");
    let b = held(
        ok(l.acquire_lease("k", "ctl-b", ttl).await, "take over"),
        "b",
    );
    conflict(l.record_job(&late).await, "a write under the old token");
    let mut by_b = rec("k", JobState::Running, 6);
    by_b.fence = Some(b.token);
    ok(l.record_job(&by_b).await, "the new holder's write");
    let cancel = rec("k", JobState::Cancelled, 7);
    ok(
        l.record_job(&cancel).await,
        "a person's cancel through a live lease",
    );
    assert_eq!(
        ok(l.job_history("k").await, "history"),
        vec![k1, by_b, cancel],
        "refused writes left nothing behind"
    );
    // A fenced write to a job nobody leases is refused too.
    let mut stray = rec("free", JobState::Running, 0);
    stray.fence = Some(1);
    conflict(l.record_job(&stray).await, "a fenced write with no lease");
}

/// Many controllers racing for the same free lease: exactly one gets it.
pub async fn check_lease_race(l: Arc<dyn Ledger>) {
    let mut tasks = Vec::new();
    for i in 0..8 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            l.acquire_lease("race", &format!("ctl-{i}"), Duration::from_secs(30))
                .await
        }));
    }
    let mut winners = HashSet::new();
    for t in tasks {
        match t.await {
            Ok(Ok(Claim::Acquired(lease))) => {
                winners.insert(lease.holder);
            }
            Ok(Ok(Claim::Held(_))) => {}
            Ok(Err(e)) => panic!("acquire: {e}"),
            Err(e) => panic!("task: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
}

/// A cancel is final: once a managed job's newest record is `cancelled`,
/// another state is refused (Conflict), with or without a lease, while
/// another cancel goes through; other jobs are not affected, and a
/// launch-only job (no saved definition) may be launched again.
pub async fn check_cancel_is_final(l: &dyn Ledger) {
    ok(l.save_job_spec("job-c", "{}").await, "spec");
    ok(
        l.record_job(&rec("job-c", JobState::Launching, 0)).await,
        "launching",
    );
    let lease = held(
        ok(
            l.acquire_lease("job-c", "ctl-1", Duration::from_secs(60))
                .await,
            "lease",
        ),
        "lease",
    );
    ok(
        l.record_job(&rec("job-c", JobState::Cancelled, 1)).await,
        "a person's cancel",
    );
    let mut running = rec("job-c", JobState::Running, 2);
    running.fence = Some(lease.token);
    conflict(
        l.record_job(&running).await,
        "running after cancelled, under the lease",
    );
    let _ = l.release_lease(&lease).await;
    conflict(
        l.record_job(&rec("job-c", JobState::Succeeded, 3)).await,
        "succeeded after cancelled",
    );
    ok(
        l.record_job(&rec("job-c", JobState::Cancelled, 4)).await,
        "cancelled again",
    );
    let last = ok(l.job_latest("job-c").await, "latest");
    assert_eq!(last.map(|r| r.state), Some(JobState::Cancelled));
    ok(
        l.record_job(&rec("job-d", JobState::Running, 5)).await,
        "another job",
    );
    ok(
        l.record_job(&rec("launched", JobState::Cancelled, 6)).await,
        "launch-only",
    );
    ok(
        l.record_job(&rec("launched", JobState::Launching, 7)).await,
        "a launch-only job launched again under its name",
    );
}

fn spent(id: &str, cloud: Cloud, start: i64) -> InstanceSpend {
    InstanceSpend {
        id: InstanceId::new(id),
        pool: Pool {
            cloud,
            ..pool("use1-az1")
        },
        job_id: "job-s".into(),
        owner: Some("alice".into()),
        team: Some("ml".into()),
        gpu: Some("V100".into()),
        gpus: 1,
        price: Price::from_micros_per_hour(918_000),
        started_at: at(start),
        ended_at: None,
        ended_by: None,
        end_detail: String::new(),
    }
}

/// The ledger of spend: a start is recorded once (a second start under the
/// same cloud and id changes nothing), the first end stands, an end of an
/// unknown instance writes nothing, ids are per cloud, and `spend(since)`
/// gives what is alive or ended since, oldest start first, every field
/// intact.
pub async fn check_spend(l: &dyn Ledger) {
    assert!(ok(l.spend(None).await, "empty").is_empty());
    let a = spent("us-east-1/i-a", Cloud::Aws, 100);
    let b = spent("us-east-1/i-b", Cloud::Aws, 0);
    let same_id_elsewhere = spent("us-east-1/i-a", Cloud::Gcp, 200);
    for s in [&a, &b, &same_id_elsewhere] {
        ok(l.record_instance_start(s).await, "start");
    }
    let mut again = a.clone();
    again.price = Price::from_micros_per_hour(9_000_000);
    ok(l.record_instance_start(&again).await, "start again");
    let all = ok(l.spend(None).await, "all");
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[0], b, "oldest start first, every field intact");
    assert_eq!(all[1], a, "the first start stands");
    let end = InstanceEnd::new(at(3_700), EndedBy::Terminate, "gpufleet terminate by bob");
    assert!(ok(
        l.record_instance_end(Cloud::Aws, &a.id, &end).await,
        "end"
    ));
    let later = InstanceEnd::new(at(9_000), EndedBy::Cloud, "seen gone");
    assert!(!ok(
        l.record_instance_end(Cloud::Aws, &a.id, &later).await,
        "end again"
    ));
    let unknown = InstanceId::new("us-east-1/i-none");
    assert!(!ok(
        l.record_instance_end(Cloud::Aws, &unknown, &end).await,
        "unknown"
    ));
    let early = InstanceEnd::new(at(-50), EndedBy::Cloud, "reclaimed");
    assert!(ok(
        l.record_instance_end(Cloud::Aws, &b.id, &early).await,
        "early end"
    ));
    let all = ok(l.spend(None).await, "all");
    let got_a = all
        .iter()
        .find(|s| s.id == a.id && s.pool.cloud == Cloud::Aws);
    let got_a = got_a.unwrap_or_else(|| panic!("{all:?}"));
    assert_eq!(got_a.ended_at, Some(at(3_700)));
    assert_eq!(got_a.ended_by, Some(EndedBy::Terminate));
    assert_eq!(got_a.end_detail, "gpufleet terminate by bob");
    let got_b = all.iter().find(|s| s.id == b.id);
    assert_eq!(
        got_b.and_then(|s| s.ended_at),
        Some(at(0)),
        "an end before the start is at the start"
    );
    let other = all.iter().find(|s| s.pool.cloud == Cloud::Gcp);
    assert!(
        other.is_some_and(InstanceSpend::is_alive),
        "ids are per cloud: {all:?}"
    );
    // Alive, or ended at or after the cut.
    let since = ok(l.spend(Some(at(1_000))).await, "since");
    let ids: HashSet<(Cloud, String)> = since
        .iter()
        .map(|s| (s.pool.cloud, s.id.to_string()))
        .collect();
    assert_eq!(
        ids,
        HashSet::from([
            (Cloud::Aws, "us-east-1/i-a".to_string()),
            (Cloud::Gcp, "us-east-1/i-a".to_string())
        ])
    );
}

/// Services: rows replaced and listed by name, logs in order with their
/// sequence numbers, and the fencing rules (a request always goes through;
/// another unfenced write only while no live lease holds the service).
pub async fn check_services(l: &dyn Ledger) {
    let row = |name: &str, doc: &str, fence: Option<u64>, secs: i64| ServiceRow {
        name: name.into(),
        doc: doc.into(),
        fence,
        updated_at: at(secs),
    };
    ok(
        l.save_service(&row("web", r#"{"up":true}"#, None, 0)).await,
        "unleased row",
    );
    ok(
        l.save_service(&row("api", "{}", None, 1)).await,
        "second row",
    );
    let names: Vec<String> = ok(l.services().await, "services")
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["api", "web"], "services by name");

    let lease = held(
        ok(
            l.acquire_lease(&service_lease("web"), "ctl-a", Duration::from_secs(30))
                .await,
            "acquire the service's lease",
        ),
        "service lease",
    );
    conflict(
        l.save_service(&row("web", "{}", None, 2)).await,
        "an unfenced row under a live lease",
    );
    conflict(
        l.save_service(&row("web", "{}", Some(lease.token + 1), 2))
            .await,
        "a row under another token",
    );
    let mine = row("web", r#"{"up":true,"ready":2}"#, Some(lease.token), 3);
    ok(l.save_service(&mine).await, "a row under the lease");
    let got = ok(l.services().await, "services");
    assert_eq!(
        got.iter().find(|r| r.name == "web"),
        Some(&mine),
        "row replaced, intact"
    );

    let started = ServiceEntry::new(
        "web",
        at(4),
        ServiceEntryKind::Replica,
        r#"{"id":"web-r1","state":"starting","why":"'quoted' ✓"}"#,
    )
    .fenced(lease.token);
    let s1 = ok(l.append_service_entry(&started).await, "a fenced entry");
    conflict(
        l.append_service_entry(&ServiceEntry::new(
            "web",
            at(5),
            ServiceEntryKind::Scale,
            "{}",
        ))
        .await,
        "an unfenced scale entry under a live lease",
    );
    let down = ServiceEntry::new("web", at(6), ServiceEntryKind::Request, r#"{"down":true}"#);
    let s2 = ok(l.append_service_entry(&down).await, "a person's request");
    assert!(s2 > s1, "sequence grows: {s1} then {s2}");
    let other = ServiceEntry::new("api", at(7), ServiceEntryKind::Lifecycle, "{}");
    let s3 = ok(
        l.append_service_entry(&other).await,
        "another service's entry",
    );
    assert!(s3 > s2, "sequence grows across services: {s2} then {s3}");

    let log = ok(l.service_entries("web", 0, None).await, "the log");
    let want = |e: &ServiceEntry, seq: u64| ServiceEntry { seq, ..e.clone() };
    assert_eq!(
        log,
        vec![want(&started, s1), want(&down, s2)],
        "the log, intact"
    );
    assert_eq!(
        ok(l.service_entries("web", s1, None).await, "the log after s1"),
        vec![want(&down, s2)]
    );
    assert_eq!(
        ok(
            l.service_entries("web", 0, Some(ServiceEntryKind::Request))
                .await,
            "the requests"
        ),
        vec![want(&down, s2)]
    );
    assert_eq!(
        ok(
            l.service_entries("web", 0, Some(ServiceEntryKind::Replica))
                .await,
            "the replicas"
        ),
        vec![want(&started, s1)]
    );
    assert!(ok(l.service_entries("web", s2, None).await, "after the last").is_empty());
    assert!(ok(l.service_entries("nope", 0, None).await, "no such service").is_empty());

    ok(l.release_lease(&lease).await, "release");
    conflict(
        l.save_service(&row("web", "{}", Some(lease.token), 8))
            .await,
        "a row under a released lease",
    );
    ok(
        l.save_service(&row("web", r#"{"up":false}"#, None, 9))
            .await,
        "an unfenced row once the lease is given up",
    );
}

/// One test per check, for a backend. `$make` is an expression whose value
/// is a future of `Option<L>` (`L: Ledger + 'static`): a fresh, empty ledger,
/// or `None` to skip (the harness says why).
///
/// ```ignore
/// gpufleet_core::ledger_conformance!(async { Some(gpufleet_core::ledger::MemoryLedger::new()) });
/// ```
#[macro_export]
macro_rules! ledger_conformance {
    ($make:expr) => {
        $crate::ledger_conformance!(@each $make;
            ledger_job_records => check_job_records,
            ledger_job_specs => check_job_specs,
            ledger_evidence => check_evidence,
            ledger_active_jobs => check_active_jobs,
            ledger_leases => check_leases,
            ledger_fencing => check_fencing,
            ledger_usage => check_usage,
            ledger_spend => check_spend,
            ledger_cancel_is_final => check_cancel_is_final,
            ledger_services => check_services,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn ledger_lease_race() {
            let Some(ledger) = $make.await else { return };
            $crate::ledger::conformance::check_lease_race(::std::sync::Arc::new(ledger)).await;
        }
    };
    (@each $make:expr; $($name:ident => $check:ident,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(ledger) = $make.await else { return };
            $crate::ledger::conformance::$check(&ledger).await;
        }
    )*};
}
