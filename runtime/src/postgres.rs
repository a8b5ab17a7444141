//! The PostgreSQL [`Ledger`]: one ledger shared by several controllers (one
//! per region, or a replicated service), on the database platform teams
//! already run.
//!
//! - **Driver**: `tokio-postgres` (async all the way: no call blocks the
//!   runtime's threads) with a `deadpool-postgres` pool, which replaces a
//!   connection the server closed (a restart, a failover) on the next call.
//! - **Tables** live in their own schema, `gpufleet`, created and migrated
//!   forward by versioned migrations under an advisory lock (two controllers
//!   starting together migrate once). A schema newer than this build is
//!   refused with a message; a migration only ever adds.
//! - **Fencing** is a trigger on `gpufleet.jobs` (the rules of the
//!   [ledger module](gpufleet_core::ledger)), so a controller that lost its
//!   lease is refused by the database itself.
//! - **No lost, no doubled transition**: every insert carries a random
//!   request id with a unique constraint, so a write whose answer was lost
//!   (the server restarted mid-commit) is retried until the server is back
//!   (up to [`PgOptions::reconnect_for`]) and lands exactly once.
//! - **The connection string** is the libpq URL
//!   (`postgres://user:password@host:port/db?sslmode=verify-full`). Its
//!   password is never logged or shown: messages name
//!   `postgres://user@host:port/db`. `sslmode` is honoured as libpq does:
//!   `disable`; `prefer` (the default) and `require` encrypt without checking
//!   the certificate unless `sslrootcert` is given; `verify-ca` checks the
//!   chain; `verify-full` the chain and the host name. Roots come from
//!   `sslrootcert` (a PEM file), else the system's store.
//! - **Limits**: a pool of [`PgOptions::max_connections`] connections, a
//!   statement timeout (unless the URL's `options` sets one) and a connect
//!   timeout, and `application_name=gpufleet` so an operator sees who is
//!   connected.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use gpufleet_core::ledger::{
    check_lease_request, fence_refused, lease_lost, Claim, JobRecord, JobState, Lease, Ledger,
};
use gpufleet_core::placer::{PoolEvent, PoolEventKind, PoolEvidence};
use gpufleet_core::usage::JobUsage;
use gpufleet_core::{fnv1a64, Error, ErrorKind, InstanceId, Pool as GpuPool, Price, Result};
use time::OffsetDateTime;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

/// The newest schema version this build knows (and migrates to).
pub const SCHEMA_VERSION: i32 = 2;

/// The SQLSTATE the fencing trigger raises.
const FENCE_SQLSTATE: &str = "GF409";

/// The advisory lock migrations take ("gpufleet" in ASCII).
const MIGRATION_LOCK: i64 = 0x6770_7566_6c65_6574;

/// Each migration: its version, what it does, and its SQL. Only ever
/// appended to; a migration only adds.
const MIGRATIONS: &[(i32, &str, &str)] = &[
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
];

/// How the ledger uses the server.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool (default 8).
    pub max_connections: usize,
    /// `statement_timeout` for each connection unless the URL's `options`
    /// sets one (default 15 s).
    pub statement_timeout: Duration,
    /// Connecting (and waiting for a pooled connection) gives up after this
    /// (default 10 s).
    pub connect_timeout: Duration,
    /// A call that fails because the server is unreachable or restarting is
    /// retried this long before it fails (default 60 s).
    pub reconnect_for: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 8,
            statement_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(10),
            reconnect_for: Duration::from_secs(60),
        }
    }
}

/// A ledger in a PostgreSQL database. Cheap to clone (a pool, shared).
#[derive(Clone)]
pub struct PgLedger {
    pool: Pool,
    shown: Arc<str>,
    options: PgOptions,
}

