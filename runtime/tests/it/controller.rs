//! The job controller on the fake cloud: a job killed at every step of its
//! life resumes with no duplicate launch and no orphan; 100 jobs over a
//! 24-hour fake clock keep the controller's memory flat.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::layers::{Call, Interceptor, LayerExt, Next, Reply};
use gpufleet_core::ledger::{JobState, Ledger, MemoryLedger};
use gpufleet_core::placer::JobFile;
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, Pacer};
use gpufleet_runtime::{Executor, LaunchTemplate};
use time::OffsetDateTime;

/// Hangs forever at provider call number `at` (before or after its effect;
/// with `only`, counting the calls of that operation alone), as a process
/// killed there would: the test then drops the future.
#[derive(Debug)]
struct Crash {
    at: usize,
    after_effect: bool,
    only: Option<Operation>,
    count: AtomicUsize,
    hit: Arc<tokio::sync::Notify>,
}

impl Interceptor for Crash {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            if self.only.is_some_and(|op| op != call.operation) {
                return next().await;
            }
            let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
            if n == self.at {
                if self.after_effect {
                    let _ = next().await;
                }
                self.hit.notify_one();
                futures::future::pending::<()>().await;
            }
            next().await
        }
        .boxed()
    }
}

/// Moves the fake clock each pause and carries out scripted events once.
#[derive(Debug)]
struct Script {
    fake: Arc<FakeCloud>,
    start: OffsetDateTime,
    events: Mutex<Vec<(u64, &'static str)>>,
}

impl Script {
    fn act(&self, what: &str) {
        let live = self.fake.live_job_instances();
        match what {
            "preempt" => {
                for i in &live {
                    self.fake.preempt(&i.id).unwrap();
                }
            }
            "notice" => {
                let now = self.fake.clock().now().unix_timestamp().to_string();
                for i in &live {
                    self.fake.set_tag(&i.id, tags::NOTICE, &now).unwrap();
                }
            }
            // The node's boot script: a heartbeat, then the job's exit.
            "beat" | "exit 0" => {
                let now = self.fake.clock().now().unix_timestamp().to_string();
                for i in &live {
                    self.fake.set_tag(&i.id, tags::HEARTBEAT, &now).unwrap();
                    if what == "exit 0" {
                        self.fake.set_tag(&i.id, tags::EXIT, "0").unwrap();
                    }
                }
            }
            // An instance of the job's that it does not hold (a launch
            // whose record was lost), beside its own.
            "stray" => {
                let mut stray = live[0].clone();
                stray.id = InstanceId::new("i-stray");
                self.fake.insert_instance(stray);
            }
            "capacity" => self.fake.fail_next(
                gpufleet_core::Operation::Launch,
                Error::new(
                    ErrorKind::InsufficientCapacity,
                    "InsufficientInstanceCapacity",
                ),
            ),
            _ => unreachable!(),
        }
    }
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
                .partition(|(mins, _)| self.start + time::Duration::minutes(*mins as i64) <= now);
            *ev = rest;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in due {
            self.act(w);
        }
        tokio::task::yield_now().await;
    }
}

fn job_file() -> JobFile {
    JobFile::new(3.0, "A10G", 1)
        .named("resume-me")
        .within("aws", &["us-east-1"])
        .checkpointing("20m", "5m")
}

fn template() -> LaunchTemplate {
    let mut t = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    t.images.insert(Cloud::Aws, "ami-1".into());
    t
}

fn config() -> ControllerConfig {
    ControllerConfig {
        poll: Duration::from_secs(600),
        move_review: Duration::from_secs(3600),
        sweep_every: 3,
        // A crashed controller and the one started after it are the same
        // controller restarted under its name (a service with a stable
        // identity), so the successor resumes the lease at once instead of
        // waiting for it to expire.
        holder: "controller-under-test".into(),
        ..ControllerConfig::default()
    }
}

struct World {
    fake: Arc<FakeCloud>,
    ledger: Arc<MemoryLedger>,
    script: Arc<Script>,
}

