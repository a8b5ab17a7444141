//! A job as a person or program hands it over (a file, a document, flags),
//! read into the [`JobSpec`] the placer and controllers take, once, and
//! always against the same catalog: the live catalog cache when it is
//! fresh (`catalog_max_age`), else the embedded snapshot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpufleet_core::placer::{CheckpointInterval, JobFile, JobSpec};
use gpufleet_core::{Cloud, Error, GpuRequirement, Money, Snapshot};

use crate::config::Config;

/// A job described by flags or keywords rather than a file (`gpufleet place
/// --gpu … --hours …`, `gpufleet.place(gpu=…, hours=…)`).
#[derive(Debug, Clone)]
pub struct JobFlags {
    /// The job's name.
    pub name: String,
    /// The acceptable GPU configurations; `hours` is measured on the first.
    pub gpus: Vec<GpuRequirement>,
    /// Hours of work on the first GPU configuration.
    pub hours: f64,
    /// How often it checkpoints.
    pub checkpoint_interval: CheckpointInterval,
    /// Time one checkpoint takes.
    pub checkpoint_cost: Duration,
    /// Time from a (re)start to useful work.
    pub restart_overhead: Duration,
    /// It must be done within this long.
    pub deadline: Option<Duration>,
    /// It cannot survive interruption: on-demand only.
    pub not_interruptible: bool,
    /// At most this expected cost.
    pub budget: Option<Money>,
    /// The clouds to consider (none: every one).
    pub clouds: Vec<Cloud>,
    /// The regions to consider (none: every one of those clouds).
    pub regions: Vec<String>,
}

impl JobFlags {
    /// A job of `hours` on `gpus`, with the CLI's defaults for the rest
    /// (checkpoint interval `auto`, a 2-minute checkpoint, a 10-minute
    /// restart).
    pub fn new(name: impl Into<String>, gpus: Vec<GpuRequirement>, hours: f64) -> JobFlags {
        JobFlags {
            name: name.into(),
            gpus,
            hours,
            checkpoint_interval: CheckpointInterval::Auto,
            checkpoint_cost: Duration::from_secs(120),
            restart_overhead: Duration::from_secs(600),
            deadline: None,
            not_interruptible: false,
            budget: None,
            clouds: Vec::new(),
            regions: Vec::new(),
        }
    }

    /// The job, its regions checked against `catalog` and its values by
    /// [`JobSpec`]'s own checks (hours, counts, durations).
    pub fn spec(&self, catalog: &Snapshot) -> Result<JobSpec, Error> {
        let Some(first) = self.gpus.first() else {
            return Err(Error::invalid_input(
                "give at least one GPU configuration, MODEL:COUNT (such as A100:8)",
            ));
        };
        let mut b = JobSpec::builder(
            &self.name,
            first.model.clone(),
            first.count.unwrap_or(1),
            self.hours,
        )
        .checkpoint_cost(self.checkpoint_cost)
        .restart_overhead(self.restart_overhead)
        .checkpoint_interval(self.checkpoint_interval);
        for g in &self.gpus[1..] {
            b = b.or_gpu(g.model.clone(), g.count.unwrap_or(1));
        }
        if let Some(d) = self.deadline {
            b = b.deadline(d);
        }
        if self.not_interruptible {
            b = b.not_interruptible();
        }
        if let Some(budget) = self.budget {
            b = b.budget(budget);
        }
        for c in &self.clouds {
            b = b.cloud(*c);
        }
        for r in catalog.known_regions(&self.clouds, &self.regions)? {
            b = b.region(r);
        }
        b.build()
    }
}

/// Where a job comes from.
#[derive(Debug, Clone)]
pub enum JobInput {
    /// A job file (TOML, or JSON when it ends in `.json` or starts with
    /// `{`), read bounded ([`crate::input::MAX_INPUT_FILE`]).
    File(PathBuf),
    /// A job file's text (JSON or TOML), named `label` in errors.
    Document {
        /// The text.
        text: String,
        /// What errors call it ("the job").
        label: String,
    },
    /// Flags or keywords.
    Flags(JobFlags),
}