impl std::fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLedger")
            .field("at", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Whether `s` is a PostgreSQL connection URL (`postgres://` or
/// `postgresql://`).
pub fn is_postgres_url(s: &str) -> bool {
    let l = s.trim_start().to_ascii_lowercase();
    l.starts_with("postgres://") || l.starts_with("postgresql://")
}

/// The URL with its password replaced by `***` (for `config show`).
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return format!("{scheme}://{authority}{}", mask_query_password(tail));
    };
    let user = match userinfo.split_once(':') {
        Some((u, _)) => format!("{u}:***"),
        None => userinfo.to_string(),
    };
    let tail = mask_query_password(tail);
    format!("{scheme}://{user}@{hosts}{tail}")
}

fn mask_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

/// What gpufleet takes out of the URL before the driver parses it.
struct Parsed {
    config: tokio_postgres::Config,
    verify: Verify,
    root_cert: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    /// Encrypt (when the server offers it) without checking the certificate.
    None,
    /// Check the chain, not the host name.
    Ca,
    /// Check the chain and the host name.
    Full,
}

fn bad_url(why: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!(
        "invalid PostgreSQL ledger URL: {why}; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE]"
    ))
}

fn parse_url(url: &str) -> Result<Parsed> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut mode = "prefer".to_string();
    let mut root_cert = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "sslmode" => mode = v.to_ascii_lowercase(),
            "sslrootcert" => root_cert = Some(std::path::PathBuf::from(v)),
            _ => kept.push(kv),
        }
    }
    let (ssl, verify) = match mode.as_str() {
        "disable" => (SslMode::Disable, Verify::None),
        "prefer" | "allow" => (SslMode::Prefer, Verify::None),
        "require" if root_cert.is_some() => (SslMode::Require, Verify::Ca),
        "require" => (SslMode::Require, Verify::None),
        "verify-ca" => (SslMode::Require, Verify::Ca),
        "verify-full" => (SslMode::Require, Verify::Full),
        other => {
            return Err(bad_url(format!(
                "unknown sslmode '{other}' (valid: disable, allow, prefer, require, verify-ca, verify-full)"
            )))
        }
    };
    let rebuilt = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    // The driver's own message may quote the URL: it is not passed on.
    let mut config: tokio_postgres::Config =
        rebuilt.parse().map_err(|e: tokio_postgres::Error| {
            let text = e.to_string();
            let why = if text.contains("unknown option") || text.contains("invalid value") {
                text.split(':').next().unwrap_or("unreadable").to_string()
            } else {
                "unreadable".to_string()
            };
            bad_url(why)
        })?;
    config.ssl_mode(ssl);
    if config.get_hosts().is_empty() {
        return Err(bad_url("no host"));
    }
    Ok(Parsed {
        config,
        verify,
        root_cert,
    })
}

/// `postgres://user@host:port/db`: where the ledger is, without secrets.
fn shown(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    format!(
        "postgres://{user}{}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

mod tls {
    //! The certificate checks `sslmode` asks for, on rustls.
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    pub(super) struct Checks {
        pub(super) chain: Option<Arc<WebPkiServerVerifier>>,
        pub(super) name: bool,
        pub(super) provider: Arc<CryptoProvider>,
    }

    impl ServerCertVerifier for Checks {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let Some(chain) = &self.chain else {
                return Ok(ServerCertVerified::assertion());
            };
            match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) if !self.name => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}

/// The TLS set-up for `parsed` (roots read on the blocking pool).
async fn tls_config(parsed: &Parsed) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = if parsed.verify == Verify::None {
        None
    } else {
        let root_cert = parsed.root_cert.clone();
        let roots = tokio::task::spawn_blocking(move || -> Result<rustls::RootCertStore> {
            let mut roots = rustls::RootCertStore::empty();
            match &root_cert {
                Some(path) => {
                    let certs = CertificateDer::pem_file_iter(path)
                        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                        .map_err(|e| {
                            Error::invalid_input(format!(
                                "sslrootcert '{}' is not a readable PEM file: {e}",
                                path.display()
                            ))
                        })?;
                    for c in certs {
                        roots.add(c).map_err(|e| {
                            Error::invalid_input(format!(
                                "sslrootcert '{}' holds a bad certificate: {e}",
                                path.display()
                            ))
                        })?;
                    }
                }
                None => {
                    for c in rustls_native_certs::load_native_certs().certs {
                        let _ = roots.add(c);
                    }
                }
            }
            Ok(roots)
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("reading roots: {e}")))??;
        if roots.is_empty() {
            return Err(Error::invalid_input(
                "sslmode asks to verify the server's certificate, but there are no root certificates: set sslrootcert=FILE",
            ));
        }
        Some(
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| Error::invalid_input(format!("TLS roots: {e}")))?,
        )
    };
    let checks = tls::Checks {
        chain,
        name: parsed.verify == Verify::Full,
        provider: provider.clone(),
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(checks))
        .with_no_client_auth())
}

