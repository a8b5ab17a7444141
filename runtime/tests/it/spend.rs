//! The ledger of spend against what the cloud billed: a scripted month on
//! the fake cloud (managed jobs preempted and moved, a controller killed
//! mid-job and its job finished by another, launch-only jobs terminated,
//! reaped at their TTL and reclaimed by the cloud, one left running) totals,
//! to the micro-dollar, what the fake cloud itself billed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::layers::{Call, Interceptor, LayerExt, Next, Reply};
use gpufleet_core::ledger::{EndedBy, JobState, Ledger};
use gpufleet_core::placer::{JobFile, JobSpec};
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, Pacer};
use gpufleet_runtime::spend::{cost_report, CostBy};
use gpufleet_runtime::sqlite::SqliteLedger;
use gpufleet_runtime::{Executor, LaunchTemplate};
use time::OffsetDateTime;

/// Moves the fake clock each pause; preempts the job's instances once, at
/// `preempt_at` minutes, and reports the job's exit at `exit_at`.
#[derive(Debug)]
struct Script {
    fake: Arc<FakeCloud>,
    start: OffsetDateTime,
    events: Mutex<Vec<(i64, &'static str)>>,
}

#[async_trait::async_trait]
impl Pacer for Script {
    async fn pause(&self, d: Duration) {
        self.fake.advance(d);
        let now = self.fake.clock().now();
        let due: Vec<&'static str> = {
            let mut ev = self.events.lock().unwrap();
            let (due, rest): (Vec<_>, Vec<_>) = ev
                .drain(..)
                .partition(|(mins, _)| self.start + time::Duration::minutes(*mins) <= now);
            *ev = rest;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in due {
            let stamp = now.unix_timestamp().to_string();
            for i in self.fake.live_job_instances() {
                match w {
                    "preempt" => self.fake.preempt(&i.id).unwrap(),
                    "beat" => self.fake.set_tag(&i.id, tags::HEARTBEAT, &stamp).unwrap(),
                    _ => {
                        self.fake.set_tag(&i.id, tags::HEARTBEAT, &stamp).unwrap();
                        self.fake.set_tag(&i.id, tags::EXIT, "0").unwrap();
                    }
                }
            }
        }
        tokio::task::yield_now().await;
    }
}

/// Hangs forever at provider call `at`, as a controller killed there.
#[derive(Debug)]
struct Kill {
    at: usize,
    count: AtomicUsize,
    hit: Arc<tokio::sync::Notify>,
}

impl Interceptor for Kill {
    fn intercept<'a, T: Send + 'a>(&'a self, _call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            if self.count.fetch_add(1, Ordering::SeqCst) + 1 == self.at {
                self.hit.notify_one();
                futures::future::pending::<()>().await;
            }
            next().await
        }
        .boxed()
    }
}

fn template() -> LaunchTemplate {
    let mut t = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    t.images.insert(Cloud::Aws, "ami-1".into());
    t.tags.insert(tags::OWNER.into(), "alice".into());
    t
}

fn config() -> ControllerConfig {
    ControllerConfig {
        poll: Duration::from_secs(600),
        move_review: Duration::from_secs(3600),
        boot_grace: Duration::ZERO,
        holder: "month".into(),
        ..ControllerConfig::default()
    }
}

fn job(name: &str, hours: f64) -> JobFile {
    JobFile::new(hours, "A10G", 1)
        .named(name)
        .within("aws", &["us-east-1"])
        .checkpointing("20m", "5m")
}

