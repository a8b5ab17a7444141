//! The schema and its migrations, applied once under an advisory lock;
//! a newer schema than this build knows is refused.

use super::*;

/// The advisory lock migrations take ("gpufleet" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x6770_7566_6c65_6574;

/// Each migration: its version, what it does, and its SQL. Only ever
/// appended to; a migration only adds.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "pool evidence, job records with fencing, job definitions, leases",
        r#"
    CREATE TABLE gpufleet.pool_events (
        id BIGSERIAL PRIMARY KEY,
        rid TEXT NOT NULL UNIQUE,
        pool JSONB NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('interruption', 'capacity-failure')));
    CREATE INDEX pool_events_at ON gpufleet.pool_events (at);
    CREATE TABLE gpufleet.exposure (
        id BIGSERIAL PRIMARY KEY,
        rid TEXT NOT NULL UNIQUE,
        pool JSONB NOT NULL,
        from_at TIMESTAMPTZ NOT NULL,
        to_at TIMESTAMPTZ NOT NULL);
    CREATE INDEX exposure_to ON gpufleet.exposure (to_at);
    CREATE TABLE gpufleet.jobs (
        id BIGSERIAL PRIMARY KEY,
        rid TEXT NOT NULL UNIQUE,
        job_id TEXT NOT NULL,
        name TEXT NOT NULL,
        pool JSONB,
        instances JSONB NOT NULL,
        state TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        attempt BIGINT NOT NULL,
        progress DOUBLE PRECISION NOT NULL,
        price BIGINT,
        detail TEXT NOT NULL,
        fence BIGINT,
        written_at TIMESTAMPTZ NOT NULL DEFAULT now());
    CREATE INDEX jobs_job_id ON gpufleet.jobs (job_id, id);
    CREATE TABLE gpufleet.job_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
    CREATE TABLE gpufleet.job_leases (
        job_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token BIGINT NOT NULL,
        acquired_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL);
    CREATE FUNCTION gpufleet.check_fence() RETURNS trigger LANGUAGE plpgsql AS $fn$
    DECLARE
        l gpufleet.job_leases%ROWTYPE;
    BEGIN
        SELECT * INTO l FROM gpufleet.job_leases WHERE job_id = NEW.job_id FOR SHARE;
        IF NEW.fence IS NULL THEN
            IF NEW.state = 'cancelled' OR NOT FOUND OR l.expires_at <= now() THEN
                RETURN NEW;
            END IF;
        ELSIF FOUND AND l.token = NEW.fence AND l.expires_at > now() THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'gpufleet: fenced write refused for job %', NEW.job_id
            USING ERRCODE = 'GF409';
    END
    $fn$;
    CREATE TRIGGER jobs_fence BEFORE INSERT ON gpufleet.jobs
        FOR EACH ROW EXECUTE FUNCTION gpufleet.check_fence();
    "#,
    ),
    (
        2,
        "each job's measured GPU use",
        r#"
    CREATE TABLE gpufleet.job_usage (
        job_id TEXT PRIMARY KEY,
        usage JSONB NOT NULL,
        written_at TIMESTAMPTZ NOT NULL DEFAULT now());
    "#,
    ),
    (
        3,
        "the ledger of spend: one row per instance gpufleet started; a cancel is final",
        r#"
    CREATE TABLE gpufleet.instance_spend (
        cloud TEXT NOT NULL,
        id TEXT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        ended_at TIMESTAMPTZ,
        doc JSONB NOT NULL,
        PRIMARY KEY (cloud, id));
    CREATE INDEX instance_spend_ended ON gpufleet.instance_spend (ended_at);
    CREATE FUNCTION gpufleet.check_final() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        IF NEW.state <> 'cancelled'
            AND EXISTS (SELECT 1 FROM gpufleet.job_specs s WHERE s.job_id = NEW.job_id)
            AND (
                SELECT state FROM gpufleet.jobs WHERE job_id = NEW.job_id ORDER BY id DESC LIMIT 1
            ) = 'cancelled' THEN
            RAISE EXCEPTION 'gpufleet: a cancel is final for job %', NEW.job_id
                USING ERRCODE = 'GF410';
        END IF;
        RETURN NEW;
    END
    $fn$;
    CREATE TRIGGER jobs_final BEFORE INSERT ON gpufleet.jobs
        FOR EACH ROW EXECUTE FUNCTION gpufleet.check_final();
    "#,
    ),
    (
        4,
        "services: one row each, and their log",
        r#"
    CREATE TABLE gpufleet.services (
        name TEXT PRIMARY KEY,
        doc TEXT NOT NULL,
        fence BIGINT,
        updated_at TIMESTAMPTZ NOT NULL,
        written_at TIMESTAMPTZ NOT NULL DEFAULT now());
    CREATE TABLE gpufleet.service_log (
        seq BIGSERIAL PRIMARY KEY,
        rid TEXT NOT NULL UNIQUE,
        service TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        kind TEXT NOT NULL,
        doc TEXT NOT NULL,
        fence BIGINT,
        written_at TIMESTAMPTZ NOT NULL DEFAULT now());
    CREATE INDEX service_log_service ON gpufleet.service_log (service, seq);
    "#,
    ),
];

impl PgLedger {
    pub(super) fn too_new(&self, v: i32) -> Error {
        Error::invalid_input(format!(
            "ledger {} has schema version {v}, newer than this gpufleet understands ({SCHEMA_VERSION}); upgrade gpufleet, or point GPUFLEET_LEDGER elsewhere",
            self.shown
        ))
    }

    /// The schema version the database holds (0: none yet).
    pub async fn schema_version(&self) -> Result<i32> {
        let what = "read the schema version";
        let table = "SELECT to_regclass('gpufleet.schema_migrations') IS NOT NULL";
        let found = self.query(what, table, &[]).await?;
        if !found.first().is_some_and(|r| r.get::<_, bool>(0)) {
            return Ok(0);
        }
        let newest = "SELECT COALESCE(MAX(version), 0) FROM gpufleet.schema_migrations";
        let rows = self.query(what, newest, &[]).await?;
        Ok(rows.first().map_or(0, |r| r.get::<_, i32>(0)))
    }

    /// Migrates forward to [`SCHEMA_VERSION`] in one transaction under an
    /// advisory lock (two controllers starting at once migrate once);
    /// refuses a newer schema.
    pub(super) async fn migrate(&self) -> Result<()> {
        let mut client = self
            .pool
            .get()
            .await
            .map_err(|e| pool_err(&self.shown, e))?;
        let fail = |e| pg_err(&self.shown, "cannot migrate the schema", e);
        let tx = client.transaction().await.map_err(fail)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(fail)?;
        tx.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS gpufleet;
             CREATE TABLE IF NOT EXISTS gpufleet.schema_migrations (
                 version INTEGER PRIMARY KEY,
                 description TEXT NOT NULL,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now());",
        )
        .await
        .map_err(fail)?;
        let v: i32 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM gpufleet.schema_migrations",
                &[],
            )
            .await
            .map_err(fail)?
            .get(0);
        if v > SCHEMA_VERSION {
            return Err(self.too_new(v));
        }
        for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > v) {
            tx.batch_execute(sql).await.map_err(fail)?;
            tx.execute(
                "INSERT INTO gpufleet.schema_migrations(version, description) VALUES ($1, $2)",
                &[version, description],
            )
            .await
            .map_err(fail)?;
            tracing::info!(ledger = %self.shown, version, description, "ledger schema migrated");
        }
        tx.commit().await.map_err(fail)
    }
}
