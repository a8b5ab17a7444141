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
use crate::placer::{PoolEvent, PoolEvidence};

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    /// Running in a pool.
    Running,
    /// Interrupted; being placed again.
    Interrupted,
    /// Moved to another pool.
    Moved,
    /// Done; everything terminated.
    Completed,
    /// Given up, with nothing left running.
    Failed,
}

/// One entry of a job's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id.
    pub job_id: String,
    /// Its name.
    pub name: String,
    /// The pool.
    pub pool: Pool,
    /// Its instances.
    pub instances: Vec<InstanceId>,
    /// What happened.
    pub state: JobState,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
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
}

/// A ledger in memory.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<(HashMap<Pool, PoolEvidence>, Vec<JobRecord>)>,
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
        g.0.entry(pool.clone()).or_default().events.push(event);
        Ok(())
    }

    fn record_exposure(&self, pool: &Pool, from: OffsetDateTime, to: OffsetDateTime) -> Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0.entry(pool.clone()).or_default().ran(from, to);
        Ok(())
    }

    fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(g.0
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
            .1
            .push(record.clone());
        Ok(())
    }

    fn jobs(&self) -> Result<Vec<JobRecord>> {
        Ok(self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone())
    }
}
