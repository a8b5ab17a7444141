//! Several controllers, one truth: three `gpufleet jobs serve` processes
//! share 300 managed jobs through a PostgreSQL ledger on the shared fake
//! cloud while spot interruptions are injected; one controller is killed
//! with SIGKILL mid-run. Every job must complete exactly once, no instance be
//! launched twice or left running, and the survivors must take the dead
//! one's jobs over within its lease time and one poll.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::postgres as pg;

use crate::support;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::words;

use gpufleet::ledger::{JobState, Ledger};
use gpufleet::placer::JobFile;
use gpufleet::postgres::PgLedger;
use gpufleet::runtime::fake_store::FakeStore;
use gpufleet::{tags, EndCause, EndReason, InstanceState};

const JOBS: usize = 300;
const LEASE: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_secs(1);
/// Only instances launched this recently are reclaimed: their job (10.8 s
/// of work after boot) cannot have finished, so each reclaim must be an
/// interruption. An older one may carry a job whose work is done but whose
/// end its controller has not yet seen (slow under load): its reclaim is
/// no interruption.
const FRESH: time::Duration = time::Duration::seconds(6);

fn job_file(i: usize) -> JobFile {
    JobFile {
        checkpoint_cost: Some("1s".into()),
        ..JobFile::new(0.003, ["T4", "A10G", "L4"][i % 3], 1)
            .named(format!("shared-{i}"))
            .within("aws", &["us-east-1"])
            .checkpointing("3s", "1s")
    }
}