/// A job read and checked: its spec, and the file it came from (a managed
/// job records it; flags have none).
#[derive(Debug, Clone)]
pub struct JobRead {
    /// What the placer and controllers take.
    pub spec: JobSpec,
    /// The file, for what is recorded with a managed job.
    pub file: Option<JobFile>,
    /// What errors and notes call it: the path, or the document's label.
    pub source: String,
}

impl JobInput {
    /// Reads the job, checked against the catalog every command uses (the
    /// live cache when fresh, else the embedded snapshot).
    pub fn read(&self, cfg: &Config) -> Result<JobRead, Error> {
        let (catalog, _) = crate::live::cache::current(cfg);
        self.read_on(&catalog)
    }

    /// Reads the job, checked against `catalog`.
    pub fn read_on(&self, catalog: &Snapshot) -> Result<JobRead, Error> {
        match self {
            JobInput::File(path) => {
                let file = read_job_file(path)?;
                let source = path.display().to_string();
                Ok(JobRead {
                    spec: file.checked_spec(catalog, &source)?,
                    file: Some(file),
                    source,
                })
            }
            JobInput::Document { text, label } => {
                let file = parse(text, false)
                    .map_err(|e| Error::invalid_input(format!("{label}: {}", e.message())))?;
                Ok(JobRead {
                    spec: file.checked_spec(catalog, label)?,
                    file: Some(file),
                    source: label.clone(),
                })
            }
            JobInput::Flags(flags) => Ok(JobRead {
                spec: flags.spec(catalog)?,
                file: None,
                source: "the flags".into(),
            }),
        }
    }
}

/// Reads a job file, bounded: JSON when it ends in `.json` or starts with
/// `{`, else TOML; not yet checked (see [`JobFile::checked_spec`]). Errors
/// name the file.
pub fn read_job_file(path: &Path) -> Result<JobFile, Error> {
    let text = crate::input::read_text(path, "job file")?;
    parse(&text, path.extension().is_some_and(|e| e == "json"))
        .map_err(|e| Error::invalid_input(format!("{}: {}", path.display(), e.message())))
}

fn parse(text: &str, json: bool) -> Result<JobFile, Error> {
    if json || text.trim_start().starts_with('{') {
        JobFile::from_json(text)
    } else {
        JobFile::from_toml(text)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_a_file_read_to_the_same_spec() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        std::fs::write(
            &path,
            "name = \"a\"\nhours = 3\nregions = [\"us-east-1\"]\nclouds = [\"aws\"]\n[[gpu]]\nmodel = \"A100\"\ncount = 8\n",
        )
        .unwrap();
        let snap = Snapshot::embedded();
        let from_file = JobInput::File(path).read_on(snap).unwrap();
        let mut flags = JobFlags::new("a", vec!["A100:8".parse().unwrap()], 3.0);
        flags.clouds = vec![Cloud::Aws];
        flags.regions = vec!["us-east-1".into()];
        let from_flags = JobInput::Flags(flags).read_on(snap).unwrap();
        assert_eq!(from_file.spec.regions, from_flags.spec.regions);
        assert_eq!(from_file.spec.gpus, from_flags.spec.gpus);
        assert!(from_file.file.is_some() && from_flags.file.is_none());
    }

    #[test]
    fn bad_flags_name_the_value() {
        let snap = Snapshot::embedded();
        let e = JobInput::Flags(JobFlags::new("a", vec![], 3.0))
            .read_on(snap)
            .unwrap_err();
        assert!(e.message().contains("MODEL:COUNT"), "{e}");
        let e = JobInput::Flags(JobFlags::new("a", vec!["A100:8".parse().unwrap()], -1.0))
            .read_on(snap)
            .unwrap_err();
        assert!(e.message().contains("invalid hours -1"), "{e}");
        let mut f = JobFlags::new("a", vec!["A100:8".parse().unwrap()], 1.0);
        f.regions = vec!["mars-1".into()];
        let e = JobInput::Flags(f).read_on(snap).unwrap_err();
        assert!(e.message().contains("mars-1"), "{e}");
        let e = JobInput::Document {
            text: "{ not json".into(),
            label: "the job".into(),
        }
        .read_on(snap)
        .unwrap_err();
        assert!(e.message().starts_with("the job:"), "{e}");
    }
}
