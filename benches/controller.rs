//! The controller's own cost (issue 64): one `jobs serve` controller driving
//! 1,000 one-node jobs in 4 regions on the fake cloud, its ledger on a
//! throwaway PostgreSQL 15 cluster (as the tests use; skipped without one),
//! polling every minute of a manual clock. Measured over 30 polls once every
//! job runs: the process's CPU time per poll (user + system, from
//! `/proc/self/stat`: the controller, the fake cloud it calls and the
//! PostgreSQL client, not the server), its resident memory, and the rows the
//! ledger wrote per minute (PostgreSQL's own counters of inserted, updated
//! and deleted rows, per table).
//!
//! `cargo bench --bench controller --features postgres` (figures in
//! docs/performance.md). Linux only (it reads `/proc`). The controller's
//! defaults apply unless `BENCH_SWEEP_EVERY` (polls between orphan sweeps)
//! or `BENCH_MOVE_REVIEW_SECS` (how often each job asks the policy whether
//! moving pays) say otherwise; "measuring" on stderr marks the start of the
//! measured window (to attach a profiler there).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet::clock::{Clock, ManualClock};
use gpufleet::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet::ledger::Ledger;
use gpufleet::placer::JobFile;
use gpufleet::postgres::PgLedger;
use gpufleet::runtime::controller::{Controller, ControllerConfig, ServeConfig};
use gpufleet::runtime::factory::{layered, Layers};
use gpufleet::runtime::{Executor, LaunchTemplate};
use gpufleet::{Cloud, Provider};
use gpufleet_testkit::fleet;
use gpufleet_testkit::postgres as pg;
use tokio::sync::watch;

const JOBS: usize = 1_000;
const REGIONS: usize = 4;
const POLL: Duration = Duration::from_secs(60);
const MEASURED_POLLS: u64 = 30;

/// The process's CPU time (user + system) so far, from `/proc/self/stat` in
/// clock ticks of 10 ms (Linux's USER_HZ).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name (which may hold spaces) in `)`.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// A `/proc/self/status` field in MiB (`VmRSS`, `VmHWM`).
fn mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

/// Rows inserted, updated and deleted per table of `db` so far. A backend
/// publishes its counters within 10 s of going idle (PostgreSQL 15), so the
/// caller waits that long first.
fn rows_written(server: &pg::PgServer, db: &str) -> BTreeMap<String, i64> {
    let out = server.psql(
        db,
        "SELECT relname || ' ' || (n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables",
    );
    out.lines()
        .filter_map(|l| {
            let (t, n) = l.trim().rsplit_once(' ')?;
            Some((t.to_string(), n.parse().ok()?))
        })
        .collect()
}

fn main() {
    let Some(server) = pg::shared() else {
        println!("(skipped: no PostgreSQL binaries)");
        return;
    };
    let url = server.fresh_db();
    // `postgres://…/<db>?sslmode=disable`: the database name alone.
    let db = url
        .rsplit('/')
        .next()
        .and_then(|tail| tail.split('?').next())
        .unwrap()
        .to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(server, &url, &db));
}

