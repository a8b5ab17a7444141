//! Opening the ledger a location names: a PostgreSQL URL
//! (`postgres://…`, shared by several controllers) or a SQLite file path
//! (the embedded default).

use std::sync::Arc;

use gpufleet_core::ledger::Ledger;
use gpufleet_core::{Error, ErrorKind, Result};

use crate::postgres::{is_postgres_url, mask_url, PgLedger};
use crate::sqlite::SqliteLedger;

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
        return Ok(Arc::new(PgLedger::connect(location).await?));
    }
    let path = sqlite_path(location)?;
    let l = tokio::task::spawn_blocking(move || SqliteLedger::open(path))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("opening the ledger: {e}")))??;
    Ok(Arc::new(l))
}

/// Opens the ledger at `location` to read only (nothing is created,
/// migrated or written): `None` when there is none yet.
pub async fn open_read_only(location: &str) -> Result<Option<Arc<dyn Ledger>>> {
    if is_postgres_url(location) {
        return Ok(Some(Arc::new(PgLedger::connect_read_only(location).await?)));
    }
    let path = sqlite_path(location)?;
    match tokio::task::spawn_blocking(move || SqliteLedger::open_read_only(path))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("opening the ledger: {e}")))?
    {
        Ok(l) => Ok(Some(Arc::new(l))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
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
