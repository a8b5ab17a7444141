//! The job controller embedded in your own program: what `gpufleet run`
//! does, on three fake clouds. The job file is `examples/jobs/finetune.toml`
//! (6 hours of A10G or A10 work within a day, checkpoints every 30 minutes);
//! two hours in, the cloud takes the instances back without notice. The
//! controller records the interruption, places the rest of the work again
//! with the one placement policy, and drives the job to its end. The ledger
//! then says where it ran and what it cost.
//!
//! `cargo run --example managed_job` (no credentials; a few seconds: the
//! fake clock moves as fast as the controller polls).
//!
//! For a real cloud, open providers with `gpufleet::runtime::open`, use a
//! [`gpufleet::sqlite::SqliteLedger`] (or the PostgreSQL one) so a restarted
//! process resumes the job, and pace with [`RealTime`](gpufleet::runtime::RealTime).

use std::sync::Arc;
use std::time::Duration;

use gpufleet::clock::ManualClock;
use gpufleet::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet::ledger::{JobState, MemoryLedger};
use gpufleet::placer::JobFile;
use gpufleet::prelude::*;
use gpufleet::runtime::controller::{job_id_for, ManualPacer};
use gpufleet::runtime::{Controller, ControllerConfig, Executor, LaunchTemplate};

/// Runs the job; returns the summary the example prints.
async fn run() -> Result<gpufleet::runtime::jobs::JobSummary> {
    // Three fake clouds serving the embedded catalog, on one manual clock.
    let clock = ManualClock::new(FAKE_EPOCH);
    let fakes = FakeCloud::every_cloud(&clock);
    let providers = gpufleet::fake::providers(&fakes);
    let executor = Arc::new(Executor::new(
        providers,
        Arc::new(MemoryLedger::new()),
        Arc::new(clock.clone()),
    ));

    // Each pause of the controller moves the clock; two hours in, every
    // instance a job runs on is preempted with no notice.
    let pacer = ManualPacer::new(clock, fakes.clone()).at(Duration::from_secs(2 * 3600), |fakes| {
        for fake in fakes {
            for i in fake.live_job_instances() {
                println!("  (the cloud takes back {} in {})", i.id, i.pool);
                let _ = fake.preempt(&i.id);
            }
        }
    });

    // What the job file does not say: an image per cloud.
    let mut base = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    for c in Cloud::REAL {
        base.images.insert(c, format!("{c}-gpu-image"));
    }
    let controller =
        Controller::new(executor, base, Arc::new(pacer)).with_config(ControllerConfig {
            holder: "example".into(),
            ..ControllerConfig::default()
        });

    let file = JobFile::from_toml(include_str!("jobs/finetune.toml"))?;
    let id = job_id_for(&file)?;
    let spec = controller.submit(&id, &file).await?;
    if let Some(why) = controller.why_unplaceable(&spec).await? {
        return Err(Error::invalid_input(format!(
            "job {id} cannot be placed: {why}"
        )));
    }
    println!("job {id}: {} h of work", spec.hours);
    let outcome = controller.drive(&id).await?;
    println!("{}: {}", outcome.state, outcome.detail);
    if outcome.state != JobState::Succeeded {
        return Err(Error::new(
            ErrorKind::Unexpected,
            format!("job {id} ended {}: {}", outcome.state, outcome.detail),
        ));
    }

    let left: usize = fakes.iter().map(|f| f.live_instances().len()).sum();
    if left != 0 {
        return Err(Error::new(
            ErrorKind::Unexpected,
            format!("{left} instance(s) left running"),
        ));
    }
    controller.summary(&id).await
}

#[tokio::main]
async fn main() -> Result<()> {
    let s = run().await?;
    let pools: Vec<String> = s.pools.iter().map(|p| p.to_string()).collect();
    println!(
        "ran in {} ({} preemption(s), {} move(s), {} launch attempt(s)); cost ${}; nothing left running",
        pools.join(" -> "),
        s.preemptions,
        s.moves,
        s.attempts,
        s.cost_so_far
    );
    Ok(())
}

/// `cargo test --example managed_job` runs it (and so does `cargo test`).
#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_job_survives_its_preemption_and_leaves_nothing_running() {
        let s = super::run().await.expect("the example runs");
        assert_eq!(s.preemptions, 1, "{s:?}");
        assert!(s.pools.len() >= 2 || s.attempts >= 2, "{s:?}");
        assert!(s.cost_so_far > gpufleet::Money::ZERO, "{s:?}");
    }
}
