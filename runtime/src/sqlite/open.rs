//! Opening a ledger file: checked to be gpufleet's (application id and
//! tables), migrated in place, or opened read-only without writing.

use super::*;

/// Schema 2 over schema 1: each job record's attempt, progress, price and
/// detail, and the definitions of managed jobs. Columns are only added;
/// nothing is ever dropped.
pub(super) const MIGRATE_1_TO_2: &str = "
    ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN progress REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN price INTEGER;
    ALTER TABLE jobs ADD COLUMN detail TEXT NOT NULL DEFAULT '';
    CREATE INDEX IF NOT EXISTS jobs_job_id ON jobs(job_id, id);
    CREATE TABLE IF NOT EXISTS job_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
    UPDATE meta SET value = '2' WHERE key = 'schema_version';";

/// SQLite's clock in Unix milliseconds (the one leases expire by).
pub(super) const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// Schema 3 over schema 2: leases, and each record's fencing token, checked
/// by a trigger as the trait's rules say. Nothing is dropped.
pub(super) fn migrate_2_to_3() -> String {
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
pub(super) const MIGRATE_3_TO_4: &str = "
    CREATE TABLE IF NOT EXISTS job_usage (job_id TEXT PRIMARY KEY, usage TEXT NOT NULL);
    UPDATE meta SET value = '4' WHERE key = 'schema_version';";

/// Schema 5 over schema 4: the ledger of spend, one row per instance
/// gpufleet started (its start, its end once known, the whole record), and
/// the trigger that makes a cancel final.
pub(super) const MIGRATE_4_TO_5: &str = "
    CREATE TABLE IF NOT EXISTS instance_spend (cloud TEXT NOT NULL, id TEXT NOT NULL, started_at INTEGER NOT NULL,
                                               ended_at INTEGER, doc TEXT NOT NULL, PRIMARY KEY (cloud, id));
    CREATE INDEX IF NOT EXISTS instance_spend_ended ON instance_spend(ended_at);
    CREATE TRIGGER IF NOT EXISTS jobs_final BEFORE INSERT ON jobs
    BEGIN
      SELECT RAISE(ABORT, 'gpufleet: a cancel is final')
      WHERE NEW.state <> 'cancelled'
        AND EXISTS (SELECT 1 FROM job_specs s WHERE s.job_id = NEW.job_id)
        AND (SELECT state FROM jobs WHERE job_id = NEW.job_id ORDER BY id DESC LIMIT 1) = 'cancelled';
    END;
    UPDATE meta SET value = '5' WHERE key = 'schema_version';";

/// Schema 6 over schema 5: services, one row each, and their log.
pub(super) const MIGRATE_5_TO_6: &str = "
    CREATE TABLE IF NOT EXISTS services (name TEXT PRIMARY KEY, doc TEXT NOT NULL, fence INTEGER,
                                         updated_at INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS service_log (seq INTEGER PRIMARY KEY, service TEXT NOT NULL, at INTEGER NOT NULL,
                                            kind TEXT NOT NULL, doc TEXT NOT NULL, fence INTEGER);
    CREATE INDEX IF NOT EXISTS service_log_service ON service_log(service, seq);
    UPDATE meta SET value = '6' WHERE key = 'schema_version';";

/// The tables a gpufleet ledger holds.
pub(super) const OUR_TABLES: [&str; 10] = [
    "meta",
    "pool_events",
    "exposure",
    "jobs",
    "job_specs",
    "job_leases",
    "job_usage",
    "instance_spend",
    "services",
    "service_log",
];

/// Whether the database is a gpufleet ledger, or empty: by its
/// `application_id`, or (ledgers written before it was set) by its tables.
/// Reads only.
pub(super) fn check_ours(conn: &Connection, path: &Path) -> Result<()> {
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
pub(super) fn schema_version(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )
    .optional()
}

/// Refuses a ledger whose schema version is not in `usable`: newer than this
/// build understands, or unknown.
pub(super) fn check_version(
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
pub(super) fn read_only(path: &Path) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!(
            "ledger {} is read-only (file or directory permissions); make it writable or point GPUFLEET_LEDGER at a writable file",
            path.display()
        ),
    )
}

/// Creates the ledger's directory (mode 0700) and file (0600) when they do
/// not exist: it holds job files, whose `env` may hold secrets. An existing
/// one readable by others is warned about, not changed (it may be shared on
/// purpose). SQLite gives its `-wal` and `-shm` files the database's mode.
fn private_file(path: &Path) -> Result<()> {
    let cannot = |what: &Path, e: std::io::Error| {
        Error::new(
            ErrorKind::Unexpected,
            format!("cannot create {}", what.display()),
        )
        .with_source(e)
    };
    #[cfg(unix)]
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            let mut b = std::fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            b.mode(0o700);
            b.create(dir).map_err(|e| cannot(dir, e))?;
        }
    }
    if !path.exists() {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        o.mode(0o600);
        match o.open(path) {
            Ok(_) => {}
            // Another process made it first: it is checked below as any.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(cannot(path, e)),
        }
    }
    // A directory others may write lets them replace the ledger (remove
    // it and put their own in its place; with the sticky bit, as /tmp has,
    // they can still claim its name before it exists).
    #[cfg(unix)]
    if let Some(meta) = path
        .parent()
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .and_then(|d| std::fs::metadata(d).ok())
    {
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o022 != 0 {
            tracing::warn!(
                "ledger {} is in a directory others may write (mode {mode:o}): another user could replace it or take its name; keep it in a directory only you can write (`chmod 700`)",
                path.display()
            );
        }
    }
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                "ledger {} is readable by others (mode {mode:o}): it holds job files, whose env may hold secrets; `chmod 600` it unless it is shared on purpose",
                path.display()
            );
        }
    }
    Ok(())
}

impl SqliteLedger {
    /// Opens (or creates) the ledger at [`default_path`].
    pub fn open_default() -> Result<Self> {
        Self::open(default_path()?)
    }

    /// Opens (or creates) the ledger at `path`, creating its directory.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        private_file(&path)?;
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
            ("4", MIGRATE_4_TO_5.to_string()),
            ("5", MIGRATE_5_TO_6.to_string()),
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

    pub(super) fn wrap(path: PathBuf, conn: Connection) -> Self {
        SqliteLedger {
            db: Arc::new(Db {
                path,
                conn: Mutex::new(conn),
            }),
            gate: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }
}
