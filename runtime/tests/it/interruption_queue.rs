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

/// Sends one message body to a queue, as EventBridge would.
async fn post(sqs: &aws::SqsClient, url: &str, body: String) {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
}

/// Makes a queue as an operator makes it for the EventBridge rules; its URL.
async fn new_queue(sqs: &aws::SqsClient, name: &str) -> String {
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// The event EC2 sends when an instance of this capacity type is taken:
/// the two-minute warning for spot, the state change for any other.
fn ending_event(capacity: Capacity, native: &str) -> String {
    if capacity == Capacity::Spot {
        aws::ec2_event(
            "EC2 Spot Instance Interruption Warning",
            "us-east-1",
            native,
            &[("instance-action", "terminate")],
        )
    } else {
        aws::ec2_event(
            "EC2 Instance State-change Notification",
            "us-east-1",
            native,
            &[("state", "shutting-down")],
        )
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
    let _ = new_queue(&sqs, "gpufleet-interruptions").await;
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
    post(&sqs, &queue_url, rebalance).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let h = ledger.job_history("queued-1").await.unwrap();
    assert_eq!(h.last().unwrap().state, JobState::Running, "{h:?}");

    // The two-minute warning, as EventBridge delivers it: obeyed for a
    // spot instance only (EC2 sends it for no other). Where the placer put
    // the job on demand (as it does on moto's prices), the warning is not
    // obeyed, and the instance's state change is the event acted on.
    let warning = aws::ec2_event(
        "EC2 Spot Instance Interruption Warning",
        "us-east-1",
        native,
        &[("instance-action", "terminate")],
    );
    let spot = history[first].pool.as_ref().unwrap().capacity == Capacity::Spot;
    let ending = if spot {
        warning
    } else {
        post(&sqs, &queue_url, warning).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let h = ledger.job_history("queued-1").await.unwrap();
        assert_eq!(
            h.last().unwrap().state,
            JobState::Running,
            "a spot warning obeyed for an on-demand instance: {h:?}"
        );
        ending_event(Capacity::OnDemand, native)
    };
    let sent = Instant::now();
    post(&sqs, &queue_url, ending).await;
    let interrupted = until(&ledger, "queued-1", JobState::Interrupted, first).await;
    let heard_in = sent.elapsed();
    let again = until(&ledger, "queued-1", JobState::Running, interrupted).await;
    let placed_in = sent.elapsed();
    let h = ledger.job_history("queued-1").await.unwrap();
    assert!(
        h[interrupted].detail.contains("interruption queue"),
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

/// Two readers of one queue (issue 78): a message about an instance one
/// reader does not drive is handed back for the other, never deleted
/// under it. Of 10 events about A's instance, A gets all 10 while B, which
/// reads the same queue as often, claims none and deletes none; an event
/// naming another account is returned to no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_two_readers_of_one_queue_each_get_their_own_instances_events() {
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let provider = aws::provider(&moto.url, None, "us-east-1").await;
    let sqs = aws::sqs(&moto.url);
    let _ = new_queue(&sqs, "shared-interruptions").await;
    let open = || async {
        provider
            .interruption_queue("shared-interruptions")
            .await
            .unwrap()
            .with_wait(Duration::from_secs(1))
    };
    let (a, b) = (open().await, open().await);
    let url = a.url().to_string();
    for n in 0..10 {
        let body = aws::ec2_event(
            "EC2 Instance Rebalance Recommendation",
            "us-east-1",
            &format!("i-aaaa{n:04}"),
            &[],
        );
        post(&sqs, &url, body).await;
    }
    // Another account's event about an instance A drives: never A's.
    let foreign = aws::ec2_event(
        "EC2 Spot Instance Interruption Warning",
        "us-east-1",
        "i-aaaa0000",
        &[("instance-action", "terminate")],
    )
    .replace("123456789012", "999999999999");
    post(&sqs, &url, foreign).await;
    let a_mine = |e: &CloudEvent| e.instance.as_str().starts_with("us-east-1/i-aaaa");
    let b_mine = |e: &CloudEvent| e.instance.as_str().starts_with("us-east-1/i-bbbb");
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while got_a.len() < 10 && started.elapsed() < Duration::from_secs(60) {
        // B reads first each round, as often as A: it must leave A's.
        got_b.extend(b.receive(&b_mine).await.unwrap());
        got_a.extend(a.receive(&a_mine).await.unwrap());
    }
    assert!(got_b.is_empty(), "B took A's events: {got_b:?}");
    let mut ids: Vec<String> = got_a.iter().map(|e| e.instance.to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 10, "A got {ids:?} in {:?}", started.elapsed());
    assert!(
        got_a
            .iter()
            .all(|e| e.account.as_deref() == Some("123456789012")
                && matches!(e.kind, CloudEventKind::Rebalance)),
        "{got_a:?}"
    );
    // The foreign one is still on the queue (handed back, not obeyed).
    tokio::time::sleep(gpufleet_aws::LEFT_FOR + Duration::from_secs(1)).await;
    let left = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].body().unwrap_or_default().contains("999999999999"));
}

/// Two controllers on one queue, each driving a job: the event that ends
/// each one's instance is acted on by that controller within seconds (the
/// other hands it back), whatever order they read in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_two_controllers_on_one_queue_each_act_on_their_own_warning() {
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let sqs = aws::sqs(&moto.url);
    let queue_url = new_queue(&sqs, "two-controllers").await;
    let ledger = Arc::new(MemoryLedger::new());
    let mut controllers = Vec::new();
    for _ in 0..2 {
        let p = aws::provider(&moto.url, None, "us-east-1").await;
        let queue = p
            .interruption_queue("two-controllers")
            .await
            .unwrap()
            .with_wait(Duration::from_secs(1));
        let provider: Arc<dyn Provider> = Arc::new(p);
        let exec = Arc::new(Executor::new(
            vec![provider],
            ledger.clone(),
            Arc::new(SystemClock) as Arc<dyn Clock>,
        ));
        let mut template = LaunchTemplate::default();
        template.images.insert(Cloud::Aws, "ami-12c6146b".into());
        controllers.push(
            Controller::new(exec, template, Arc::new(RealTime))
                .with_config(ControllerConfig {
                    poll: Duration::from_secs(600),
                    move_review: Duration::from_secs(24 * 3600),
                    ..ControllerConfig::default()
                })
                .with_events(vec![Arc::new(queue)]),
        );
    }
    let mut driving = Vec::new();
    for (k, ctl) in controllers.iter().enumerate() {
        let id = format!("two-{k}");
        let file = JobFile::new(2.0, "A10G", 1)
            .named(format!("two{k}"))
            .within("aws", &["us-east-1"]);
        ctl.submit(&id, &file).await.unwrap();
        let ctl = ctl.clone();
        driving.push(tokio::spawn(async move { ctl.drive(&id).await }));
    }
    for k in 0..2 {
        let job = format!("two-{k}");
        let first = until(&ledger, &job, JobState::Running, 0).await;
        let h = ledger.job_history(&job).await.unwrap();
        let native = h[first].instances[0]
            .as_str()
            .split_once('/')
            .unwrap()
            .1
            .to_string();
        // The event EC2 sends for the instance's capacity type.
        let warning = ending_event(h[first].pool.as_ref().unwrap().capacity, &native);
        let sent = Instant::now();
        post(&sqs, &queue_url, warning).await;
        until(&ledger, &job, JobState::Interrupted, first).await;
        let heard_in = sent.elapsed();
        eprintln!("controller {k}: its warning acted on after {heard_in:?} (poll 600 s, another reader on the queue)");
        assert!(heard_in < Duration::from_secs(20), "{heard_in:?}");
    }
    for d in driving {
        d.abort();
    }
    for (k, ctl) in controllers.iter().enumerate() {
        ctl.cancel(&format!("two-{k}")).await.unwrap();
    }
}
