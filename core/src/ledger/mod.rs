//! Memory across runs and across controllers: interruptions, capacity
//! failures and running time per pool (the hazard estimator's evidence), the
//! jobs gpufleet placed, and the leases under which controllers drive them.
//!
//! [`Ledger`] is the trait; [`MemoryLedger`] keeps it in memory (tests, the
//! simulator). The runtime has a SQLite backend (embedded, the default) and
//! a PostgreSQL one (shared by several controllers). Every backend passes
//! the same checks ([`conformance`], with the `conformance` feature).
//!
//! # Leases and fencing
//!
//! A controller drives a job only while it holds the job's lease
//! ([`Ledger::acquire_lease`]): a row naming the holder, a fencing token and
//! an expiry, renewed while the controller lives. Each time the lease changes
//! hands its token grows by one and never goes back. Every record a
//! controller writes for a leased job carries the token it holds
//! ([`JobRecord::fence`]), and the backend refuses the write
//! ([`ErrorKind::Conflict`]) unless that token is the lease's current one and
//! the lease has not expired by the ledger's own clock. The check runs where
//! the write lands (a trigger in SQLite and PostgreSQL), so a controller that
//! was paused past its lease cannot record a transition, and so cannot
//! announce (and then send) a launch, whatever it believes.
//!
//! The rules every backend applies to [`Ledger::record_job`]:
//! - a record with a fence is accepted only if the job's lease has that token
//!   and has not expired;
//! - a record without one is accepted only if no unexpired lease holds the
//!   job, or if it records `cancelled` (a person's cancel goes through; the
//!   controller driving the job stops at its next poll);
//! - a cancel is final: once a managed job's (one with a saved definition)
//!   newest record is `cancelled`, any other record for it is refused
//!   ([`cancelled_refused`]), fence or not. A launch-only job (`gpufleet
//!   launch`) may be launched again under its name.
//!
//! # Services
//!
//! A service (`gpufleet serve`) has a row, what its controller last said of
//! it ([`ServiceRow`]), and a log: replicas started and ended and why, scale
//! decisions, rollouts, and the requests people make of it
//! ([`ServiceEntry`]). Its controller holds the lease named
//! [`service_lease`]`(name)`, and the same rules apply to its writes: one
//! with a fence is accepted only under the live lease with that token; one
//! without only while no live lease holds the service, except a request
//! ([`ServiceEntryKind::Request`]: take it down, roll out a new version),
//! which is a person's and always accepted, as a cancel is.

#[cfg(feature = "conformance")]
pub mod conformance;
mod definition;
mod hooked;
mod memory;
mod service;
mod spend;

pub use definition::{not_your_job, JobDefinition};
pub use hooked::{Hooked, RecordHook};
pub use memory::MemoryLedger;
pub use service::{
    service_fence_refused, service_lease, service_write_allowed, ServiceEntry, ServiceEntryKind,
    ServiceRow,
};
pub use spend::{EndedBy, InstanceEnd, InstanceSpend};

use std::collections::HashMap;
use std::fmt::Debug;
use std::ops::Range;
use std::time::Duration;

use async_trait::async_trait;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::placer::{PoolEvent, PoolEvidence};
use crate::Price;
use crate::{Error, ErrorKind, Result};
use crate::{InstanceId, Pool};

