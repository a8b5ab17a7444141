//! Launch, survive a lost response, get interrupted and clean up, against the
//! fake cloud, through the same `Arc<dyn Provider>` a real cloud would be used by.
//!
//! `cargo run --example fake_cloud_launch`

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gpufleet::fake::FakeCloud;
use gpufleet::prelude::*;

#[tokio::main]
async fn main() -> Result<()> {
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
    let cloud: Arc<dyn Provider> = (fake.clone() as Arc<dyn Provider>)
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .layer(RetryLayer::default())
        .layer(TracingLayer);

    let query = OfferQuery::new()
        .gpu(GpuModel::A100, Some(8))
        .capacity(Capacity::Spot);
    let offer = cloud.cheapest_offers(&query, 1).await?.remove(0);
    println!("cheapest 8xA100 spot: {} at ${}/h", offer.pool, offer.price);

    // The first launch's response is lost; the retry reuses the key.
    fake.fail_next_after_effect(
        gpufleet::Operation::Launch,
        Error::new(ErrorKind::Timeout, "response lost"),
    );
    let request = LaunchRequest::new(
        offer.pool.clone(),
        "ami-0123456789abcdef0",
        IdempotencyKey::new("train-llm-0001")?,
    )
    .with_tag(tags::JOB, "train-llm")
    .with_tag(tags::TEAM, "research")
    .with_ttl(Duration::from_secs(24 * 3600));
    let instance = cloud.launch(&request).await?.remove(0);
    println!(
        "launched {} (live instances: {})",
        instance.id,
        fake.live_instances().len()
    );

    let mut notices = cloud.interruptions().await?;
    fake.inject_interruption(
        &instance.id,
        NoticeKind::Preemption,
        Duration::from_secs(120),
    )?;
    if let Some(notice) = notices.next().await.transpose()? {
        println!(
            "notice: {:?} for {:?}, deadline {:?}",
            notice.kind, notice.instance, notice.deadline
        );
    }

    let report = cloud
        .terminate_all(&TagFilter::managed().with(tags::JOB, "train-llm"))
        .await?;
    println!(
        "terminated {:?}; left running: {}",
        report.terminated,
        fake.live_instances().len()
    );
    Ok(())
}
