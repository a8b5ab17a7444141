//! The PostgreSQL ledger against a real PostgreSQL 15 (a throwaway cluster:
//! `gpufleet_testkit::postgres`): the ledger conformance suite, migrations,
//! fencing enforced by the database itself, a server restart in the middle
//! of writes, `sslmode`, and connection strings that never show their
//! password.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::postgres as pg;

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::fake::FAKE_EPOCH;
use gpufleet_core::ledger::{Claim, JobRecord, JobState, Ledger};
use gpufleet_core::ErrorKind;
use gpufleet_runtime::postgres::{PgLedger, PgOptions, SCHEMA_VERSION};

async fn fresh() -> Option<PgLedger> {
    let url = tokio::task::spawn_blocking(pg::fresh_url).await.unwrap()?;
    Some(PgLedger::connect(&url).await.unwrap())
}

gpufleet_core::ledger_conformance!(fresh());

fn db_of(url: &str) -> String {
    url.rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string()
}

/// A schema newer than this build is refused with a message and left as it
/// is; two controllers starting at once migrate once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_once_and_a_newer_schema_is_refused() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let (a, b) = tokio::join!(PgLedger::connect(&url), PgLedger::connect(&url));
    let (a, _b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.schema_version().await.unwrap(), SCHEMA_VERSION);
    let db = db_of(&url);
    assert_eq!(
        server.psql(&db, "SELECT count(*) FROM gpufleet.schema_migrations"),
        SCHEMA_VERSION.to_string()
    );
    a.record_job(&JobRecord::new("j", "j", JobState::Placing, FAKE_EPOCH))
        .await
        .unwrap();
    server.psql(
        &db,
        "INSERT INTO gpufleet.schema_migrations(version, description) VALUES (77, 'from the future')",
    );
    let e = PgLedger::connect(&url).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "schema version 77, newer than this gpufleet understands ({SCHEMA_VERSION})"
        )),
        "{text}"
    );
    // Nothing was dropped or changed.
    assert_eq!(server.psql(&db, "SELECT count(*) FROM gpufleet.jobs"), "1");
    let e = PgLedger::connect_read_only(&url).await.unwrap_err();
    assert!(e.to_string().contains("newer than this gpufleet"), "{e}");
}

/// A database no writer has used answers read-only callers as an absent
/// SQLite file does (empty evidence, no ledger), creating nothing; the
/// first writer creates the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_database_reads_as_an_empty_ledger() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let since = FAKE_EPOCH - time::Duration::days(14);
    let evidence = gpufleet_runtime::ledgers::evidence_since(&url, since)
        .await
        .unwrap();
    assert!(evidence.is_empty());
    assert!(gpufleet_runtime::ledgers::open_read_only(&url)
        .await
        .unwrap()
        .is_none());
    let db = db_of(&url);
    assert_eq!(
        server.psql(
            &db,
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'gpufleet'"
        ),
        "0",
        "a reader created nothing"
    );
    let l = gpufleet_runtime::ledgers::open(&url).await.unwrap();
    assert!(l.jobs().await.unwrap().is_empty());
    assert!(l.spend(None).await.unwrap().is_empty());
    assert_eq!(
        server.psql(&db, "SELECT count(*) FROM gpufleet.schema_migrations"),
        SCHEMA_VERSION.to_string()
    );
}

/// The fencing rules hold for anyone who writes to the table, not only for
/// gpufleet's own code: a plain INSERT under a stale token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_itself_refuses_a_stale_fence() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let l = PgLedger::connect(&url).await.unwrap();
    let Claim::Acquired(lease) = l
        .acquire_lease("j", "ctl-a", Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("not acquired")
    };
    let insert = |fence: &str| {
        format!(
            "INSERT INTO gpufleet.jobs(rid, job_id, name, instances, state, at, attempt, progress, detail, fence)
             VALUES (md5(random()::text), 'j', 'j', '[]', 'running', now(), 1, 0, '', {fence})"
        )
    };
    let db = db_of(&url);
    server.psql(&db, &insert(&lease.token.to_string()));
    for stale in ["NULL", "99"] {
        let msg = server.try_psql(&db, &insert(stale)).unwrap_err();
        assert!(msg.contains("fenced write refused"), "fence {stale}: {msg}");
    }
    assert_eq!(server.psql(&db, "SELECT count(*) FROM gpufleet.jobs"), "1");
}

/// A server restart between (and during) writes: the pool replaces its dead
/// connections, a write that waits for the server lands once, and no
/// transition is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_loses_no_transition() {
    let Some(server) = tokio::task::spawn_blocking(pg::PgServer::start)
        .await
        .unwrap()
    else {
        return;
    };
    let server = Arc::new(server);
    let url = {
        let s = server.clone();
        tokio::task::spawn_blocking(move || s.fresh_db())
            .await
            .unwrap()
    };
    let l = PgLedger::connect_with(
        &url,
        PgOptions {
            max_connections: 2,
            reconnect_for: Duration::from_secs(30),
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    let rec = |n: i64| {
        let mut r = JobRecord::new(
            "j",
            "j",
            JobState::Running,
            FAKE_EPOCH + time::Duration::seconds(n),
        );
        r.detail = format!("transition {n}");
        r
    };
    for n in 0..5 {
        l.record_job(&rec(n)).await.unwrap();
    }
    // Down, and back up 1.5 s later while writes are waiting.
    {
        let s = server.clone();
        tokio::task::spawn_blocking(move || s.stop()).await.unwrap();
    }
    let restart = {
        let s = server.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            tokio::task::spawn_blocking(move || s.start_again())
                .await
                .unwrap();
        })
    };
    for n in 5..10 {
        l.record_job(&rec(n)).await.unwrap();
    }
    restart.await.unwrap();
    let details: Vec<String> = l
        .job_history("j")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.detail)
        .collect();
    let want: Vec<String> = (0..10).map(|n| format!("transition {n}")).collect();
    assert_eq!(details, want);
}

