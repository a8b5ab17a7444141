//! The job controller against each cloud's stand-in: an instance that ends
//! under the job (terminated out of band on moto_server's EC2, preempted on
//! the Compute Engine stand-in, evicted on the Azure one) is seen from the
//! controller's side, recorded with the cloud's reason, and the job is placed
//! again and finished with nothing left running. The launch bodies carry the
//! boot script each cloud runs (`UserData`, `startup-script`, `customData`),
//! and the job ends on the exit its node reports the way that script does
//! (`create-tags` on EC2, labels on Compute Engine, a tag merge on Azure).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit as stand_ins;
use stand_ins::{aws, azure, gcp, AZURE_IMAGE, GCE_IMAGE};

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use futures::future::BoxFuture;
use futures::FutureExt;
use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::FAKE_EPOCH;
use gpufleet_core::ledger::{JobRecord, JobState, Ledger, MemoryLedger};
use gpufleet_core::placer::{JobFile, PoolEventKind};
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, Outcome, Pacer};
use gpufleet_runtime::{Executor, LaunchTemplate};

type Action = Box<dyn Fn(Vec<Instance>) -> BoxFuture<'static, ()> + Send + Sync>;

/// Writes tags on an instance through the cloud's own API, as the node's
/// boot script does.
type Report =
    Box<dyn Fn(InstanceId, Vec<(&'static str, String)>) -> BoxFuture<'static, ()> + Send + Sync>;

/// A report's tags as the stand-ins take them.
fn pairs<'a>(said: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    said.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Pauses (10 minutes each) a node runs before its job exits 0: the 2 h of
/// work, the restart overhead and some to spare.
const EXIT_AFTER: u32 = 14;

/// Moves the controller's clock each pause; at the `at`-th pause runs the
/// action on the job's live instances (read with a provider of its own: out
/// of band, as far as the controller knows). At every other pause each live
/// node reports as its boot script would: a heartbeat, and its job's exit 0
/// once it has run [`EXIT_AFTER`] pauses.
struct Script {
    clock: ManualClock,
    pauses: AtomicU32,
    at: u32,
    side: Arc<dyn Provider>,
    job: &'static str,
    action: Action,
    report: Report,
    seen: Mutex<Vec<InstanceId>>,
    first_seen: Mutex<std::collections::HashMap<InstanceId, u32>>,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script").field("at", &self.at).finish()
    }
}

#[async_trait::async_trait]
impl Pacer for Script {
    async fn pause(&self, d: Duration) {
        self.clock.advance(d);
        let n = self.pauses.fetch_add(1, Ordering::SeqCst) + 1;
        let live: Vec<Instance> = self
            .side
            .list_instances(&TagFilter::managed().with(tags::JOB, self.job))
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.state.is_live())
            .collect();
        if n == self.at {
            assert!(
                !live.is_empty(),
                "nothing to end at pause {n}: {:?}",
                self.side.list_instances(&TagFilter::default()).await
            );
            self.seen
                .lock()
                .unwrap()
                .extend(live.iter().map(|i| i.id.clone()));
            (self.action)(live).await;
        } else {
            let now = self.clock.now().unix_timestamp().to_string();
            for i in live {
                let first = *self
                    .first_seen
                    .lock()
                    .unwrap()
                    .entry(i.id.clone())
                    .or_insert(n);
                let mut said = vec![(tags::HEARTBEAT, now.clone())];
                if n - first >= EXIT_AFTER {
                    said.push((tags::EXIT, "0".to_string()));
                }
                (self.report)(i.id, said).await;
            }
        }
        tokio::task::yield_now().await;
    }
}

fn job_file(gpu: &str, cloud: &str, region: &str) -> JobFile {
    JobFile {
        run: Some("python train.py --resume".into()),
        checkpoint: Some("kill -USR1 $(pgrep -f train.py)".into()),
        ..JobFile::new(2.0, gpu, 1)
            .named("standin-job")
            .within(cloud, &[region])
            .checkpointing("20m", "5m")
    }
}

struct Run {
    outcome: Outcome,
    history: Vec<JobRecord>,
    ended: Vec<InstanceId>,
    ledger: Arc<MemoryLedger>,
}

