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

/// `text` with any password in it replaced by `***`, for showing: a URL's
/// userinfo (`scheme://user:***@host`, whatever the password holds: `@`,
/// `/` and `:` included, up to the last `@`), a `password=` query parameter,
/// a libpq `password=` keyword, and what precedes the `@` of a mistyped URL
/// (`postgres:/u:pw@host` shows as `postgres…***@host`). Anything else is
/// left as it is.
pub fn mask_url(text: &str) -> String {
    let masked = match text.split_once("://") {
        Some((scheme, rest)) => {
            let rest = match rest.rsplit_once('@') {
                Some((userinfo, after)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    if userinfo.contains(':') {
                        format!("{user}:***@{after}")
                    } else {
                        format!("{user}@{after}")
                    }
                }
                None => rest.to_string(),
            };
            format!("{scheme}://{}", mask_query_password(&rest))
        }
        // Not a URL, yet `user:password@host`-like (a mistyped URL:
        // `postgres:/u:pw@host`): everything before the last `@` but the
        // leading word is masked, user included.
        None => match text.rsplit_once('@') {
            Some((before, after)) if before.contains(':') => {
                let word: String = before
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                format!("{word}…***@{after}")
            }
            _ => text.to_string(),
        },
    };
    mask_keyword_password(&masked)
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

/// A libpq keyword string's `password=VALUE` (quoted or not) as
/// `password=***`.
fn mask_keyword_password(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let Some(at) = lower.find("password") else {
        return text.to_string();
    };
    let after = &text[at + "password".len()..];
    let trimmed = after.trim_start();
    let Some(value) = trimmed.strip_prefix('=') else {
        return text.to_string();
    };
    let value = value.trim_start();
    // To the closing quote, or to the next whitespace.
    let len = if let Some(q) = value.strip_prefix('\'') {
        q.find('\'').map_or(value.len(), |i| i + 2)
    } else {
        value.find(char::is_whitespace).unwrap_or(value.len())
    };
    let rest = &value[len..];
    format!("{}password=***{}", &text[..at], mask_keyword_password(rest))
}

/// The libpq connection keywords, for recognising a keyword string
/// (`host=db.internal dbname=gpufleet user=gf password=…`).
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "options",
    "application_name",
    "service",
    "target_session_attrs",
];

/// Checks that a ledger setting can be what it says: a `postgres://` or
/// `postgresql://` URL that parses (where this build has PostgreSQL), or a
/// SQLite location; a value that looks like a PostgreSQL URL but is not one
/// (`postgres:/u:pw@host/db`, `postgres//…`, `postgresql:u:pw@…`), or a libpq
/// keyword string (`host=… password=…`), is refused with the value masked,
/// never used as a file name (a mistyped URL used to fork the ledger into
/// a local file whose name held the password).
pub fn check_location(location: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid_input(format!(
            "invalid ledger '{}': {why}; expected a SQLite file path, sqlite://PATH or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
            mask_url(location)
        )))
    };
    let t = location.trim();
    let lower = t.to_ascii_lowercase();
    if is_postgres_url(t) {
        #[cfg(feature = "postgres")]
        return crate::postgres::check_url(t);
        #[cfg(not(feature = "postgres"))]
        return Ok(());
    }
    for scheme in ["postgresql", "postgres"] {
        if let Some(rest) = lower.strip_prefix(scheme) {
            if rest.starts_with(':') || rest.starts_with("//") {
                return bad(
                    "it looks like a PostgreSQL URL but is not one (a URL starts postgres://)",
                );
            }
        }
    }
    let keyword = t.split_whitespace().any(|w| {
        w.split_once('=')
            .is_some_and(|(k, _)| LIBPQ_KEYWORDS.contains(&k.to_ascii_lowercase().as_str()))
    });
    if keyword {
        return bad("a libpq keyword string is not accepted (write it as a postgres:// URL)");
    }
    sqlite_path(location).map(|_| ())
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
            // `sqlite://user:password@host/db` names no file: a user or
            // host before the path (it used to become a directory named
            // with the password).
            let first = rest.split('/').next().unwrap_or_default();
            if first.contains('@') || (first.contains(':') && !rest.starts_with('/')) {
                return Err(bad(
                    "sqlite:// takes a file path (sqlite:///var/lib/gpufleet/ledger.sqlite3 or sqlite://ledger.sqlite3), not a user, password or host",
                ));
            }
            return Ok(std::path::PathBuf::from(rest));
        }
    }
    Ok(std::path::PathBuf::from(location))
}

/// Opens (creating and migrating as needed) the ledger at `location`.
pub async fn open(location: &str) -> Result<Arc<dyn Ledger>> {
    check_location(location)?;
    if is_postgres_url(location) {
        return open_postgres(location, false).await;
    }
    open_sqlite(sqlite_path(location)?, false).await
}

/// Opens the ledger at `location` to read only (nothing is created,
/// migrated or written): `None` when there is none yet.
pub async fn open_read_only(location: &str) -> Result<Option<Arc<dyn Ledger>>> {
    check_location(location)?;
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

    /// Issue 63: a value that looks like a PostgreSQL URL or a libpq keyword
    /// string but is not a URL that parses is refused with its password
    /// masked, never used as a file name; masking holds whatever the
    /// password contains.
    #[test]
    fn a_mistyped_postgres_location_is_refused_masked() {
        for bad in [
            "postgres:/gf:PW-one@host/db",
            "postgres//gf:PW-one@host/db",
            "postgresql:gf:PW-one@host/db",
            "POSTGRES:gf:PW-one@host",
            "host=db.internal dbname=gf user=gf password=PW-one",
            "host=db password='PW-one two' dbname=gf",
        ] {
            let e = check_location(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
            assert!(!e.message().contains("PW-one"), "{bad}: {}", e.message());
            assert!(e.message().contains("postgres://"), "{}", e.message());
        }
        for fine in [
            "/var/lib/gpufleet/ledger.sqlite3",
            "postgres-ledger.sqlite3",
            "postgres/ledger.sqlite3",
            "sqlite:///tmp/l.db",
        ] {
            check_location(fine).unwrap_or_else(|e| panic!("{fine}: {e}"));
        }
        for (url, shown) in [
            ("postgres://gf:p@ss@host/db", "postgres://gf:***@host/db"),
            ("postgres://gf:pa/ss@host/db", "postgres://gf:***@host/db"),
            (
                "postgres://gf:a:b@host:5/db?sslmode=require",
                "postgres://gf:***@host:5/db?sslmode=require",
            ),
            (
                "postgres://gf@host/db?password=x1",
                "postgres://gf@host/db?password=***",
            ),
            ("http://u:secret@127.0.0.1:9", "http://u:***@127.0.0.1:9"),
            ("host=h password=x1 user=u", "host=h password=*** user=u"),
            (
                "host=h password = 'a b' user=u",
                "host=h password=*** user=u",
            ),
            ("plain text", "plain text"),
        ] {
            assert_eq!(mask_url(url), shown, "{url}");
        }
    }
}