fn world() -> World {
    let fake =
        Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(ManualClock::new(FAKE_EPOCH)));
    let script = Arc::new(Script {
        fake: fake.clone(),
        start: FAKE_EPOCH,
        events: Mutex::new(vec![(50, "notice"), (50, "capacity"), (110, "preempt")]),
    });
    World {
        fake,
        ledger: Arc::new(MemoryLedger::new()),
        script,
    }
}

fn controller(w: &World, provider: Arc<dyn Provider>) -> Controller {
    let clock: Arc<dyn Clock> = Arc::new(w.fake.clock().clone());
    let exec = Arc::new(Executor::new(vec![provider], w.ledger.clone(), clock));
    Controller::new(exec, template(), w.script.clone()).with_config(config())
}

/// Instances each idempotency key made (the fake keeps every one).
fn launches(fake: &FakeCloud) -> usize {
    fake.export_state().launches.len()
}

#[tokio::test]
async fn a_job_killed_at_every_step_resumes_with_no_duplicate_launch_and_no_orphan() {
    // The uninterrupted run: how many provider calls and launches it takes.
    let base = world();
    let ctl = controller(&base, base.fake.clone());
    ctl.submit("job-1", &job_file()).await.unwrap();
    let out = ctl.drive("job-1").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    let calls = base.fake.calls().len();
    let base_launches = launches(&base.fake);
    assert!(
        calls > 10 && base_launches >= 3,
        "{calls} calls, {base_launches} launches"
    );

    let mut crashed = 0;
    for after_effect in [false, true] {
        for at in 1..=calls + 5 {
            let w = world();
            let hit = Arc::new(tokio::sync::Notify::new());
            let crash: Arc<dyn Provider> = (w.fake.clone() as Arc<dyn Provider>).layer(Crash {
                at,
                after_effect,
                only: None,
                count: AtomicUsize::new(0),
                hit: hit.clone(),
            });
            let first = controller(&w, crash);
            first.submit("job-1", &job_file()).await.unwrap();
            let mut task = tokio::spawn(async move { first.drive("job-1").await });
            tokio::select! {
                _ = hit.notified() => {
                    task.abort();
                    let _ = (&mut task).await;
                    crashed += 1;
                }
                r = &mut task => { let _ = r; }
            }
            // Whatever happened, a new controller finishes the job.
            let second = controller(&w, w.fake.clone());
            let out = second.drive("job-1").await.unwrap();
            let ctx = format!(
                "crash at call {at} ({}): ",
                if after_effect {
                    "after its effect"
                } else {
                    "before it"
                }
            );
            assert_eq!(out.state, JobState::Succeeded, "{ctx}{}", out.detail);
            assert!(
                w.fake.live_instances().is_empty(),
                "{ctx}left running: {:?}",
                w.fake.live_instances()
            );
            let history = w.ledger.job_history("job-1").await.unwrap();
            let ends = history.iter().filter(|r| r.state.is_terminal()).count();
            assert_eq!(ends, 1, "{ctx}ended {ends} times");
            // A crash costs at most the launch it interrupted (an abandoned
            // move); a re-sent key never launches twice.
            let n = launches(&w.fake);
            assert!(
                n <= base_launches + 1,
                "{ctx}{n} launches against {base_launches}"
            );
            for (key, _, ids) in w.fake.export_state().launches {
                assert_eq!(ids.len(), 1, "{ctx}key {key} made {} instances", ids.len());
            }
        }
    }
    eprintln!("{calls} provider calls and {base_launches} launches uncrashed; {crashed} runs killed and resumed");
    assert!(crashed >= calls, "only {crashed} runs crashed");
}

