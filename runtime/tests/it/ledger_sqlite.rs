//! The SQLite ledger: persistence across opens, concurrent writers, and clear
//! errors for corrupt or newer files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpufleet_core::fake::FAKE_EPOCH;
use gpufleet_core::ledger::{JobRecord, JobState, Ledger};
use gpufleet_core::placer::{PoolEvent, PoolEventKind};
use gpufleet_core::*;
use gpufleet_runtime::sqlite::SqliteLedger;

fn pool() -> Pool {
    Snapshot::embedded().offers()[0].pool.clone()
}

/// A ledger path `$TMP/gpufleet-ledger-NAME-XXXXXX/db/ledger.sqlite3` (its
/// directory not yet made), removed with everything in it on drop.
struct Scratch {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

fn tmp(name: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("gpufleet-ledger-{name}-"))
        .tempdir()
        .unwrap();
    let path = dir.path().join("db").join("ledger.sqlite3");
    Scratch { _dir: dir, path }
}

/// Records an interruption of `pool()` at `FAKE_EPOCH`.
async fn interrupt(l: &SqliteLedger) {
    let at = FAKE_EPOCH;
    let event = PoolEvent {
        at,
        kind: PoolEventKind::Interruption,
    };
    l.record_event(&pool(), event).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembers_across_opens() {
    let path = tmp("persist");
    {
        let l = SqliteLedger::open(&path).unwrap();
        interrupt(&l).await;
        l.record_exposure(&pool(), FAKE_EPOCH - time::Duration::hours(3)..FAKE_EPOCH)
            .await
            .unwrap();
        let mut rec = JobRecord::new("j1", "train", JobState::Running, FAKE_EPOCH);
        rec.pool = Some(pool());
        rec.instances = vec![InstanceId::new("i-1")];
        rec.attempt = 2;
        rec.progress_hours = 1.5;
        rec.detail = "moved here".into();
        l.record_job(&rec).await.unwrap();
        l.save_job_spec("j1", "{\"hours\":2}").await.unwrap();
        // The same file again is fine; another under the same id is refused.
        l.save_job_spec("j1", "{\"hours\":2}").await.unwrap();
        assert!(l.save_job_spec("j1", "{\"hours\":3}").await.is_err());
    }
    let l = SqliteLedger::open(&path).unwrap();
    let ev = l
        .evidence(FAKE_EPOCH - time::Duration::days(1))
        .await
        .unwrap();
    assert_eq!(
        ev[&pool()].events,
        vec![PoolEvent {
            at: FAKE_EPOCH,
            kind: PoolEventKind::Interruption
        }]
    );
    assert_eq!(ev[&pool()].exposure.len(), 1);
    assert!(l
        .evidence(FAKE_EPOCH + time::Duration::hours(1))
        .await
        .unwrap()
        .is_empty());
    let back = &l.jobs().await.unwrap()[0];
    assert_eq!(back.instances, vec![InstanceId::new("i-1")]);
    assert_eq!(
        (back.attempt, back.progress_hours, back.detail.as_str()),
        (2, 1.5, "moved here")
    );
    assert_eq!(back.pool, Some(pool()));
    assert_eq!(
        l.job_spec("j1").await.unwrap().as_deref(),
        Some("{\"hours\":2}")
    );
    assert_eq!(
        l.job_latest("j1").await.unwrap().unwrap().state,
        JobState::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_nothing() {
    let path = tmp("concurrent");
    SqliteLedger::open(&path).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.to_path_buf();
            tokio::spawn(async move {
                // Each task is its own connection, as two CLI processes would be.
                let l = SqliteLedger::open(&path).unwrap();
                for i in 0..100 {
                    let at = FAKE_EPOCH + time::Duration::seconds(t * 1000 + i);
                    l.record_event(
                        &pool(),
                        PoolEvent {
                            at,
                            kind: PoolEventKind::CapacityFailure,
                        },
                    )
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.await.unwrap();
    }
    let l = Arc::new(SqliteLedger::open(&path).unwrap());
    assert_eq!(
        l.evidence(FAKE_EPOCH).await.unwrap()[&pool()].events.len(),
        400
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_and_newer_ledgers_are_refused_not_replaced() {
    let path = tmp("corrupt");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        b"this is not a database, it is a grocery list\n".repeat(200),
    )
    .unwrap();
    let e = SqliteLedger::open(&path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains("not a gpufleet ledger or is corrupt"),
        "{e}"
    );
    assert!(
        std::fs::read(&path)
            .unwrap()
            .starts_with(b"this is not a database"),
        "the file was not touched"
    );

    let path = tmp("newer");
    SqliteLedger::open(&path).unwrap();
    // A future gpufleet wrote this file.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
        [],
    )
    .unwrap();
    drop(c);
    let e = SqliteLedger::open(&path).unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "schema version 99, newer than this gpufleet understands ({})",
            gpufleet_runtime::sqlite::SCHEMA_VERSION
        )),
        "{e}"
    );
}

/// Someone else's SQLite database is refused untouched: no table, no WAL,
/// not a byte changed (it used to gain 4 tables and WAL mode, exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_not_a_ledger_is_refused_untouched() {
    let path = tmp("foreign");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers(name) VALUES ('ada');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    for e in [
        SqliteLedger::open(&path).unwrap_err(),
        SqliteLedger::open_read_only(&path).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        let msg = e.to_string();
        assert!(msg.contains("is not a gpufleet ledger"), "{msg}");
        assert!(
            msg.contains("customers") && msg.contains("left untouched"),
            "{msg}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    let wal = path.with_extension("sqlite3-wal");
    assert!(!wal.exists(), "a WAL file appeared");

    // A database with another application's id, even with our table names.
    let other = tmp("other-app");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    {
        let c = rusqlite::Connection::open(&other).unwrap();
        c.execute_batch("PRAGMA application_id = 1234; CREATE TABLE meta (key TEXT, value TEXT);")
            .unwrap();
    }
    let e = SqliteLedger::open(&other).unwrap_err();
    assert!(e.to_string().contains("application_id is 0x4d2"), "{e}");
}

/// A ledger written before the application id existed (its own tables, id
/// 0) is still ours: it is opened and marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmarked_ledger_of_ours_is_opened_and_marked() {
    let path = tmp("unmarked");
    drop(SqliteLedger::open(&path).unwrap());
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA application_id = 0;").unwrap();
    }
    drop(SqliteLedger::open(&path).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    let id: i32 = c
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(id, gpufleet_runtime::sqlite::APPLICATION_ID);
}

/// Opened read-only (as `place` does), a ledger reads its evidence and says
/// plainly that it is read-only when written to; a missing one is NotFound
/// and is not created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_ledger_reads_and_says_it_is_read_only() {
    let path = tmp("read-only");
    {
        let l = SqliteLedger::open(&path).unwrap();
        interrupt(&l).await;
    }
    let l = SqliteLedger::open_read_only(&path).unwrap();
    let ev = l
        .evidence(FAKE_EPOCH - time::Duration::days(1))
        .await
        .unwrap();
    assert_eq!(ev[&pool()].events.len(), 1);
    let e = l
        .record_event(
            &pool(),
            PoolEvent {
                at: FAKE_EPOCH,
                kind: PoolEventKind::CapacityFailure,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("read-only"), "{e}");
    assert!(!e.to_string().contains("corrupt"), "{e}");
    let missing = tmp("missing");
    let e = SqliteLedger::open_read_only(&missing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(!missing.exists());
}

/// The ledger's calls run on the blocking pool: with one worker, a task on the same runtime keeps
/// ticking while a writer waits 600 ms on another process's lock (called
/// on the worker itself, it would stall until the write ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn ledger_calls_do_not_hold_up_the_runtime() {
    let path = tmp("blocking");
    let l = Arc::new(SqliteLedger::open(&path).unwrap());
    // Another connection holds the write lock for 600 ms.
    let holder = std::thread::spawn({
        let path = path.to_path_buf();
        move || {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch("BEGIN IMMEDIATE;").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(600));
            c.execute_batch("COMMIT;").unwrap();
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            for _ in 0..20 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    let writer = tokio::spawn({
        let l = l.clone();
        let ticks = ticks.clone();
        async move {
            let mut rec = JobRecord::new("j-block", "b", JobState::Placing, FAKE_EPOCH);
            rec.pool = Some(pool());
            l.record_job(&rec)
                .await
                .map(|()| ticks.load(std::sync::atomic::Ordering::SeqCst))
        }
    });
    let during = writer.await.unwrap().unwrap();
    ticker.await.unwrap();
    holder.join().unwrap();
    assert!(during >= 10, "only {during} ticks while the ledger waited");
}

thread_local! {
    /// The conformance ledgers' scratch directories: the suite takes a ledger
    /// alone, so each test's directory is kept by its thread (the one the
    /// test harness runs it on) and removed when that thread ends, after the
    /// test has dropped its ledger.
    static CONFORMANCE_DIRS: std::cell::RefCell<Vec<Scratch>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where the conformance suite's ledgers go.
fn fresh_sqlite() -> SqliteLedger {
    let scratch = tmp("conformance");
    let ledger = SqliteLedger::open(&scratch).unwrap();
    CONFORMANCE_DIRS.with(|d| d.borrow_mut().push(scratch));
    ledger
}

gpufleet_core::ledger_conformance!(async { Some(fresh_sqlite()) });

/// A ledger written by schema 2 (before leases) is migrated to 3 in place:
/// its records stay, and the fencing trigger guards it from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_2_ledger_is_migrated_and_keeps_its_records() {
    let path = tmp("schema2");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE pool_events (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, at INTEGER NOT NULL, kind TEXT NOT NULL);
             CREATE TABLE exposure (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, from_at INTEGER NOT NULL, to_at INTEGER NOT NULL);
             CREATE TABLE jobs (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL,
                                instances TEXT NOT NULL, state TEXT NOT NULL, at INTEGER NOT NULL,
                                attempt INTEGER NOT NULL DEFAULT 0, progress REAL NOT NULL DEFAULT 0, price INTEGER,
                                detail TEXT NOT NULL DEFAULT '');
             CREATE TABLE job_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '2');
             INSERT INTO job_specs VALUES ('old', '{}');
             INSERT INTO jobs(job_id, name, pool, instances, state, at) VALUES ('old', 'o', '', '[]', 'running', 0);",
        )
        .unwrap();
    }
    let l = SqliteLedger::open(&path).unwrap();
    assert_eq!(l.jobs().await.unwrap().len(), 1);
    assert_eq!(l.active_jobs().await.unwrap(), vec!["old".to_string()]);
    let lease = match l
        .acquire_lease("old", "ctl", std::time::Duration::from_secs(30))
        .await
        .unwrap()
    {
        gpufleet_core::ledger::Claim::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    let rec = JobRecord::new("old", "o", JobState::Failed, FAKE_EPOCH);
    assert_eq!(
        l.record_job(&rec).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let mut fenced = rec.clone();
    fenced.fence = Some(lease.token);
    l.record_job(&fenced).await.unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let v: String = c
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, gpufleet_runtime::sqlite::SCHEMA_VERSION.to_string());
}
