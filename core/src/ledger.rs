//! Memory across runs: interruptions, capacity failures and running time per
//! pool (the hazard estimator's evidence), and the jobs gpufleet placed.
//!
//! [`Ledger`] is the trait; [`MemoryLedger`] keeps it in memory (tests, the
//! simulator). The `gpufleet` facade has a SQLite ledger for the CLI.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::Result;
use crate::model::{InstanceId, Pool};
use crate::money::Price;
use crate::placer::{PoolEvent, PoolEvidence};

/// Where a job stands. A managed job goes placing → launching → running,
/// then (interrupted | moving → moved → running)* until it ends succeeded,
/// failed or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    /// Choosing a pool.
    Placing,
    /// A launch is about to be (or was) sent: the record names the pool and
    /// the attempt whose idempotency key a resumed controller re-sends.
    Launching,
    /// Running in a pool.
    Running,
    /// Interrupted (notice, preemption seen from the controller, or a node
    /// that stopped reporting); being placed again.
    Interrupted,
    /// Moving to a cheaper pool: the new placement is being launched.
    Moving,
    /// The placement the job moved away from (released).
    Moved,
    /// Done; everything terminated.
    #[serde(alias = "completed")]
    Succeeded,
    /// Given up, with nothing left running.
    Failed,
    /// Cancelled by a person, with nothing left running.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 9] = [
        JobState::Placing,
        JobState::Launching,
        JobState::Running,
        JobState::Interrupted,
        JobState::Moving,
        JobState::Moved,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name in the ledger and in output (`running`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Placing => "placing",
            JobState::Launching => "launching",
            JobState::Running => "running",
            JobState::Interrupted => "interrupted",
            JobState::Moving => "moving",
            JobState::Moved => "moved",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Parses [`JobState::as_str`] (and `completed`, the name schema 1 used
    /// for `succeeded`).
    pub fn parse(s: &str) -> Option<JobState> {
        if s == "completed" {
            return Some(JobState::Succeeded);
        }
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the job has ended (nothing more happens to it).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a job's history (the ledger keeps every one: the last is
/// where the job stands).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id.
    pub job_id: String,
    /// Its name.
    pub name: String,
    /// The pool, once one is chosen.
    pub pool: Option<Pool>,
    /// Its instances.
    pub instances: Vec<InstanceId>,
    /// What happened.
    pub state: JobState,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The launch attempt this placement is (part of its idempotency key).
    #[serde(default)]
    pub attempt: u32,
    /// Reference work-hours done in total when this was recorded.
    #[serde(default)]
    pub progress_hours: f64,
    /// The price of one instance of this placement per hour.
    #[serde(default)]
    pub price: Option<Price>,
    /// Why, in a line (the policy's explanation, the error, the notice).
    #[serde(default)]
    pub detail: String,
}

impl JobRecord {
    /// A record of `state` for `job_id` with nothing else filled in.
    pub fn new(
        job_id: impl Into<String>,
        name: impl Into<String>,
        state: JobState,
        at: OffsetDateTime,
    ) -> Self {
        JobRecord {
            job_id: job_id.into(),
            name: name.into(),
            pool: None,
            instances: Vec::new(),
            state,
            at,
            attempt: 0,
            progress_hours: 0.0,
            price: None,
            detail: String::new(),
        }
    }
}

/// Durable memory of what happened in each pool and to each job.
pub trait Ledger: Send + Sync + Debug {
    /// Records an interruption or capacity failure.
    fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()>;

    /// Records that an instance ran in `pool` from `from` to `to`.
    fn record_exposure(&self, pool: &Pool, from: OffsetDateTime, to: OffsetDateTime) -> Result<()>;

    /// Everything observed since `since`, per pool.
    fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>>;

    /// Appends to a job's history.
    fn record_job(&self, record: &JobRecord) -> Result<()>;

    /// Every job record, oldest first.
    fn jobs(&self) -> Result<Vec<JobRecord>>;

    /// One job's records, oldest first.
    fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        let mut all = self.jobs()?;
        all.retain(|r| r.job_id == job_id);
        Ok(all)
    }

    /// The newest record of `job_id`, if any.
    fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self.job_history(job_id)?.pop())
    }

    /// Keeps what a managed job was asked to do (an opaque document the
    /// runtime writes once, before the job's first record), so a controller
    /// that resumes it needs nothing else. Saving the same id again with the
    /// same document is a no-op; with another document it is
    /// [`crate::ErrorKind::AlreadyExists`].
    fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()>;

    /// The document [`Ledger::save_job_spec`] kept for `job_id`.
    fn job_spec(&self, job_id: &str) -> Result<Option<String>>;
}

/// A ledger in memory.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pools: HashMap<Pool, PoolEvidence>,
    jobs: Vec<JobRecord>,
    specs: HashMap<String, String>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Ledger for MemoryLedger {
    fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.pools.entry(pool.clone()).or_default().events.push(event);
        Ok(())
    }

    fn record_exposure(&self, pool: &Pool, from: OffsetDateTime, to: OffsetDateTime) -> Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.pools.entry(pool.clone()).or_default().ran(from, to);
        Ok(())
    }

    fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(g.pools
            .iter()
            .map(|(pool, ev)| {
                let ev = PoolEvidence {
                    events: ev
                        .events
                        .iter()
                        .filter(|e| e.at >= since)
                        .copied()
                        .collect(),
                    exposure: ev
                        .exposure
                        .iter()
                        .filter(|(_, to)| *to >= since)
                        .copied()
                        .collect(),
                };
                (pool.clone(), ev)
            })
            .collect())
    }

    fn record_job(&self, record: &JobRecord) -> Result<()> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .jobs
            .push(record.clone());
        Ok(())
    }

    fn jobs(&self) -> Result<Vec<JobRecord>> {
        Ok(self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .jobs
            .clone())
    }

    fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(g.jobs
            .iter()
            .filter(|r| r.job_id == job_id)
            .cloned()
            .collect())
    }

    fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(g.jobs.iter().rev().find(|r| r.job_id == job_id).cloned())
    }

    fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match g.specs.get(job_id) {
            Some(s) if s == spec => Ok(()),
            Some(_) => Err(crate::Error::new(
                crate::ErrorKind::AlreadyExists,
                format!("job {job_id} already exists with another definition"),
            )),
            None => {
                g.specs.insert(job_id.to_string(), spec.to_string());
                Ok(())
            }
        }
    }

    fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        Ok(self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .specs
            .get(job_id)
            .cloned())
    }
}
