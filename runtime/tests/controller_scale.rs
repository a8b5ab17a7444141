//! Controllers at fleet scale (issue 64): the cloud calls a controller makes
//! per poll grow with the regions its jobs run in, not with its jobs or
//! their instances. 2,000 jobs of 4 nodes across 6 regions, served by 3
//! controllers sharing one PostgreSQL ledger, on the fake cloud that counts
//! every call: at each poll each controller lists the managed instances
//! once per region and reads no instance on its own; an instance reclaimed
//! between two polls costs one read of its own (to learn why it ended) and
//! its job is placed again at once. The fake holds the account to EC2's
//! published request rates: the launch burst is throttled and waited out
//! (no job fails for it); the polls are never throttled.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::{FakeCloud, RateLimits, FAKE_EPOCH};
use gpufleet_core::layers::RetryLayer;
use gpufleet_core::ledger::{JobState, Ledger};
use gpufleet_core::placer::JobFile;
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, ServeConfig};
use gpufleet_runtime::factory::{layered, Layers};
use gpufleet_runtime::postgres::PgLedger;
use gpufleet_runtime::{Executor, LaunchTemplate};
use gpufleet_testkit::fleet;
use gpufleet_testkit::postgres as pg;
use tokio::sync::watch;

const NODES: u32 = 4;
const REGIONS: usize = 6;
const CONTROLLERS: usize = 3;
const POLL: Duration = Duration::from_secs(60);

/// 2,000 jobs, EC2's rate limits on the account once they run: the polls
/// and the reclaims are never throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_jobs_in_six_regions_cost_one_listing_per_region_and_poll() {
    fleet(2_000, false).await;
}

/// 200 jobs launched at once under EC2's rate limits (more launches than
/// its write bucket holds): the burst is throttled and waited out, no job
/// fails for it, and the polls after are never throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_burst_over_the_rate_limits_is_waited_out() {
    fleet(200, true).await;
}