/// A job whose controller detached (Ctrl-C: the lease given up, the
/// instances kept) is cancelled by a person: its instances are terminated and
/// the cancel recorded. The cancel used to copy the fencing token of the last
/// record, which the ledger refuses once that lease is gone, so `jobs cancel`
/// failed and the instances kept running.
#[tokio::test]
async fn a_detached_job_is_cancelled_after_its_lease_was_given_up() {
    use gpufleet_core::ledger::Claim;
    let w = world();
    let ctl = controller(&w, w.fake.clone());
    ctl.submit("job-1", &job_file()).await.unwrap();
    let Claim::Acquired(lease) = w
        .ledger
        .acquire_lease("job-1", "controller-under-test", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("the lease is free")
    };
    // Driven under the lease until it runs, then let go.
    let drive = ctl.drive_leased(lease.clone());
    let running = async {
        loop {
            let last = w.ledger.job_latest("job-1").await.unwrap().unwrap();
            if last.state == JobState::Running {
                return last;
            }
            tokio::task::yield_now().await;
        }
    };
    let last = tokio::select! {
        last = running => last,
        out = drive => panic!("the job ended before it ran: {out:?}"),
    };
    assert_eq!(last.fence, Some(lease.token));
    ctl.let_go("job-1").await.unwrap();
    w.ledger.release_lease(&lease).await.unwrap();
    assert_eq!(w.fake.live_job_instances().len(), 1);

    let out = ctl.cancel("job-1").await.unwrap();
    assert_eq!(out.state, JobState::Cancelled, "{}", out.detail);
    assert!(w.fake.live_job_instances().is_empty());
    let last = w.ledger.job_latest("job-1").await.unwrap().unwrap();
    assert_eq!((last.state, last.fence), (JobState::Cancelled, None));
}

/// Holds a controller in its polling loop in real time (the fake clock
/// stands still), so its job runs on and its lease is renewed.
#[derive(Debug)]
struct Stall;

