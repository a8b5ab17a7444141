//! The `local` provider: the fake cloud's catalog, prices, capacity and
//! scripted interruptions, with each instance's boot script run as a
//! process on this machine, so that a service (or a workload) can be tried
//! on a laptop with no credentials.
//!
//! [`LocalCloud::start`] keeps the fake cloud's clock on the wall clock
//! and, every [`LocalCloud::TICK`], starts a process (`bash -c SCRIPT`, in
//! its own process group, in a directory of its own under the runner's,
//! output to `INSTANCE.log` there) for each live instance that has a boot
//! script, and kills the process group of each instance that is no longer
//! live (terminated, or preempted as the fake cloud's interruptions
//! script). A process that exits on its own leaves its instance running,
//! as a server that crashed on a real machine does. Each instance's process
//! group also ends within a second of this process ending, however it
//! ended (a watcher in the group checks for it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpufleet_core::fake::FakeCloud;
use gpufleet_core::{Cloud, Error, ErrorKind, InstanceId, Provider, Result};
use time::OffsetDateTime;
use tokio::process::{Child, Command};

#[derive(Debug, Default)]
struct Processes {
    running: HashMap<(Cloud, InstanceId), Child>,
    /// How much of each instance's report file has been read.
    read: HashMap<(Cloud, InstanceId), u64>,
}

/// Where the `local` provider keeps its instances' directories and output
/// for `cfg`: `local/` beside the fake cloud's state (a service's under
/// `local/SERVICE/`, `run`'s under `local/jobs/`).
pub fn root(cfg: &crate::config::Config) -> PathBuf {
    cfg.fake_state
        .parent()
        .map_or_else(std::env::temp_dir, |p| p.to_path_buf())
        .join("local")
}

