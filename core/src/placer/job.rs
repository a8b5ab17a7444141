//! What a job needs: the [`JobSpec`], built in code or read from a TOML/JSON file.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{format_duration, parse_duration};
use crate::catalog::MAX_GPUS_PER_INSTANCE;
use crate::error::{Error, Result};
use crate::gpu::GpuModel;
use crate::model::{Access, Cloud, Region, Zone};
use crate::money::Money;

/// Training throughput of one GPU relative to one V100, fp16, as the geometric
/// mean over Lambda's PyTorch benchmarks (`lambdal/deeplearning-benchmark`,
/// `derived_relative_to_V100_single_gpu_fp16.csv`; H200 and B200 scaled from
/// H100 SXM by the v2 tables' geometric mean ratios 1.184 and 1.695). A10G uses
/// the A10's figure as its nearest measured stand-in. T4, L4, K80, M60, P4, P100
/// and the rest were not measured there and have no default.
pub const DEFAULT_THROUGHPUT: &[(GpuModel, f64)] = &[
    (GpuModel::V100, 1.0),
    (GpuModel::A10, 0.892),
    (GpuModel::A10G, 0.892),
    (GpuModel::A100, 2.205),
    (GpuModel::A100_80GB, 2.635),
    (GpuModel::H100, 4.417),
    (GpuModel::H200, 5.230),
    (GpuModel::B200, 7.487),
];

/// Relative GPU throughput per model, defaults plus the user's overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputTable(BTreeMap<GpuModel, f64>);

impl Default for ThroughputTable {
    fn default() -> Self {
        ThroughputTable(DEFAULT_THROUGHPUT.iter().cloned().collect())
    }
}

impl ThroughputTable {
    /// An empty table (no model is convertible).
    pub fn empty() -> Self {
        ThroughputTable(BTreeMap::new())
    }

    /// Sets a model's factor.
    pub fn set(&mut self, model: GpuModel, factor: f64) -> Result<()> {
        if !(factor.is_finite() && factor > 0.0 && factor < 1000.0) {
            return Err(Error::invalid_input(format!(
                "invalid throughput factor {factor} for {model}: expected a positive number (1.0 = one V100)"
            )));
        }
        self.0.insert(model, factor);
        Ok(())
    }

    /// A model's factor, if known.
    pub fn factor(&self, model: &GpuModel) -> Option<f64> {
        self.0.get(model).copied()
    }
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
    /// Environment variables for `setup`, `run` and `checkpoint`.
    pub env: BTreeMap<String, String>,
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
            let ok = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(Error::invalid_input(format!(
                    "invalid env name '{name}': use letters, digits and '_', not starting with a digit"
                )));
            }
            if value.contains('\0') {
                return Err(Error::invalid_input(format!(
                    "invalid env value for {name}: it contains a NUL byte"
                )));
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
        if !(self.hours.is_finite() && self.hours > 0.0 && self.hours <= 1_000_000.0) {
            return Err(Error::invalid_input(format!(
                "invalid hours {}: expected a positive number of hours of work",
                self.hours
            )));
        }
        if let CheckpointInterval::Every(d) = self.checkpoint_interval {
            if d.is_zero() {
                return Err(Error::invalid_input(
                    "invalid checkpoint interval 0s: use a positive duration or 'auto'",
                ));
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
        if self.budget.is_some_and(|b| b <= Money::ZERO) {
            return Err(Error::invalid_input(
                "invalid budget: expected a positive amount of US dollars",
            ));
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
        self.0.validate()?;
        Ok(self.0)
    }
}

/// A job file, as TOML or JSON:
///
/// ```toml
/// name = "llama-70b-finetune"
/// hours = 20                  # of work on the first GPU option
/// checkpoint_interval = "auto" # or "30m"
/// checkpoint_cost = "2m"
/// restart_overhead = "10m"
/// deadline = "48h"
/// budget = "900"               # USD
/// clouds = ["aws", "gcp"]
///
/// [[gpu]]
/// model = "H100"
/// count = 8
///
/// [[gpu]]
/// model = "A100-80GB"
/// count = 8
///
/// [throughput]                 # relative to one V100; overrides the defaults
/// L4 = 0.9
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
    /// Hours of work on the first GPU option.
    pub hours: f64,
    /// GPU options, any of them.
    #[serde(rename = "gpu")]
    pub gpus: Vec<GpuFileOption>,
    /// Whether the job survives interruption (default true).
    #[serde(default)]
    pub interruptible: Option<bool>,
    /// A duration such as `30m`, or `auto`.
    #[serde(default)]
    pub checkpoint_interval: Option<String>,
    /// A duration.
    #[serde(default)]
    pub checkpoint_cost: Option<String>,
    /// A duration.
    #[serde(default)]
    pub restart_overhead: Option<String>,
    /// A duration from now.
    #[serde(default)]
    pub deadline: Option<String>,
    /// A probability such as 0.95.
    #[serde(default)]
    pub deadline_confidence: Option<f64>,
    /// US dollars, as a string (`"900"`) or a number.
    #[serde(default)]
    pub budget: Option<serde_json::Value>,
    /// Allowed clouds.
    #[serde(default)]
    pub clouds: Vec<String>,
    /// Allowed regions.
    #[serde(default)]
    pub regions: Vec<String>,
    /// Allowed zones.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Whether a placement group is needed.
    #[serde(default)]
    pub placement_group: bool,
    /// Throughput overrides by GPU model.
    #[serde(default)]
    pub throughput: BTreeMap<String, f64>,
    /// The command that does the work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Commands run before `run` on every (re)start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// One image for every allowed cloud (`image = "ami-…"`) or one per cloud
    /// (`[image]` with `aws`, `gcp`, `azure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageFile>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The checkpoint hook command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Restarts of a `run` that exits non-zero (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts_on_errors: Option<u32>,
    /// Access settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessFile>,
}

/// The `image` of a job file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ImageFile {
    /// The same image everywhere.
    One(String),
    /// An image per cloud name.
    PerCloud(BTreeMap<String, String>),
}