/// A unique id for one insert, so a retried insert lands once.
fn request_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
    let pid = std::process::id();
    let seed = format!("{pid}:{nanos}:{n}:{:p}", &SEQ);
    format!(
        "{:016x}{:016x}{n:x}",
        fnv1a64(seed.as_bytes()),
        fnv1a64(format!("{seed}:2").as_bytes()) ^ (nanos as u64)
    )
}

/// Whether a database error is worth retrying (the connection, not the
/// statement, failed).
fn transient(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => true,
        Some(c) => {
            let code = c.code();
            code.starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN.code(),
                    SqlState::CRASH_SHUTDOWN.code(),
                    SqlState::CANNOT_CONNECT_NOW.code(),
                    SqlState::T_R_SERIALIZATION_FAILURE.code(),
                    SqlState::T_R_DEADLOCK_DETECTED.code(),
                ]
                .contains(&code)
        }
    }
}

/// What went wrong, as an error of the right kind naming the ledger (never
/// its password).
fn pg_err(at: &str, what: &str, e: tokio_postgres::Error) -> Error {
    let code = e.code().map(|c| c.code().to_string());
    let detail = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string());
    let kind = match code.as_deref() {
        Some("28P01") | Some("28000") => ErrorKind::Unauthenticated,
        Some("42501") | Some("25006") => ErrorKind::PermissionDenied,
        Some("3D000") => ErrorKind::InvalidInput,
        Some("57014") => ErrorKind::Timeout,
        Some(FENCE_SQLSTATE) => ErrorKind::Conflict,
        Some("42P01") => ErrorKind::NotFound,
        _ if transient(&e) => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, format!("ledger {at}: {what}: {detail}"))
}

fn pool_err(at: &str, e: deadpool_postgres::PoolError) -> Error {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(at, "cannot connect", e),
        deadpool_postgres::PoolError::Timeout(_) => Error::new(
            ErrorKind::Unavailable,
            format!("ledger {at}: no connection within the connect timeout"),
        ),
        other => Error::new(
            ErrorKind::Unavailable,
            format!("ledger {at}: cannot connect: {other}"),
        ),
    }
}

/// A failure inside one attempt: retry it, or give it back.
enum Attempt {
    Retry(Error),
    Fail(Error),
}

impl PgLedger {
    /// Connects with the default [`PgOptions`] and migrates the schema
    /// forward (refusing a newer one).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connects with `options` and migrates the schema forward.
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<Self> {
        let ledger = Self::pool(url, options).await?;
        ledger.migrate().await?;
        Ok(ledger)
    }

    /// Connects to read only: nothing is created or migrated (`place` reads
    /// evidence this way). A database without gpufleet's tables reads as
    /// empty.
    pub async fn connect_read_only(url: &str) -> Result<Self> {
        let ledger = Self::pool(url, PgOptions::default()).await?;
        let v = ledger.schema_version().await?;
        if v > SCHEMA_VERSION {
            return Err(ledger.too_new(v));
        }
        Ok(ledger)
    }

