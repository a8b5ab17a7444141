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

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 4;

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

/// SQLite's clock in Unix milliseconds (the one leases expire by).
const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// Schema 3 over schema 2: leases, and each record's fencing token, checked
/// by a trigger as the trait's rules say. Nothing is dropped.
fn migrate_2_to_3() -> String {
    format!(
        "ALTER TABLE jobs ADD COLUMN fence INTEGER;
         CREATE TABLE IF NOT EXISTS job_leases (job_id TEXT PRIMARY KEY, holder TEXT NOT NULL, token INTEGER NOT NULL,
                                                acquired_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
         CREATE TRIGGER IF NOT EXISTS jobs_fence BEFORE INSERT ON jobs
         BEGIN
           SELECT RAISE(ABORT, '{FENCE_REFUSED}')
           WHERE CASE WHEN NEW.fence IS NULL
             THEN NEW.state <> 'cancelled' AND EXISTS (
               SELECT 1 FROM job_leases l WHERE l.job_id = NEW.job_id AND l.expires_at > {NOW_MS})
             ELSE NOT EXISTS (
               SELECT 1 FROM job_leases l WHERE l.job_id = NEW.job_id AND l.token = NEW.fence AND l.expires_at > {NOW_MS})
             END;
         END;
         UPDATE meta SET value = '3' WHERE key = 'schema_version';"
    )
}

/// Schema 4 over schema 3: each job's measured GPU use (one JSON document
/// per job, replaced as it grows).
const MIGRATE_3_TO_4: &str = "
    CREATE TABLE IF NOT EXISTS job_usage (job_id TEXT PRIMARY KEY, usage TEXT NOT NULL);
    UPDATE meta SET value = '4' WHERE key = 'schema_version';";

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
const OUR_TABLES: [&str; 7] = [
    "meta",
    "pool_events",
    "exposure",
    "jobs",
    "job_specs",
    "job_leases",
    "job_usage",
];

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
        for (from, sql) in [
            ("1", MIGRATE_1_TO_2.to_string()),
            ("2", migrate_2_to_3()),
            ("3", MIGRATE_3_TO_4.to_string()),
        ] {
            let current: Option<String> = schema_version(&conn).map_err(not_ledger)?;
            if current.as_deref() != Some(from) {
                continue;
            }
            conn.execute_batch(&format!("BEGIN IMMEDIATE; {sql} COMMIT;"))
                .or_else(|e| {
                    let _ = conn.execute_batch("ROLLBACK;");
                    // Another process migrated first: fine if it moved on.
                    let v: Option<String> = schema_version(&conn).unwrap_or(None);
                    if v.as_deref() != Some(from) && v.is_some() {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| {
                    db_err(
                        &path,
                        &format!("cannot migrate the ledger from schema {from}"),
                        e,
                    )
                })?;
        }
        let version: Option<String> = schema_version(&conn).map_err(not_ledger)?;
        check_version(&path, version.as_deref(), SCHEMA_VERSION..=SCHEMA_VERSION)?;
        Ok(SqliteLedger::wrap(path, conn))
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
        Ok(SqliteLedger::wrap(path, conn))
    }

    fn wrap(path: PathBuf, conn: Connection) -> Self {
        SqliteLedger {
            db: Arc::new(Db {
                path,
                conn: Mutex::new(conn),
            }),
            gate: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.db.path
    }

    /// Runs `f` on tokio's blocking pool (SQLite blocks on the disk and on
    /// other writers' locks, up to the 5 s busy timeout); inline where there
    /// is no tokio runtime.
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
impl Db {
    fn record_event_now(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        let pool = self.pool_json(pool)?;
        self.conn()
            .execute(
                "INSERT INTO pool_events(pool, at, kind) VALUES (?1, ?2, ?3)",
                params![pool, nanos(event.at), event.kind.as_str()],
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
            let kind = PoolEventKind::parse(&kind).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown event kind '{kind}'",
                    self.path.display()
                ))
            })?;
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
                "INSERT INTO jobs(job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
                    record.detail,
                    record.fence.map(|t| t as i64)
                ],
            )
            .map_err(|e| match &e {
                rusqlite::Error::SqliteFailure(_, Some(msg)) if msg.contains(FENCE_REFUSED) => {
                    fence_refused(record)
                }
                _ => db_err(&self.path, "cannot record a job", e),
            })?;
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

    fn record_usage_now(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        let doc = serde_json::to_string(usage).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "cannot encode a job's GPU use").with_source(e)
        })?;
        self.conn()
            .execute(
                "INSERT INTO job_usage(job_id, usage) VALUES (?1, ?2)
                 ON CONFLICT(job_id) DO UPDATE SET usage = excluded.usage",
                params![job_id, doc],
            )
            .map_err(|e| db_err(&self.path, "cannot record a job's GPU use", e))?;
        Ok(())
    }

    fn job_usage_now(&self, job_id: &str) -> Result<Option<JobUsage>> {
        let doc: Option<String> = self
            .conn()
            .query_row(
                "SELECT usage FROM job_usage WHERE job_id = ?1",
                params![job_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, "cannot read a job's GPU use", e))?;
        doc.map(|d| {
            serde_json::from_str(&d).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "ledger {}: job {job_id}'s GPU use is unreadable",
                        self.path.display()
                    ),
                )
                .with_source(e)
            })
        })
        .transpose()
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

