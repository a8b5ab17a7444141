//! Soak: 10,000 jobs over a simulated week on three fake clouds, with random
//! capacity outages and preemptions from a fixed seed. Every job completes or
//! fails with a reason; nothing is left running, nothing launched twice, no
//! placement group orphaned; peak memory is reported.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::clock::ManualClock;
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::ledger::MemoryLedger;
use gpufleet_core::placer::*;
use gpufleet_core::*;
use gpufleet_runtime::*;

use catalogs::THREE_CLOUD_A100 as CATALOG;
use gpufleet_testkit::catalogs;

/// xorshift64*: a fixed-seed generator, so every run sees the same week.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

struct Live {
    running: RunningJob,
    done: f64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_over_a_week_leave_nothing_behind() {
    const JOBS: usize = 10_000;
    const HOURS: u64 = 7 * 24;
    let snapshot = Snapshot::parse(CATALOG).unwrap();
    let clock = ManualClock::new(FAKE_EPOCH);
    let clouds: Vec<Arc<FakeCloud>> = [Cloud::Aws, Cloud::Gcp, Cloud::Azure]
        .into_iter()
        .map(|c| {
            Arc::new(FakeCloud::with_catalog(c, &snapshot.for_cloud(c)).with_clock(clock.clone()))
        })
        .collect();
    let providers: Vec<Arc<dyn Provider>> = clouds
        .iter()
        .map(|c| c.clone() as Arc<dyn Provider>)
        .collect();
    let ledger = Arc::new(MemoryLedger::new());
    let exec = Executor::new(providers, ledger, Arc::new(clock.clone()));
    let template = catalogs::three_cloud_template();
    let pools: Vec<(usize, Pool)> = snapshot
        .offers()
        .iter()
        .map(|o| {
            let i = match o.pool.cloud {
                Cloud::Aws => 0,
                Cloud::Gcp => 1,
                _ => 2,
            };
            (i, o.pool.clone())
        })
        .collect();
    let hook = NoCheckpoint;
    let mut rng = Rng(0x5eed_f1ee_7000_0001);
    let mut live: HashMap<String, Live> = HashMap::new();
    let mut completed = 0usize;
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut preemptions = 0usize;
    let mut next_job = 0usize;
    for hour in 0..HOURS {
        // Capacity comes and goes: spot pools often, on-demand rarely.
        for (i, pool) in &pools {
            let p = if pool.capacity == Capacity::Spot {
                0.15
            } else {
                0.03
            };
            if rng.chance(p) {
                let out = rng.chance(0.5);
                clouds[*i].set_out_of_capacity(pool, out);
            }
        }
        // This hour's arrivals.
        let arrivals = ((hour + 1) as usize * JOBS / HOURS as usize) - next_job;
        for _ in 0..arrivals {
            let id = format!("job-{next_job:05}");
            next_job += 1;
            let hours = rng.range(1, 12) as f64;
            let spec = JobSpec::builder(id.clone(), GpuModel::A100, 8, hours)
                .deadline(Duration::from_secs(((hours * 3.0) as u64 + 24) * 3600))
                .build()
                .unwrap();
            match exec.start(&id, &spec, &template).await {
                Ok(running) => {
                    live.insert(id, Live { running, done: 0.0 });
                }
                Err(e) => failed.push((id, e.to_string())),
            }
        }
        // An hour of work for everything running; some are preempted.
        clock.advance(Duration::from_secs(3600));
        let ids: Vec<String> = {
            let mut v: Vec<String> = live.keys().cloned().collect();
            v.sort();
            v
        };
        for id in ids {
            let mut job = live.remove(&id).unwrap();
            job.done += 1.0;
            if job.done >= job.running.spec.hours {
                exec.complete(job.running).await.unwrap();
                completed += 1;
                continue;
            }
            if job.running.plan.offer.pool.capacity == Capacity::Spot && rng.chance(0.05) {
                preemptions += 1;
                let cloud = match job.running.plan.offer.pool.cloud {
                    Cloud::Aws => 0,
                    Cloud::Gcp => 1,
                    _ => 2,
                };
                let notice = clouds[cloud]
                    .inject_interruption(
                        &job.running.instances[0].id,
                        NoticeKind::Preemption,
                        Duration::from_secs(120),
                    )
                    .unwrap();
                match exec
                    .on_notice(job.running, &notice, &hook, job.done, &template)
                    .await
                {
                    Ok(running) => {
                        live.insert(id, Live { running, done: 0.0 });
                    }
                    Err(e) => failed.push((id, e.to_string())),
                }
                continue;
            }
            live.insert(id, job);
        }
    }
    // Whatever is still running at the end of the week finishes now.
    for (_, job) in live.drain() {
        exec.complete(job.running).await.unwrap();
        completed += 1;
    }

    assert_eq!(next_job, JOBS);
    assert_eq!(completed + failed.len(), JOBS, "a job was lost");
    for (id, why) in &failed {
        assert!(!why.is_empty(), "{id} failed without a reason");
    }
    let running: usize = clouds.iter().map(|c| c.live_instances().len()).sum();
    assert_eq!(running, 0, "instances left running");
    let groups: usize = clouds.iter().map(|c| c.placement_groups().len()).sum();
    assert_eq!(groups, 0, "placement groups orphaned");
    // Every launch made its own instances (the clouds hold exactly as many as
    // the executor launched), and each was terminated once.
    // (Totals: the event list keeps only the newest events.)
    let (launched, terminations) = exec.totals();
    let (launched, terminations) = (launched as usize, terminations as usize);
    let held: usize = clouds
        .iter()
        .map(|c| c.export_state().instances.len())
        .sum();
    assert_eq!(
        held, launched,
        "the clouds hold instances nobody launched, or a launch made two"
    );
    assert_eq!(terminations, launched, "launched and terminated differ");
    let peak = peak_rss_kib();
    eprintln!(
        "soak: {JOBS} jobs, {completed} completed, {} failed, {preemptions} preemptions, {} launches; peak RSS {} MiB",
        failed.len(),
        launched,
        peak.map_or("?".into(), |k| (k / 1024).to_string())
    );
    // Why jobs did not start or restart, the commonest first (a start the
    // placement policy answers with a wait counts here: the soak does not
    // come back to it).
    let mut why: HashMap<String, usize> = HashMap::new();
    for (_, e) in &failed {
        let head = e.split([':', '(']).next().unwrap_or_default();
        *why.entry(head.to_string()).or_default() += 1;
    }
    let mut why: Vec<(String, usize)> = why.into_iter().collect();
    why.sort_by_key(|w| std::cmp::Reverse(w.1));
    for (w, n) in why.iter().take(5) {
        eprintln!("  {n} failed: {w}");
    }
    if let Some(k) = peak {
        assert!(k < 1024 * 1024, "peak RSS {k} KiB: memory is not bounded");
    }
}
