//! How a controller holds the jobs it drives: the fencing tokens of its
//! leases, stamped on every record it writes ([`FencedLedger`]), and a
//! [`LeaseKeeper`] that renews each lease while its job is driven and says
//! when it is lost.
//!
//! The ledger refuses a stale token (see [`gpufleet_core::ledger`]); the
//! keeper also stops the controller acting on the cloud for a job whose lease
//! it can no longer vouch for: after two thirds of the lease time without a
//! successful renewal it reports the lease lost, a third before another
//! controller may take the job over.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpufleet_core::ledger::{Hooked, JobRecord, JobState, Lease, Ledger, RecordHook};
use gpufleet_core::{Error, ErrorKind, Result};
use tokio::time::Instant;

/// The fencing tokens this process holds, by job.
#[derive(Debug, Default)]
pub struct Fences {
    held: Mutex<HashMap<String, u64>>,
}

impl Fences {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the process holds `job_id` under `token`.
    pub fn set(&self, job_id: &str, token: u64) {
        self.lock().insert(job_id.to_string(), token);
    }

    /// Forgets `job_id`'s token if it is `token`.
    pub fn clear(&self, job_id: &str, token: u64) {
        let mut g = self.lock();
        if g.get(job_id) == Some(&token) {
            g.remove(job_id);
        }
    }

    /// The token held for `job_id`.
    pub fn get(&self, job_id: &str) -> Option<u64> {
        self.lock().get(job_id).copied()
    }

    /// The jobs held.
    pub fn jobs(&self) -> HashSet<String> {
        self.lock().keys().cloned().collect()
    }
}

/// A ledger that stamps each job record with the token this process holds
/// for its job (a `cancelled` record goes unstamped: a cancel always lands).
pub type FencedLedger = Hooked<FenceStamp>;

/// Stamps a job record with the fencing token held for its job.
#[derive(Debug)]
pub struct FenceStamp(pub Arc<Fences>);

impl RecordHook for FenceStamp {
    fn before_record<'a>(&self, record: &'a JobRecord) -> Result<Cow<'a, JobRecord>> {
        Ok(match self.0.get(&record.job_id) {
            Some(t) if record.fence.is_none() && record.state != JobState::Cancelled => {
                let mut stamped = record.clone();
                stamped.fence = Some(t);
                Cow::Owned(stamped)
            }
            _ => Cow::Borrowed(record),
        })
    }
}

/// A held lease, renewed every third of its time while its job is driven.
#[derive(Debug)]
pub struct LeaseKeeper {
    ledger: Arc<dyn Ledger>,
    ttl: Duration,
    state: Mutex<(Lease, Instant)>,
}

impl LeaseKeeper {
    /// Keeps `lease` (just acquired or renewed) for `ttl` at a time.
    pub fn new(ledger: Arc<dyn Ledger>, lease: Lease, ttl: Duration) -> Self {
        LeaseKeeper {
            ledger,
            ttl,
            state: Mutex::new((lease, Instant::now())),
        }
    }

    /// The lease as last renewed.
    pub fn lease(&self) -> Lease {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// `Ok` while the lease was renewed less than two thirds of its time
    /// ago; [`ErrorKind::Conflict`] after (the controller must not act for
    /// the job: another may take it over soon).
    pub fn check(&self) -> Result<()> {
        let (lease, at) = self.state.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if at.elapsed() < self.ttl * 2 / 3 {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "cannot vouch for the lease on job {} (token {}): not renewed for {:.1}s of its {:.1}s",
                    lease.job_id,
                    lease.token,
                    at.elapsed().as_secs_f64(),
                    self.ttl.as_secs_f64()
                ),
            ))
        }
    }

    /// Renews until the lease is lost; returns why. Run it beside the
    /// driving, and stop driving when it returns.
    pub async fn keep(&self) -> Error {
        // A renewal that failed (the ledger busy or briefly unreachable) is
        // tried again soon, not a third of the lease later: two failures in
        // a row must not lose a lease the ledger would still renew.
        let soon = (self.ttl / 12).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let mut wait = self.ttl / 3;
        loop {
            tokio::time::sleep(wait).await;
            let lease = self.lease();
            match self.ledger.renew_lease(&lease, self.ttl).await {
                Ok(renewed) => {
                    *self.state.lock().unwrap_or_else(|p| p.into_inner()) =
                        (renewed, Instant::now());
                    wait = self.ttl / 3;
                }
                Err(e) if e.kind() == ErrorKind::Conflict => return e,
                Err(e) => {
                    wait = soon;
                    tracing::warn!(job = %lease.job_id, error = %e, "could not renew the lease; retrying");
                    if let Err(lost) = self.check() {
                        return lost;
                    }
                }
            }
        }
    }
}