async fn run(server: &pg::PgServer, url: &str, db: &str) {
    let clock = ManualClock::new(FAKE_EPOCH);
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()));
    let regions = fleet::regions_selling(&fake, "A10G", REGIONS).await;
    let ledger: Arc<dyn Ledger> = Arc::new(PgLedger::connect(url).await.unwrap());
    let exec = Arc::new(Executor::new(
        vec![layered(
            fake.clone() as Arc<dyn Provider>,
            &Layers::default(),
        )],
        ledger,
        Arc::new(clock.clone()) as Arc<dyn Clock>,
    ));
    let mut template = LaunchTemplate::default();
    template.images.insert(Cloud::Aws, "ami-1".into());
    let pace = fleet::Ticks::new(clock.clone());
    let pacer = Arc::new(pace.clone());
    let ctl = Controller::new(exec, template, pacer).with_config(ControllerConfig {
        poll: POLL,
        holder: "bench".into(),
        sweep_every: std::env::var("BENCH_SWEEP_EVERY")
            .ok()
            .map_or(10, |v| v.parse().unwrap()),
        move_review: Duration::from_secs(
            std::env::var("BENCH_MOVE_REVIEW_SECS")
                .ok()
                .map_or(1800, |v| v.parse().unwrap()),
        ),
        ..ControllerConfig::default()
    });
    let rss_empty = mib("VmRSS");
    for i in 0..JOBS {
        let region = regions[i % regions.len()].as_str();
        let file = JobFile::new(400.0, "A10G", 1)
            .named(format!("bench-{i}"))
            .within("aws", &[region])
            .checkpointing("30m", "5m");
        ctl.submit(&format!("bench-{i}"), &file).await.unwrap();
    }
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let serving = {
        let ctl = ctl.clone();
        tokio::spawn(async move {
            ctl.serve(
                ServeConfig {
                    max_jobs: JOBS,
                    claim_every: Duration::from_millis(100),
                    claim_batch: 250,
                    reconcile_every: None,
                    owner: String::new(),
                    any_owner: false,
                },
                async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                },
            )
            .await
        })
    };
    let mut ticks = 0u64;
    let tick = |n: &mut u64| {
        *n += 1;
        pace.tick(&fake, POLL);
    };
    pace.polled(JOBS as u64, "the first polls").await;
    while fake.live_job_instances().len() < JOBS {
        assert!(ticks < 30, "not every job placed in 30 polls");
        tick(&mut ticks);
        pace.polled(JOBS as u64 * (ticks + 1), "a poll").await;
    }
    // Steady state: a few polls, then the measured window.
    for _ in 0..3 {
        tick(&mut ticks);
        pace.polled(JOBS as u64 * (ticks + 1), "a poll").await;
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    let rows_before = rows_written(server, db);
    let rss_running = mib("VmRSS");
    eprintln!("measuring");
    let (cpu_before, wall) = (cpu(), Instant::now());
    let mut slowest = Duration::ZERO;
    for _ in 0..MEASURED_POLLS {
        let t = Instant::now();
        tick(&mut ticks);
        pace.polled(JOBS as u64 * (ticks + 1), "a poll").await;
        slowest = slowest.max(t.elapsed());
    }
    let (cpu_used, wall) = (cpu() - cpu_before, wall.elapsed());
    let rss_after = mib("VmRSS");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let rows_after = rows_written(server, db);
    let _ = stop_tx.send(true);
    let _ = serving.await;

    let minutes = MEASURED_POLLS as f64 * POLL.as_secs_f64() / 60.0;
    println!(
        "one controller, {JOBS} jobs in {} regions on the fake cloud, PostgreSQL ledger, {MEASURED_POLLS} polls of {} s:",
        regions.len(),
        POLL.as_secs()
    );
    println!(
        "  CPU per poll: {:.1} ms (user + system, whole process); wall per poll: {:.1} ms mean, {:.1} ms slowest",
        cpu_used.as_secs_f64() * 1000.0 / MEASURED_POLLS as f64,
        wall.as_secs_f64() * 1000.0 / MEASURED_POLLS as f64,
        slowest.as_secs_f64() * 1000.0
    );
    println!(
        "  resident memory: {rss_empty:.1} MiB before the jobs, {rss_running:.1} MiB with every job running, {rss_after:.1} MiB after the window, {:.1} MiB peak",
        mib("VmHWM")
    );
    let mut total = 0;
    for (table, after) in &rows_after {
        let n = after - rows_before.get(table).copied().unwrap_or(0);
        if n > 0 {
            println!(
                "  ledger rows written to {table}: {:.1} a minute",
                n as f64 / minutes
            );
        }
        total += n;
    }
    println!(
        "  ledger rows written: {:.1} a minute in all",
        total as f64 / minutes
    );
}
