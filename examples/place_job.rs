//! Place a fault-tolerant job across three (fake) clouds, survive a
//! preemption, and finish with nothing left running.
//!
//! `cargo run --example place_job`

use std::sync::Arc;
use std::time::Duration;

use gpufleet::clock::ManualClock;
use gpufleet::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet::ledger::MemoryLedger;
use gpufleet::placer::JobSpec;
use gpufleet::prelude::*;
use gpufleet::runtime::{CheckpointHook, Executor, LaunchTemplate, RunningJob};

/// Saves the job's state when a notice arrives (here: just says so).
struct SaveCheckpoint;

#[gpufleet::async_trait]
impl CheckpointHook for SaveCheckpoint {
    async fn checkpoint(&self, job: &RunningJob) -> Result<()> {
        println!("  checkpointing {} on {}", job.job_id, job.plan.offer.pool);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    // Three fake clouds serving the embedded catalog, sharing one clock.
    let clock = ManualClock::new(FAKE_EPOCH);
    let fakes = FakeCloud::every_cloud(&clock);
    let providers = gpufleet::fake::providers(&fakes);
    let executor = Executor::new(
        providers,
        Arc::new(MemoryLedger::new()),
        Arc::new(clock.clone()),
    );

    let job = JobSpec::builder("llama-ft", GpuModel::H100, 8, 20.0)
        .or_gpu(GpuModel::A100_80GB, 8)
        .deadline(Duration::from_secs(48 * 3600))
        .build()?;
    let ranking = executor.rank(&job, 3).await?;
    println!("best plans:");
    for p in &ranking.plans {
        println!("  {}", p.explanation);
    }

    let template = LaunchTemplate {
        images: Cloud::REAL
            .iter()
            .map(|c| (*c, format!("{c}-gpu-image")))
            .collect(),
        nodes: 1,
        ..LaunchTemplate::default()
    };
    let running = executor.start("llama-ft-001", &job, &template).await?;
    println!("launched on {}", running.plan.offer.pool);

    // Six hours in, the cloud takes the instance back with two minutes' notice.
    clock.advance(Duration::from_secs(6 * 3600));
    let fake = fakes
        .iter()
        .find(|f| f.cloud() == running.plan.offer.pool.cloud)
        .expect("its cloud");
    let notice = fake.inject_interruption(
        &running.instances[0].id,
        NoticeKind::Preemption,
        Duration::from_secs(120),
    )?;
    let progress = 6.0 * running.spec.hours / running.plan.work_hours; // reference hours done
    let running = executor
        .on_notice(running, &notice, &SaveCheckpoint, progress, &template)
        .await?;
    println!(
        "re-placed on {} with {:.1} h of work left",
        running.plan.offer.pool, running.spec.hours
    );

    executor.complete(running).await?;
    let left: usize = fakes.iter().map(|f| f.live_instances().len()).sum();
    println!("done; instances left running: {left}");
    Ok(())
}
