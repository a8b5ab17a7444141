//! The scripted fake clock (`GPUFLEET_FAKE_SCRIPT`): a test's interruptions,
//! capacity failures and progress, played against the fake cloud on a
//! manual clock: the [`Pacer`] `gpufleet run --provider fake` drives a job
//! with, so a test scripts a whole managed job through the CLI.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::placer::{format_duration, parse_duration};
use gpufleet_core::{tags, Error, ErrorKind, NoticeKind, Pool, Price, Provider, TagFilter};

use crate::fake_store::FakeSaver;
use crate::pacer::{ManualPacer, Pacer};

/// The fake cloud's script (`GPUFLEET_FAKE_SCRIPT`): lines of `OFFSET
/// ACTION [ARGS]`, the offset from when the controller started, carried out
/// as the fake clock passes them. Actions: `preempt` (the job's instances end
/// with no notice), `notice` (the watch agent reports a notice; the instances
/// end 2 minutes later), `capacity-error` (the next launch is refused),
/// `price POOL USD_PER_HOUR`, `exit CODE` (the node reports the job's exit),
/// `gpu UTIL_PCT USED_MIB` (from then on every GPU of the job's nodes is
/// that busy and holds that much; the node agent publishes its summary).
#[derive(Debug, Clone)]
pub struct ScriptLine {
    /// When, from the start.
    pub at: Duration,
    /// What.
    pub action: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The script `GPUFLEET_FAKE_SCRIPT` names (none when unset), in time
/// order; a line that is not `OFFSET ACTION [ARGS]` with a known action is
/// an error naming its line.
pub fn read_script() -> Result<Vec<ScriptLine>, Error> {
    let Some(path) = std::env::var_os("GPUFLEET_FAKE_SCRIPT") else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::invalid_input(format!(
            "GPUFLEET_FAKE_SCRIPT '{}': {e}",
            PathBuf::from(&path).display()
        ))
    })?;
    parse_script(&text)
}

/// A script's text (lines of `OFFSET ACTION [ARGS]`, `#` comments), in
/// time order; a line that is not one, or names an unknown action, is an
/// error naming its line and the valid actions.
pub fn parse_script(text: &str) -> Result<Vec<ScriptLine>, Error> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(at), Some(action)) = (words.next(), words.next()) else {
            return Err(Error::invalid_input(format!(
                "fake script line {}: expected OFFSET ACTION",
                n + 1
            )));
        };
        let at = parse_duration(at).map_err(|e| {
            Error::invalid_input(format!("fake script line {}: {}", n + 1, e.message()))
        })?;
        if ![
            "preempt",
            "notice",
            "capacity-error",
            "price",
            "exit",
            "gpu",
        ]
        .contains(&action)
        {
            return Err(Error::invalid_input(format!(
                "fake script line {}: unknown action '{action}'; valid: preempt, notice, capacity-error, price, exit, gpu",
                n + 1
            )));
        }
        out.push(ScriptLine {
            at,
            action: action.to_string(),
            args: words.map(str::to_string).collect(),
        });
    }
    out.sort_by_key(|l| l.at);
    Ok(out)
}

/// Fake time: each pause moves the fake cloud's clock, carries out the
/// script, publishes the scripted GPU use as the node agent would, and saves
/// the fake cloud's state (so other commands see it).
#[derive(Debug)]
pub struct ScriptedPacer {
    /// Moves the fake cloud's clock and settles its fakes (both read
    /// through it); the script is carried out here.
    pacer: ManualPacer,
    store: FakeSaver,
    start: time::OffsetDateTime,
    script: Mutex<Vec<ScriptLine>>,
    job_id: String,
    /// `gpu UTIL USED`: what the nodes' GPUs do, and each node's agent.
    gpu: Mutex<Option<(u8, u64)>>,
    agents: Mutex<
        std::collections::HashMap<gpufleet_core::InstanceId, gpufleet_core::usage::UsageWindow>,
    >,
}

impl ScriptedPacer {
    /// Plays `script` (offsets from `start`) against `pacer`'s fake clouds
    /// for the job `job_id`, saving through `store` after each pause.
    pub fn new(
        pacer: ManualPacer,
        store: FakeSaver,
        start: time::OffsetDateTime,
        script: Vec<ScriptLine>,
        job_id: impl Into<String>,
    ) -> ScriptedPacer {
        ScriptedPacer {
            pacer,
            store,
            start,
            script: Mutex::new(script),
            job_id: job_id.into(),
            gpu: Mutex::new(None),
            agents: Mutex::new(Default::default()),
        }
    }