    async fn pool(url: &str, options: PgOptions) -> Result<Self> {
        if options.max_connections == 0 {
            return Err(Error::invalid_input(
                "invalid ledger pool size 0: use at least 1 connection",
            ));
        }
        let mut parsed = parse_url(url)?;
        let shown: Arc<str> = shown(&parsed.config).into();
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&parsed).await?);
        let config = &mut parsed.config;
        if config.get_application_name().is_none() {
            config.application_name("gpufleet");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        let existing = config.get_options().unwrap_or("").to_string();
        if !existing.contains("statement_timeout") {
            let ms = options.statement_timeout.as_millis().max(1);
            config.options(format!("{existing} -c statement_timeout={ms}").trim());
        }
        let manager = Manager::from_config(
            parsed.config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_connections)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("ledger pool: {e}")))?;
        Ok(PgLedger {
            pool,
            shown,
            options,
        })
    }

    /// Runs `f` on a pooled connection; a failure of the connection (not of
    /// the statement) is retried with backoff for up to
    /// [`PgOptions::reconnect_for`] on a fresh one.
    async fn run<'a, T, F>(&'a self, what: &'static str, f: F) -> Result<T>
    where
        F: Fn(
                deadpool_postgres::Client,
            ) -> futures::future::BoxFuture<'a, std::result::Result<T, Attempt>>
            + Send
            + Sync
            + 'a,
        T: Send,
    {
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            let err = match self.pool.get().await {
                Ok(client) => match f(client).await {
                    Ok(v) => return Ok(v),
                    Err(Attempt::Fail(e)) => return Err(e),
                    Err(Attempt::Retry(e)) => e,
                },
                Err(e) => {
                    let e = pool_err(&self.shown, e);
                    if !matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) {
                        return Err(e);
                    }
                    e
                }
            };
            if started.elapsed() + pause > self.options.reconnect_for {
                return Err(err.with_context("retried for", format!("{:?}", started.elapsed())));
            }
            tracing::warn!(ledger = %self.shown, what, error = %err, "ledger call failed; retrying");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    fn classify(&self, what: &str, e: tokio_postgres::Error) -> Attempt {
        let retry = transient(&e);
        let err = pg_err(&self.shown, what, e);
        if retry {
            Attempt::Retry(err)
        } else {
            Attempt::Fail(err)
        }
    }

    fn too_new(&self, v: i32) -> Error {
        Error::invalid_input(format!(
            "ledger {} has schema version {v}, newer than this gpufleet understands ({SCHEMA_VERSION}); upgrade gpufleet, or point GPUFLEET_LEDGER elsewhere",
            self.shown
        ))
    }

    /// The schema version the database holds (0: none yet).
    pub async fn schema_version(&self) -> Result<i32> {
        self.run("schema version", |c| {
            Box::pin(async move {
                let exists = c
                    .query_one(
                        "SELECT to_regclass('gpufleet.schema_migrations') IS NOT NULL",
                        &[],
                    )
                    .await
                    .map_err(|e| self.classify("cannot read the schema version", e))?;
                if !exists.get::<_, bool>(0) {
                    return Ok(0);
                }
                let row = c
                    .query_one(
                        "SELECT COALESCE(MAX(version), 0) FROM gpufleet.schema_migrations",
                        &[],
                    )
                    .await
                    .map_err(|e| self.classify("cannot read the schema version", e))?;
                Ok(row.get::<_, i32>(0))
            })
        })
        .await
    }

    /// Migrates forward to [`SCHEMA_VERSION`] in one transaction under an
    /// advisory lock (two controllers starting at once migrate once);
    /// refuses a newer schema.
    async fn migrate(&self) -> Result<()> {
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

    /// The pool's size and how many of its connections are idle.
    pub fn pool_status(&self) -> (usize, usize) {
        let s = self.pool.status();
        (s.size, s.available)
    }
}

