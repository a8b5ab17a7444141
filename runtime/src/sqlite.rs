//! The SQLite [`Ledger`]: memory across runs for the CLI and for services that
//! embed gpufleet. SQLite is compiled in (no system library needed).
//!
//! Two processes may write at once (WAL journal, 5 s busy timeout). A file that
//! is not a gpufleet ledger, is corrupt, or has a newer schema is refused with a
//! clear error; it is never silently recreated.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use gpufleet_core::ledger::{JobRecord, JobState, Ledger};
use gpufleet_core::placer::{PoolEvent, PoolEventKind, PoolEvidence};
use gpufleet_core::{Error, ErrorKind, InstanceId, Pool, Price, Result};
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 2;

/// Schema 2 over schema 1: each job record's attempt, progress, price and
/// detail, and the definitions of managed jobs. Columns are only added;
/// nothing is ever dropped.
const MIGRATE_1_TO_2: &str = "
    ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN progress REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN price INTEGER;
    ALTER TABLE jobs ADD COLUMN detail TEXT NOT NULL DEFAULT '';
    CREATE INDEX IF NOT EXISTS jobs_job_id ON jobs(job_id, id);
    CREATE TABLE IF NOT EXISTS job_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
    UPDATE meta SET value = '2' WHERE key = 'schema_version';";

/// A ledger in a SQLite file.
#[derive(Debug)]
pub struct SqliteLedger {
    path: PathBuf,
    conn: Mutex<Connection>,
}

/// Where the ledger lives: `GPUFLEET_LEDGER`, else `gpufleet/ledger.sqlite3`
/// in the platform data directory (`~/.local/share` on Linux).
pub fn default_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("GPUFLEET_LEDGER").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    dirs::data_dir()
        .map(|d| d.join("gpufleet").join("ledger.sqlite3"))
        .ok_or_else(|| {
            Error::invalid_input(
                "no data directory on this platform: set GPUFLEET_LEDGER to a file path",
            )
        })
}

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

/// The tables a gpufleet ledger holds.
const OUR_TABLES: [&str; 5] = ["meta", "pool_events", "exposure", "jobs", "job_specs"];

/// Whether the database is a gpufleet ledger, or empty: by its
/// `application_id`, or (ledgers written before it was set) by its tables.
/// Reads only.
fn check_ours(conn: &Connection, path: &Path) -> Result<()> {
    let refuse = |why: String| {
        Error::invalid_input(format!(
            "{} is not a gpufleet ledger ({why}); it was left untouched: point GPUFLEET_LEDGER (or `ledger` in the config) at another file",
            path.display()
        ))
    };
    let id: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| {
            let mut err = db_err(
                path,
                "is not a gpufleet ledger or is corrupt; it was left untouched",
                e,
            );
            if err.kind() == ErrorKind::Unexpected {
                err = Error::new(ErrorKind::InvalidInput, err.to_string());
            }
            err
        })?;
    if id == APPLICATION_ID {
        return Ok(());
    }
    if id != 0 {
        return Err(refuse(format!("its application_id is {id:#x}")));
    }
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .map_err(|e| db_err(path, "cannot list its tables", e))?;
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| db_err(path, "cannot list its tables", e))?;
    let foreign: Vec<&String> = tables
        .iter()
        .filter(|t| !OUR_TABLES.contains(&t.as_str()))
        .collect();
    if !foreign.is_empty() || (!tables.is_empty() && !tables.iter().any(|t| t == "meta")) {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(refuse(format!("it holds tables {}", shown.join(", "))));
    }
    Ok(())
}

/// The ledger's recorded schema version (`meta.schema_version`).
fn schema_version(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )
    .optional()
}

