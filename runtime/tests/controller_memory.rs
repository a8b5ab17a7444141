//! 100 managed jobs driven by one controller over a 24-hour fake clock, with
//! spot reclaims every two hours and moves, on the SQLite ledger: the
//! process's live heap (every allocation counted) stays flat from hour 6 to
//! hour 24 while the jobs poll 21,600 times between them. Its own binary:
//! the count is process-wide, and no other test may allocate beside it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::ledger::{JobState, Ledger};
use gpufleet_core::placer::JobFile;
use gpufleet_core::*;
use gpufleet_runtime::controller::{Controller, ControllerConfig, Pacer};
use gpufleet_runtime::sqlite::SqliteLedger;
use gpufleet_runtime::{Executor, LaunchTemplate};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};
use time::OffsetDateTime;
use tokio::sync::watch;

#[global_allocator]
static HEAP: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes now (a `realloc` is already in both byte counts).
fn live() -> i64 {
    let s = HEAP.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

/// Every job's pause waits on one shared clock, which a ticker moves.
#[derive(Debug)]
struct Ticks {
    clock: ManualClock,
    now: watch::Receiver<OffsetDateTime>,
}

#[async_trait::async_trait]
impl Pacer for Ticks {
    async fn pause(&self, d: Duration) {
        let until = self.clock.now() + d;
        let mut rx = self.now.clone();
        while *rx.borrow_and_update() < until {
            if rx.changed().await.is_err() {
                // The ticker stopped: the run is over; stay paused.
                futures::future::pending::<()>().await;
            }
        }
    }
}

fn job_file(i: usize) -> JobFile {
    JobFile {
        run: Some("python train.py".into()),
        ..JobFile::new(40.0, ["A10G", "T4", "L4", "V100"][i % 4], 1)
            .named(format!("long-{i}"))
            .within("aws", &["us-east-1", "us-west-2"])
            .checkpointing("30m", "5m")
    }
}

#[tokio::test]
async fn a_hundred_jobs_over_24_hours_keep_the_controllers_memory_flat() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let ledger = Arc::new(SqliteLedger::open(dir.join("ledger.db")).unwrap());
    let clock = ManualClock::new(FAKE_EPOCH);
    let fake = Arc::new(
        FakeCloud::from_snapshot(Cloud::Aws)
            .with_clock(clock.clone())
            .with_call_log(1_000),
    );
    let exec = Arc::new(Executor::new(
        vec![fake.clone() as Arc<dyn Provider>],
        ledger.clone(),
        Arc::new(clock.clone()) as Arc<dyn Clock>,
    ));
    let mut template = LaunchTemplate {
        nodes: 1,
        ..LaunchTemplate::default()
    };
    template.images.insert(Cloud::Aws, "ami-1".into());
    let (tx, rx) = watch::channel(clock.now());
    let pacer = Arc::new(Ticks {
        clock: clock.clone(),
        now: rx,
    });
    let ctl = Controller::new(exec, template, pacer).with_config(ControllerConfig {
        poll: Duration::from_secs(300),
        move_review: Duration::from_secs(4 * 3600),
        ..ControllerConfig::default()
    });
    let jobs = 100;
    let mut drivers = Vec::new();
    for i in 0..jobs {
        let id = format!("long-{i}");
        ctl.submit(&id, &job_file(i)).await.unwrap();
        let c = ctl.clone();
        drivers.push(tokio::spawn(async move { c.drive(&id).await }));
    }

    let mut samples: Vec<(u32, i64)> = Vec::new();
    let mut reclaimed = 0;
    // Five-minute ticks: every job polls once a tick.
    for minute in (5..=24 * 60u32).step_by(5) {
        clock.advance(Duration::from_secs(300));
        fake.settle();
        tx.send_replace(clock.now());
        // Let every job that woke finish its poll.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        if minute % 120 == 0 && minute < 24 * 60 {
            // Spot reclaims (none at the last tick, whose state is read): every 7th live job instance goes.
            let live: Vec<Instance> = fake.live_instances();
            for i in live.iter().step_by(7) {
                fake.preempt(&i.id).unwrap();
                reclaimed += 1;
            }
        }
        if minute % 180 == 0 {
            samples.push((minute / 60, live()));
        }
    }
    // The ledger's calls run on the blocking pool: let the polls of the
    // last tick finish before reading where the jobs stand.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut states: Vec<JobState> = Vec::new();
    for i in 0..jobs {
        let last = ledger
            .job_latest(&format!("long-{i}"))
            .await
            .unwrap()
            .unwrap();
        // A job the placement policy chose to keep waiting for spot
        // capacity (cheaper in expectation than on-demand) is driven too.
        let waiting =
            last.state == JobState::Placing && last.detail.contains("the placement policy waits");
        states.push(if waiting {
            JobState::Running
        } else {
            last.state
        });
    }
    for d in &drivers {
        d.abort();
    }

    // After a move the newest record is the old placement's `moved`; a job
    // waiting by the policy's choice counts as running (above).
    let running = states
        .iter()
        .filter(|s| matches!(s, JobState::Running | JobState::Moved))
        .count();
    let polls: usize = 24 * 60 / 5 * jobs;
    let window_polls = 18 * 60 / 5 * jobs;
    let at6 = samples.iter().find(|(h, _)| *h == 6).unwrap().1;
    let peak_after = samples
        .iter()
        .filter(|(h, _)| *h > 6)
        .map(|(_, b)| *b)
        .max()
        .unwrap();
    let growth = peak_after - at6;
    let figures: Vec<String> = samples
        .iter()
        .map(|(h, b)| format!("{h}h {:.2} MiB", *b as f64 / 1048576.0))
        .collect();
    eprintln!(
        "{jobs} jobs, about {polls} polls, {reclaimed} reclaims; live heap {}; growth after hour 6: {} KiB ({} bytes a poll)",
        figures.join(", "),
        growth / 1024,
        growth / window_polls as i64
    );
    assert!(
        running >= jobs * 9 / 10,
        "only {running} of {jobs} jobs running at 24 h: {states:?}"
    );
    assert!(reclaimed >= 75, "{reclaimed} reclaims");
    // Flat: what grows is the ledger (on disk) and the fake cloud's
    // instance and launch lists (every reclaim or move adds one, as EC2
    // keeps terminated instances listed), about 5 KiB a launch; 1.5 MiB
    // over 21,600 polls is 72 bytes a poll, less than any record a
    // controller could keep per poll.
    assert!(
        growth < 1536 * 1024,
        "the live heap grew {growth} bytes from hour 6 to 24: {figures:?}"
    );
}