#[async_trait::async_trait]
impl Pacer for Stall {
    async fn pause(&self, _: Duration) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `jobs resume` right after its controller was killed: `drive` refuses a
/// job whose lease another controller holds, so a person had to wait out
/// the lease and try again. `drive_when_free` waits for the lease to lapse
/// and takes the job over when its holder is dead; a live holder renews in
/// that time, and that is a Conflict that says so.
#[tokio::test]
async fn a_dead_controllers_job_is_resumed_once_its_lease_lapses_and_a_live_ones_is_not() {
    let w = world();
    let named = |holder: &str, pacer: Arc<dyn Pacer>| {
        let clock: Arc<dyn Clock> = Arc::new(w.fake.clock().clone());
        let exec = Arc::new(Executor::new(
            vec![w.fake.clone() as Arc<dyn Provider>],
            w.ledger.clone(),
            clock,
        ));
        Controller::new(exec, template(), pacer).with_config(ControllerConfig {
            holder: holder.into(),
            lease_ttl: Duration::from_secs(3),
            ..config()
        })
    };
    let first = named("first", Arc::new(Stall));
    first.submit("job-1", &job_file()).await.unwrap();
    let task = tokio::spawn(async move { first.drive("job-1").await });
    loop {
        let last = w.ledger.job_latest("job-1").await.unwrap().unwrap();
        if last.state == JobState::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Alive: refused at once by `drive`, and after one wait by
    // `drive_when_free`, which saw the lease renewed.
    let second = named("second", w.script.clone());
    let e = second.drive("job-1").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    let waited = Mutex::new(None);
    let e = second
        .drive_when_free("job-1", |l, d| {
            *waited.lock().unwrap() = Some((l.holder.clone(), d))
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(
        e.to_string().contains("first, which renewed its lease"),
        "{e}"
    );
    let (holder, wait) = waited.lock().unwrap().take().expect("told of the wait");
    assert!(
        holder == "first" && wait <= Duration::from_secs(3),
        "{wait:?}"
    );
    assert!(!task.is_finished());

    // Killed: its lease is not given up, so `drive` still refuses, and
    // `drive_when_free` takes the job over once it lapses and finishes it.
    task.abort();
    let _ = task.await;
    let e = second.drive("job-1").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    let out = second
        .drive_when_free("job-1", |l, d| {
            *waited.lock().unwrap() = Some((l.holder.clone(), d))
        })
        .await
        .unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    assert_eq!(waited.lock().unwrap().as_ref().unwrap().0, "first");
    assert!(w.fake.live_job_instances().is_empty());
    // The instance running at the takeover was adopted, not launched again.
    let history = w.ledger.job_history("job-1").await.unwrap();
    assert!(history.iter().any(|r| r.state == JobState::Running));
    for (key, _, ids) in w.fake.export_state().launches {
        assert_eq!(ids.len(), 1, "key {key} made {} instances", ids.len());
    }
}

/// `jobs resume` of a job cancelled while a dead controller still held its
/// lease answers at once with the cancel (it used to wait out that lease:
/// 22 s with the default one), and waits for nothing it could not drive.
#[tokio::test]
async fn resuming_an_ended_job_does_not_wait_for_a_dead_lease() {
    let w = world();
    let ctl = Controller::new(
        Arc::new(Executor::new(
            vec![w.fake.clone() as Arc<dyn Provider>],
            w.ledger.clone(),
            Arc::new(w.fake.clock().clone()) as Arc<dyn Clock>,
        )),
        template(),
        w.script.clone(),
    )
    .with_config(config());
    ctl.submit("job-1", &job_file()).await.unwrap();
    // A controller that took the lease for a minute and died.
    w.ledger
        .acquire_lease("job-1", "dead", Duration::from_secs(60))
        .await
        .unwrap();
    ctl.cancel("job-1").await.unwrap();
    let started = std::time::Instant::now();
    let out = ctl
        .drive_when_free("job-1", |l, d| panic!("waited {d:?} for {}", l.holder))
        .await
        .unwrap();
    assert_eq!(out.state, JobState::Cancelled, "{}", out.detail);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// On a cloud that runs boot scripts, a node started with a workload that
/// has sent no heartbeat 20 minutes (the boot grace) after its launch is a
/// job that did not start: its boot script did not run or cannot tag the
/// instance. The job is started again while `max_restarts_on_errors` allows,
/// then fails saying why and what the node needs; nothing is left running.
/// It used to be declared succeeded once its estimated run time had passed,
/// with nothing known to have run. A node that beats within the grace runs
/// on to its exit.
#[tokio::test]
async fn a_node_that_never_reports_is_a_job_that_did_not_start() {
    let job = |restarts: u32| {
        JobFile::from_toml(&format!(
            "name = \"silent\"\nhours = 3\nrun = \"python train.py\"\nmax_restarts_on_errors = {restarts}\nclouds = [\"aws\"]\nregions = [\"us-east-1\"]\n[[gpu]]\nmodel = \"A10G\"\ncount = 1\n"
        ))
        .unwrap()
    };
    let world_with = |events: Vec<(u64, &'static str)>| {
        let fake = Arc::new(
            FakeCloud::from_snapshot(Cloud::Aws)
                .with_clock(ManualClock::new(FAKE_EPOCH))
                .with_capabilities(Capabilities::ALL),
        );
        let script = Arc::new(Script {
            fake: fake.clone(),
            start: FAKE_EPOCH,
            events: Mutex::new(events),
        });
        World {
            fake,
            ledger: Arc::new(MemoryLedger::new()),
            script,
        }
    };
    let poll_minutes = |w: &World| {
        let clock: Arc<dyn Clock> = Arc::new(w.fake.clock().clone());
        let exec = Arc::new(Executor::new(vec![w.fake.clone()], w.ledger.clone(), clock));
        Controller::new(exec, template(), w.script.clone()).with_config(ControllerConfig {
            poll: Duration::from_secs(300),
            ..config()
        })
    };
    for restarts in [0u32, 1] {
        let w = world_with(Vec::new());
        let ctl = poll_minutes(&w);
        ctl.submit("job-1", &job(restarts)).await.unwrap();
        let out = ctl.drive("job-1").await.unwrap();
        let ctx = format!("{restarts} restart(s): {}", out.detail);
        assert_eq!(out.state, JobState::Failed, "{ctx}");
        for said in [
            "never started: instance ",
            "without a first heartbeat (boot grace 20m)",
            "ec2:CreateTags",
            "gpufleet jobs logs job-1",
        ] {
            assert!(out.detail.contains(said), "{ctx}");
        }
        assert_eq!(launches(&w.fake), restarts as usize + 1, "{ctx}");
        assert!(w.fake.live_instances().is_empty(), "{ctx}");
        // Found at the first poll past the grace, not after the 3 h the
        // work would take.
        let took = w.fake.clock().now() - FAKE_EPOCH;
        let most = time::Duration::minutes(25 * (i64::from(restarts) + 1) + 5);
        assert!(took <= most, "{ctx}: took {took}");
        let summary = ctl.summary("job-1").await.unwrap();
        assert_eq!(summary.restarts, restarts as usize, "{ctx}");
    }

    // With the boot grace off (an image that cannot report, knowingly), a
    // silent node's job ends on its estimated run time, and says so.
    let w = world_with(Vec::new());
    let ctl = poll_minutes(&w).with_config(ControllerConfig {
        poll: Duration::from_secs(300),
        boot_grace: Duration::ZERO,
        ..config()
    });
    ctl.submit("job-1", &job(0)).await.unwrap();
    let out = ctl.drive("job-1").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    assert!(
        out.detail
            .contains("the node never reported; the boot grace is off"),
        "{}",
        out.detail
    );

    // A node whose boot script beats from minute 10, every 5 minutes, runs
    // on to its exit.
    let mut events: Vec<(u64, &'static str)> = (2..40).map(|k| (k * 5, "beat")).collect();
    events.push((200, "exit 0"));
    let w = world_with(events);
    let ctl = poll_minutes(&w);
    ctl.submit("job-1", &job(0)).await.unwrap();
    let out = ctl.drive("job-1").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    assert_eq!(out.detail, "run exited with 0");
    assert_eq!(launches(&w.fake), 1);
}

/// A cancel is final: a job cancelled while its launch is in flight ends
/// `cancelled` when the launch answers (it used to record `running` after
/// `cancelled`, run on to `succeeded` and be billed), and the instance that
/// answered late is terminated, its end recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_launch_in_flight_is_final() {
    let w = world();
    w.fake
        .set_latency(gpufleet_core::Operation::Launch, Duration::from_millis(600));
    let ctl = Arc::new(controller(&w, w.fake.clone()));
    ctl.submit("job-c", &job_file()).await.unwrap();
    let driving = {
        let ctl = ctl.clone();
        tokio::spawn(async move { ctl.drive("job-c").await })
    };
    // Wait for the launch to be under way, then cancel from elsewhere (a
    // person's `jobs cancel`: no lease).
    let started = std::time::Instant::now();
    loop {
        let last = w.ledger.job_latest("job-c").await.unwrap().unwrap();
        if last.state == JobState::Launching {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never launched"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = Controller::new(
        Arc::new(Executor::new(
            vec![w.fake.clone() as Arc<dyn Provider>],
            w.ledger.clone(),
            Arc::new(w.fake.clock().clone()),
        )),
        template(),
        w.script.clone(),
    )
    .with_config(ControllerConfig {
        holder: "a-person".into(),
        ..config()
    });
    other.cancel("job-c").await.unwrap();
    let out = driving.await.unwrap().unwrap();
    assert_eq!(out.state, JobState::Cancelled, "{}", out.detail);
    let states: Vec<JobState> = w
        .ledger
        .job_history("job-c")
        .await
        .unwrap()
        .iter()
        .map(|r| r.state)
        .collect();
    let after: Vec<&JobState> = states
        .iter()
        .skip_while(|s| **s != JobState::Cancelled)
        .collect();
    assert!(
        after.iter().all(|s| **s == JobState::Cancelled),
        "a record after the cancel: {states:?}"
    );
    assert!(
        w.fake.live_instances().is_empty(),
        "{:?}",
        w.fake.live_instances()
    );
    let spend = w.ledger.spend(None).await.unwrap();
    assert!(
        !spend.is_empty() && spend.iter().all(|s| !s.is_alive()),
        "{spend:?}"
    );
}

/// The controller extends the expiry of what it drives at every poll (from
/// the launch's allowance down to the lease and two polls); killed mid-job,
/// its instance is past its expiry within that window and `reap` selects
/// it, unless the ledger shows a controller driving its job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_instance_expires_within_the_lease_and_two_polls() {
    use std::collections::HashSet;
    let w = world();
    let hit = Arc::new(tokio::sync::Notify::new());
    // At its second extension: the first has been made.
    let killed: Arc<dyn Provider> = (w.fake.clone() as Arc<dyn Provider>).layer(Crash {
        at: 2,
        after_effect: false,
        only: Some(Operation::TagInstances),
        count: AtomicUsize::new(0),
        hit: hit.clone(),
    });
    let ctl = controller(&w, killed);
    let window = ctl.config().expiry_window();
    ctl.submit("job-x", &job_file()).await.unwrap();
    let task = tokio::spawn(async move { ctl.drive("job-x").await });
    tokio::time::timeout(Duration::from_secs(30), hit.notified())
        .await
        .expect("the controller never extended the expiry twice");
    task.abort();
    let _ = task.await;
    let live = w.fake.live_instances();
    assert_eq!(live.len(), 1, "{live:?}");
    let now = w.fake.clock().now();
    let exp = live[0]
        .expires_at
        .expect("a driven instance carries an expiry");
    assert!(
        exp > now && exp <= now + window,
        "expiry {exp} not within ({now}, now + {window:?}]: the controller did not bring the launch's allowance down to its window"
    );
    let tagged = w
        .fake
        .calls()
        .iter()
        .filter(|c| c.operation == Operation::TagInstances)
        .count();
    assert!(tagged >= 1, "never extended");
    w.fake.advance(window + Duration::from_secs(1));
    let after = w.fake.clock().now();
    let none = HashSet::new();
    let picked = gpufleet_runtime::reap::select(
        w.fake.live_instances(),
        after,
        None,
        None,
        Duration::from_secs(900),
        &none,
    );
    assert_eq!(picked.victims.len(), 1, "the orphan is not reaped");
    assert!(
        picked.victims[0].1.contains("expired"),
        "{:?}",
        picked.victims
    );
    let driven: HashSet<String> = ["job-x".to_string()].into();
    let kept = gpufleet_runtime::reap::select(
        w.fake.live_instances(),
        after,
        None,
        None,
        Duration::from_secs(900),
        &driven,
    );
    assert!(
        kept.victims.is_empty(),
        "reaped although the ledger shows its job driven: {:?}",
        kept.victims
    );
}

/// A running job's orphan sweep ends an instance tagged with the job that
/// it does not hold, found in the poll's listing of its region (no listing
/// of its own), and leaves the job's instance alone.
#[tokio::test]
async fn a_running_job_sweeps_a_stray_of_its_own_from_the_polls_listing() {
    let w = world();
    *w.script.events.lock().unwrap() = vec![(30, "stray")];
    let ctl = controller(&w, w.fake.clone());
    ctl.submit("job-s", &job_file()).await.unwrap();
    let out = ctl.drive("job-s").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    let state = w.fake.export_state();
    let stray = state
        .instances
        .iter()
        .find(|i| i.id == InstanceId::new("i-stray"))
        .expect("the stray is known to the cloud");
    assert!(!stray.state.is_live(), "{stray:?}");
    // Ended by a sweep while the job ran (sweeps every 3 polls of 10
    // minutes after it appeared at minute 30), not by the sweep at its end.
    let ended = stray.ended_at.expect("the fake says when it ended");
    assert!(
        ended <= FAKE_EPOCH + time::Duration::minutes(30 + 3 * 10),
        "the stray ended at {ended}, after the job's end at {}",
        w.fake.clock().now()
    );
}