/// Where a job stands. A managed job goes placing → launching → running,
/// then (interrupted | moving → moved → running)* until it ends succeeded,
/// failed or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "kebab-case")]
pub enum JobState {
    /// Choosing a pool.
    Placing,
    /// A launch is about to be (or was) sent: the record names the pool and
    /// the attempt whose idempotency key a resumed controller re-sends.
    Launching,
    /// Running in a pool.
    Running,
    /// Interrupted (notice, preemption seen from the controller, or a node
    /// that stopped reporting); being placed again.
    Interrupted,
    /// Moving to a cheaper pool: the new placement is being launched.
    Moving,
    /// The placement the job moved away from (released).
    Moved,
    /// Done; everything terminated.
    #[serde(alias = "completed")]
    Succeeded,
    /// Given up, with nothing left running.
    Failed,
    /// Cancelled by a person, with nothing left running.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 9] = [
        JobState::Placing,
        JobState::Launching,
        JobState::Running,
        JobState::Interrupted,
        JobState::Moving,
        JobState::Moved,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name in the ledger and in output (`running`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parses [`JobState::as_str`] (and `completed`, the name schema 1 used
    /// for `succeeded`).
    pub fn parse(s: &str) -> Option<JobState> {
        if s == "completed" {
            return Some(JobState::Succeeded);
        }
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the job has ended (nothing more happens to it).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

/// One entry of a job's history (the ledger keeps every one: the last is
/// where the job stands).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id.
    pub job_id: String,
    /// Its name.
    pub name: String,
    /// The pool, once one is chosen.
    pub pool: Option<Pool>,
    /// Its instances.
    pub instances: Vec<InstanceId>,
    /// What happened.
    pub state: JobState,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The launch attempt this placement is (part of its idempotency key).
    #[serde(default)]
    pub attempt: u32,
    /// Reference work-hours done in total when this was recorded.
    #[serde(default)]
    pub progress_hours: f64,
    /// The price of one instance of this placement per hour.
    #[serde(default)]
    pub price: Option<Price>,
    /// Why, in a line (the policy's explanation, the error, the notice).
    #[serde(default)]
    pub detail: String,
    /// The fencing token of the lease this record was written under (see
    /// the [module docs](self)); `None` for a record written with no lease
    /// (a submit, a person's cancel, a one-off `launch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

impl JobRecord {
    /// A record of `state` for `job_id` with nothing else filled in.
    pub fn new(
        job_id: impl Into<String>,
        name: impl Into<String>,
        state: JobState,
        at: OffsetDateTime,
    ) -> Self {
        JobRecord {
            job_id: job_id.into(),
            name: name.into(),
            pool: None,
            instances: Vec::new(),
            state,
            at,
            attempt: 0,
            progress_hours: 0.0,
            price: None,
            detail: String::new(),
            fence: None,
        }
    }
}

/// A controller's hold on a job: who, the fencing token, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The job.
    pub job_id: String,
    /// The controller holding it (unique per process).
    pub holder: String,
    /// The fencing token: one more each time the lease changes hands.
    pub token: u64,
    /// When this holder took it (the token's start).
    #[serde(with = "time::serde::rfc3339")]
    pub acquired_at: OffsetDateTime,
    /// When it lapses unless renewed (by the ledger's clock).
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

impl Lease {
    /// Whether it is still held at `now`.
    pub fn is_live(&self, now: OffsetDateTime) -> bool {
        self.expires_at > now
    }
}

/// What [`Ledger::acquire_lease`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The lease is the caller's (new, taken over after expiry, or renewed).
    Acquired(Lease),
    /// Another controller holds it, unexpired.
    Held(Lease),
}

/// The shortest and longest lease a ledger grants.
pub const LEASE_TTL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));

/// Checks a lease's time to live and a holder's name.
pub fn check_lease_request(holder: &str, ttl: Duration) -> Result<()> {
    let (lo, hi) = LEASE_TTL_RANGE;
    if ttl < lo || ttl > hi {
        return Err(Error::invalid_input(format!(
            "invalid lease time {:.3}s: a lease lasts 1s to 24h",
            ttl.as_secs_f64()
        )));
    }
    if holder.is_empty() || holder.len() > 200 || holder.chars().any(char::is_control) {
        return Err(Error::invalid_input(format!(
            "invalid lease holder '{}': 1 to 200 printable characters",
            holder.escape_debug()
        )));
    }
    Ok(())
}

/// The error for a record of a managed job whose newest record is
/// `cancelled` and which is not itself a cancel: once cancelled, a job never runs again
/// (a launch that answers after the cancel cannot record its instances
/// running, and its executor terminates them).
pub fn cancelled_refused(record: &JobRecord) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "job {} was cancelled, and a cancel is final; the '{}' record was refused",
            record.job_id, record.state
        ),
    )
}

/// The error for a write the fencing rules refuse.
pub fn fence_refused(record: &JobRecord) -> Error {
    let why = match record.fence {
        Some(t) => format!(
            "the lease on job {} is no longer held under token {t} (it expired or another controller took it over)",
            record.job_id
        ),
        None => format!(
            "job {} is leased by a controller; only it may record its transitions",
            record.job_id
        ),
    };
    Error::new(
        ErrorKind::Conflict,
        format!("{why}; the '{}' record was refused", record.state),
    )
}

/// Saving job `job_id`'s definition `spec` where `existing` is already
/// saved: the same definition is fine (a retried save), another one is
/// [`ErrorKind::AlreadyExists`].
pub fn same_job_spec(job_id: &str, existing: &str, spec: &str) -> Result<()> {
    if existing == spec {
        return Ok(());
    }
    let differs = match (
        serde_json::from_str::<serde_json::Value>(existing),
        serde_json::from_str::<serde_json::Value>(spec),
    ) {
        (Ok(was), Ok(now)) => {
            let mut out = Vec::new();
            spec_differences("", &was, &now, &mut out);
            let more = out.len() > 3;
            out.truncate(3);
            let mut said = out.join(", ");
            if more {
                said.push_str(" and elsewhere");
            }
            format!(" (differs in {said})")
        }
        _ => String::new(),
    };
    Err(Error::new(
        ErrorKind::AlreadyExists,
        format!(
            "job {job_id} already exists with another definition{differs}; a recorded job's definition is fixed: submit the new one under another id"
        ),
    ))
}