/// Drives `file` on `provider` to its end, ending the job's instances with
/// `action` at the second pause.
async fn drive(
    provider: Arc<dyn Provider>,
    side: Arc<dyn Provider>,
    cloud: Cloud,
    image: &str,
    file: JobFile,
    action: Action,
    report: Report,
) -> Run {
    let clock = ManualClock::new(FAKE_EPOCH);
    let ledger = Arc::new(MemoryLedger::new());
    let exec = Arc::new(Executor::new(
        vec![provider],
        ledger.clone(),
        Arc::new(clock.clone()) as Arc<dyn Clock>,
    ));
    let mut template = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    template.images.insert(cloud, image.into());
    let script = Arc::new(Script {
        clock,
        pauses: AtomicU32::new(0),
        at: 2,
        side,
        job: "standin-1",
        action,
        report,
        seen: Mutex::new(Vec::new()),
        first_seen: Mutex::new(Default::default()),
    });
    let ctl = Controller::new(exec, template, script.clone()).with_config(ControllerConfig {
        poll: Duration::from_secs(600),
        move_review: Duration::from_secs(24 * 3600),
        ..ControllerConfig::default()
    });
    ctl.submit("standin-1", &file).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(120), ctl.drive("standin-1"))
        .await
        .expect("the controller did not finish in 120 s")
        .unwrap();
    let history = ledger.job_history("standin-1").await.unwrap();
    let ended = script.seen.lock().unwrap().clone();
    Run {
        outcome,
        history,
        ended,
        ledger,
    }
}

/// Drives the job (an A100 in us-central1) on a fresh Compute Engine
/// stand-in, calling `end` with the stand-in and each live VM's zone and
/// name at the second pause.
async fn drive_gce(end: impl Fn(&gcp::Gce, &str, &str) + Send + Sync + 'static) -> (Run, gcp::Gce) {
    let (server, gce) = gcp::Gce::start().await;
    let provider: Arc<dyn Provider> = Arc::new(gcp::provider(&server, None).await);
    let side: Arc<dyn Provider> = Arc::new(gcp::provider(&server, None).await);
    let stand_in = gce.clone();
    let action: Action = Box::new(move |live| {
        for i in live {
            let (zone, name) = i.id.as_str().split_once('/').unwrap();
            end(&stand_in, zone, name);
        }
        async {}.boxed()
    });
    let node = gce.clone();
    let report: Report = Box::new(move |id, said| {
        let (zone, name) = id.as_str().split_once('/').unwrap();
        let said = pairs(&said);
        assert!(node.add_labels(zone, name, &said), "no {id} to label");
        async {}.boxed()
    });
    let file = job_file("A100", "gcp", "us-central1");
    let run = drive(provider, side, Cloud::Gcp, GCE_IMAGE, file, action, report).await;
    (run, gce)
}

/// Drives the job (an A100 80GB in eastus) on a fresh Azure stand-in,
/// calling `end` with the stand-in and each live VM's name at the second
/// pause.
async fn drive_azure(end: impl Fn(&azure::Arm, &str) + Send + Sync + 'static) -> (Run, azure::Arm) {
    let (server, arm) = azure::Arm::start().await;
    let provider: Arc<dyn Provider> = Arc::new(azure::provider(&server).await);
    let side: Arc<dyn Provider> = Arc::new(azure::provider(&server).await);
    let stand_in = arm.clone();
    let action: Action = Box::new(move |live| {
        for i in live {
            end(&stand_in, i.id.as_str().rsplit('/').next().unwrap());
        }
        async {}.boxed()
    });
    let node = arm.clone();
    let report: Report = Box::new(move |id, said| {
        let name = id.as_str().rsplit('/').next().unwrap();
        let said = pairs(&said);
        assert!(node.merge_tags(name, &said), "no VM {id} to tag");
        async {}.boxed()
    });
    let file = job_file("A100-80GB", "azure", "eastus");
    let run = drive(
        provider,
        side,
        Cloud::Azure,
        AZURE_IMAGE,
        file,
        action,
        report,
    )
    .await;
    (run, arm)
}

