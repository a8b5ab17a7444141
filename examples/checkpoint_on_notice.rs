//! A training loop that checkpoints when its instance is about to be taken
//! back: the interruption stream is one branch of the loop's `select!`, the
//! checkpoint must land before the notice's deadline, and the job resumes
//! from it on a fresh instance.
//!
//! `cargo run --example checkpoint_on_notice`

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gpufleet::fake::FakeCloud;
use gpufleet::prelude::*;

/// What the job must not lose.
#[derive(Debug, Clone, Copy, Default)]
struct Checkpoint {
    step: u64,
}

/// One run of the loop on one instance: trains until it finishes or a
/// preemption notice arrives, then checkpoints within the deadline.
async fn train(
    cloud: &Arc<dyn Provider>,
    instance: &Instance,
    from: Checkpoint,
    total_steps: u64,
    preempt_at_step: Option<(u64, &FakeCloud)>,
) -> Result<(Checkpoint, bool)> {
    let mut notices = cloud.interruptions().await?;
    let mut step = from.step;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    loop {
        tokio::select! {
            Some(notice) = notices.next() => {
                let notice = notice?;
                if notice.kind != NoticeKind::Preemption || notice.instance.as_ref() != Some(&instance.id) {
                    continue;
                }
                let left = notice.deadline.map(|d| (d - notice.received_at).whole_seconds()).unwrap_or(0);
                println!("step {step}: preemption notice, {left} s to the deadline; checkpointing");
                // A real job writes its state to durable storage here, with a
                // timeout shorter than `left`.
                let saved = Checkpoint { step };
                println!("checkpoint saved at step {}", saved.step);
                return Ok((saved, false));
            }
            _ = tick.tick() => {
                step += 1;
                if step >= total_steps {
                    return Ok((Checkpoint { step }, true));
                }
                if let Some((at, fake)) = preempt_at_step {
                    if step == at {
                        fake.inject_interruption(&instance.id, NoticeKind::Preemption, Duration::from_secs(120))?;
                    }
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Gcp));
    let cloud: Arc<dyn Provider> = fake.clone();
    let query = OfferQuery::new()
        .gpu(GpuModel::L4, Some(1))
        .capacity(Capacity::Spot);
    let offer = cloud.cheapest_offers(&query, 1).await?.remove(0);
    println!("training on {} at ${}/h", offer.pool, offer.price);

    let mut checkpoint = Checkpoint::default();
    let total = 400;
    for attempt in 1.. {
        let key = IdempotencyKey::new(format!("finetune-l4-{attempt}"))?;
        let req = LaunchRequest::new(offer.pool.clone(), "debian-12", key)
            .with_tag(tags::JOB, "finetune-l4");
        let instance = cloud.launch(&req).await?.remove(0);
        // The first instance is preempted at step 150.
        let preempt = (attempt == 1).then_some((150, fake.as_ref()));
        let (saved, done) = train(&cloud, &instance, checkpoint, total, preempt).await?;
        checkpoint = saved;
        let _ = cloud.terminate(&instance.id).await;
        if done {
            println!("finished {total} steps after {attempt} instance(s), resuming from step 150 on the second");
            break;
        }
    }
    assert_eq!(fake.live_instances().len(), 0);
    Ok(())
}