/// The `[access]` table of a job file: the SSH key and disk size for every
/// cloud, and `[access.aws]`, `[access.gcp]`, `[access.azure]` for the
/// cloud-specific settings (subnet, security groups, identity; any field).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessFile {
    /// An OpenSSH public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_key: Option<String>,
    /// The boot disk size in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<u32>,
    /// AWS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<Access>,
    /// GCP settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<Access>,
    /// Azure settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<Access>,
}

/// A GPU option in a job file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFileOption {
    /// A GPU model name.
    pub model: String,
    /// GPUs per instance (default 1).
    #[serde(default)]
    pub count: Option<u32>,
    /// At least this much memory per GPU.
    #[serde(default)]
    pub min_memory_gib: Option<u32>,
}

impl JobFile {
    /// Reads a job file in TOML (not yet checked: see [`JobFile::into_spec`]).
    pub fn from_toml(text: &str) -> Result<JobFile> {
        toml::from_str(text).map_err(|e| Error::invalid_input(format!("job file: {}", e.message())))
    }

    /// Reads a job file in JSON (not yet checked: see [`JobFile::into_spec`]).
    pub fn from_json(text: &str) -> Result<JobFile> {
        serde_json::from_str(text).map_err(|e| Error::invalid_input(format!("job file: {e}")))
    }

