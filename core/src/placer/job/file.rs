//! The job file (TOML or JSON) as written by a person, checked and turned
//! into a [`JobSpec`], every bad field named with what would be valid.

use super::*;

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
    /// Secrets the node reads at boot from the cloud's store (`[secrets]`:
    /// `NAME = "reference"` or `NAME = { aws = "…", gcp = "…" }`, see
    /// [`SecretRef`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, SecretFile>,
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

/// A TOML file's parse error on one line, saying where: `WHAT: line N
/// (the line): what is wrong` (job files and service files).
pub(crate) fn toml_error(what: &str, text: &str, e: &toml::de::Error) -> Error {
    let at = e.span().map(|span| {
        let start = span.start.min(text.len());
        let line = text.as_bytes()[..start]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        let shown = text.lines().nth(line - 1).unwrap_or("").trim();
        let shown: String = shown.chars().take(80).collect();
        format!("line {line} ({shown}): ")
    });
    Error::invalid_input(format!(
        "{what}: {}{}",
        at.unwrap_or_default(),
        e.message().trim()
    ))
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
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessFile {
    /// An OpenSSH public key.
    pub ssh_public_key: Option<String>,
    /// The boot disk size in GiB.
    pub disk_gb: Option<u32>,
    /// AWS settings.
    pub aws: Option<Access>,
    /// GCP settings.
    pub gcp: Option<Access>,
    /// Azure settings.
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
    /// A job of `hours` of work (on the reference GPU, as in a file's
    /// `hours`) on `count` GPUs of `model` each; the rest as a file that
    /// says nothing more. Like a parsed file it is checked by
    /// [`JobFile::into_spec`]:
    ///
    /// ```
    /// use gpufleet_core::placer::JobFile;
    /// let spec = JobFile::new(3.0, "A10G", 1)
    ///     .named("resume-me")
    ///     .within("aws", &["us-east-1"])
    ///     .checkpointing("20m", "5m")
    ///     .into_spec()
    ///     .unwrap();
    /// assert!(spec.interruptible);
    /// ```
    pub fn new(hours: f64, model: impl Into<String>, count: u32) -> Self {
        JobFile {
            hours,
            gpus: vec![GpuFileOption {
                model: model.into(),
                count: Some(count),
                min_memory_gib: None,
            }],
            ..JobFile::default()
        }
    }

    /// Names the job.
    pub fn named(self, name: impl Into<String>) -> Self {
        JobFile {
            name: Some(name.into()),
            ..self
        }
    }

    /// Runs only on `cloud`, in one of `regions` (all of its regions when
    /// empty).
    pub fn within(self, cloud: &str, regions: &[&str]) -> Self {
        JobFile {
            clouds: vec![cloud.to_string()],
            regions: regions.iter().map(|r| r.to_string()).collect(),
            ..self
        }
    }

    /// Interruptible: checkpoints every `interval`, and a restart takes
    /// `restart_overhead` (durations as a file writes them: `20m`, `1h`).
    pub fn checkpointing(self, interval: &str, restart_overhead: &str) -> Self {
        JobFile {
            interruptible: Some(true),
            checkpoint_interval: Some(interval.to_string()),
            restart_overhead: Some(restart_overhead.to_string()),
            ..self
        }
    }

    /// Reads a job file in TOML: its name is checked ([`check_job_name`]),
    /// the rest by [`JobFile::into_spec`].
    pub fn from_toml(text: &str) -> Result<JobFile> {
        let file: JobFile = toml::from_str(text).map_err(|e| toml_error("job file", text, &e))?;
        file.check_name()?;
        Ok(file)
    }

    /// Reads a job file in JSON: its name is checked ([`check_job_name`]),
    /// the rest by [`JobFile::into_spec`].
    pub fn from_json(text: &str) -> Result<JobFile> {
        let file: JobFile = serde_json::from_str(text)
            .map_err(|e| Error::invalid_input(format!("job file: {e}")))?;
        file.check_name()?;
        Ok(file)
    }

    /// Checks the name, when the file gives one ([`check_job_name`]).
    pub fn check_name(&self) -> Result<()> {
        self.name.as_deref().map_or(Ok(()), check_job_name)
    }

    /// The job this file describes, checked as every front end checks a job
    /// file (`place --job`, `run --job`, the Python bindings): its values
    /// ([`JobFile::into_spec`]), its clouds (the real three: `fake` names a
    /// library user's own provider, which job files do not), and its
    /// regions and zones, each one `snapshot` knows on the file's clouds (an
    /// unknown one would only be refused later as "no offer", naming
    /// nothing). Errors are prefixed with `label` (the file's path).
    pub fn checked_spec(
        &self,
        snapshot: &crate::catalog::Snapshot,
        label: &str,
    ) -> Result<JobSpec> {
        let in_file =
            |e: crate::Error| crate::Error::new(e.kind(), format!("{label}: {}", e.message()));
        let spec = self.clone().into_spec().map_err(in_file)?;
        spec.check_locations(snapshot).map_err(in_file)?;
        Ok(spec)
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
        let secrets = read_secrets(&self.secrets, &self.env)?;
        let clouds = clouds_for_secrets(&secrets, &clouds)?;
        let mut workload = Workload {
            run: self.run.clone(),
            setup: self.setup.clone(),
            env: self.env.clone(),
            secrets,
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