/// Where two job definitions differ, as `path: was → now`, depth first;
/// stops after four (three are shown).
fn spec_differences(
    path: &str,
    was: &serde_json::Value,
    now: &serde_json::Value,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    if was == now || out.len() > 3 {
        return;
    }
    if let (Value::Object(a), Value::Object(b)) = (was, now) {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for k in keys {
            let at = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            let (x, y) = (
                a.get(k).unwrap_or(&Value::Null),
                b.get(k).unwrap_or(&Value::Null),
            );
            spec_differences(&at, x, y, out);
        }
        return;
    }
    let short = |v: &Value| {
        let s = v.to_string();
        if s.chars().count() > 40 {
            format!("{}…", s.chars().take(40).collect::<String>())
        } else {
            s
        }
    };
    let at = if path.is_empty() {
        "the definition"
    } else {
        path
    };
    // A job's environment may hold its secrets: named, never shown.
    if path.split('.').any(|seg| seg == "env") {
        out.push(format!("{at} (value not shown)"));
        return;
    }
    out.push(format!("{at}: {} → {}", short(was), short(now)));
}

/// A job's GPU use as the JSON document ledgers store.
pub fn usage_document(usage: &crate::usage::JobUsage) -> Result<serde_json::Value> {
    serde_json::to_value(usage).map_err(|e| {
        Error::new(ErrorKind::Unexpected, "cannot encode a job's GPU use").with_source(e)
    })
}

/// The error for renewing a lease that is no longer the caller's.
pub fn lease_lost(lease: &Lease) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "lost the lease on job {} (token {}): it expired or another controller took it over",
            lease.job_id, lease.token
        ),
    )
}

/// Durable memory of what happened in each pool and to each job, shared by
/// every process that opens the same ledger. Calls are async: a backend never
/// blocks the runtime's threads.
#[async_trait]
pub trait Ledger: Send + Sync + Debug {
    /// Records an interruption or capacity failure.
    async fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()>;

    /// Records that an instance ran in `pool` `during` that span (an empty
    /// or reversed span records nothing).
    async fn record_exposure(&self, pool: &Pool, during: Range<OffsetDateTime>) -> Result<()>;

    /// Everything observed since `since`, per pool.
    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>>;

    /// Appends to a job's history, under the fencing rules of the
    /// [module docs](self): a refused write is [`ErrorKind::Conflict`] and
    /// records nothing.
    async fn record_job(&self, record: &JobRecord) -> Result<()>;

    /// Every job record, oldest first.
    async fn jobs(&self) -> Result<Vec<JobRecord>>;