/// Refuses a ledger whose schema version is not in `usable`: newer than this
/// build understands, or unknown.
fn check_version(
    path: &Path,
    version: Option<&str>,
    usable: std::ops::RangeInclusive<i64>,
) -> Result<()> {
    match version.map(str::parse::<i64>) {
        Some(Ok(v)) if usable.contains(&v) => Ok(()),
        Some(Ok(v)) if v > SCHEMA_VERSION => Err(Error::invalid_input(format!(
            "ledger {} has schema version {v}, newer than this gpufleet understands ({SCHEMA_VERSION}); upgrade gpufleet or point GPUFLEET_LEDGER elsewhere",
            path.display()
        ))),
        other => Err(Error::invalid_input(format!(
            "ledger {} has an unknown schema version ({other:?}); move it aside or point GPUFLEET_LEDGER elsewhere",
            path.display()
        ))),
    }
}

/// The error for a ledger the process may not write.
fn read_only(path: &Path) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!(
            "ledger {} is read-only (file or directory permissions); make it writable or point GPUFLEET_LEDGER at a writable file",
            path.display()
        ),
    )
}

fn nanos(t: OffsetDateTime) -> i64 {
    t.unix_timestamp_nanos()
        .clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn from_nanos(n: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(n)).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn kind_str(k: PoolEventKind) -> &'static str {
    match k {
        PoolEventKind::Interruption => "interruption",
        PoolEventKind::CapacityFailure => "capacity-failure",
    }
}

impl SqliteLedger {
    /// Opens (or creates) the ledger at [`default_path`].
    pub fn open_default() -> Result<Self> {
        Self::open(default_path()?)
    }