/// `jobs` jobs of [`NODES`] nodes in [`REGIONS`] regions, served by
/// [`CONTROLLERS`] controllers on one PostgreSQL ledger; EC2's rate limits
/// from the start (`limited_launch`) or once every job runs.
async fn fleet(jobs: usize, limited_launch: bool) {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let clock = ManualClock::new(FAKE_EPOCH);
    let fake = Arc::new(
        FakeCloud::from_snapshot(Cloud::Aws)
            .with_clock(clock.clone())
            .with_call_log(1_000),
    );
    // Six regions that sell A10G capacity in the embedded catalog.
    let regions = fleet::regions_selling(&fake, "A10G", REGIONS).await;
    assert_eq!(regions.len(), REGIONS, "{regions:?}");

    // EC2's request-rate model on the account, and each controller's
    // provider behind the layers `gpufleet` puts it behind (retries with a
    // budget of their own, quick here).
    if limited_launch {
        fake.set_rate_limits(Some(RateLimits::EC2));
    }
    let layers = Layers {
        retry: RetryLayer::new().with_min_delay(Duration::from_millis(20)),
        ..Layers::default()
    };
    let pace = fleet::Ticks::new(clock.clone());
    let mut controllers = Vec::new();
    for c in 0..CONTROLLERS {
        let ledger: Arc<dyn Ledger> = Arc::new(PgLedger::connect(&url).await.unwrap());
        let exec = Arc::new(Executor::new(
            vec![layered(fake.clone() as Arc<dyn Provider>, &layers)],
            ledger,
            Arc::new(clock.clone()) as Arc<dyn Clock>,
        ));
        let mut template = LaunchTemplate {
            nodes: NODES,
            ..LaunchTemplate::default()
        };
        template.images.insert(Cloud::Aws, "ami-1".into());
        let pacer = Arc::new(pace.clone());
        controllers.push(
            Controller::new(exec, template, pacer).with_config(ControllerConfig {
                poll: POLL,
                move_review: Duration::from_secs(24 * 3600),
                lease_ttl: Duration::from_secs(600),
                // The orphan sweep at every poll: it reads the poll's
                // listings, no call of its own.
                sweep_every: 1,
                holder: format!("controller-{c}"),
                ..ControllerConfig::default()
            }),
        );
    }
    let started = Instant::now();
    for i in 0..jobs {
        let region = regions[i % REGIONS].as_str();
        let file = JobFile::new(40.0, "A10G", 1)
            .named(format!("fleet-{i}"))
            .within("aws", &[region]);
        controllers[0]
            .submit(&format!("fleet-{i}"), &file)
            .await
            .unwrap();
    }
    let submitted = started.elapsed();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut serving = Vec::new();
    for ctl in &controllers {
        let ctl = ctl.clone();
        let mut stop = stop_rx.clone();
        serving.push(tokio::spawn(async move {
            ctl.serve(
                ServeConfig {
                    max_jobs: jobs,
                    claim_every: Duration::from_millis(100),
                    claim_batch: 250,
                    reconcile_every: None,
                    owner: String::new(),
                    any_owner: false,
                },
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            )
            .await
        }));
    }
    // Every job claimed and polled once, then a poll at a time until every
    // job runs: 2,000 launches are more than EC2's write bucket holds (200,
    // and 5 a second), so some jobs wait for the next poll, throttled.
    let mut ticks = 0u64;
    let tick = |n: &mut u64| {
        *n += 1;
        pace.tick(&fake, POLL);
    };
    // Done when a poll places nothing (no offers asked for: a job whose
    // launch was throttled, or whose first look failed, tries again).
    pace.polled(jobs as u64, "the first polls").await;
    loop {
        assert!(ticks < 30, "not every job placed in 30 polls");
        let asked = fake.call_count(Operation::Offers);
        tick(&mut ticks);
        pace.polled(jobs as u64 * (ticks + 1), "placing").await;
        if fake.live_job_instances().len() == jobs * NODES as usize
            && fake.call_count(Operation::Offers) == asked
        {
            break;
        }
    }
    let placed = started.elapsed();
    let placing_polls = ticks;
    let throttled_placing = fake.throttled();
    if !limited_launch {
        fake.set_rate_limits(Some(RateLimits::EC2));
    }

    let count = |op| fake.call_count(op);
    let mut per_poll = Vec::new();
    for _ in 1..=3u64 {
        let before = (
            count(Operation::ListInstances),
            count(Operation::Instance),
            count(Operation::TagInstances),
        );
        tick(&mut ticks);
        pace.polled(jobs as u64 * (ticks + 1), "a poll").await;
        let after = (
            count(Operation::ListInstances),
            count(Operation::Instance),
            count(Operation::TagInstances),
        );
        per_poll.push((after.0 - before.0, after.1 - before.1, after.2 - before.2));
    }
    // A reclaim of 10 instances between two polls: each costs one read of
    // its own, and its job is placed again.
    let victims: Vec<InstanceId> = fake
        .live_job_instances()
        .iter()
        .step_by(jobs * NODES as usize / 10)
        .map(|i| i.id.clone())
        .take(10)
        .collect();
    for v in &victims {
        fake.preempt(v).unwrap();
    }
    let before = (
        count(Operation::ListInstances),
        count(Operation::Instance),
        count(Operation::Launch),
    );
    tick(&mut ticks);
    pace.polled(jobs as u64 * (ticks + 1), "the poll after the reclaims")
        .await;
    let seen = (count(Operation::ListInstances), count(Operation::Instance));
    // And one more, where the interrupted jobs are placed again.
    tick(&mut ticks);
    pace.polled(jobs as u64 * (ticks + 1), "the poll after that")
        .await;
    let throttled_steady = fake.throttled() - throttled_placing;
    let after = (seen.0, seen.1, count(Operation::Launch));
    let _ = stop_tx.send(true);
    for s in serving {
        let _ = s.await;
    }
    eprintln!(
        "{jobs} jobs x {NODES} nodes in {REGIONS} regions, {CONTROLLERS} controllers on PostgreSQL, EC2's rate limits from {}: submitted in {submitted:?}, all placed in {placed:?} over {placing_polls} more poll(s) ({throttled_placing} calls throttled); per poll (listings, single reads, expiry writes): {per_poll:?}; the poll after 10 reclaims: {} listings, {} single reads, {} launches; {throttled_steady} calls throttled after placing",
        if limited_launch { "the start" } else { "when they run" },
        after.0 - before.0,
        after.1 - before.1,
        after.2 - before.2,
    );
    let most = (CONTROLLERS * REGIONS) as u64;
    for (i, (lists, reads, writes)) in per_poll.iter().enumerate() {
        assert!(
            *lists <= most,
            "poll {}: {lists} listings for {CONTROLLERS} controllers in {REGIONS} regions",
            i + 1
        );
        assert_eq!(*reads, 0, "poll {}: instances read one by one", i + 1);
        assert!(*writes <= most, "poll {}: {writes} expiry writes", i + 1);
    }
    // The poll of the reclaims: the listings, and one listing of its own
    // instances by each interrupted job, as it lets its placement go.
    assert!(
        after.0 - before.0 <= most + victims.len() as u64,
        "{} listings in the poll of the reclaims",
        after.0 - before.0
    );
    // The jobs of the 10 reclaimed instances (at most 10 jobs) each read
    // their ended instance once, and were placed again.
    assert!(
        after.1 - before.1 <= 10 && after.1 - before.1 >= 1,
        "single reads after the reclaims: {}",
        after.1 - before.1
    );
    assert!(after.2 - before.2 >= 1, "no job was placed again");
    assert_eq!(throttled_steady, 0, "polls throttled once every job ran");
    let ledger = PgLedger::connect(&url).await.unwrap();
    let mut states = std::collections::BTreeMap::new();
    for j in ledger.active_jobs().await.unwrap() {
        let s = ledger.job_latest(&j).await.unwrap().unwrap().state;
        *states.entry(s.to_string()).or_insert(0) += 1;
    }
    assert_eq!(
        states.values().sum::<usize>(),
        jobs,
        "every job still driven: {states:?}"
    );
    assert!(
        !states.contains_key(&JobState::Failed.to_string()),
        "{states:?}"
    );
}