    /// Each live node of the job samples its GPUs and writes its summary
    /// on its own tags, as `gpufleet watch` and the boot script do.
    fn publish_gpu(&self, now: time::OffsetDateTime) {
        let Some((util, used)) = *self.gpu.lock().unwrap_or_else(|p| p.into_inner()) else {
            return;
        };
        let filter = TagFilter::managed().with(tags::JOB, self.job_id.as_str());
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        for f in self.pacer.fakes() {
            for i in f
                .live_instances()
                .into_iter()
                .filter(|i| filter.matches(&i.tags))
            {
                let gpu = gpufleet_core::Snapshot::embedded()
                    .instance_types()
                    .iter()
                    .find(|t| t.cloud == i.pool.cloud && t.name == i.pool.instance_type)
                    .and_then(|t| t.gpu.clone());
                let Some(gpu) = gpu else { continue };
                let total = u64::from(gpu.memory_gib) * 1024;
                let w = agents.entry(i.id.clone()).or_default();
                let readings =
                    gpufleet_core::usage::uniform(gpu.count, util, used.min(total), total);
                if w.add(now, &readings).is_err() {
                    continue;
                }
                if let Some(s) = w.summary() {
                    let _ = f.set_tag(&i.id, tags::GPU, &s.tag_value());
                    let _ = f.set_tag(&i.id, tags::GPU_QUIET, &s.quiet_tag_value());
                }
            }
        }
    }

    fn act(&self, line: &ScriptLine) -> Result<(), Error> {
        let now = gpufleet_core::clock::Clock::now(self.pacer.clock()).unix_timestamp();
        let filter = TagFilter::managed().with(tags::JOB, self.job_id.as_str());
        if let Some(g) = act_on(self.pacer.fakes(), now, &|i| filter.matches(&i.tags), line)? {
            *self.gpu.lock().unwrap_or_else(|p| p.into_inner()) = Some(g);
        }
        Ok(())
    }
}

/// Carries out one line of a script on `fakes`, on the live instances
/// `target` picks, at `now` (Unix seconds): `preempt`, `notice`,
/// `capacity-error`, `exit`, `price`; `gpu` is returned (utilisation,
/// MiB) for the caller to publish as the node agent would.
pub(crate) fn act_on(
    fakes: &[Arc<FakeCloud>],
    now: i64,
    target: &dyn Fn(&gpufleet_core::Instance) -> bool,
    line: &ScriptLine,
) -> Result<Option<(u8, u64)>, Error> {
    let live: Vec<(Arc<FakeCloud>, gpufleet_core::Instance)> = fakes
        .iter()
        .flat_map(|f| {
            f.live_instances()
                .into_iter()
                .filter(|i| target(i))
                .map(|i| (f.clone(), i))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut gpu = None;
    match line.action.as_str() {
        "preempt" => {
            for (f, i) in &live {
                f.preempt(&i.id)?;
            }
        }
        "notice" => {
            for (f, i) in &live {
                f.set_tag(&i.id, tags::NOTICE, &now.to_string())?;
                f.inject_interruption(&i.id, NoticeKind::Preemption, Duration::from_secs(120))?;
            }
        }
        "capacity-error" => {
            for f in fakes {
                f.fail_next(
                    gpufleet_core::Operation::Launch,
                    Error::new(
                        ErrorKind::InsufficientCapacity,
                        "InsufficientInstanceCapacity (scripted)",
                    ),
                );
            }
        }
        "gpu" => {
            let parsed = match (line.args.first(), line.args.get(1)) {
                (Some(u), Some(m)) => u
                    .parse::<u8>()
                    .ok()
                    .filter(|u| *u <= 100)
                    .zip(m.parse::<u64>().ok()),
                _ => None,
            };
            let Some(g) = parsed else {
                return Err(Error::invalid_input(
                    "fake script: gpu UTIL_PCT USED_MIB (0-100, whole MiB)",
                ));
            };
            gpu = Some(g);
        }
        "exit" => {
            let code = line.args.first().cloned().unwrap_or_else(|| "0".into());
            for (f, i) in &live {
                f.set_tag(&i.id, tags::EXIT, &code)?;
            }
        }
        "price" => {
            let (Some(pool), Some(usd)) = (line.args.first(), line.args.get(1)) else {
                return Err(Error::invalid_input("fake script: price POOL USD_PER_HOUR"));
            };
            let pool: Pool = pool.parse()?;
            let usd: f64 = usd
                .parse()
                .map_err(|_| Error::invalid_input(format!("fake script: invalid price '{usd}'")))?;
            for f in fakes {
                if f.cloud() == pool.cloud {
                    f.set_price(&pool, Price::from_usd_per_hour_f64(usd));
                }
            }
        }
        _ => {}
    }
    eprintln!(
        "fake: {} {} {}",
        format_duration(line.at),
        line.action,
        line.args.join(" ")
    );
    Ok(gpu)
}

#[async_trait]
impl Pacer for ScriptedPacer {
    async fn pause(&self, d: Duration) {
        self.pacer.pause(d).await;
        let now = gpufleet_core::clock::Clock::now(self.pacer.clock());
        let due: Vec<ScriptLine> = {
            let mut script = self.script.lock().unwrap_or_else(|p| p.into_inner());
            let split = script
                .iter()
                .position(|l| {
                    self.start + time::Duration::try_from(l.at).unwrap_or(time::Duration::MAX) > now
                })
                .unwrap_or(script.len());
            script.drain(..split).collect()
        };
        for line in &due {
            if let Err(e) = self.act(line) {
                eprintln!("fake: {} failed: {e}", line.action);
            }
        }
        self.publish_gpu(now);
        if let Err(e) = self.store.save() {
            eprintln!("warning: cannot save the fake cloud's state: {e}");
        }
        // Let other tasks (Ctrl-C) run.
        tokio::task::yield_now().await;
    }
}