impl Run {
    /// The job succeeded on the exit its node reported through the cloud's
    /// API (not on an estimate).
    fn succeeded(&self) {
        assert_eq!(
            self.outcome.state,
            JobState::Succeeded,
            "{}",
            self.outcome.detail
        );
        assert_eq!(self.outcome.detail, "run exited with 0");
    }
    /// The job succeeded after exactly one interruption whose detail says
    /// `why`, on two placements, the second on a new instance.
    fn replaced(&self, why: &str) -> &JobRecord {
        let states: Vec<JobState> = self.history.iter().map(|r| r.state).collect();
        assert_eq!(
            self.outcome.state,
            JobState::Succeeded,
            "{}: {states:?}",
            self.outcome.detail
        );
        assert_eq!(self.outcome.detail, "run exited with 0", "{states:?}");
        let interrupted: Vec<&JobRecord> = self
            .history
            .iter()
            .filter(|r| r.state == JobState::Interrupted)
            .collect();
        assert_eq!(interrupted.len(), 1, "{states:?}");
        let rec = interrupted[0];
        assert!(
            rec.detail.starts_with("controller:") && rec.detail.contains(why),
            "interruption detail {:?} does not say {why:?}",
            rec.detail
        );
        assert_eq!(self.ended.len(), 1, "{:?}", self.ended);
        assert!(rec.instances.contains(&self.ended[0]), "{rec:?}");
        let running: Vec<&JobRecord> = self
            .history
            .iter()
            .filter(|r| r.state == JobState::Running)
            .collect();
        assert!(running.len() >= 2, "{states:?}");
        let after = running.last().unwrap();
        assert!(
            !after.instances.contains(&self.ended[0]),
            "re-placed on the instance that ended: {after:?}"
        );
        assert!(after.attempt > rec.attempt, "{after:?} after {rec:?}");
        rec
    }

    async fn interruptions_against(&self, pool: &Pool) -> usize {
        self.ledger
            .evidence(FAKE_EPOCH - time::Duration::days(1))
            .await
            .unwrap()
            .get(pool)
            .map_or(0, |e| {
                e.events
                    .iter()
                    .filter(|ev| ev.kind == PoolEventKind::Interruption)
                    .count()
            })
    }
}