/// The lease ops: one `BEGIN IMMEDIATE` transaction each, on SQLite's clock.
impl Db {
    fn lease_err(&self, e: rusqlite::Error) -> Error {
        db_err(&self.path, "cannot update a lease", e)
    }

    fn now_ms(&self, conn: &Connection) -> Result<i64> {
        conn.query_row(&format!("SELECT {NOW_MS}"), [], |r| r.get(0))
            .map_err(|e| db_err(&self.path, "cannot read the clock", e))
    }

    fn lease_row(&self, conn: &Connection, job_id: &str) -> Result<Option<Lease>> {
        conn.query_row(
            "SELECT job_id, holder, token, acquired_at, expires_at FROM job_leases WHERE job_id = ?1",
            params![job_id],
            lease_of,
        )
        .optional()
        .map_err(|e| db_err(&self.path, "cannot read a lease", e))
    }

    /// Runs `f` in an immediate transaction (rolled back on error).
    fn in_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.conn();
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.lease_err(e))?;
        match f(&conn) {
            Ok(v) => {
                conn.execute_batch("COMMIT").map_err(|e| {
                    let _ = conn.execute_batch("ROLLBACK");
                    self.lease_err(e)
                })?;
                Ok(v)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn acquire_now(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        let ttl_ms = ttl.as_millis() as i64;
        self.in_tx(|conn| {
            let now = self.now_ms(conn)?;
            let lease = match self.lease_row(conn, job_id)? {
                Some(l) if l.expires_at > from_millis(now) && l.holder != holder => {
                    return Ok(Claim::Held(l))
                }
                Some(l) if l.expires_at > from_millis(now) => {
                    conn.execute(
                        "UPDATE job_leases SET expires_at = ?2 WHERE job_id = ?1",
                        params![job_id, now + ttl_ms],
                    )
                    .map_err(|e| self.lease_err(e))?;
                    Lease {
                        expires_at: from_millis(now + ttl_ms),
                        ..l
                    }
                }
                previous => {
                    let token = previous.map_or(1, |l| l.token + 1);
                    conn.execute(
                        "INSERT INTO job_leases(job_id, holder, token, acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT(job_id) DO UPDATE SET holder = excluded.holder, token = excluded.token,
                             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                        params![job_id, holder, token as i64, now, now + ttl_ms],
                    )
                    .map_err(|e| self.lease_err(e))?;
                    Lease {
                        job_id: job_id.to_string(),
                        holder: holder.to_string(),
                        token,
                        acquired_at: from_millis(now),
                        expires_at: from_millis(now + ttl_ms),
                    }
                }
            };
            Ok(Claim::Acquired(lease))
        })
    }

    fn renew_now(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let ttl_ms = ttl.as_millis() as i64;
        self.in_tx(|conn| {
            let now = self.now_ms(conn)?;
            let n = conn
                .execute(
                    "UPDATE job_leases SET expires_at = ?4
                     WHERE job_id = ?1 AND holder = ?2 AND token = ?3 AND expires_at > ?5",
                    params![
                        lease.job_id,
                        lease.holder,
                        lease.token as i64,
                        now + ttl_ms,
                        now
                    ],
                )
                .map_err(|e| self.lease_err(e))?;
            if n == 0 {
                return Err(lease_lost(lease));
            }
            Ok(Lease {
                expires_at: from_millis(now + ttl_ms),
                ..lease.clone()
            })
        })
    }

    fn release_now(&self, lease: &Lease) -> Result<()> {
        self.conn()
            .execute(
                &format!(
                    "UPDATE job_leases SET expires_at = {NOW_MS}
                     WHERE job_id = ?1 AND holder = ?2 AND token = ?3 AND expires_at > {NOW_MS}"
                ),
                params![lease.job_id, lease.holder, lease.token as i64],
            )
            .map_err(|e| self.lease_err(e))?;
        Ok(())
    }

    fn leases_now(&self) -> Result<Vec<Lease>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read leases", e);
        let mut stmt = conn
            .prepare("SELECT job_id, holder, token, acquired_at, expires_at FROM job_leases ORDER BY job_id")
            .map_err(read)?;
        let rows = stmt.query_map([], lease_of).map_err(read)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(read)
    }

    fn active_now(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read jobs", e);
        let mut stmt = conn
            .prepare(
                "SELECT j.job_id FROM jobs j
                 JOIN (SELECT job_id, MIN(id) AS first, MAX(id) AS last FROM jobs GROUP BY job_id) m
                   ON j.id = m.last
                 WHERE j.state NOT IN ('succeeded', 'completed', 'failed', 'cancelled')
                   AND EXISTS (SELECT 1 FROM job_specs s WHERE s.job_id = j.job_id)
                 ORDER BY m.first",
            )
            .map_err(read)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(read)?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .map_err(read)
    }
}