    /// One job's records, oldest first.
    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        let mut all = self.jobs().await?;
        all.retain(|r| r.job_id == job_id);
        Ok(all)
    }

    /// The newest record of `job_id`, if any.
    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self.job_history(job_id).await?.pop())
    }

    /// The newest record of each of `job_ids` that has one: a controller's
    /// look at every job it drives, in one read where the backend can (the
    /// default asks [`Ledger::job_latest`] once per job).
    async fn jobs_latest(&self, job_ids: &[String]) -> Result<HashMap<String, JobRecord>> {
        let mut out = HashMap::with_capacity(job_ids.len());
        for id in job_ids {
            if let Some(r) = self.job_latest(id).await? {
                out.insert(id.clone(), r);
            }
        }
        Ok(out)
    }

    /// Keeps what a managed job was asked to do (an opaque document the
    /// runtime writes once, before the job's first record), so a controller
    /// that resumes it needs nothing else. Saving the same id again with the
    /// same document is a no-op; with another document it is
    /// [`ErrorKind::AlreadyExists`].
    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()>;

    /// The document [`Ledger::save_job_spec`] kept for `job_id`.
    async fn job_spec(&self, job_id: &str) -> Result<Option<String>>;

    /// Managed jobs (those with a saved spec) whose newest record has not
    /// ended, oldest first: what controllers share out.
    async fn active_jobs(&self) -> Result<Vec<String>>;

    /// Keeps the job's measured GPU use (one value per job, replaced by each
    /// call; see [`crate::usage::JobUsage`]).
    async fn record_usage(&self, job_id: &str, usage: &crate::usage::JobUsage) -> Result<()>;

    /// What [`Ledger::record_usage`] kept for `job_id`.
    async fn job_usage(&self, job_id: &str) -> Result<Option<crate::usage::JobUsage>>;

    /// Takes the job's lease for `holder` for `ttl`: a free or expired lease
    /// is taken (its token grows by one), the holder's own is renewed (same
    /// token), another's unexpired one is [`Claim::Held`].
    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim>;

    /// Extends a lease the caller holds; [`ErrorKind::Conflict`] when it is
    /// no longer the caller's (expired or taken over).
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease>;

    /// Gives a lease up (it expires now; the token stays, so the next holder
    /// gets a larger one). Releasing a lease already lost does nothing.
    async fn release_lease(&self, lease: &Lease) -> Result<()>;

    /// Every lease row, live or expired.
    async fn leases(&self) -> Result<Vec<Lease>>;

    /// The ledger's own clock (the one leases expire by).
    async fn now(&self) -> Result<OffsetDateTime>;

    /// Records that gpufleet started an instance (see [`InstanceSpend`]).
    /// Recording one already held (same cloud and id) changes nothing: the
    /// first record, its price and start, stands.
    async fn record_instance_start(&self, spend: &InstanceSpend) -> Result<()>;

    /// Records the end of an instance the ledger holds as alive. The first
    /// end recorded stands: `false` when the instance had ended already or
    /// is not in the ledger (nothing is written). An end before its start is
    /// recorded at its start.
    async fn record_instance_end(
        &self,
        cloud: crate::Cloud,
        id: &InstanceId,
        end: &InstanceEnd,
    ) -> Result<bool>;

    /// The instances alive now or ended at or after `since` (every one for
    /// `None`), oldest start first.
    async fn spend(&self, since: Option<OffsetDateTime>) -> Result<Vec<InstanceSpend>>;

    /// Writes a service's row (replacing the one it had), under the rules
    /// of the [module docs](self#services): refused with
    /// [`ErrorKind::Conflict`] unless `row.fence` is the live token of
    /// [`service_lease`]`(name)`, or it carries none and no live lease holds
    /// the service. A backend that keeps no services answers
    /// [`ErrorKind::Unsupported`].
    async fn save_service(&self, row: &ServiceRow) -> Result<()> {
        Err(no_services(self, &row.name))
    }

    /// Every service's row, by name.
    async fn services(&self) -> Result<Vec<ServiceRow>> {
        Err(no_services(self, "any"))
    }

    /// Appends to a service's log under the same rules as
    /// [`Ledger::save_service`] (a [`ServiceEntryKind::Request`] needs no
    /// token); returns the entry's [`ServiceEntry::seq`], larger than any
    /// the service's log held.
    async fn append_service_entry(&self, entry: &ServiceEntry) -> Result<u64> {
        Err(no_services(self, &entry.service))
    }

    /// The entries of `service`'s log after `after` (by `seq`), of `kind`
    /// only when given, oldest first.
    async fn service_entries(
        &self,
        service: &str,
        after: u64,
        kind: Option<ServiceEntryKind>,
    ) -> Result<Vec<ServiceEntry>> {
        let _ = (after, kind);
        Err(no_services(self, service))
    }

    /// Where the ledger is, for messages: a path, or `postgres://host:port/db`
    /// (never a password).
    fn location(&self) -> String;
}

/// The error of a backend that keeps no services.
fn no_services<L: Ledger + ?Sized>(l: &L, service: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "ledger {} keeps no services (asked about service {service})",
            l.location()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job state's name in text is its name in JSON.
    #[test]
    fn job_state_names_in_text_match_json() {
        for s in JobState::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(JobState::Succeeded.as_str(), "succeeded");
    }

    /// Another definition under a recorded id names where it differs (it
    /// said only "another definition"), never an environment value, and at
    /// most three places.
    #[test]
    fn another_definition_names_where_it_differs_but_no_secret() {
        let was = r#"{"hours":6.0,"workload":{"env":{"TOKEN":"s3cret-1"},"run":"a"}}"#;
        let now = r#"{"hours":9.0,"workload":{"env":{"TOKEN":"s3cret-2"},"run":"a"}}"#;
        let e = same_job_spec("ft1", was, now).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        let m = e.to_string();
        assert!(m.contains("hours: 6.0 → 9.0"), "{m}");
        assert!(m.contains("workload.env.TOKEN (value not shown)"), "{m}");
        assert!(!m.contains("s3cret"), "{m}");
        assert!(m.contains("under another id"), "{m}");
        let many = same_job_spec(
            "j",
            r#"{"a":1,"b":1,"c":1,"d":1,"e":1}"#,
            r#"{"a":2,"b":2,"c":2,"d":2,"e":2}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            many.contains("a: 1 → 2, b: 1 → 2, c: 1 → 2 and elsewhere"),
            "{many}"
        );
        assert!(same_job_spec("j", was, was).is_ok());
    }
}
