//! Opening the ledger a location names: a PostgreSQL URL
//! (`postgres://…`, shared by several controllers) or a SQLite file path
//! (the embedded default).

use std::sync::Arc;

use gpufleet_core::ledger::Ledger;
use gpufleet_core::{Error, ErrorKind, Result};

#[cfg(feature = "postgres")]
use crate::postgres::PgLedger;
#[cfg(feature = "sqlite")]
use crate::sqlite::SqliteLedger;

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

/// Where the ledger lives: `GPUFLEET_LEDGER`, else `gpufleet/ledger.sqlite3`
/// in the platform data directory (`~/.local/share` on Linux).
pub fn default_path() -> Result<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("GPUFLEET_LEDGER").filter(|p| !p.is_empty()) {
        return Ok(std::path::PathBuf::from(p));
    }
    dirs::data_dir()
        .map(|d| d.join("gpufleet").join("ledger.sqlite3"))
        .ok_or_else(|| {
            Error::invalid_input(
                "no data directory on this platform: set GPUFLEET_LEDGER to a file path",
            )
        })
}

/// `location` fit to print: a URL's password masked, whatever its scheme
/// (a path is shown as it is).
pub fn shown(location: &str) -> String {
    mask_url(location)
}

/// The SQLite file a location names: a path, or `sqlite://PATH`. Any other
/// `SCHEME://` is refused naming what is accepted (a `mysql://` URL used to
/// become a directory `mysql:` holding a SQLite file), as is an empty one.
fn sqlite_path(location: &str) -> Result<std::path::PathBuf> {
    // Shown with any password masked, whatever the scheme.
    let bad = |why: &str| {
        Error::invalid_input(format!(
            "invalid ledger '{}': {why}; expected a SQLite file path, sqlite://PATH or postgres://USER@HOST/DATABASE",
            mask_url(location)
        ))
    };
    if location.trim().is_empty() {
        return Err(bad("empty"));
    }
    if let Some((scheme, rest)) = location.split_once("://") {
        let is_scheme = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if is_scheme {
            if !scheme.eq_ignore_ascii_case("sqlite") {
                return Err(bad(&format!("unsupported scheme '{scheme}'")));
            }
            if rest.is_empty() {
                return Err(bad("no path after sqlite://"));
            }
            return Ok(std::path::PathBuf::from(rest));
        }
    }
    Ok(std::path::PathBuf::from(location))
}

/// Opens (creating and migrating as needed) the ledger at `location`.
pub async fn open(location: &str) -> Result<Arc<dyn Ledger>> {
    if is_postgres_url(location) {
        return open_postgres(location, false).await;
    }
    open_sqlite(sqlite_path(location)?, false).await
}

/// Opens the ledger at `location` to read only (nothing is created,
/// migrated or written): `None` when there is none yet.
pub async fn open_read_only(location: &str) -> Result<Option<Arc<dyn Ledger>>> {
    if is_postgres_url(location) {
        // A database no writer has used yet holds no schema: as an absent
        // SQLite file, an empty ledger (the first writer creates it).
        return match open_postgres(location, true).await {
            Ok(l) => Ok(Some(l)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        };
    }
    match open_sqlite(sqlite_path(location)?, true).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The evidence the ledger at `location` holds since `since`, read only
/// (nothing is created, migrated or written): none when there is no ledger
/// yet. What `place` and `tf-external` decide with.
pub async fn evidence_since(
    location: &str,
    since: time::OffsetDateTime,
) -> Result<std::collections::HashMap<gpufleet_core::Pool, gpufleet_core::placer::PoolEvidence>> {
    match open_read_only(location).await? {
        Some(l) => l.evidence(since).await,
        None => Ok(Default::default()),
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(location: &str, read_only: bool) -> Result<Arc<dyn Ledger>> {
    Ok(if read_only {
        Arc::new(PgLedger::connect_read_only(location).await?)
    } else {
        Arc::new(PgLedger::connect(location).await?)
    })
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(location: &str, _read_only: bool) -> Result<Arc<dyn Ledger>> {
    Err(not_built(location, "postgres", "a SQLite file path"))
}

/// The error for a ledger this build has no support for: which feature
/// would have it, and what this build accepts instead.
#[cfg(not(all(feature = "postgres", feature = "sqlite")))]
fn not_built(location: &str, feature: &str, instead: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "ledger '{}' needs gpufleet-runtime's '{feature}' feature, which this build does not have; use {instead} or rebuild with --features {feature}",
            mask_url(location)
        ),
    )
}

/// Opens the SQLite ledger at `path`: `NotFound` when reading only and
/// there is none yet.
#[cfg(feature = "sqlite")]
async fn open_sqlite(path: std::path::PathBuf, read_only: bool) -> Result<Arc<dyn Ledger>> {
    let l = tokio::task::spawn_blocking(move || {
        if read_only {
            SqliteLedger::open_read_only(path)
        } else {
            SqliteLedger::open(path)
        }
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Unexpected, format!("opening the ledger: {e}")))??;
    Ok(Arc::new(l))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(path: std::path::PathBuf, _read_only: bool) -> Result<Arc<dyn Ledger>> {
    Err(not_built(
        &path.display().to_string(),
        "sqlite",
        "a postgres:// URL",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_a_path_sqlite_or_refused() {
        assert_eq!(
            sqlite_path("/var/lib/gpufleet/ledger.db").unwrap(),
            std::path::PathBuf::from("/var/lib/gpufleet/ledger.db")
        );
        assert_eq!(
            sqlite_path("sqlite:///tmp/l.db").unwrap(),
            std::path::PathBuf::from("/tmp/l.db")
        );
        assert_eq!(
            sqlite_path("SQLite://rel/l.db").unwrap(),
            std::path::PathBuf::from("rel/l.db")
        );
        // Not a scheme: a relative path with "://" later in it stays a path.
        assert!(sqlite_path("dir with ://odd name").is_ok());
        for (bad, why) in [
            ("mysql://fleet@db/gpufleet", "unsupported scheme 'mysql'"),
            (
                "mysql://fleet:hunter2@db/gpufleet",
                "'mysql://fleet:***@db/gpufleet': unsupported scheme 'mysql'",
            ),
            ("sqlite://", "no path after sqlite://"),
            ("  ", "empty"),
        ] {
            let e = sqlite_path(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.message().contains(why), "{bad}: {}", e.message());
            assert!(e.message().contains("postgres://"), "{}", e.message());
            assert!(!e.message().contains("hunter2"), "{}", e.message());
        }
        assert_eq!(
            shown("mysql://fleet:hunter2@db/gpufleet"),
            "mysql://fleet:***@db/gpufleet"
        );
        assert_eq!(shown("/var/lib/a b.db"), "/var/lib/a b.db");
    }
}