fn from_millis(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn lease_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        job_id: r.get(0)?,
        holder: r.get(1)?,
        token: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
        acquired_at: from_millis(r.get(3)?),
        expires_at: from_millis(r.get(4)?),
    })
}

#[async_trait]
impl Ledger for SqliteLedger {
    async fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        let pool = pool.clone();
        self.call(move |db| db.record_event_now(&pool, event)).await
    }

    async fn record_exposure(
        &self,
        pool: &Pool,
        from: OffsetDateTime,
        to: OffsetDateTime,
    ) -> Result<()> {
        let pool = pool.clone();
        self.call(move |db| db.record_exposure_now(&pool, from, to))
            .await
    }

    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        self.call(move |db| db.evidence_now(since)).await
    }

    async fn record_job(&self, record: &JobRecord) -> Result<()> {
        let record = record.clone();
        self.call(move |db| db.record_job_now(&record)).await
    }

    async fn jobs(&self) -> Result<Vec<JobRecord>> {
        self.call(|db| db.jobs_now()).await
    }

    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        let job_id = job_id.to_string();
        self.call(move |db| db.job_history_now(&job_id)).await
    }

    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        let job_id = job_id.to_string();
        self.call(move |db| db.job_latest_now(&job_id)).await
    }

    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        let (job_id, spec) = (job_id.to_string(), spec.to_string());
        self.call(move |db| db.save_job_spec_now(&job_id, &spec))
            .await
    }

    async fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        let job_id = job_id.to_string();
        self.call(move |db| db.job_spec_now(&job_id)).await
    }

    async fn record_usage(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        let (job_id, usage) = (job_id.to_string(), usage.clone());
        self.call(move |db| db.record_usage_now(&job_id, &usage))
            .await
    }

    async fn job_usage(&self, job_id: &str) -> Result<Option<JobUsage>> {
        let job_id = job_id.to_string();
        self.call(move |db| db.job_usage_now(&job_id)).await
    }

    async fn active_jobs(&self) -> Result<Vec<String>> {
        self.call(|db| db.active_now()).await
    }

    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        check_lease_request(holder, ttl)?;
        let (job_id, holder) = (job_id.to_string(), holder.to_string());
        self.call(move |db| db.acquire_now(&job_id, &holder, ttl))
            .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_lease_request(&lease.holder, ttl)?;
        let lease = lease.clone();
        self.call(move |db| db.renew_now(&lease, ttl)).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.call(move |db| db.release_now(&lease)).await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        self.call(|db| db.leases_now()).await
    }

    async fn now(&self) -> Result<OffsetDateTime> {
        self.call(|db| {
            let conn = db.conn();
            db.now_ms(&conn).map(from_millis)
        })
        .await
    }

    fn location(&self) -> String {
        self.db.path.display().to_string()
    }
}

impl Db {
    fn job_rows(&self, filter: &str, job_id: Option<&str>) -> Result<Vec<JobRecord>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read jobs", e);
        let mut stmt = conn
            .prepare(&format!(
                "SELECT job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence
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
                    r.get::<_, Option<i64>>(10)?,
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
            let (
                (job_id, name, pool, instances, state),
                (at, attempt, progress, price, detail, fence),
            ) = row.map_err(read)?;
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
                fence: fence.and_then(|t| u64::try_from(t).ok()),
            });
        }
        Ok(out)
    }
}