fn pool_json(pool: &GpuPool) -> Result<serde_json::Value> {
    serde_json::to_value(pool)
        .map_err(|e| Error::new(ErrorKind::Unexpected, "cannot encode a pool").with_source(e))
}

fn pool_of(at: &str, v: serde_json::Value) -> Result<GpuPool> {
    serde_json::from_value(v).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("ledger {at} holds an unreadable pool"),
        )
        .with_source(e)
    })
}

fn lease_of(r: &Row) -> Lease {
    Lease {
        job_id: r.get(0),
        holder: r.get(1),
        token: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
        acquired_at: r.get(3),
        expires_at: r.get(4),
    }
}

const LEASE_COLUMNS: &str = "job_id, holder, token, acquired_at, expires_at";
const JOB_COLUMNS: &str =
    "job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence";

impl PgLedger {
    fn job_of(&self, r: &Row) -> Result<JobRecord> {
        let state: String = r.get(4);
        let instances: serde_json::Value = r.get(3);
        let instances: Vec<InstanceId> = serde_json::from_value(instances).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("ledger {} holds unreadable instances", self.shown),
            )
            .with_source(e)
        })?;
        Ok(JobRecord {
            job_id: r.get(0),
            name: r.get(1),
            pool: r
                .get::<_, Option<serde_json::Value>>(2)
                .map(|v| pool_of(&self.shown, v))
                .transpose()?,
            instances,
            state: JobState::parse(&state).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown job state '{state}'",
                    self.shown
                ))
            })?,
            at: r.get(5),
            attempt: u32::try_from(r.get::<_, i64>(6)).unwrap_or(u32::MAX),
            progress_hours: r.get(7),
            price: r.get::<_, Option<i64>>(8).map(Price::from_micros_per_hour),
            detail: r.get(9),
            fence: r
                .get::<_, Option<i64>>(10)
                .and_then(|t| u64::try_from(t).ok()),
        })
    }

    async fn job_rows(&self, filter: &'static str, job_id: Option<&str>) -> Result<Vec<JobRecord>> {
        let rows = self
            .run("read jobs", |c| {
                Box::pin(async move {
                    let sql =
                        format!("SELECT {JOB_COLUMNS} FROM gpufleet.jobs {filter} ORDER BY id");
                    let r = match job_id {
                        Some(id) => c.query(&sql, &[&id]).await,
                        None => c.query(&sql, &[]).await,
                    };
                    r.map_err(|e| self.classify("cannot read jobs", e))
                })
            })
            .await?;
        rows.iter().map(|r| self.job_of(r)).collect()
    }

    fn secs(ttl: Duration) -> f64 {
        ttl.as_secs_f64()
    }
}

#[async_trait]
impl Ledger for PgLedger {
    async fn record_event(&self, pool: &GpuPool, event: PoolEvent) -> Result<()> {
        let pool = pool_json(pool)?;
        let kind = event.kind.as_str();
        let rid = request_id();
        self.run("record an event", |c| {
            let (pool, rid) = (&pool, &rid);
            Box::pin(async move {
                c.execute(
                    "INSERT INTO gpufleet.pool_events(rid, pool, at, kind) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (rid) DO NOTHING",
                    &[rid, pool, &event.at, &kind],
                )
                .await
                .map_err(|e| self.classify("cannot record an event", e))?;
                Ok(())
            })
        })
        .await
    }

