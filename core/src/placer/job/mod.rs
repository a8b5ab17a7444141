//! What a job needs: the [`JobSpec`], built in code or read from a TOML/JSON file.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{format_duration, parse_duration};
use crate::catalog::MAX_GPUS_PER_INSTANCE;
use crate::GpuModel;
use crate::Money;
use crate::{Access, Cloud, Region, Zone};
use crate::{Error, Result};

mod file;
mod secrets;
mod throughput;
pub use self::{file::*, secrets::*, throughput::*};

/// The most hours of work a job may ask for (about 114 years of one GPU).
pub const MAX_JOB_HOURS: f64 = 1_000_000.0;

/// The longest job name, in characters.
pub const MAX_JOB_NAME_CHARS: usize = 256;

/// Checks a job's name: 1 to [`MAX_JOB_NAME_CHARS`] characters, not all
/// blank, none a control character (a name is shown in tables and logs; the
/// clouds' tags carry the job id derived from it, not the name). Checked
/// where a name comes in (a job file read from text, the builder, a job
/// submitted to the ledger, `launch --name`), not by [`JobSpec::validate`],
/// so a job recorded before the check existed can still be driven and
/// cancelled.
pub fn check_job_name(name: &str) -> Result<()> {
    let chars = name.chars().count();
    if name.trim().is_empty() || chars > MAX_JOB_NAME_CHARS || name.chars().any(char::is_control) {
        let shown: String = name.chars().take(64).collect();
        let more = if chars > 64 { "..." } else { "" };
        return Err(Error::invalid_input(format!(
            "invalid job name {shown:?}{more} ({chars} characters): expected 1 to {MAX_JOB_NAME_CHARS} characters, not all blank, with no control characters"
        )));
    }
    Ok(())
}

/// One acceptable GPU configuration for a job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuOption {
    /// The GPU model.
    pub model: GpuModel,
    /// GPUs per instance.
    pub count: u32,
    /// At least this much memory per GPU.
    #[serde(default)]
    pub min_memory_gib: Option<u32>,
}

/// When the job checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointInterval {
    /// Every so often.
    Every(Duration),
    /// At the Young/Daly optimum for each pool's hazard, √(2·cost/λ).
    Auto,
}

/// What a job needs. Build it with [`JobSpec::builder`] or read it with
/// [`JobSpec::from_toml`] / [`JobSpec::from_json`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobSpec {
    /// A name for logs and tags.
    pub name: String,
    /// Acceptable GPU configurations (any of them); the first is the reference
    /// the work is measured on.
    pub gpus: Vec<GpuOption>,
    /// Hours of work on the first GPU option.
    pub hours: f64,
    /// Throughput factors that convert the work to other GPU options.
    pub throughput: ThroughputTable,
    /// Whether the job survives interruption (checkpoints and restarts).
    pub interruptible: bool,
    /// Checkpoint interval.
    pub checkpoint_interval: CheckpointInterval,
    /// Time one checkpoint takes (no progress meanwhile).
    pub checkpoint_cost: Duration,
    /// Time from a (re)start to useful work: provisioning, image, data, restore.
    pub restart_overhead: Duration,
    /// The job must be done within this long from now.
    pub deadline: Option<Duration>,
    /// How sure the placer must be to meet the deadline (default 0.95).
    pub deadline_confidence: f64,
    /// At most this expected cost.
    pub budget: Option<Money>,
    /// Allowed clouds (all when empty).
    pub clouds: Vec<Cloud>,
    /// Allowed regions (all when empty).
    pub regions: Vec<Region>,
    /// Allowed zones (all when empty).
    pub zones: Vec<Zone>,
    /// Whether the instances must share a placement group.
    pub placement_group: bool,
    /// What the instances run and how they are reached (empty: bare
    /// instances, as `place` and the simulator need).
    pub workload: Workload,
}

