//! The SQLite ledger: persistence across opens, concurrent writers, and clear
//! errors for corrupt or newer files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use gpufleet::fake::FAKE_EPOCH;
use gpufleet::ledger::{JobRecord, JobState, Ledger};
use gpufleet::placer::{PoolEvent, PoolEventKind};
use gpufleet::sqlite::SqliteLedger;
use gpufleet::*;

fn pool() -> Pool {
    Snapshot::embedded().offers()[0].pool.clone()
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpufleet-ledger-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("ledger.sqlite3")
}

#[test]
fn remembers_across_opens() {
    let path = tmp("persist");
    {
        let l = SqliteLedger::open(&path).unwrap();
        l.record_event(
            &pool(),
            PoolEvent {
                at: FAKE_EPOCH,
                kind: PoolEventKind::Interruption,
            },
        )
        .unwrap();
        l.record_exposure(&pool(), FAKE_EPOCH - time::Duration::hours(3), FAKE_EPOCH)
            .unwrap();
        let mut rec = JobRecord::new("j1", "train", JobState::Running, FAKE_EPOCH);
        rec.pool = Some(pool());
        rec.instances = vec![InstanceId::new("i-1")];
        rec.attempt = 2;
        rec.progress_hours = 1.5;
        rec.detail = "moved here".into();
        l.record_job(&rec).unwrap();
        l.save_job_spec("j1", "{\"hours\":2}").unwrap();
        // The same file again is fine; another under the same id is refused.
        l.save_job_spec("j1", "{\"hours\":2}").unwrap();
        assert!(l.save_job_spec("j1", "{\"hours\":3}").is_err());
    }
    let l = SqliteLedger::open(&path).unwrap();
    let ev = l.evidence(FAKE_EPOCH - time::Duration::days(1)).unwrap();
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
        .unwrap()
        .is_empty());
    let back = &l.jobs().unwrap()[0];
    assert_eq!(back.instances, vec![InstanceId::new("i-1")]);
    assert_eq!(
        (back.attempt, back.progress_hours, back.detail.as_str()),
        (2, 1.5, "moved here")
    );
    assert_eq!(back.pool, Some(pool()));
    assert_eq!(l.job_spec("j1").unwrap().as_deref(), Some("{\"hours\":2}"));
    assert_eq!(
        l.job_latest("j1").unwrap().unwrap().state,
        JobState::Running
    );
}

#[test]
fn concurrent_writers_lose_nothing() {
    let path = tmp("concurrent");
    SqliteLedger::open(&path).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                // Each thread is its own connection, as two CLI processes would be.
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
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let l = Arc::new(SqliteLedger::open(&path).unwrap());
    assert_eq!(l.evidence(FAKE_EPOCH).unwrap()[&pool()].events.len(), 400);
}

#[test]
fn corrupt_and_newer_ledgers_are_refused_not_replaced() {
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
        "UPDATE meta SET value = '3' WHERE key = 'schema_version'",
        [],
    )
    .unwrap();
    drop(c);
    let e = SqliteLedger::open(&path).unwrap_err();
    assert!(
        e.to_string()
            .contains("schema version 3, newer than this gpufleet understands (2)"),
        "{e}"
    );
}