    /// Opens (or creates) the ledger at `path`, creating its directory.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("cannot create {}", dir.display()),
                )
                .with_source(e)
            })?;
        }
        let conn = Connection::open(&path).map_err(|e| db_err(&path, "cannot open", e))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| db_err(&path, "cannot set a busy timeout", e))?;
        // Nothing is written to a file until it is known to be a gpufleet
        // ledger (or empty): someone else's database is refused untouched.
        check_ours(&conn, &path)?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(read_only(&path));
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(|e| db_err(&path, "cannot mark the ledger", e))?;
        let not_ledger = |e: rusqlite::Error| {
            let mut err = db_err(
                &path,
                "is not a gpufleet ledger or is corrupt; move it aside or set GPUFLEET_LEDGER",
                e,
            );
            if err.kind() == ErrorKind::Unexpected {
                err = Error::new(ErrorKind::InvalidInput, err.to_string());
            }
            err
        };
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(not_ledger)?;
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS pool_events (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, at INTEGER NOT NULL, kind TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS exposure (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, from_at INTEGER NOT NULL, to_at INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL,
                                              instances TEXT NOT NULL, state TEXT NOT NULL, at INTEGER NOT NULL);
             CREATE INDEX IF NOT EXISTS pool_events_at ON pool_events(at);
             CREATE INDEX IF NOT EXISTS exposure_to ON exposure(to_at);
             INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
             COMMIT;",
        )
        .map_err(not_ledger)?;
        // Migrate forward, one version at a time, each in one transaction.
        let current: Option<String> = schema_version(&conn).map_err(not_ledger)?;
        if current.as_deref() == Some("1") {
            conn.execute_batch(&format!("BEGIN IMMEDIATE; {MIGRATE_1_TO_2} COMMIT;"))
                .or_else(|e| {
                    let _ = conn.execute_batch("ROLLBACK;");
                    // Another process migrated first: fine if it is now 2.
                    let v: Option<String> = schema_version(&conn).unwrap_or(None);
                    if v.as_deref() == Some("2") {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| db_err(&path, "cannot migrate the ledger to schema 2", e))?;
        }
        let version: Option<String> = schema_version(&conn).map_err(not_ledger)?;
        check_version(&path, version.as_deref(), SCHEMA_VERSION..=SCHEMA_VERSION)?;
        Ok(SqliteLedger {
            path,
            conn: Mutex::new(conn),
        })
    }

    /// Opens the ledger at `path` to read only, as `place` does: nothing is
    /// created, migrated or written (a write is refused by SQLite). A missing
    /// file is NotFound; a file that is not a gpufleet ledger is refused.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no ledger at {}", path.display()),
            ));
        }
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| db_err(&path, "cannot open", e))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| db_err(&path, "cannot set a busy timeout", e))?;
        check_ours(&conn, &path)?;
        let version: Option<String> = schema_version(&conn)
            .map_err(|e| db_err(&path, "cannot read the schema version", e))?;
        // Reading needs no migration: every schema so far holds the evidence.
        check_version(&path, version.as_deref(), 1..=SCHEMA_VERSION)?;
        Ok(SqliteLedger {
            path,
            conn: Mutex::new(conn),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

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

/// The ledger's calls, run where they may block (see [`blocking`]).
impl SqliteLedger {
    fn record_event_now(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        let pool = self.pool_json(pool)?;
        self.conn()
            .execute(
                "INSERT INTO pool_events(pool, at, kind) VALUES (?1, ?2, ?3)",
                params![pool, nanos(event.at), kind_str(event.kind)],
            )
            .map_err(|e| db_err(&self.path, "cannot record an event", e))?;
        Ok(())
    }

    fn record_exposure_now(
        &self,
        pool: &Pool,
        from: OffsetDateTime,
        to: OffsetDateTime,
    ) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        let pool = self.pool_json(pool)?;
        self.conn()
            .execute(
                "INSERT INTO exposure(pool, from_at, to_at) VALUES (?1, ?2, ?3)",
                params![pool, nanos(from), nanos(to)],
            )
            .map_err(|e| db_err(&self.path, "cannot record exposure", e))?;
        Ok(())
    }

    fn evidence_now(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        let mut out: HashMap<Pool, PoolEvidence> = HashMap::new();
        let events = self.rows(
            "SELECT pool, at, kind FROM pool_events WHERE at >= ?1 ORDER BY at",
            since,
            |r| r.get::<_, String>(2),
        )?;
        for (pool, at, kind) in events {
            let kind = match kind.as_str() {
                "interruption" => PoolEventKind::Interruption,
                "capacity-failure" => PoolEventKind::CapacityFailure,
                other => {
                    return Err(Error::invalid_input(format!(
                        "ledger {} holds an unknown event kind '{other}'",
                        self.path.display()
                    )))
                }
            };
            out.entry(self.parse_pool(&pool)?)
                .or_default()
                .record(from_nanos(at), kind);
        }
        let exposure = self.rows(
            "SELECT pool, from_at, to_at FROM exposure WHERE to_at >= ?1 ORDER BY from_at",
            since,
            |r| r.get::<_, i64>(2),
        )?;
        for (pool, from, to) in exposure {
            out.entry(self.parse_pool(&pool)?)
                .or_default()
                .ran(from_nanos(from), from_nanos(to));
        }
        Ok(out)
    }

    fn record_job_now(&self, record: &JobRecord) -> Result<()> {
        let pool = match &record.pool {
            Some(p) => self.pool_json(p)?,
            None => String::new(),
        };
        let instances = serde_json::to_string(&record.instances).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "cannot encode instances").with_source(e)
        })?;
        self.conn()
            .execute(
                "INSERT INTO jobs(job_id, name, pool, instances, state, at, attempt, progress, price, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    record.job_id,
                    record.name,
                    pool,
                    instances,
                    record.state.as_str(),
                    nanos(record.at),
                    record.attempt,
                    record.progress_hours,
                    record.price.map(Price::micros_per_hour),
                    record.detail
                ],
            )
            .map_err(|e| db_err(&self.path, "cannot record a job", e))?;
        Ok(())
    }

    fn jobs_now(&self) -> Result<Vec<JobRecord>> {
        self.job_rows("", None)
    }

    fn job_history_now(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        self.job_rows("WHERE job_id = ?1", Some(job_id))
    }

    fn job_latest_now(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self
            .job_rows(
                "WHERE id = (SELECT MAX(id) FROM jobs WHERE job_id = ?1)",
                Some(job_id),
            )?
            .pop())
    }

    fn save_job_spec_now(&self, job_id: &str, spec: &str) -> Result<()> {
        let conn = self.conn();
        let inserted = conn
            .execute(
                "INSERT OR IGNORE INTO job_specs(job_id, spec) VALUES (?1, ?2)",
                params![job_id, spec],
            )
            .map_err(|e| db_err(&self.path, "cannot record a job definition", e))?;
        if inserted == 1 {
            return Ok(());
        }
        let existing: String = conn
            .query_row(
                "SELECT spec FROM job_specs WHERE job_id = ?1",
                params![job_id],
                |r| r.get(0),
            )
            .map_err(|e| db_err(&self.path, "cannot read a job definition", e))?;
        if existing == spec {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("job {job_id} already exists with another definition"),
            ))
        }
    }

    fn job_spec_now(&self, job_id: &str) -> Result<Option<String>> {
        self.conn()
            .query_row(
                "SELECT spec FROM job_specs WHERE job_id = ?1",
                params![job_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, "cannot read a job definition", e))
    }
}