#[tokio::test]
async fn a_scripted_month_totals_what_the_cloud_billed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(FAKE_EPOCH);
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()));
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(dir.path().join("l.db")).unwrap());
    let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let provider: Arc<dyn Provider> = fake.clone();
    let exec = Arc::new(Executor::new(
        vec![provider.clone()],
        ledger.clone(),
        shared_clock.clone(),
    ));
    let script = |events: Vec<(i64, &'static str)>| {
        Arc::new(Script {
            fake: fake.clone(),
            start: clock.now(),
            events: Mutex::new(events),
        })
    };

    // A managed job, preempted once, moved by its controller, finished.
    let ctl = Controller::new(
        exec.clone(),
        template(),
        script(vec![(30, "beat"), (110, "preempt"), (400, "exit")]),
    )
    .with_config(config());
    ctl.submit("job-1", &job("job-1", 4.0)).await.unwrap();
    let out = ctl.drive("job-1").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);

    // A managed job whose controller is killed mid-job (a provider call
    // hangs, the drive is dropped); another controller finishes it.
    let hit = Arc::new(tokio::sync::Notify::new());
    let killed: Arc<dyn Provider> = provider.clone().layer(Kill {
        at: 6,
        count: AtomicUsize::new(0),
        hit: hit.clone(),
    });
    let exec_killed = Arc::new(Executor::new(
        vec![killed],
        ledger.clone(),
        shared_clock.clone(),
    ));
    let doomed =
        Controller::new(exec_killed, template(), script(vec![(20, "beat")])).with_config(config());
    doomed.submit("job-2", &job("job-2", 3.0)).await.unwrap();
    tokio::select! {
        _ = doomed.drive("job-2") => panic!("the killed controller finished"),
        _ = hit.notified() => {}
    }
    drop(doomed);
    fake.advance(Duration::from_secs(3 * 3600));
    let successor =
        Controller::new(exec.clone(), template(), script(vec![(60, "exit")])).with_config(config());
    let out = successor.drive("job-2").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);

    // Launch-only jobs, as `gpufleet launch` makes them.
    let snapshot = Snapshot::embedded();
    let pool: Pool = "aws:us-east-1/use1-az1:g5.xlarge:on-demand"
        .parse()
        .unwrap();
    let spot: Pool = "aws:us-east-1/use1-az2:g5.xlarge:spot".parse().unwrap();
    let launch = |name: &'static str, pool: Pool, nodes: u32, ttl: Option<Duration>| {
        let exec = exec.clone();
        async move {
            let spec = JobSpec::for_pool(&pool, name, snapshot).unwrap();
            let mut t = template();
            t.nodes = nodes;
            t.ttl = ttl;
            exec.launch_once(name, &spec, &t, Some(&pool))
                .await
                .unwrap()
                .1
        }
    };
    let terminated = launch("batch-a", pool.clone(), 2, None).await;
    let expiring = launch(
        "batch-b",
        pool.clone(),
        1,
        Some(Duration::from_secs(2 * 3600)),
    )
    .await;
    let reclaimed = launch("batch-c", spot.clone(), 1, None).await;
    let running = launch("batch-d", pool.clone(), 1, None).await;
    assert!(running.instances.len() == 1 && expiring.instances.len() == 1);

    // Five days on: a person terminates batch-a.
    fake.advance(Duration::from_secs(5 * 86_400));
    let out = gpufleet_runtime::reap::terminate_recorded(
        std::slice::from_ref(&provider),
        &terminated.instances,
        Some(ledger.as_ref()),
        &|_| (EndedBy::Terminate, "gpufleet terminate by alice".into()),
        clock.now(),
    )
    .await;
    assert_eq!(out.terminated.len(), 2);
    // The cloud reclaims batch-c; a listing two hours later records it, at
    // the time the cloud says it ended.
    fake.preempt(&reclaimed.instances[0].id).unwrap();
    fake.advance(Duration::from_secs(2 * 3600));
    let listed = provider
        .list_instances(&TagFilter::managed())
        .await
        .unwrap();
    let settled = gpufleet_runtime::spend::settle(
        ledger.as_ref(),
        std::slice::from_ref(&provider),
        &[Cloud::Aws],
        &listed,
        &TagFilter::default(),
        clock.now(),
    )
    .await
    .unwrap();
    assert_eq!(settled.ended.len(), 1, "{settled:?}");
    assert_eq!(settled.jobs_closed, vec!["batch-c".to_string()]);
    // The reaper finds batch-b past its TTL (it ran 5 days past it).
    let now = clock.now();
    let expired: Vec<Instance> = provider
        .list_instances(&TagFilter::managed())
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state.is_live() && i.expires_at.is_some_and(|t| t <= now))
        .collect();
    assert_eq!(expired.len(), 1);
    gpufleet_runtime::reap::terminate_recorded(
        std::slice::from_ref(&provider),
        &expired,
        Some(ledger.as_ref()),
        &|_| (EndedBy::Ttl, "gpufleet reap: expired".into()),
        now,
    )
    .await;

    // The rest of the month; batch-d still runs.
    fake.advance(Duration::from_secs(24 * 86_400));
    let now = clock.now();
    let billed = fake.billed(now).unwrap();
    let spend = ledger.spend(None).await.unwrap();
    let recorded = Money::try_sum(spend.iter().map(|s| s.cost(now).unwrap())).unwrap();
    assert_eq!(
        recorded,
        billed,
        "ledger {} vs billed {}",
        recorded.display(6),
        billed.display(6)
    );
    assert!(billed > Money::ZERO);
    let report = cost_report(
        &spend,
        &ledger.jobs().await.unwrap(),
        CostBy::Job,
        FAKE_EPOCH,
        now,
        &|_| None,
    )
    .unwrap();
    assert_eq!(report.total.cost, billed);
    assert_eq!(report.completed_jobs, 2);
    assert_eq!(report.total.running, 1, "batch-d");
    // Who ended what, as recorded.
    let by = |job: &str| -> Vec<Option<EndedBy>> {
        spend
            .iter()
            .filter(|s| s.job_id == job)
            .map(|s| s.ended_by)
            .collect()
    };
    assert_eq!(by("batch-a"), vec![Some(EndedBy::Terminate); 2]);
    assert_eq!(by("batch-b"), vec![Some(EndedBy::Ttl)]);
    assert_eq!(by("batch-c"), vec![Some(EndedBy::Cloud)]);
    assert_eq!(by("batch-d"), vec![None]);
    assert!(
        by("job-1").contains(&Some(EndedBy::Cloud)),
        "{:?}",
        by("job-1")
    );
    // Launch-only jobs ended with their instances.
    for (job, state) in [
        ("batch-a", JobState::Cancelled),
        ("batch-b", JobState::Cancelled),
        ("batch-c", JobState::Failed),
        ("batch-d", JobState::Running),
    ] {
        let last = ledger.job_latest(job).await.unwrap().unwrap();
        assert_eq!(last.state, state, "{job}: {}", last.detail);
    }
}