    async fn record_exposure(
        &self,
        pool: &GpuPool,
        from: OffsetDateTime,
        to: OffsetDateTime,
    ) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        let pool = pool_json(pool)?;
        let rid = request_id();
        self.run("record exposure", |c| {
            let (pool, rid) = (&pool, &rid);
            Box::pin(async move {
                c.execute(
                    "INSERT INTO gpufleet.exposure(rid, pool, from_at, to_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (rid) DO NOTHING",
                    &[rid, pool, &from, &to],
                )
                .await
                .map_err(|e| self.classify("cannot record exposure", e))?;
                Ok(())
            })
        })
        .await
    }

    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<GpuPool, PoolEvidence>> {
        let (events, exposure) = self
            .run("read evidence", |c| {
                Box::pin(async move {
                    let fail = |e| self.classify("cannot read evidence", e);
                    let events = c
                        .query(
                            "SELECT pool, at, kind FROM gpufleet.pool_events WHERE at >= $1 ORDER BY at, id",
                            &[&since],
                        )
                        .await
                        .map_err(fail)?;
                    let exposure = c
                        .query(
                            "SELECT pool, from_at, to_at FROM gpufleet.exposure WHERE to_at >= $1 ORDER BY from_at, id",
                            &[&since],
                        )
                        .await
                        .map_err(fail)?;
                    Ok((events, exposure))
                })
            })
            .await?;
        let mut out: HashMap<GpuPool, PoolEvidence> = HashMap::new();
        for r in events {
            let kind: String = r.get(2);
            let kind = PoolEventKind::parse(&kind).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown event kind '{kind}'",
                    self.shown
                ))
            })?;
            out.entry(pool_of(&self.shown, r.get(0))?)
                .or_default()
                .record(r.get(1), kind);
        }
        for r in exposure {
            out.entry(pool_of(&self.shown, r.get(0))?)
                .or_default()
                .ran(r.get(1), r.get(2));
        }
        Ok(out)
    }

    async fn record_job(&self, record: &JobRecord) -> Result<()> {
        let pool = record.pool.as_ref().map(pool_json).transpose()?;
        let instances = serde_json::to_value(&record.instances).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "cannot encode instances").with_source(e)
        })?;
        let rid = request_id();
        let attempt = i64::from(record.attempt);
        let price = record.price.map(Price::micros_per_hour);
        let fence = match record.fence.map(i64::try_from) {
            Some(Ok(t)) => Some(t),
            Some(Err(_)) => return Err(fence_refused(record)),
            None => None,
        };
        self.run("record a job", |c| {
            let (pool, instances, rid) = (&pool, &instances, &rid);
            Box::pin(async move {
                c.execute(
                    "INSERT INTO gpufleet.jobs(rid, job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                     ON CONFLICT (rid) DO NOTHING",
                    &[
                        rid,
                        &record.job_id,
                        &record.name,
                        pool,
                        instances,
                        &record.state.as_str(),
                        &record.at,
                        &attempt,
                        &record.progress_hours,
                        &price,
                        &record.detail,
                        &fence,
                    ],
                )
                .await
                .map_err(|e| {
                    if e.code().map(SqlState::code) == Some(FENCE_SQLSTATE) {
                        Attempt::Fail(fence_refused(record))
                    } else {
                        self.classify("cannot record a job", e)
                    }
                })?;
                Ok(())
            })
        })
        .await
    }

    async fn jobs(&self) -> Result<Vec<JobRecord>> {
        self.job_rows("", None).await
    }

    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        self.job_rows("WHERE job_id = $1", Some(job_id)).await
    }

    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self
            .job_rows(
                "WHERE id = (SELECT MAX(id) FROM gpufleet.jobs WHERE job_id = $1)",
                Some(job_id),
            )
            .await?
            .pop())
    }

    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        let existing: String = self
            .run("record a job definition", |c| {
                Box::pin(async move {
                    let fail = |e| self.classify("cannot record a job definition", e);
                    c.execute(
                        "INSERT INTO gpufleet.job_specs(job_id, spec) VALUES ($1, $2) ON CONFLICT (job_id) DO NOTHING",
                        &[&job_id, &spec],
                    )
                    .await
                    .map_err(fail)?;
                    let row = c
                        .query_one("SELECT spec FROM gpufleet.job_specs WHERE job_id = $1", &[&job_id])
                        .await
                        .map_err(fail)?;
                    Ok(row.get(0))
                })
            })
            .await?;
        if existing == spec {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("job {job_id} already exists with another definition"),
            ))
        }
    }

    async fn record_usage(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        let doc = serde_json::to_value(usage).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "cannot encode a job's GPU use").with_source(e)
        })?;
        self.run("record a job's GPU use", |c| {
            let doc = doc.clone();
            Box::pin(async move {
                c.execute(
                    "INSERT INTO gpufleet.job_usage(job_id, usage) VALUES ($1, $2)
                     ON CONFLICT (job_id) DO UPDATE SET usage = EXCLUDED.usage, written_at = now()",
                    &[&job_id, &doc],
                )
                .await
                .map_err(|e| self.classify("cannot record a job's GPU use", e))?;
                Ok(())
            })
        })
        .await
    }

    async fn job_usage(&self, job_id: &str) -> Result<Option<JobUsage>> {
        let doc: Option<serde_json::Value> = self
            .run("read a job's GPU use", |c| {
                Box::pin(async move {
                    let row = c
                        .query_opt(
                            "SELECT usage FROM gpufleet.job_usage WHERE job_id = $1",
                            &[&job_id],
                        )
                        .await
                        .map_err(|e| self.classify("cannot read a job's GPU use", e))?;
                    Ok(row.map(|r| r.get(0)))
                })
            })
            .await?;
        doc.map(|d| {
            serde_json::from_value(d).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("job {job_id}'s GPU use in the ledger is unreadable"),
                )
                .with_source(e)
            })
        })
        .transpose()
    }

    async fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        self.run("read a job definition", |c| {
            Box::pin(async move {
                let row = c
                    .query_opt(
                        "SELECT spec FROM gpufleet.job_specs WHERE job_id = $1",
                        &[&job_id],
                    )
                    .await
                    .map_err(|e| self.classify("cannot read a job definition", e))?;
                Ok(row.map(|r| r.get(0)))
            })
        })
        .await
    }

    async fn active_jobs(&self) -> Result<Vec<String>> {
        self.run("read active jobs", |c| {
            Box::pin(async move {
                let rows = c
                    .query(
                        "SELECT l.job_id FROM
                           (SELECT DISTINCT ON (job_id) job_id, state FROM gpufleet.jobs ORDER BY job_id, id DESC) l
                           JOIN (SELECT job_id, MIN(id) AS first FROM gpufleet.jobs GROUP BY job_id) f USING (job_id)
                         WHERE l.state NOT IN ('succeeded', 'completed', 'failed', 'cancelled')
                           AND EXISTS (SELECT 1 FROM gpufleet.job_specs s WHERE s.job_id = l.job_id)
                         ORDER BY f.first",
                        &[],
                    )
                    .await
                    .map_err(|e| self.classify("cannot read jobs", e))?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            })
        })
        .await
    }

    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        check_lease_request(holder, ttl)?;
        let secs = Self::secs(ttl);
        self.run("acquire a lease", |c| {
            Box::pin(async move {
                let fail = |e| self.classify("cannot acquire a lease", e);
                let won = c
                    .query_opt(
                        &format!(
                            "INSERT INTO gpufleet.job_leases AS l (job_id, holder, token, acquired_at, expires_at)
                             VALUES ($1, $2, 1, now(), now() + $3 * interval '1 second')
                             ON CONFLICT (job_id) DO UPDATE SET
                               token = CASE WHEN l.holder = excluded.holder AND l.expires_at > now()
                                            THEN l.token ELSE l.token + 1 END,
                               acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at > now()
                                            THEN l.acquired_at ELSE now() END,
                               holder = excluded.holder,
                               expires_at = excluded.expires_at
                             WHERE l.expires_at <= now() OR l.holder = excluded.holder
                             RETURNING {LEASE_COLUMNS}"
                        ),
                        &[&job_id, &holder, &secs],
                    )
                    .await
                    .map_err(fail)?;
                if let Some(r) = won {
                    return Ok(Claim::Acquired(lease_of(&r)));
                }
                let r = c
                    .query_one(
                        &format!("SELECT {LEASE_COLUMNS} FROM gpufleet.job_leases WHERE job_id = $1"),
                        &[&job_id],
                    )
                    .await
                    .map_err(fail)?;
                Ok(Claim::Held(lease_of(&r)))
            })
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_lease_request(&lease.holder, ttl)?;
        let secs = Self::secs(ttl);
        let token = i64::try_from(lease.token).map_err(|_| lease_lost(lease))?;
        let row = self
            .run("renew a lease", |c| {
                Box::pin(async move {
                    c.query_opt(
                        &format!(
                            "UPDATE gpufleet.job_leases SET expires_at = now() + $4 * interval '1 second'
                             WHERE job_id = $1 AND holder = $2 AND token = $3 AND expires_at > now()
                             RETURNING {LEASE_COLUMNS}"
                        ),
                        &[&lease.job_id, &lease.holder, &token, &secs],
                    )
                    .await
                    .map_err(|e| self.classify("cannot renew a lease", e))
                })
            })
            .await?;
        row.map(|r| lease_of(&r)).ok_or_else(|| lease_lost(lease))
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let Ok(token) = i64::try_from(lease.token) else {
            return Ok(());
        };
        self.run("release a lease", |c| {
            Box::pin(async move {
                c.execute(
                    "UPDATE gpufleet.job_leases SET expires_at = now()
                     WHERE job_id = $1 AND holder = $2 AND token = $3 AND expires_at > now()",
                    &[&lease.job_id, &lease.holder, &token],
                )
                .await
                .map_err(|e| self.classify("cannot release a lease", e))?;
                Ok(())
            })
        })
        .await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        self.run("read leases", |c| {
            Box::pin(async move {
                let rows = c
                    .query(
                        &format!("SELECT {LEASE_COLUMNS} FROM gpufleet.job_leases ORDER BY job_id"),
                        &[],
                    )
                    .await
                    .map_err(|e| self.classify("cannot read leases", e))?;
                Ok(rows.iter().map(lease_of).collect())
            })
        })
        .await
    }

    async fn now(&self) -> Result<OffsetDateTime> {
        self.run("read the clock", |c| {
            Box::pin(async move {
                let row = c
                    .query_one("SELECT now()", &[])
                    .await
                    .map_err(|e| self.classify("cannot read the clock", e))?;
                Ok(row.get(0))
            })
        })
        .await
    }

    fn location(&self) -> String {
        self.shown.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords() {
        assert_eq!(
            mask_url("postgres://fleet:s3cr%40t@db.internal:5433/gf?sslmode=require"),
            "postgres://fleet:***@db.internal:5433/gf?sslmode=require"
        );
        assert_eq!(
            mask_url("postgresql://db/gf?user=a&password=hunter2"),
            "postgresql://db/gf?user=a&password=***"
        );
        assert_eq!(mask_url("postgres://a@db/gf"), "postgres://a@db/gf");
    }

    #[test]
    fn parses_sslmodes_and_hides_the_password() {
        for (mode, verify) in [
            ("disable", Verify::None),
            ("require", Verify::None),
            ("verify-ca", Verify::Ca),
            ("verify-full", Verify::Full),
        ] {
            let p = parse_url(&format!("postgres://u:pw@h:6000/d?sslmode={mode}"))
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert_eq!(p.verify, verify);
            assert_eq!(shown(&p.config), "postgres://u@h:6000/d");
        }
        let e = parse_url("postgres://u:pw@h/d?sslmode=sometimes")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("unknown sslmode 'sometimes'") && !e.contains("pw"),
            "{e}"
        );
        let e = parse_url("postgres://u:hunter2@h/d?bogus=1")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("invalid PostgreSQL ledger URL") && !e.contains("hunter2"),
            "{e}"
        );
    }
}
