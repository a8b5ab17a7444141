//! Connection URLs: recognised, checked (with the bad part named), and
//! shown with the password masked.

use super::*;

/// What gpufleet takes out of the URL before the driver parses it.
pub(super) struct Parsed {
    pub(super) config: tokio_postgres::Config,
    pub(super) verify: Verify,
    pub(super) root_cert: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verify {
    /// Encrypt (when the server offers it) without checking the certificate.
    None,
    /// Check the chain, not the host name.
    Ca,
    /// Check the chain and the host name.
    Full,
}

pub(super) fn bad_url(why: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!(
        "invalid PostgreSQL ledger URL: {why}; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE]"
    ))
}

pub(super) fn parse_url(url: &str) -> Result<Parsed> {
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
pub(super) fn shown(config: &tokio_postgres::Config) -> String {
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
