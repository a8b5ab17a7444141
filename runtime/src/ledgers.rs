//! Opening the ledger a location names: a PostgreSQL URL
//! (`postgres://…`, shared by several controllers) or a SQLite file path
//! (the embedded default).

use std::sync::Arc;

use gpufleet_core::ledger::Ledger;
use gpufleet_core::{Error, ErrorKind, Result};

use crate::postgres::{is_postgres_url, mask_url, PgLedger};
use crate::sqlite::SqliteLedger;

/// `location` fit to print: a URL's password masked.
pub fn shown(location: &str) -> String {
    if is_postgres_url(location) {
        mask_url(location)
    } else {
        location.to_string()
    }
}

/// Opens (creating and migrating as needed) the ledger at `location`.
pub async fn open(location: &str) -> Result<Arc<dyn Ledger>> {
    if is_postgres_url(location) {
        return Ok(Arc::new(PgLedger::connect(location).await?));
    }
    let path = std::path::PathBuf::from(location);
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
    let path = std::path::PathBuf::from(location);
    match tokio::task::spawn_blocking(move || SqliteLedger::open_read_only(path))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("opening the ledger: {e}")))?
    {
        Ok(l) => Ok(Some(Arc::new(l))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