/// What a managed job's instances run: the job file's `run`, `setup`,
/// `image`, `env`, `checkpoint` and `[access]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The command that does the work (run by `bash -c` as the login user,
    /// from its home directory); its exit status ends the job.
    pub run: Option<String>,
    /// Commands run once before `run` on every (re)start, e.g. installing
    /// packages or fetching data.
    pub setup: Option<String>,
    /// The machine image per cloud (AMI id, GCE image, Azure image
    /// reference).
    pub images: BTreeMap<Cloud, String>,
    /// Environment variables for `setup`, `run` and `checkpoint`, stored
    /// and sent in clear.
    pub env: BTreeMap<String, String>,
    /// Environment variables whose values the node reads at boot from the
    /// cloud's secret store, with its own identity: references only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: Secrets,
    /// The command that saves a checkpoint, run by the node's watch agent
    /// when an interruption notice arrives.
    pub checkpoint: Option<String>,
    /// Access settings per cloud.
    pub access: BTreeMap<Cloud, Access>,
    /// How many times a `run` that exits non-zero is started again (from its
    /// last checkpoint, on a new placement) before the job fails; 0 by
    /// default (SkyPilot's `max_restarts_on_errors`). Interruptions never
    /// count: they are the cloud's doing.
    pub max_restarts_on_errors: u32,
}

/// The most restarts on errors a job file may ask for.
pub const MAX_RESTARTS_ON_ERRORS: u32 = 100;

impl Workload {
    /// Whether there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.run.is_none() && self.setup.is_none()
    }

    /// Checks names and values, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in &self.env {
            check_env_name("env", name)?;
            if value.contains('\0') {
                return Err(Error::invalid_input(format!(
                    "invalid env value for {name}: it contains a NUL byte"
                )));
            }
        }
        for (name, refs) in &self.secrets {
            check_secret_name(name)?;
            if self.env.contains_key(name) {
                return Err(Error::invalid_input(format!(
                    "{name} is both in env and in secrets: keep one"
                )));
            }
            for (cloud, r) in refs {
                if r.cloud() != *cloud {
                    return Err(Error::invalid_input(format!(
                        "secret {name}: {r} is a secret in {}, not in {}",
                        r.store(),
                        cloud.title()
                    )));
                }
            }
        }
        for (what, v) in [
            ("run", &self.run),
            ("setup", &self.setup),
            ("checkpoint", &self.checkpoint),
        ] {
            if let Some(v) = v {
                if v.trim().is_empty() || v.contains('\0') {
                    return Err(Error::invalid_input(format!(
                        "invalid {what}: give a shell command (it is empty or holds a NUL byte)"
                    )));
                }
            }
        }
        for (cloud, image) in &self.images {
            if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
                return Err(Error::invalid_input(format!(
                    "invalid image '{image}' for {cloud}: give one image id without spaces"
                )));
            }
        }
        for access in self.access.values() {
            access.validate()?;
        }
        Ok(())
    }
}

impl JobSpec {
    /// Checks the clouds, regions and zones the job names against
    /// `snapshot`'s catalog (a region or zone it does not know is refused
    /// with the nearest names; `fake` is no cloud a job names): what every
    /// front end checks a job file or a service file by.
    pub fn check_locations(&self, snapshot: &crate::catalog::Snapshot) -> Result<()> {
        if self.clouds.contains(&crate::Cloud::Fake) {
            return Err(Error::invalid_input(
                "unknown cloud 'fake' in clouds; valid clouds: aws, gcp, azure (the fake provider stands in for those three)",
            ));
        }
        snapshot.known_regions(
            &self.clouds,
            &self.regions.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        )?;
        snapshot.known_zones(
            &self.clouds,
            &self.regions,
            &self.zones.iter().map(|z| z.as_str()).collect::<Vec<_>>(),
        )?;
        Ok(())
    }