#[tokio::test]
async fn moto_an_instance_terminated_out_of_band_is_seen_and_the_job_placed_again() {
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let provider: Arc<dyn Provider> = Arc::new(aws::provider(&moto.url, None, "us-east-1").await);
    let side: Arc<dyn Provider> = Arc::new(aws::provider(&moto.url, None, "us-east-1").await);
    let by_hand = side.clone();
    let action: Action = Box::new(move |live| {
        // TerminateInstances from outside the controller, as a person in
        // the console would.
        let p = by_hand.clone();
        async move {
            for i in live {
                p.terminate(&i.id).await.unwrap();
            }
        }
        .boxed()
    });
    let url = moto.url.clone();
    let report: Report = Box::new(move |id, said| {
        let url = url.clone();
        async move {
            let said = pairs(&said);
            aws::node_tags(&url, &id, &said).await;
        }
        .boxed()
    });
    let run = drive(
        provider,
        side.clone(),
        Cloud::Aws,
        "ami-12c6146b",
        job_file("A10G", "aws", "us-east-1"),
        action,
        report,
    )
    .await;
    // moto records the terminate as EC2 does: Client.UserInitiatedShutdown.
    let rec = run.replaced("Client.UserInitiatedShutdown");
    assert!(rec.detail.contains("ended on request"), "{}", rec.detail);
    // It interrupted the job, but the cloud did not reclaim it: not a
    // preemption (it used to be counted as one).
    let s = gpufleet_runtime::jobs::summarize(&run.history, FAKE_EPOCH).unwrap();
    assert_eq!((s.preemptions, s.ended_on_request), (0, 1), "{s:?}");
    // Someone's terminate says nothing against the pool.
    let pool = rec.pool.clone().unwrap();
    assert_eq!(run.interruptions_against(&pool).await, 0, "{pool}");
    let live = side
        .list_instances(&TagFilter::managed().with(tags::JOB, "standin-1"))
        .await
        .unwrap();
    assert!(
        live.iter().all(|i| !i.state.is_live()),
        "left running on moto: {live:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gce_a_preempted_spot_vm_is_seen_with_its_operation_and_the_job_placed_again() {
    let (run, gce) = drive_gce(|gce, zone, name| {
        assert!(gce.preempt(zone, name), "no {zone}/{name} to preempt");
    })
    .await;
    let rec = run.replaced("compute.instances.preempted");
    assert!(rec.detail.contains("gcp reclaimed it"), "{}", rec.detail);
    let s = gpufleet_runtime::jobs::summarize(&run.history, FAKE_EPOCH).unwrap();
    assert_eq!((s.preemptions, s.ended_on_request), (1, 0), "{s:?}");
    let pool = rec.pool.clone().unwrap();
    assert_eq!(pool.capacity, Capacity::Spot, "{pool}");
    assert_eq!(run.interruptions_against(&pool).await, 1, "{pool}");
    // The controller asked the zone's operations why, once.
    assert_eq!(gce.count("zoneOperations.list"), 1);
    // Nothing left running, after at least two inserts (the first placement
    // and the one after the preemption).
    let bodies = gce.instance_bodies();
    let live: Vec<_> = bodies
        .iter()
        .filter(|b| b["status"] == serde_json::json!("RUNNING"))
        .collect();
    assert!(live.is_empty(), "left running: {live:?}");
    let inserts = gce.calls();
    assert!(
        inserts
            .iter()
            .filter(|(op, _)| op == "instances.insert")
            .count()
            >= 2
    );
}

/// A spot VM preempted under the `DELETE` termination action (what gpufleet
/// asks for) is gone, 404, by the next poll; the zone's preemption
/// operation outlives it, and the controller still records the cloud's
/// reason and counts it against the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gce_a_spot_vm_deleted_on_preemption_still_has_its_reason() {
    let (run, _) = drive_gce(|gce, zone, name| {
        assert!(
            gce.preempt_and_delete(zone, name),
            "no {zone}/{name} to preempt"
        );
    })
    .await;
    let rec = run.replaced("compute.instances.preempted");
    assert!(
        rec.detail.contains("no longer exists: gcp reclaimed it"),
        "{}",
        rec.detail
    );
    let pool = rec.pool.clone().unwrap();
    assert_eq!(run.interruptions_against(&pool).await, 1, "{pool}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gce_and_azure_launch_bodies_carry_the_boot_script() {
    // Compute Engine: `metadata.items[startup-script]`.
    let captured = Arc::new(Mutex::new(Vec::new()));
    let c = captured.clone();
    let (run, _) =
        drive_gce(move |gce, _, _| c.lock().unwrap().extend(gce.instance_bodies())).await;
    run.succeeded();
    let bodies = captured.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let script = bodies[0]["metadata"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|it| it["key"] == serde_json::json!("startup-script"))
        .and_then(|it| it["value"].as_str())
        .expect("no startup-script in the insert")
        .to_string();
    assert!(script.starts_with("#!/bin/bash"), "{script}");
    assert!(script.contains("python train.py --resume"), "{script}");
    assert!(
        script.contains("gpufleet watch --cloud \"$GPUFLEET_CLOUD\" --on-notice"),
        "{script}"
    );
    assert!(script.contains("export GPUFLEET_CLOUD=gcp\n"), "{script}");

    // Azure: `osProfile.customData`, base64.
    let captured = Arc::new(Mutex::new(Vec::new()));
    let c = captured.clone();
    let (run, _) = drive_azure(move |arm, _| c.lock().unwrap().extend(arm.vm_bodies())).await;
    run.succeeded();
    let bodies = captured.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let data = bodies[0]["properties"]["osProfile"]["customData"]
        .as_str()
        .expect("no customData in the PUT");
    let script = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap();
    assert!(script.starts_with("#!/bin/bash"), "{script}");
    assert!(script.contains("python train.py --resume"), "{script}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_an_evicted_spot_vm_is_seen_and_the_job_placed_again() {
    let (run, arm) =
        drive_azure(|arm, name| assert!(arm.evict(name), "no VM {name} to evict")).await;
    // `evictionPolicy: Delete`: the VM is gone, and the instance view never
    // says who ended it.
    let rec = run.replaced("no longer exists");
    let pool = rec.pool.clone().unwrap();
    assert_eq!(pool.capacity, Capacity::Spot, "{pool}");
    // A vanished spot VM counts against its pool.
    assert_eq!(run.interruptions_against(&pool).await, 1, "{pool}");
    assert!(arm.vm_names().is_empty(), "left: {:?}", arm.vm_names());
}
