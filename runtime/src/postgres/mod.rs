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
use std::ops::Range;
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

mod connect;
mod ledger;
mod rows;
mod schema;
mod services;
mod url;
use self::url::*;
use self::{connect::*, rows::*};
pub use crate::ledgers::{is_postgres_url, mask_url};

/// Checks a `postgres://` ledger URL as connecting would parse it (the
/// value is never quoted back: a password may be in it).
pub fn check_url(url: &str) -> Result<()> {
    url::parse_url(url).map(|_| ())
}

/// The newest schema version this build knows (and migrates to).
pub const SCHEMA_VERSION: i32 = 4;

/// The SQLSTATE the fencing trigger raises.
const FENCE_SQLSTATE: &str = "GF409";

/// The SQLSTATE the trigger that makes a cancel final raises.
const FINAL_SQLSTATE: &str = "GF410";

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

impl PgLedger {
    /// The pool's size and how many of its connections are idle.
    pub fn pool_status(&self) -> (usize, usize) {
        let s = self.pool.status();
        (s.size, s.available)
    }
}

impl PgLedger {}

#[cfg(test)]
mod tests;
