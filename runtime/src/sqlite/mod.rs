//! The SQLite [`Ledger`]: memory across runs for the CLI and for services that
//! embed gpufleet. SQLite is compiled in (no system library needed).
//!
//! Several processes on one machine may share it (WAL journal, 5 s busy
//! timeout); leases and fencing work across them as the trait says (the
//! fencing check is a trigger on the jobs table, the clock SQLite's). A file
//! that is not a gpufleet ledger, is corrupt, or has a newer schema is refused
//! with a clear error; it is never silently recreated. Each call runs on
//! tokio's blocking pool, never on the runtime's own threads.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpufleet_core::ledger::{
    check_lease_request, fence_refused, lease_lost, Claim, JobRecord, JobState, Lease, Ledger,
};
use gpufleet_core::placer::{PoolEvent, PoolEventKind, PoolEvidence};
use gpufleet_core::usage::JobUsage;
use gpufleet_core::{Error, ErrorKind, InstanceId, Pool, Price, Result};
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

mod leases;
mod ledger;
mod open;
mod records;
mod services;
mod spend;
use self::{leases::*, open::*};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 6;

/// The trigger's message when it refuses a write.
const FENCE_REFUSED: &str = "gpufleet: fenced write refused";

/// A ledger in a SQLite file. Cheap to clone (one connection, shared).
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    db: Arc<Db>,
    /// One call at a time reaches the blocking pool (the connection serves
    /// one anyway): waiting callers wait here, as tasks, not as threads.
    gate: Arc<tokio::sync::Semaphore>,
}

/// The file and its connection.
#[derive(Debug)]
struct Db {
    path: PathBuf,
    conn: Mutex<Connection>,
}

pub use crate::ledgers::default_path;

fn db_err(path: &Path, what: &str, e: rusqlite::Error) -> Error {
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) =>
        {
            ErrorKind::Unavailable
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
            ErrorKind::InvalidInput
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ReadOnly => {
            return Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "ledger {}: {what}: it is read-only (opened read-only, or the file's permissions)",
                    path.display()
                ),
            )
            .with_source(e)
        }
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, format!("ledger {}: {what}", path.display())).with_source(e)
}

/// SQLite's `application_id` of a gpufleet ledger ("GFLT").
pub const APPLICATION_ID: i32 = 0x4746_4c54;

fn nanos(t: OffsetDateTime) -> i64 {
    t.unix_timestamp_nanos()
        .clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn from_nanos(n: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(n)).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

impl SqliteLedger {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.db.path
    }

    /// Runs `f` on tokio's blocking pool (SQLite blocks on the disk and on
    /// other writers' locks, up to the 5 s busy timeout); inline where there
    /// is no tokio runtime.
    /// [`call`](Self::call) with the job's id.
    async fn for_job<T: Send + 'static>(
        &self,
        job_id: &str,
        f: impl FnOnce(&Db, &str) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let job_id = job_id.to_string();
        self.call(move |db| f(db, &job_id)).await
    }

    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Db) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.db.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                let _turn = self.gate.acquire().await.map_err(|e| {
                    Error::new(ErrorKind::Unexpected, "the ledger is closed").with_source(e)
                })?;
                h.spawn_blocking(move || f(&db)).await.map_err(|e| {
                    Error::new(ErrorKind::Unexpected, "a ledger call panicked").with_source(e)
                })?
            }
            Err(_) => f(&db),
        }
    }
}

impl Db {
    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rows of `(pool, time, third column)` from a query filtered by `since`.
    fn rows<T>(
        &self,
        sql: &str,
        since: OffsetDateTime,
        third: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<(String, i64, T)>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read evidence", e);
        let mut stmt = conn.prepare(sql).map_err(read)?;
        let rows = stmt
            .query_map(params![nanos(since)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, third(r)?))
            })
            .map_err(read)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(read)
    }

    fn pool_json(&self, pool: &Pool) -> Result<String> {
        serde_json::to_string(pool)
            .map_err(|e| Error::new(ErrorKind::Unexpected, "cannot encode a pool").with_source(e))
    }

    fn parse_pool(&self, s: &str) -> Result<Pool> {
        serde_json::from_str(s).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("ledger {} holds an unreadable pool", self.path.display()),
            )
            .with_source(e)
        })
    }
}

/// The ledger's calls, run on the blocking pool (see [`SqliteLedger::call`]).
impl Db {}

/// The lease ops: one `BEGIN IMMEDIATE` transaction each, on SQLite's clock.
impl Db {}

impl Db {}
