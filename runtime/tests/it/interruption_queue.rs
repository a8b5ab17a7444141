//! The AWS interruption queue (issue 64): EventBridge's EC2 events on an SQS
//! queue that the controller long-polls, on moto's EC2 and SQS. A spot
//! interruption warning for a job's instance is acted on within seconds,
//! whatever the poll: the job is recorded as interrupted and placed again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_core::clock::{Clock, SystemClock};
use gpufleet_core::ledger::{JobState, Ledger, MemoryLedger};
use gpufleet_core::placer::JobFile;
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, RealTime};
use gpufleet_runtime::{Executor, LaunchTemplate};
use gpufleet_testkit::aws;

/// Waits (bounded) until the job's history has a record of `state` after
/// the first `skip` records; returns its index.
async fn until(ledger: &MemoryLedger, job: &str, state: JobState, skip: usize) -> usize {
    let started = Instant::now();
    loop {
        let h = ledger.job_history(job).await.unwrap();
        if let Some(i) = h.iter().skip(skip).position(|r| r.state == state) {
            return skip + i;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {state} record in 60 s: {:?}",
            h.iter()
                .map(|r| (r.state, r.detail.clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_a_spot_warning_on_the_queue_places_the_job_again_within_seconds() {
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let aws_provider = aws::provider(&moto.url, None, "us-east-1").await;
    // The queue, made as an operator makes it for the EventBridge rules.
    let sqs = aws::sqs(&moto.url);
    sqs.create_queue()
        .queue_name("gpufleet-interruptions")
        .send()
        .await
        .unwrap();
    let queue = aws_provider
        .interruption_queue("gpufleet-interruptions")
        .await
        .unwrap()
        .with_wait(Duration::from_secs(2));
    queue.check().await.unwrap();
    let queue_url = queue.url().to_string();
    // A queue that is not there is said so, by kind.
    let e = aws_provider
        .interruption_queue("no-such-queue")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");

    let ledger = Arc::new(MemoryLedger::new());
    let provider: Arc<dyn Provider> = Arc::new(aws_provider);
    let exec = Arc::new(Executor::new(
        vec![provider.clone()],
        ledger.clone(),
        Arc::new(SystemClock) as Arc<dyn Clock>,
    ));
    let mut template = LaunchTemplate::default();
    template.images.insert(Cloud::Aws, "ami-12c6146b".into());
    // A poll of 10 minutes: only the queue can make it act in seconds.
    let ctl = Controller::new(exec, template, Arc::new(RealTime))
        .with_config(ControllerConfig {
            poll: Duration::from_secs(600),
            move_review: Duration::from_secs(24 * 3600),
            ..ControllerConfig::default()
        })
        .with_events(vec![Arc::new(queue)]);
    let file = JobFile::new(2.0, "A10G", 1)
        .named("queued")
        .within("aws", &["us-east-1"]);
    ctl.submit("queued-1", &file).await.unwrap();
    let driving = {
        let ctl = ctl.clone();
        tokio::spawn(async move { ctl.drive("queued-1").await })
    };
    let first = until(&ledger, "queued-1", JobState::Running, 0).await;
    let history = ledger.job_history("queued-1").await.unwrap();
    let id = history[first].instances[0].clone();
    let native = id.as_str().split_once('/').unwrap().1;

    // A rebalance recommendation first: noted, not acted on.
    let rebalance = aws::ec2_event(
        "EC2 Instance Rebalance Recommendation",
        "us-east-1",
        native,
        &[],
    );
    sqs.send_message()
        .queue_url(&queue_url)
        .message_body(rebalance)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let h = ledger.job_history("queued-1").await.unwrap();
    assert_eq!(h.last().unwrap().state, JobState::Running, "{h:?}");

    // The two-minute warning, as EventBridge delivers it.
    let warning = aws::ec2_event(
        "EC2 Spot Instance Interruption Warning",
        "us-east-1",
        native,
        &[("instance-action", "terminate")],
    );
    let sent = Instant::now();
    sqs.send_message()
        .queue_url(&queue_url)
        .message_body(warning)
        .send()
        .await
        .unwrap();
    let interrupted = until(&ledger, "queued-1", JobState::Interrupted, first).await;
    let heard_in = sent.elapsed();
    let again = until(&ledger, "queued-1", JobState::Running, interrupted).await;
    let placed_in = sent.elapsed();
    let h = ledger.job_history("queued-1").await.unwrap();
    assert!(
        h[interrupted]
            .detail
            .contains("heard on the interruption queue"),
        "{}",
        h[interrupted].detail
    );
    assert_ne!(h[again].instances, h[first].instances);
    eprintln!(
        "spot warning on the queue: interruption recorded after {heard_in:?}, placed again after {placed_in:?} (poll 600 s)"
    );
    assert!(heard_in < Duration::from_secs(5), "{heard_in:?}");
    // The warned instance was let go; the new one runs.
    let old = provider.instance(&id).await.unwrap();
    assert!(!old.state.is_live(), "{:?}", old.state);
    // The queue is empty: every message read was deleted.
    let left = sqs
        .receive_message()
        .queue_url(&queue_url)
        .wait_time_seconds(0)
        .send()
        .await
        .unwrap();
    assert!(left.messages.unwrap_or_default().is_empty());
    driving.abort();
    ctl.cancel("queued-1").await.unwrap();
}