/// The fake clouds (one per real cloud, on one clock), with their
/// instances' boot scripts run as local processes.
#[derive(Debug)]
pub struct LocalCloud {
    fakes: Vec<Arc<FakeCloud>>,
    /// The file that says this run lives ([`LocalCloud::keep_alive`]), and
    /// its writer.
    alive: Mutex<Option<(PathBuf, tokio::task::JoinHandle<()>)>>,
    dir: PathBuf,
    processes: Arc<Mutex<Processes>>,
    task: tokio::task::JoinHandle<()>,
    /// The scripts being played ([`LocalCloud::play`]).
    scripts: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The variable every process of an instance inherits, naming it: what
/// finds those that left the instance's process group (`setsid`, a daemon
/// that double-forked) when the instance ends.
const INSTANCE_VAR: &str = "GPUFLEET_LOCAL_INSTANCE";

/// Kills every process of this user whose environment names instance `tag`
/// ([`INSTANCE_VAR`]), wherever it went (Linux's /proc; elsewhere the
/// process group alone is killed).
fn kill_tagged(tag: &str) {
    #[cfg(target_os = "linux")]
    {
        let want = format!("{INSTANCE_VAR}={tag}");
        let me = std::process::id();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if pid as u32 == me {
                continue;
            }
            let Ok(env) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            if env.split(|b| *b == 0).any(|kv| kv == want.as_bytes()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = tag;
}

fn kill_group(child: &Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl LocalCloud {
    /// How often the runner looks at the fake cloud.
    pub const TICK: Duration = Duration::from_millis(100);

    /// One fake per real cloud, each serving its part of the embedded
    /// catalog, on one clock set to now, that run boot scripts. Their
    /// instance ids are this run's own (`local-aws-RUN-000001`, `RUN` from
    /// the time and process): the fakes start afresh in each process, and
    /// the ledger keeps one record per instance id, so an id used by an
    /// earlier run would take the new instance's spend for the old one's.
    pub fn fakes() -> Vec<Arc<FakeCloud>> {
        let now = OffsetDateTime::now_utc();
        let clock = gpufleet_core::clock::ManualClock::new(now);
        let run = gpufleet_core::fnv1a64(
            format!("{}/{}", std::process::id(), now.unix_timestamp_nanos()).as_bytes(),
        ) as u32;
        Cloud::REAL
            .iter()
            .map(|c| {
                Arc::new(
                    FakeCloud::from_snapshot(*c)
                        .with_clock(clock.clone())
                        .with_capabilities({
                            let mut caps = FakeCloud::capabilities_of(*c);
                            caps.runs_boot_script = true;
                            caps
                        })
                        .with_instance_prefix(&format!("local-{c}-{run:08x}"))
                        // Its processes listen on this machine: reached there
                        // whichever address a controller asks for.
                        .with_addresses(gpufleet_core::Addresses {
                            private: Some(std::net::Ipv4Addr::LOCALHOST.into()),
                            public: Some(std::net::Ipv4Addr::LOCALHOST.into()),
                        }),
                )
            })
            .collect()
    }

    /// Runs the instances of `fakes` (which share one clock) as processes
    /// under `dir` (created if missing) until [`LocalCloud::shutdown`] or
    /// the value is dropped.
    pub fn start(fakes: Vec<Arc<FakeCloud>>, dir: &Path) -> Result<LocalCloud> {
        // Its processes run in directories under it, as this user: a
        // directory another user could write would let them plant what
        // those processes run (a replica's cwd is on Python's path) or a
        // link its logs are written through.
        crate::private_fs::private_dir(dir)
            .map_err(|e| Error::new(e.kind(), format!("local provider: {}", e.message())))?;
        let processes = Arc::new(Mutex::new(Processes::default()));
        let (f, p, d) = (fakes.clone(), processes.clone(), dir.to_path_buf());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Self::TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Files and processes: off the runtime's threads.
                let (f, p, d) = (f.clone(), p.clone(), d.clone());
                if tokio::task::spawn_blocking(move || Self::step(&f, &p, &d))
                    .await
                    .is_err()
                {
                    tracing::warn!("local: a step of the runner failed");
                }
            }
        });
        Ok(LocalCloud {
            fakes,
            alive: Mutex::new(None),
            dir: dir.to_path_buf(),
            processes,
            task,
            scripts: Mutex::new(Vec::new()),
        })
    }

    fn step(fakes: &[Arc<FakeCloud>], processes: &Mutex<Processes>, dir: &Path) {
        let now = OffsetDateTime::now_utc();
        let mut live = Vec::new();
        for fake in fakes {
            if now > gpufleet_core::clock::Clock::now(fake.clock()) {
                fake.clock().set(now);
            }
            fake.settle();
            live.extend(
                fake.live_with_boot_scripts()
                    .into_iter()
                    .map(|(i, s)| ((i.pool.cloud, i.id), s)),
            );
        }
        let Ok(mut procs) = processes.lock() else {
            return;
        };
        let ended: Vec<(Cloud, InstanceId)> = procs
            .running
            .keys()
            .filter(|key| !live.iter().any(|(k, _)| k == *key))
            .cloned()
            .collect();
        for key in ended {
            if let Some(mut child) = procs.running.remove(&key) {
                kill_group(&child);
                let _ = child.start_kill();
                kill_tagged(&format!("{}-{}", key.0, key.1));
                tracing::info!(instance = %key.1, "local: instance ended, its process killed");
            }
        }
        procs.read.retain(|k, _| live.iter().any(|(l, _)| l == k));
        for (key, script) in live {
            let Some(script) = script else { continue };
            if procs.running.contains_key(&key) {
                if let Some(fake) = fakes.iter().find(|f| f.cloud() == key.0) {
                    let home = dir.join(format!("{}-{}", key.0, key.1)).join("node");
                    let offset = procs.read.entry(key.clone()).or_insert(0);
                    Self::carry_reports(fake, &key.1, &home, offset);
                    Self::tell_notice(fake, &key.1, &home);
                }
                continue;
            }
            match Self::spawn(dir, key.0, &key.1, &script) {
                Ok(child) => {
                    tracing::info!(instance = %key.1, pid = child.id(), "local: started the instance's boot script");
                    procs.running.insert(key, child);
                }
                Err(e) => {
                    tracing::warn!(instance = %key.1, error = %e, "local: cannot start the boot script");
                    // Not retried at every tick: the instance is marked with
                    // a process that never ran.
                    if let Ok(child) = Command::new("true").spawn() {
                        procs.running.insert(key, child);
                    }
                }
            }
        }
    }

    /// Writes on the instance, as tags, the `KEY VALUE` lines its process
    /// appended to `node/report` since `offset` (whole lines only; keys
    /// other than gpufleet's reports are ignored, as a node's identity may
    /// write only those).
    fn carry_reports(fake: &FakeCloud, id: &InstanceId, home: &Path, offset: &mut u64) {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(home.join("report")) else {
            return;
        };
        let mut text = String::new();
        if f.seek(SeekFrom::Start(*offset)).is_err() || f.read_to_string(&mut text).is_err() {
            return;
        }
        let Some(end) = text.rfind('\n') else {
            return;
        };
        for line in text[..end].lines() {
            match line.split_once(' ') {
                Some((k, v)) if k.starts_with("gpufleet:") && !v.is_empty() => {
                    if let Err(e) = fake.set_tag(id, k, v.trim()) {
                        tracing::debug!(instance = %id, error = %e, "local: report not written");
                    }
                }
                _ => tracing::debug!(instance = %id, line, "local: report line ignored"),
            }
        }
        *offset += end as u64 + 1;
    }

    /// Creates `node/notice` for an instance the fake cloud has given a
    /// preemption notice, which its process watches for (as a cloud node
    /// watches its metadata service).
    fn tell_notice(fake: &FakeCloud, id: &InstanceId, home: &Path) {
        let notice = home.join("notice");
        if !home.is_dir()
            || notice.exists()
            || !fake.pending_preemptions().iter().any(|(i, _)| i == id)
        {
            return;
        }
        let told = crate::private_fs::create_private(&notice).and_then(|mut f| {
            use std::io::Write;
            f.write_all(b"preemption\n")
                .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))
        });
        if let Err(e) = told {
            tracing::warn!(instance = %id, error = %e, "local: cannot tell the instance of its notice");
        }
    }

    fn spawn(dir: &Path, cloud: Cloud, id: &InstanceId, script: &str) -> std::io::Result<Child> {
        let home = dir.join(format!("{cloud}-{id}"));
        let private = |e: Error| std::io::Error::other(e.message().to_string());
        // Fresh and this user's own, as is its log (0600, never through a
        // link someone planted under the instance's name).
        crate::private_fs::private_dir(&home).map_err(private)?;
        let log = crate::private_fs::create_private(&dir.join(format!("{cloud}-{id}.log")))
            .map_err(private)?;
        let err = log.try_clone()?;
        // A watcher in the instance's process group ends the group once
        // this process is gone, however it went (a SIGKILL runs no drop):
        // a replica left serving on a laptop's port with nothing to stop it
        // is a leak.
        // And every process that left the group (`setsid`), found by the
        // variable naming the instance, which every one inherits.
        let tag = format!("{cloud}-{id}");
        let watched = format!(
            "( while kill -0 {pid} 2>/dev/null; do sleep 1; done; for p in /proc/[0-9]*; do [ \"${{p#/proc/}}\" = \"$BASHPID\" ] && continue; tr '\\0' '\\n' < \"$p/environ\" 2>/dev/null | grep -qx '{INSTANCE_VAR}={tag}' && kill -KILL \"${{p#/proc/}}\"; done; kill -KILL 0 ) >/dev/null 2>&1 &\n{script}",
            pid = std::process::id()
        );
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(watched)
            .current_dir(&home)
            .env("HOME", &home)
            .env(INSTANCE_VAR, &tag)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        cmd.spawn()
    }

    /// The fake of `cloud` (to drive: capacity, prices, interruptions).
    pub fn cloud(&self, cloud: Cloud) -> Option<&Arc<FakeCloud>> {
        self.fakes.iter().find(|f| f.cloud() == cloud)
    }

    /// Plays `script` (the fake cloud's script, `GPUFLEET_FAKE_SCRIPT`: see
    /// [`crate::fake_script`]) in real time from now against the live
    /// instances of managed jobs: `preempt`, `notice` (the process sees
    /// its notice file; the instance ends two minutes later),
    /// `capacity-error`, `price`. `exit` and `gpu` are refused: a local
    /// job's process reports its own exit, and has no GPU.
    pub fn play(&self, script: Vec<crate::fake_script::ScriptLine>) -> Result<()> {
        if let Some(line) = script
            .iter()
            .find(|l| l.action == "exit" || l.action == "gpu")
        {
            return Err(Error::invalid_input(format!(
                "fake script: '{}' cannot be played on the local provider, where the job's own process reports its exit and there is no GPU; valid here: preempt, notice, capacity-error, price",
                line.action
            )));
        }
        if script.is_empty() {
            return Ok(());
        }
        let fakes = self.fakes.clone();
        let start = tokio::time::Instant::now();
        let task = tokio::spawn(async move {
            for line in script {
                tokio::time::sleep_until(start + line.at).await;
                let now = OffsetDateTime::now_utc().unix_timestamp();
                // Only instances of jobs: a local service's replicas are
                // the service controller's.
                let is_job =
                    |i: &gpufleet_core::Instance| i.tags.contains_key(gpufleet_core::tags::JOB);
                if let Err(e) = crate::fake_script::act_on(&fakes, now, &is_job, &line) {
                    tracing::warn!(error = %e, "local: a script line failed");
                }
            }
        });
        if let Ok(mut s) = self.scripts.lock() {
            s.push(task);
        }
        Ok(())
    }

    /// The fakes as providers.
    pub fn providers(&self) -> Vec<Arc<dyn Provider>> {
        gpufleet_core::fake::providers(&self.fakes)
    }

    /// Where an instance's output goes.
    pub fn log_path(&self, cloud: Cloud, id: &InstanceId) -> PathBuf {
        self.dir.join(format!("{cloud}-{id}.log"))
    }

    /// The instances with a process now.
    pub fn running(&self) -> Vec<(Cloud, InstanceId)> {
        self.processes
            .lock()
            .map(|p| p.running.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// This run's id: what its instance ids carry after the cloud
    /// (`local-aws-RUN-000001`).
    pub fn run_id(&self) -> Option<String> {
        let id = format!("{}-000000", self.fakes.first()?.instance_prefix());
        run_of(&id).map(str::to_string)
    }

    /// Says, in `runs` (made 0700), that this run lives: a file named for
    /// it, its content the time, written every second until
    /// [`LocalCloud::shutdown`] removes it. A later `serve`, `run` or
    /// `reconcile` on the same ledger reads it to tell this run's
    /// instances from those of a run whose process is gone
    /// ([`settle_ended_runs`]).
    pub fn keep_alive(&self, runs: &Path) -> Result<()> {
        let Some(run) = self.run_id() else {
            return Ok(());
        };
        crate::private_fs::private_dir(runs)?;
        let path = runs.join(&run);
        let file = path.clone();
        let task = tokio::spawn(async move {
            loop {
                let now = gpufleet_core::report::rfc3339(OffsetDateTime::now_utc());
                let f = file.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    crate::private_fs::write_private(&f, now.as_bytes())
                })
                .await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        if let Ok(mut a) = self.alive.lock() {
            *a = Some((path, task));
        }
        Ok(())
    }

    /// Stops the runner and kills every process it started (the instances
    /// stay as they are in the fake cloud).
    pub fn shutdown(&self) {
        self.task.abort();
        if let Ok(mut a) = self.alive.lock() {
            if let Some((path, task)) = a.take() {
                task.abort();
                let _ = std::fs::remove_file(path);
            }
        }
        if let Ok(mut s) = self.scripts.lock() {
            for t in s.drain(..) {
                t.abort();
            }
        }
        if let Ok(mut procs) = self.processes.lock() {
            for (key, mut child) in procs.running.drain() {
                kill_group(&child);
                let _ = child.start_kill();
                kill_tagged(&format!("{}-{}", key.0, key.1));
            }
        }
    }
}

impl Drop for LocalCloud {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The run an instance id of the local provider belongs to
/// (`local-aws-RUN-000001` → `RUN`), `None` for any other id.
fn run_of(id: &str) -> Option<&str> {
    let mut parts = id.split('-');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("local"), Some(_cloud), Some(run), Some(_seq)) if !run.is_empty() => Some(run),
        _ => None,
    }
}

/// How stale a run's liveness file may be before the run counts as gone.
const ALIVE_WITHIN: time::Duration = time::Duration::seconds(10);

/// Where the local provider's runs say they live: `runs/` under its root.
pub fn runs_dir(cfg: &crate::config::Config) -> PathBuf {
    root(cfg).join("runs")
}

/// Finds, in `ledger`'s spend, every local-provider instance the ledger
/// holds as alive whose run is gone (its `gpufleet serve` or `run` was
/// killed, so its processes ended with it), and with `apply` records its
/// end: at the last time its run said it lived (its file in `runs`), or
/// now when it left none (a run from before runs said so). `mine`, this
/// process's run, is left alone, as is any run whose file is fresh
/// (another process serving now).
pub async fn settle_ended_runs(
    ledger: &dyn gpufleet_core::ledger::Ledger,
    runs: &Path,
    mine: Option<&str>,
    apply: bool,
) -> Result<Vec<crate::spend::EndedInstance>> {
    let now = OffsetDateTime::now_utc();
    let read_at = |path: &Path| {
        std::fs::read_to_string(path).ok().and_then(|t| {
            OffsetDateTime::parse(t.trim(), &time::format_description::well_known::Rfc3339).ok()
        })
    };
    let mut ended = Vec::new();
    for s in ledger.spend(None).await? {
        if !s.is_alive() {
            continue;
        }
        let Some(run) = run_of(s.id.as_str()) else {
            continue;
        };
        if Some(run) == mine {
            continue;
        }
        let (at, reason) = match read_at(&runs.join(run)) {
            Some(at) if now - at < ALIVE_WITHIN => continue,
            Some(at) => (
                at.max(s.started_at),
                "its gpufleet process (local provider) had ended, and its processes with it"
                    .to_string(),
            ),
            None => (
                now,
                "its gpufleet process (local provider) had ended, when is not known: ended when seen gone"
                    .to_string(),
            ),
        };
        if apply {
            crate::spend::record_end(
                ledger,
                s.pool.cloud,
                &s.id,
                at,
                gpufleet_core::ledger::EndedBy::Cloud,
                reason.clone(),
            )
            .await;
        }
        ended.push(crate::spend::EndedInstance {
            cloud: s.pool.cloud,
            id: s.id.to_string(),
            job: s.job_id.clone(),
            ended_at: gpufleet_core::report::rfc3339(at),
            reason,
        });
    }
    // The files of runs long gone: removed.
    if apply {
        if let Ok(dir) = std::fs::read_dir(runs) {
            for e in dir.flatten() {
                let mine = Some(e.file_name().to_string_lossy().as_ref()) == mine;
                if !mine && read_at(&e.path()).is_some_and(|at| now - at > ALIVE_WITHIN * 6) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    Ok(ended)
}

/// `gpufleet reconcile --provider local`: the instances of the local
/// provider's runs that are gone, ended in its ledger when `apply`.
pub async fn reconcile(
    cfg: &crate::config::Config,
    apply: bool,
) -> Result<crate::spend::Reconciliation> {
    let ledger = cfg.open_ledger().await?;
    let ended = settle_ended_runs(ledger.as_ref(), &runs_dir(cfg), None, apply).await?;
    Ok(crate::spend::Reconciliation {
        applied: apply,
        ended,
        jobs_closed: Vec::new(),
        unknown: Vec::new(),
        stuck: Vec::new(),
        leftovers: Vec::new(),
    })
}