    /// One hour of work on the GPUs of `pool`'s instance type, in its cloud
    /// and region: what `launch --pool` without GPU options places.
    pub fn for_pool(pool: &crate::Pool, name: &str, snapshot: &crate::Snapshot) -> Result<JobSpec> {
        let t = snapshot
            .instance_types()
            .iter()
            .find(|t| t.cloud == pool.cloud && t.name.eq_ignore_ascii_case(&pool.instance_type))
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "no pool {pool}: {} is not a {} instance type in the catalog",
                    pool.instance_type, pool.cloud
                ))
            })?;
        let gpu = t.gpu.as_ref().ok_or_else(|| {
            Error::invalid_input(format!(
                "{} has no GPU; gpufleet launches GPU instances",
                t.name
            ))
        })?;
        let mut job = JobSpec::builder(name, gpu.model.clone(), gpu.count, 1.0).build()?;
        job.clouds = vec![pool.cloud];
        job.regions = vec![pool.region.clone()];
        Ok(job)
    }

    /// A builder for `hours` of work on `count` x `model`.
    pub fn builder(
        name: impl Into<String>,
        model: GpuModel,
        count: u32,
        hours: f64,
    ) -> JobSpecBuilder {
        JobSpecBuilder(JobSpec {
            name: name.into(),
            gpus: vec![GpuOption {
                model,
                count,
                min_memory_gib: None,
            }],
            hours,
            throughput: ThroughputTable::default(),
            interruptible: true,
            checkpoint_interval: CheckpointInterval::Auto,
            checkpoint_cost: Duration::from_secs(120),
            restart_overhead: Duration::from_secs(600),
            deadline: None,
            deadline_confidence: 0.95,
            budget: None,
            clouds: Vec::new(),
            regions: Vec::new(),
            zones: Vec::new(),
            placement_group: false,
            workload: Workload::default(),
        })
    }

    /// Reads a job file in TOML (see [`JobFile`]).
    pub fn from_toml(text: &str) -> Result<JobSpec> {
        JobFile::from_toml(text)?.into_spec()
    }

    /// Reads a job file in JSON (see [`JobFile`]).
    pub fn from_json(text: &str) -> Result<JobSpec> {
        JobFile::from_json(text)?.into_spec()
    }

    /// Hours of work on `count` x `model`, converted from the reference option by
    /// throughput (assumed to scale linearly with GPU count); `None` when a
    /// factor is missing.
    pub fn work_hours_on(&self, model: &GpuModel, count: u32) -> Option<f64> {
        let reference = &self.gpus[0];
        if *model == reference.model && count == reference.count {
            return Some(self.hours);
        }
        let f_ref = self.throughput.factor(&reference.model)?;
        let f = self.throughput.factor(model)?;
        Some(self.hours * (f_ref * f64::from(reference.count)) / (f * f64::from(count.max(1))))
    }

    /// Checks the spec, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        self.workload.validate()?;
        if self.gpus.is_empty() {
            return Err(Error::invalid_input(
                "a job needs at least one GPU option (model and count)",
            ));
        }
        for g in &self.gpus {
            if !(1..=MAX_GPUS_PER_INSTANCE).contains(&g.count) {
                return Err(Error::invalid_input(format!(
                    "invalid GPU count {} for {}: expected 1 to {MAX_GPUS_PER_INSTANCE}",
                    g.count, g.model
                )));
            }
        }
        if !(self.hours.is_finite() && self.hours > 0.0 && self.hours <= MAX_JOB_HOURS) {
            return Err(Error::invalid_input(format!(
                "invalid hours {}: expected a positive number of hours of work, at most {MAX_JOB_HOURS}",
                self.hours
            )));
        }
        if let CheckpointInterval::Every(d) = self.checkpoint_interval {
            if d.is_zero() {
                return Err(Error::invalid_input(
                    "invalid checkpoint interval 0s: use a positive duration or 'auto'",
                ));
            }
            // The job would do nothing but checkpoint.
            if self.checkpoint_cost >= d {
                return Err(Error::invalid_input(format!(
                    "invalid checkpoint interval {} with checkpoints that take {}: a checkpoint must take less than the interval between two, or use 'auto'",
                    format_duration(d),
                    format_duration(self.checkpoint_cost)
                )));
            }
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid_input(
                "invalid deadline 0s: use a positive duration",
            ));
        }
        if !(self.deadline_confidence > 0.0 && self.deadline_confidence < 1.0) {
            return Err(Error::invalid_input(format!(
                "invalid deadline confidence {}: expected a probability between 0 and 1, such as 0.95",
                self.deadline_confidence
            )));
        }
        if let Some(b) = self.budget.filter(|b| *b <= Money::ZERO) {
            return Err(Error::invalid_input(format!(
                "invalid budget '{}': expected a positive amount of US dollars, such as 900",
                b.display(2)
            )));
        }
        Ok(())
    }
}