fn serve(dir: &Path, ledger: &str, name: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["--provider", "fake", "jobs", "serve"])
        .args(["--poll", "1s", "--lease", "3s", "--heartbeat-grace", "10m"])
        .args(words("--max-jobs 200 --claim-batch 12 --serve-for 10m"))
        .env("GPUFLEET_LOG", "warn")
        .env("GPUFLEET_CONFIG", dir.join("gpufleet.toml"))
        .env("GPUFLEET_FAKE_STATE", dir.join("fake.json"))
        .env("GPUFLEET_LEDGER", ledger)
        .env("GPUFLEET_CLOUDS", "aws")
        .env_remove("GPUFLEET_FAKE_NOW")
        .env_remove("GPUFLEET_FAKE_SCRIPT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Reclaims up to `n` running instances launched within [`FRESH`] (a spot
/// interruption with no notice), under the shared fake's lock; returns
/// them and when.
fn reclaim(store: &FakeStore, n: usize, round: usize) -> Vec<(String, time::OffsetDateTime)> {
    store
        .locked(|file| {
            let now = time::OffsetDateTime::now_utc();
            let mut done = Vec::new();
            for state in file.clouds.values_mut() {
                let mut live: Vec<usize> = state
                    .instances
                    .iter()
                    .enumerate()
                    .filter(|(_, i)| {
                        i.state == InstanceState::Running && now - i.launched_at < FRESH
                    })
                    .map(|(k, _)| k)
                    .collect();
                // A different slice of the fleet each round.
                let turn = round * 7 % live.len().max(1);
                live.rotate_left(turn);
                for k in live.into_iter().take(n - done.len()) {
                    let i = &mut state.instances[k];
                    i.state = InstanceState::Terminated;
                    i.end_reason = Some(EndReason::new(EndCause::Reclaimed, "test:reclaimed"));
                    i.ended_at = Some(now);
                    done.push((i.id.to_string(), now));
                }
            }
            done
        })
        .unwrap()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[test]
fn three_controllers_share_300_jobs_and_survive_a_sigkill() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let dir = support::TempDir::new("ctl3", "jobs");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ledger = Arc::new(rt.block_on(PgLedger::connect(&url)).unwrap());
    let ids: Vec<String> = (0..JOBS).map(|i| format!("shared-{i:03}")).collect();
    rt.block_on(async {
        for (i, id) in ids.iter().enumerate() {
            gpufleet::runtime::controller::submit_to(
                ledger.as_ref(),
                id,
                &job_file(i),
                None,
                time::OffsetDateTime::now_utc(),
            )
            .await
            .unwrap();
        }
    });

    let mut ctl: Vec<Child> = (0..3)
        .map(|k| serve(&dir, &url, &format!("ctl{k}")))
        .collect();
    let store = FakeStore::new(dir.join("fake.json"));
    let started = Instant::now();
    let ended = |l: &PgLedger| -> usize {
        rt.block_on(async {
            let active = l.active_jobs().await.unwrap();
            JOBS - active.len()
        })
    };
    // Interruptions while the jobs run; the first controller dies once a
    // fifth of the jobs are done.
    let mut reclaimed = Vec::new();
    let mut round = 0;
    let mut killed: Option<(time::OffsetDateTime, u32)> = None;
    loop {
        std::thread::sleep(Duration::from_millis(700));
        round += 1;
        if reclaimed.len() < 60 && round % 2 == 0 {
            reclaimed.extend(reclaim(&store, 4, round));
        }
        let done = ended(&ledger);
        if killed.is_none() && done >= JOBS / 5 {
            let pid = ctl[0].id();
            ctl[0].kill().unwrap(); // SIGKILL
            ctl[0].wait().unwrap();
            killed = Some((time::OffsetDateTime::now_utc(), pid));
        }
        if done == JOBS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "only {done} of {JOBS} jobs ended after 300 s; logs:\n{}\n{}\n{}",
            tail(&dir.join("ctl0.log")),
            tail(&dir.join("ctl1.log")),
            tail(&dir.join("ctl2.log"))
        );
    }
    let took = started.elapsed();
    for c in ctl.iter_mut().skip(1) {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let status = c.wait().unwrap();
        assert!(status.success(), "a survivor exited with {status}");
    }
    let (killed_at, dead_pid) = killed.expect("the controller was never killed");

    let (history, leases) =
        rt.block_on(async { (ledger.jobs().await.unwrap(), ledger.leases().await.unwrap()) });
    let mut by_job: BTreeMap<&str, Vec<&gpufleet::ledger::JobRecord>> = BTreeMap::new();
    for r in &history {
        by_job.entry(r.job_id.as_str()).or_default().push(r);
    }
    // Every job completed, exactly once.
    for id in &ids {
        let recs = &by_job[id.as_str()];
        let ends: Vec<JobState> = recs
            .iter()
            .map(|r| r.state)
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(ends, vec![JobState::Succeeded], "{id}: {recs:#?}");
    }
    // No instance launched twice, none unrecorded, none left running.
    let file = store.load().unwrap();
    let state = &file.clouds["aws"];
    let recorded: HashSet<String> = history
        .iter()
        .flat_map(|r| r.instances.iter().map(|i| i.to_string()))
        .collect();
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for i in &state.instances {
        assert!(!i.state.is_live(), "{} is left {:?}", i.id, i.state);
        assert!(
            recorded.contains(&i.id.to_string()),
            "{} ({:?}) was launched but no record holds it",
            i.id,
            i.tags.get(tags::JOB)
        );
        let key = i
            .tags
            .get(tags::IDEMPOTENCY_KEY)
            .map(String::as_str)
            .unwrap_or("");
        *per_key.entry(key).or_default() += 1;
    }
    for (key, n) in &per_key {
        assert_eq!(*n, 1, "launch key {key} made {n} instances");
    }
    // Each reclaim was of a job still working, so each is an interruption
    // on record.
    let mut unrecorded = Vec::new();
    for (id, at) in &reclaimed {
        let holders: Vec<&gpufleet::ledger::JobRecord> = history
            .iter()
            .filter(|r| r.instances.iter().any(|i| i.to_string() == *id))
            .collect();
        if !holders.iter().any(|r| r.state == JobState::Interrupted) {
            let job = holders.first().map_or("?", |r| r.job_id.as_str());
            let recs: Vec<String> = by_job
                .get(job)
                .into_iter()
                .flatten()
                .map(|r| format!("{} {:?} {:?} {}", r.at, r.state, r.instances, r.detail))
                .collect();
            unrecorded.push(format!(
                "{id} reclaimed at {at} ({job}):\n  {}",
                recs.join("\n  ")
            ));
        }
    }
    assert!(
        unrecorded.is_empty(),
        "{} of {} reclaims are no interruption on record:\n{}",
        unrecorded.len(),
        reclaimed.len(),
        unrecorded.join("\n")
    );
    let interrupted = history
        .iter()
        .filter(|r| r.state == JobState::Interrupted)
        .count();
    assert!(
        reclaimed.len() >= 20 && interrupted >= reclaimed.len(),
        "{} reclaimed, {interrupted} interruptions recorded",
        reclaimed.len()
    );
    // The dead controller's jobs were taken over within lease + one poll.
    let dead_mark = format!(":{dead_pid}:");
    let dead_jobs: Vec<&str> = history
        .iter()
        .filter(|r| r.at > killed_at)
        .map(|r| r.job_id.as_str())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut took_over = Vec::new();
    // A lease last held by the dead controller is one of a job it ended
    // itself, before it died.
    for l in leases.iter().filter(|l| l.holder.contains(&dead_mark)) {
        let end = by_job[l.job_id.as_str()]
            .iter()
            .find(|r| r.state.is_terminal())
            .unwrap();
        assert!(
            end.at <= killed_at + time::Duration::milliseconds(500),
            "{} ended at {} after the kill, under the dead controller's lease {l:?}",
            l.job_id,
            end.at
        );
    }
    // Every job the dead one held at the kill and that ended later carries a
    // later lease whose start is within the bound.
    let bound = time::Duration::try_from(LEASE + POLL).unwrap() + time::Duration::seconds(2);
    for id in dead_jobs {
        let recs = &by_job[id];
        let before_kill = recs.iter().rev().find(|r| r.at <= killed_at);
        let after_kill = recs.iter().find(|r| r.at > killed_at);
        if let (Some(b), Some(a)) = (before_kill, after_kill) {
            if let (Some(old), Some(new)) = (b.fence, a.fence) {
                let l = leases.iter().find(|l| l.job_id == id).unwrap();
                if new != old && l.token == new {
                    took_over.push(l.acquired_at - killed_at);
                }
            }
        }
    }
    assert!(!took_over.is_empty(), "no job was taken over");
    let slowest = took_over.iter().max().copied().unwrap();
    assert!(
        slowest <= bound,
        "a job was taken over {slowest} after the kill (bound {bound})"
    );
    eprintln!(
        "{JOBS} jobs in {:.1}s; {} reclaimed; {} taken over, slowest {:.2}s after the SIGKILL (bound {:.1}s)",
        took.as_secs_f64(),
        reclaimed.len(),
        took_over.len(),
        slowest.as_seconds_f64(),
        bound.as_seconds_f64()
    );
}