/// The `DescribeInstances` calls in moto's request recording: (listings
/// filtered by gpufleet's managed tag, single-instance reads by id).
fn describe_calls(recording: &std::path::Path) -> (usize, usize) {
    use base64::Engine;
    let text = std::fs::read_to_string(recording).unwrap_or_default();
    let (mut lists, mut singles) = (0, 0);
    for line in text.lines() {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap();
        let body = entry["body"].as_str().unwrap_or_default();
        let body = if entry["body_encoded"] == true {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(body)
                    .unwrap(),
            )
            .unwrap()
        } else {
            body.to_string()
        };
        if !body.contains("Action=DescribeInstances") {
            continue;
        }
        if body.contains("InstanceId.1=") {
            singles += 1;
        } else if body.contains("tag%3Agpufleet%3Amanaged") {
            lists += 1;
        }
    }
    (lists, singles)
}

/// One controller serving 12 one-instance jobs in one region on moto's EC2,
/// polling every second: once they run, the EC2 emulator's own request
/// recording (`MOTO_ENABLE_RECORDING`) shows at most one instance listing a
/// poll, and no instance read by id (it used to be one `DescribeInstances`
/// per instance per poll: 12 a second here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_twelve_jobs_in_one_region_cost_one_listing_a_poll() {
    use gpufleet_core::clock::SystemClock;
    use gpufleet_core::ledger::MemoryLedger;
    use gpufleet_runtime::controller::RealTime;
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("moto-recording.jsonl");
    let rec = recording.display().to_string();
    let Some(moto) = gpufleet_testkit::aws::Moto::start_with(&[
        ("MOTO_ENABLE_RECORDING", "True"),
        ("MOTO_RECORDER_FILEPATH", &rec),
    ]) else {
        return;
    };
    let provider: Arc<dyn Provider> =
        Arc::new(gpufleet_testkit::aws::provider(&moto.url, None, "us-east-1").await);
    let ledger = Arc::new(MemoryLedger::new());
    let exec = Arc::new(Executor::new(
        vec![provider],
        ledger.clone(),
        Arc::new(SystemClock) as Arc<dyn Clock>,
    ));
    let mut template = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    template.images.insert(Cloud::Aws, "ami-12c6146b".into());
    let poll = Duration::from_secs(1);
    let ctl = Controller::new(exec, template, Arc::new(RealTime)).with_config(ControllerConfig {
        poll,
        heartbeat_grace: Duration::from_secs(3600),
        move_review: Duration::from_secs(24 * 3600),
        lease_ttl: Duration::from_secs(60),
        ..ControllerConfig::default()
    });
    const N: usize = 12;
    for i in 0..N {
        let file = JobFile::new(2.0, "A10G", 1)
            .named(format!("moto-{i}"))
            .within("aws", &["us-east-1"]);
        ctl.submit(&format!("moto-{i}"), &file).await.unwrap();
    }
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let serving = {
        let ctl = ctl.clone();
        tokio::spawn(async move {
            ctl.serve(
                ServeConfig {
                    max_jobs: N,
                    claim_every: Duration::from_millis(200),
                    claim_batch: N,
                    reconcile_every: None,
                    owner: String::new(),
                    any_owner: false,
                },
                async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                },
            )
            .await
        })
    };
    // Every job running.
    let started = Instant::now();
    loop {
        let mut running = 0;
        for i in 0..N {
            if let Some(r) = ledger.job_latest(&format!("moto-{i}")).await.unwrap() {
                assert!(!r.state.is_terminal(), "moto-{i}: {r:?}");
                running += usize::from(r.state == JobState::Running);
            }
        }
        if running == N {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{running} of {N} jobs running after 90 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A second to settle, then six seconds of polls, counted from scratch.
    tokio::time::sleep(poll).await;
    std::fs::write(&recording, "").unwrap();
    let window = Instant::now();
    tokio::time::sleep(poll * 6).await;
    let (lists, singles) = describe_calls(&recording);
    let took = window.elapsed();
    let _ = stop_tx.send(true);
    let report = serving.await.unwrap().unwrap();
    let polls = took.as_secs_f64() / poll.as_secs_f64();
    eprintln!(
        "moto: {N} jobs, {:.1} polls: {lists} DescribeInstances listings, {singles} by id ({report:?})",
        polls
    );
    assert!(
        lists as f64 <= polls.ceil() + 1.0,
        "{lists} listings in {polls:.1} polls"
    );
    assert!(lists >= 3, "the jobs were not polled: {lists} listings");
    assert_eq!(singles, 0, "instances read one by one");
    // What they run is terminated by their drivers' own tests; here, by hand.
    let side = gpufleet_testkit::aws::provider(&moto.url, None, "us-east-1").await;
    for i in side.list_instances(&TagFilter::managed()).await.unwrap() {
        let _ = side.terminate(&i.id).await;
    }
}
