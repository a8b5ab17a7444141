//! Measured GPU use from the node to the ledger: a node agent (a
//! `UsageWindow` fed scripted readings, writing its summary onto the
//! instance's tags as the boot script does) beside a job the controller
//! drives on the fake cloud; the job's usage in the ledger is what the
//! agent measured, and a second controller that resumes the job does not
//! count the same time twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::ledger::{JobState, Ledger, MemoryLedger};
use gpufleet_core::placer::JobFile;
use gpufleet_core::usage::{uniform, UsageWindow};
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, Pacer};
use gpufleet_runtime::{Executor, LaunchTemplate};

/// Moves the fake clock; on the way the "node" samples every 10 s and
/// publishes its summary every minute, as `gpufleet watch` and the boot
/// script's heartbeat do.
#[derive(Debug)]
struct Node {
    fake: Arc<FakeCloud>,
    windows: Mutex<std::collections::HashMap<InstanceId, UsageWindow>>,
    util: u8,
    used_mib: u64,
}

#[async_trait::async_trait]
impl Pacer for Node {
    async fn pause(&self, d: Duration) {
        let mut left = d.as_secs();
        while left > 0 {
            let step = left.min(10);
            self.fake.advance(Duration::from_secs(step));
            left -= step;
            let now = self.fake.clock().now();
            let live = self.fake.live_job_instances();
            let mut w = self.windows.lock().unwrap();
            for i in live {
                let win = w.entry(i.id.clone()).or_default();
                win.add(now, &uniform(4, self.util, self.used_mib, 24_576))
                    .unwrap();
                if now.unix_timestamp() % 60 == 0 {
                    let s = win.summary().unwrap();
                    self.fake.set_tag(&i.id, tags::GPU, &s.tag_value()).unwrap();
                    self.fake
                        .set_tag(&i.id, tags::GPU_QUIET, &s.quiet_tag_value())
                        .unwrap();
                }
            }
        }
        tokio::task::yield_now().await;
    }
}

fn job_file() -> JobFile {
    JobFile {
        interruptible: Some(false),
        checkpoint_interval: Some("20m".into()),
        ..JobFile::new(3.0, "A10G", 4)
            .named("measured")
            .within("aws", &["us-east-1"])
    }
}

fn controller(fake: &Arc<FakeCloud>, ledger: Arc<MemoryLedger>, node: Arc<Node>) -> Controller {
    let clock: Arc<dyn Clock> = Arc::new(fake.clock().clone());
    let exec = Arc::new(Executor::new(vec![fake.clone()], ledger, clock));
    let mut t = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    t.images.insert(Cloud::Aws, "ami-1".into());
    Controller::new(exec, t, node).with_config(ControllerConfig {
        poll: Duration::from_secs(300),
        holder: "usage-test".into(),
        ..ControllerConfig::default()
    })
}

/// A fake cloud on a manual clock, an empty ledger, and a node whose GPUs
/// are `util` % busy holding `used_mib`.
fn world(util: u8, used_mib: u64) -> (Arc<FakeCloud>, Arc<MemoryLedger>, Arc<Node>) {
    let fake =
        Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(ManualClock::new(FAKE_EPOCH)));
    let node = Arc::new(Node {
        fake: fake.clone(),
        windows: Mutex::new(Default::default()),
        util,
        used_mib,
    });
    (fake, Arc::new(MemoryLedger::new()), node)
}

#[tokio::test]
async fn the_controller_keeps_what_the_node_measured_in_the_ledger() {
    let (fake, ledger, node) = world(35, 9_000);
    let ctl = controller(&fake, ledger.clone(), node.clone());
    ctl.submit("m-1", &job_file()).await.unwrap();
    let out = ctl.drive("m-1").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    let u = ledger
        .job_usage("m-1")
        .await
        .unwrap()
        .expect("usage recorded");
    assert_eq!(u.gpus, 4);
    assert_eq!(u.instances, 1);
    assert!(u.instance_type.starts_with("g5."), "{}", u.instance_type);
    assert_eq!(u.peak_memory_mib, 9_000);
    assert_eq!(u.memory_total_mib, 24_576);
    assert_eq!(u.max_util_pct, 35);
    assert!((u.mean_util_pct().unwrap() - 35.0).abs() < 1e-9);
    // What the instance ran for (three hours of work and the restart
    // overhead), never more: the first summary's window is cut at the
    // launch, and each later one adds only the minutes it newly covers.
    let ran = (fake.clock().now() - FAKE_EPOCH).whole_seconds() as u64;
    assert!(
        u.observed_secs <= ran && u.observed_secs + 15 * 60 >= ran,
        "{} s measured in {ran} s",
        u.observed_secs
    );
}

#[tokio::test]
async fn a_resumed_job_does_not_count_the_same_time_twice() {
    let (fake, ledger, node) = world(80, 20_000);
    let first = controller(&fake, ledger.clone(), node.clone());
    first.submit("m-2", &job_file()).await.unwrap();
    // The first controller dies an hour in.
    let task = tokio::spawn(async move { first.drive("m-2").await });
    loop {
        tokio::task::yield_now().await;
        if fake.clock().now() >= FAKE_EPOCH + time::Duration::hours(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    task.abort();
    let _ = task.await;
    let before = ledger
        .job_usage("m-2")
        .await
        .unwrap()
        .expect("usage so far");
    let second = controller(&fake, ledger.clone(), node);
    let out = second.drive("m-2").await.unwrap();
    assert_eq!(out.state, JobState::Succeeded, "{}", out.detail);
    let after = ledger.job_usage("m-2").await.unwrap().unwrap();
    assert!(after.observed_secs > before.observed_secs);
    let ran = (fake.clock().now() - FAKE_EPOCH).whole_seconds() as u64;
    assert!(
        after.observed_secs <= ran,
        "{} s measured in {ran} s",
        after.observed_secs
    );
    assert!((after.mean_util_pct().unwrap() - 80.0).abs() < 1e-9);
}
