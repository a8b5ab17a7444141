//! Ledger writes per second, for 1, 4 and 16 concurrent writers, on the
//! SQLite and the PostgreSQL backends (a throwaway PostgreSQL 15 cluster,
//! as the tests use; skipped without one). Each write is one job transition
//! (`record_job`), committed before the call returns.
//!
//! `cargo bench --bench ledger` (figures in the README).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use gpufleet_testkit::postgres as pg;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet::fake::FAKE_EPOCH;
use gpufleet::ledger::{JobRecord, JobState, Ledger};

const WRITES: usize = 4000;

async fn measure(ledger: Arc<dyn Ledger>, writers: usize) -> f64 {
    let each = WRITES / writers;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let l = ledger.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..each {
                let mut r = JobRecord::new(
                    format!("bench-{w}"),
                    "bench",
                    JobState::Running,
                    FAKE_EPOCH + time::Duration::seconds(i as i64),
                );
                r.detail = format!("transition {i}");
                l.record_job(&r).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (each * writers) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    println!("| backend | writers | writes/s |");
    println!("|---|---:|---:|");
    for writers in [1, 4, 16] {
        let path = dir.join(format!("w{writers}.sqlite3"));
        let l: Arc<dyn Ledger> = Arc::new(gpufleet::sqlite::SqliteLedger::open(&path).unwrap());
        let rate = rt.block_on(measure(l, writers));
        println!("| SQLite (WAL, one file) | {writers} | {rate:.0} |");
    }
    let Some(server) = pg::shared() else {
        println!("(PostgreSQL skipped: no binaries)");
        return;
    };
    for writers in [1, 4, 16] {
        let url = server.fresh_db();
        let rate = rt.block_on(async {
            let l = gpufleet::postgres::PgLedger::connect_with(
                &url,
                gpufleet::postgres::PgOptions {
                    max_connections: 16,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            measure(Arc::new(l), writers).await
        });
        println!("| PostgreSQL 15 (pool of 16, fsync off) | {writers} | {rate:.0} |");
    }
    std::thread::sleep(Duration::from_millis(10));
}