impl Ledger for SqliteLedger {
    fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        blocking(|| self.record_event_now(pool, event))
    }

    fn record_exposure(&self, pool: &Pool, from: OffsetDateTime, to: OffsetDateTime) -> Result<()> {
        blocking(|| self.record_exposure_now(pool, from, to))
    }

    fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        blocking(|| self.evidence_now(since))
    }

    fn record_job(&self, record: &JobRecord) -> Result<()> {
        blocking(|| self.record_job_now(record))
    }

    fn jobs(&self) -> Result<Vec<JobRecord>> {
        blocking(|| self.jobs_now())
    }

    fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        blocking(|| self.job_history_now(job_id))
    }

    fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        blocking(|| self.job_latest_now(job_id))
    }

    fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        blocking(|| self.save_job_spec_now(job_id, spec))
    }

    fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        blocking(|| self.job_spec_now(job_id))
    }
}

/// Runs a SQLite call, which blocks on the disk and on other writers' locks
/// (up to the 5 s busy timeout): on a worker of a multi-threaded tokio
/// runtime through `block_in_place`, so the runtime moves its other tasks
/// off this thread first; elsewhere (no runtime, or a current-thread one,
/// where that is not possible) directly.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl SqliteLedger {
    fn job_rows(&self, filter: &str, job_id: Option<&str>) -> Result<Vec<JobRecord>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read jobs", e);
        let mut stmt = conn
            .prepare(&format!(
                "SELECT job_id, name, pool, instances, state, at, attempt, progress, price, detail
                 FROM jobs {filter} ORDER BY id"
            ))
            .map_err(read)?;
        let map = |r: &rusqlite::Row<'_>| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ),
                (
                    r.get::<_, i64>(5)?,
                    r.get::<_, u32>(6)?,
                    r.get::<_, f64>(7)?,
                    r.get::<_, Option<i64>>(8)?,
                    r.get::<_, String>(9)?,
                ),
            ))
        };
        let rows = match job_id {
            Some(id) => stmt.query_map(params![id], map),
            None => stmt.query_map([], map),
        }
        .map_err(read)?;
        let mut out = Vec::new();
        for row in rows {
            let ((job_id, name, pool, instances, state), (at, attempt, progress, price, detail)) =
                row.map_err(read)?;
            let instances: Vec<InstanceId> = serde_json::from_str(&instances).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("ledger {} holds unreadable instances", self.path.display()),
                )
                .with_source(e)
            })?;
            let state = JobState::parse(&state).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown job state '{state}'",
                    self.path.display()
                ))
            })?;
            out.push(JobRecord {
                job_id,
                name,
                pool: if pool.is_empty() {
                    None
                } else {
                    Some(self.parse_pool(&pool)?)
                },
                instances,
                state,
                at: from_nanos(at),
                attempt,
                progress_hours: progress,
                price: price.map(Price::from_micros_per_hour),
                detail,
            });
        }
        Ok(out)
    }
}