/// Builds a [`JobSpec`].
#[derive(Debug, Clone)]
pub struct JobSpecBuilder(JobSpec);

impl JobSpecBuilder {
    /// Adds another acceptable GPU configuration.
    pub fn or_gpu(mut self, model: GpuModel, count: u32) -> Self {
        self.0.gpus.push(GpuOption {
            model,
            count,
            min_memory_gib: None,
        });
        self
    }

    /// Requires at least this much memory per GPU on every option.
    pub fn min_gpu_memory_gib(mut self, gib: u32) -> Self {
        for g in &mut self.0.gpus {
            g.min_memory_gib = Some(gib);
        }
        self
    }

    /// Overrides a throughput factor (1.0 = one V100).
    pub fn throughput(mut self, model: GpuModel, factor: f64) -> Result<Self> {
        self.0.throughput.set(model, factor)?;
        Ok(self)
    }

    /// Checkpoint interval.
    pub fn checkpoint_interval(mut self, interval: CheckpointInterval) -> Self {
        self.0.checkpoint_interval = interval;
        self
    }

    /// Time one checkpoint takes.
    pub fn checkpoint_cost(mut self, d: Duration) -> Self {
        self.0.checkpoint_cost = d;
        self
    }

    /// Time from a (re)start to useful work.
    pub fn restart_overhead(mut self, d: Duration) -> Self {
        self.0.restart_overhead = d;
        self
    }

    /// The job cannot survive an interruption: on-demand only.
    pub fn not_interruptible(mut self) -> Self {
        self.0.interruptible = false;
        self
    }

    /// Must finish within `d`.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.0.deadline = Some(d);
        self
    }

    /// How sure the placer must be to meet the deadline.
    pub fn deadline_confidence(mut self, p: f64) -> Self {
        self.0.deadline_confidence = p;
        self
    }

    /// At most this expected cost.
    pub fn budget(mut self, budget: Money) -> Self {
        self.0.budget = Some(budget);
        self
    }

    /// Allows a cloud (all when none is given).
    pub fn cloud(mut self, cloud: Cloud) -> Self {
        self.0.clouds.push(cloud);
        self
    }

    /// Allows a region (all when none is given).
    pub fn region(mut self, region: impl Into<Region>) -> Self {
        self.0.regions.push(region.into());
        self
    }

    /// Allows a zone (all when none is given).
    pub fn zone(mut self, zone: impl Into<Zone>) -> Self {
        self.0.zones.push(zone.into());
        self
    }

    /// Requires a placement group.
    pub fn placement_group(mut self, needed: bool) -> Self {
        self.0.placement_group = needed;
        self
    }

    /// Checks and returns the spec.
    pub fn build(self) -> Result<JobSpec> {
        check_job_name(&self.0.name)?;
        self.0.validate()?;
        Ok(self.0)
    }
}

impl std::fmt::Display for CheckpointInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointInterval::Every(d) => f.write_str(&format_duration(*d)),
            CheckpointInterval::Auto => f.write_str("auto"),
        }
    }
}

#[cfg(test)]
mod tests;
