//! Connecting (TLS per `sslmode`, a pool of connections) and running a
//! statement with bounded retries of transient failures, errors mapped to
//! gpufleet's kinds.

use super::*;

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
pub(super) async fn tls_config(parsed: &Parsed) -> Result<rustls::ClientConfig> {
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
pub(super) fn request_id() -> String {
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
pub(super) fn transient(e: &tokio_postgres::Error) -> bool {
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
pub(super) fn pg_err(at: &str, what: &str, e: tokio_postgres::Error) -> Error {
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
        Some(FENCE_SQLSTATE) | Some(FINAL_SQLSTATE) => ErrorKind::Conflict,
        Some("42P01") => ErrorKind::NotFound,
        _ if transient(&e) => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, format!("ledger {at}: {what}: {detail}"))
}

pub(super) fn pool_err(at: &str, e: deadpool_postgres::PoolError) -> Error {
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
pub(super) enum Attempt {
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
        if v == 0 {
            // No writer has used this database yet: nothing to read (NotFound,
            // as for an absent SQLite file; the first writer creates it).
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("ledger {} holds no gpufleet schema yet", ledger.shown),
            ));
        }
        Ok(ledger)
    }

    pub(super) async fn pool(url: &str, options: PgOptions) -> Result<Self> {
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
    pub(super) async fn run<'a, T, F>(&'a self, what: &'static str, f: F) -> Result<T>
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

    /// The one column `sql` selects for the job `$1` (by its primary key: one
    /// row at most), if a row has it.
    pub(super) async fn job_value<T>(
        &self,
        what: &'static str,
        sql: &'static str,
        job_id: &str,
    ) -> Result<Option<T>>
    where
        T: for<'r> tokio_postgres::types::FromSql<'r>,
    {
        let rows = self.query(what, sql, &[&job_id]).await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// Runs `sql` with `params`, retried as [`PgLedger::run`] retries: the
    /// rows it returns (none for a statement without `RETURNING`). A failure
    /// says `cannot {what}`. The statement is prepared once per pooled
    /// connection ([`deadpool_postgres::Client::prepare_cached`]): a
    /// controller's polls ask the same few questions, and an unprepared
    /// query costs a round trip more (Parse and Describe) each time.
    pub(super) async fn query(
        &self,
        what: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        self.run(what, |c| {
            Box::pin(async move {
                let fail = |e| self.classify(&format!("cannot {what}"), e);
                let statement = c.prepare_cached(sql).await.map_err(fail)?;
                c.query(&statement, params).await.map_err(fail)
            })
        })
        .await
    }

    pub(super) fn classify(&self, what: &str, e: tokio_postgres::Error) -> Attempt {
        let retry = transient(&e);
        let err = pg_err(&self.shown, what, e);
        if retry {
            Attempt::Retry(err)
        } else {
            Attempt::Fail(err)
        }
    }
}