    /// Checks the file and turns it into a spec.
    pub fn into_spec(self) -> Result<JobSpec> {
        let gpu = |s: &str| GpuModel::parse(s).map_err(|e| Error::invalid_input(e.to_string()));
        let dur = |field: &str, v: &Option<String>| -> Result<Option<Duration>> {
            v.as_deref()
                .map(|s| {
                    parse_duration(s)
                        .map_err(|e| Error::invalid_input(format!("{field}: {}", e.message())))
                })
                .transpose()
        };
        let mut gpus = Vec::new();
        for g in &self.gpus {
            gpus.push(GpuOption {
                model: gpu(&g.model)?,
                count: g.count.unwrap_or(1),
                min_memory_gib: g.min_memory_gib,
            });
        }
        let mut throughput = ThroughputTable::default();
        for (name, factor) in &self.throughput {
            throughput.set(gpu(name)?, *factor)?;
        }
        let checkpoint_interval = match self.checkpoint_interval.as_deref() {
            None | Some("auto") => CheckpointInterval::Auto,
            Some(_) => CheckpointInterval::Every(
                dur("checkpoint_interval", &self.checkpoint_interval)?.unwrap_or_default(),
            ),
        };
        let budget = match &self.budget {
            None => None,
            Some(serde_json::Value::String(s)) => Some(
                s.parse::<Money>()
                    .map_err(|e| Error::invalid_input(format!("budget: {e}")))?,
            ),
            Some(serde_json::Value::Number(n)) => Some(
                n.to_string()
                    .parse::<Money>()
                    .map_err(|e| Error::invalid_input(format!("budget: {e}")))?,
            ),
            Some(other) => {
                return Err(Error::invalid_input(format!(
                    "budget: expected US dollars such as \"900\", found {other}"
                )))
            }
        };
        let mut clouds = Vec::new();
        for c in &self.clouds {
            clouds.push(c.parse::<Cloud>()?);
        }
        let max_restarts_on_errors = self.max_restarts_on_errors.unwrap_or(0);
        if max_restarts_on_errors > MAX_RESTARTS_ON_ERRORS {
            return Err(Error::invalid_input(format!(
                "invalid max_restarts_on_errors {max_restarts_on_errors}: expected 0 to {MAX_RESTARTS_ON_ERRORS}"
            )));
        }
        let mut workload = Workload {
            run: self.run.clone(),
            setup: self.setup.clone(),
            env: self.env.clone(),
            checkpoint: self.checkpoint.clone(),
            max_restarts_on_errors,
            ..Workload::default()
        };
        let every_cloud: Vec<Cloud> = if clouds.is_empty() {
            vec![Cloud::Aws, Cloud::Gcp, Cloud::Azure, Cloud::Fake]
        } else {
            clouds.clone()
        };
        match &self.image {
            None => {}
            Some(ImageFile::One(image)) => {
                for c in &every_cloud {
                    workload.images.insert(*c, image.clone());
                }
            }
            Some(ImageFile::PerCloud(map)) => {
                for (name, image) in map {
                    workload.images.insert(
                        name.parse::<Cloud>()
                            .map_err(|e| Error::invalid_input(format!("[image]: {e}")))?,
                        image.clone(),
                    );
                }
            }
        }
        if let Some(a) = &self.access {
            for (cloud, specific) in [
                (Cloud::Aws, &a.aws),
                (Cloud::Gcp, &a.gcp),
                (Cloud::Azure, &a.azure),
            ] {
                let mut access = specific.clone().unwrap_or_default();
                if access.ssh_public_key.is_none() {
                    access.ssh_public_key = a.ssh_public_key.clone();
                }
                if access.disk_gb.is_none() {
                    access.disk_gb = a.disk_gb;
                }
                if !access.is_empty() {
                    workload.access.insert(cloud, access);
                }
            }
        }
        let spec = JobSpec {
            workload,
            name: self.name.unwrap_or_else(|| "job".into()),
            gpus,
            hours: self.hours,
            throughput,
            interruptible: self.interruptible.unwrap_or(true),
            checkpoint_interval,
            checkpoint_cost: dur("checkpoint_cost", &self.checkpoint_cost)?
                .unwrap_or(Duration::from_secs(120)),
            restart_overhead: dur("restart_overhead", &self.restart_overhead)?
                .unwrap_or(Duration::from_secs(600)),
            deadline: dur("deadline", &self.deadline)?,
            deadline_confidence: self.deadline_confidence.unwrap_or(0.95),
            budget,
            clouds,
            regions: self
                .regions
                .iter()
                .map(|r| Region::new(r.as_str()))
                .collect(),
            zones: self.zones.iter().map(|z| Zone::new(z.as_str())).collect(),
            placement_group: self.placement_group,
        };
        spec.validate()?;
        Ok(spec)
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
mod tests {
    use super::*;

    #[test]
    fn reads_toml_and_json() {
        let spec = JobSpec::from_toml(
            r#"
            name = "ft"
            hours = 20
            checkpoint_interval = "30m"
            deadline = "48h"
            budget = "900"
            clouds = ["aws", "gcp"]
            [[gpu]]
            model = "h100"
            count = 8
            [[gpu]]
            model = "A100-80GB"
            count = 8
            [throughput]
            L4 = 0.9
            "#,
        )
        .unwrap();
        assert_eq!(spec.gpus.len(), 2);
        assert_eq!(
            spec.checkpoint_interval,
            CheckpointInterval::Every(Duration::from_secs(1800))
        );
        assert_eq!(spec.budget, Some(Money::from_cents(90_000)));
        assert_eq!(spec.throughput.factor(&GpuModel::L4), Some(0.9));
        // 8xA100-80GB needs 4.417/2.635 as long as 8xH100.
        let h = spec.work_hours_on(&GpuModel::A100_80GB, 8).unwrap();
        assert!((h - 20.0 * 4.417 / 2.635).abs() < 1e-9);
        let json = JobSpec::from_json(r#"{"hours": 3, "gpu": [{"model": "T4"}], "budget": 12.5}"#)
            .unwrap();
        assert_eq!(json.budget, Some(Money::from_cents(1250)));
        assert_eq!(json.work_hours_on(&GpuModel::T4, 1), Some(3.0));
        assert_eq!(
            json.work_hours_on(&GpuModel::L4, 1),
            None,
            "no default factor for T4 or L4"
        );
    }

    #[test]
    fn bad_files_name_the_problem() {
        let cases = [
            (
                r#"hours = 0
[[gpu]]
model = "H100""#,
                "invalid hours 0",
            ),
            (
                r#"hours = 1
[[gpu]]
model = "H10""#,
                "unknown GPU model 'H10'",
            ),
            (
                r#"hours = 1
deadline = "soon"
[[gpu]]
model = "H100""#,
                "deadline: invalid duration 'soon'",
            ),
            (
                r#"hours = 1
[[gpu]]
model = "H100"
count = 64"#,
                "invalid GPU count 64",
            ),
            (
                r#"hours = 1
gpus = 3"#,
                "unknown field",
            ),
            ("hours = 1\ngpu = []", "at least one GPU option"),
            (
                r#"hours = 1
clouds = ["ibm"]
[[gpu]]
model = "H100""#,
                "unknown cloud 'ibm'",
            ),
        ];
        for (text, needle) in cases {
            let e = JobSpec::from_toml(text).unwrap_err();
            assert!(e.to_string().contains(needle), "{text}: {e}");
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        }
    }
}