/// `sslmode` is honoured: `require` against a server without TLS fails
/// (it never falls back to plain text), `disable` and `prefer` connect; a
/// failed login names the user and the server, never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_is_honoured_and_passwords_never_show() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let db = db_of(&url);
    let port = server.port();
    let base = format!("postgres://postgres@127.0.0.1:{port}/{db}");
    PgLedger::connect(&format!("{base}?sslmode=prefer"))
        .await
        .unwrap();
    let e = PgLedger::connect(&format!("{base}?sslmode=require"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let e = PgLedger::connect(&format!(
        "{base}?sslmode=verify-full&sslrootcert=/nonexistent.pem"
    ))
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string().contains("sslrootcert '/nonexistent.pem'"),
        "{e}"
    );
    // A role with a password, and a login with the wrong one.
    server.psql(&db, "CREATE ROLE fleet LOGIN PASSWORD 'right-horse'");
    let hba = server.dir().join("data/pg_hba.conf");
    let text = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("host all fleet 127.0.0.1/32 scram-sha-256\n{text}"),
    )
    .unwrap();
    server.psql(&db, "SELECT pg_reload_conf()");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let wrong = format!("postgres://fleet:battery-staple@127.0.0.1:{port}/{db}?sslmode=disable");
    let e = PgLedger::connect_with(
        &wrong,
        PgOptions {
            reconnect_for: Duration::from_secs(1),
            ..PgOptions::default()
        },
    )
    .await
    .unwrap_err();
    let text = format!("{e} {e:?}");
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{text}");
    assert!(!text.contains("battery-staple"), "{text}");
    assert!(
        text.contains(&format!("postgres://fleet@127.0.0.1:{port}/{db}")),
        "{text}"
    );
    let right = format!("postgres://fleet:right-horse@127.0.0.1:{port}/{db}?sslmode=disable");
    // A role that may not read gpufleet's schema is told so.
    let e = PgLedger::connect_read_only(&right).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    server.psql(
        &db,
        "GRANT USAGE ON SCHEMA gpufleet TO fleet; GRANT SELECT ON ALL TABLES IN SCHEMA gpufleet TO fleet",
    );
    let l = PgLedger::connect_read_only(&right).await.unwrap();
    assert!(!format!("{l:?} {}", l.location()).contains("right-horse"));
    assert!(l.evidence(FAKE_EPOCH).await.unwrap().is_empty());
}

/// Shared evidence: interruptions one controller records against a pool
/// demote it in another controller's next placement (each has its own
/// connection pool to the same database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruption_seen_by_one_controller_demotes_the_pool_for_all() {
    use gpufleet_core::placer::{JobFile, PoolEvent, PoolEventKind};
    use gpufleet_core::{clock::Clock, Capacity, Cloud, Provider};
    let Some(url) = tokio::task::spawn_blocking(pg::fresh_url).await.unwrap() else {
        return;
    };
    let file = JobFile::new(8.0, "A10G", 1)
        .named("shared-evidence")
        .within("aws", &["us-east-1"]);
    let job = file.into_spec().unwrap();
    let clock = gpufleet_core::clock::ManualClock::new(FAKE_EPOCH);
    let controller = |ledger: PgLedger| {
        let fake = Arc::new(
            gpufleet_core::fake::FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()),
        );
        gpufleet_runtime::Executor::new(
            vec![fake as Arc<dyn Provider>],
            Arc::new(ledger),
            Arc::new(clock.clone()) as Arc<dyn Clock>,
        )
    };
    let a = controller(PgLedger::connect(&url).await.unwrap());
    let b = controller(PgLedger::connect(&url).await.unwrap());
    let before = b.rank(&job, 50).await.unwrap();
    let top = before
        .plans
        .iter()
        .find(|p| p.offer.pool.capacity == Capacity::Spot)
        .unwrap()
        .clone();
    let pool = top.offer.pool.clone();
    // Controller A saw this pool reclaim its instances three times in 6 h.
    for h in [1, 3, 5] {
        a.ledger()
            .record_event(
                &pool,
                PoolEvent {
                    at: FAKE_EPOCH - time::Duration::hours(h),
                    kind: PoolEventKind::Interruption,
                },
            )
            .await
            .unwrap();
    }
    a.ledger()
        .record_exposure(&pool, FAKE_EPOCH - time::Duration::hours(6)..FAKE_EPOCH)
        .await
        .unwrap();
    let after = b.rank(&job, 50).await.unwrap();
    let again = after.plans.iter().find(|p| p.offer.pool == pool).unwrap();
    assert!(
        again.hazard.rate_per_hour > top.hazard.rate_per_hour
            && again.expected_cost > top.expected_cost,
        "B's plan for {pool} did not change: {:?} -> {:?}",
        top.hazard,
        again.hazard
    );
    let first_spot = after
        .plans
        .iter()
        .find(|p| p.offer.pool.capacity == Capacity::Spot)
        .unwrap();
    assert_ne!(
        first_spot.offer.pool, pool,
        "the reclaimed pool still ranks first"
    );
}
