//! A service in the ledger: its controller's lease, its row (the
//! controller's account of it, written when it changes), its log (each
//! replica's transitions with why, scale decisions, rollouts) and the
//! requests people make of it (`serve down`, `serve update`), which the
//! controller reads at each step. The rules of these writes are the ledger
//! module's (`gpufleet_core::ledger`, "Services").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_core::ledger::{
    service_lease, Claim, Lease, Ledger, ServiceEntry, ServiceEntryKind, ServiceRow,
};
use gpufleet_core::serve::{ReplicaState, ScaleDecision};
use gpufleet_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::status::{ReplicaStatus, RolloutStatus, ServiceStatus};

/// How long a service's lease lasts unless renewed; renewed every third of
/// it.
pub const SERVICE_LEASE: Duration = Duration::from_secs(15);

/// The row is written at least this often while the service runs (its load
/// and cost), and at once when anything else in it changes.
const ROW_EVERY: Duration = Duration::from_secs(5);

/// The longest one ledger call of a service's controller may take: a
/// ledger that does not answer (cut off, restarting) must not hold a step,
/// a SIGTERM or the lease's deadline up.
pub const LEDGER_CALL: Duration = Duration::from_secs(3);

/// `call`, bounded by [`LEDGER_CALL`] (then an error of kind `Timeout`).
pub(super) async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(LEDGER_CALL, call).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("the ledger did not answer {what} within {LEDGER_CALL:?}"),
        )),
    }
}

/// What a service's row holds: the controller's account of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceDoc {
    /// Whether it is up (false once taken down).
    pub up: bool,
    /// Why it was taken down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_because: Option<String>,
    /// The controller serving it (its lease holder).
    pub holder: String,
    /// Whose service it is (the owner its controller serves as); `None` in
    /// a row written before owners were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where its proxy listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The last request of its log the controller has acted on.
    pub requests_handled: u64,
    /// The service file of the version it serves, when the controller was
    /// given it (a controller that takes over serves this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_file: Option<String>,
    /// The service as the controller last saw it.
    pub status: ServiceStatus,
}

/// What a person asks of a service's controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "kebab-case")]
pub enum ServiceRequest {
    /// Take the service down: every replica ends, the controller exits.
    Down {
        /// Who asked, for the record.
        by: String,
    },
    /// Roll out this service file as the next version.
    Update {
        /// The service file (TOML), as given.
        service_file: String,
        /// Who asked.
        by: String,
    },
}

/// Where a service stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceState {
    /// Its controller holds its lease.
    Serving,
    /// Taken down.
    Down,
    /// Its controller stopped without taking it down: the lease lapsed.
    Stopped,
}

impl ServiceState {
    /// `serving`, `down`, `stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceState::Serving => "serving",
            ServiceState::Down => "down",
            ServiceState::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for ServiceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One service as `serve ls` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceView {
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub state: ServiceState,
    /// The controller's account.
    pub doc: ServiceDoc,
    /// Its lease, when one was ever taken.
    pub lease: Option<Lease>,
    /// When the row was last written.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

fn encode<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| {
        Error::new(ErrorKind::Unexpected, "cannot encode a service record").with_source(e)
    })
}

/// Every service the ledger holds, each with its state.
pub async fn services(ledger: &dyn Ledger) -> Result<Vec<ServiceView>> {
    let rows = ledger.services().await?;
    let leases = ledger.leases().await?;
    let now = ledger.now().await?;
    rows.into_iter()
        .map(|row| {
            let doc: ServiceDoc = serde_json::from_str(&row.doc).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "ledger {} holds an unreadable record of service {}",
                        ledger.location(),
                        row.name
                    ),
                )
                .with_source(e)
            })?;
            let key = service_lease(&row.name);
            let lease = leases.iter().find(|l| l.job_id == key).cloned();
            let live = lease.as_ref().is_some_and(|l| l.is_live(now));
            let state = match (doc.up, live) {
                (false, _) => ServiceState::Down,
                (true, true) => ServiceState::Serving,
                (true, false) => ServiceState::Stopped,
            };
            Ok(ServiceView {
                name: row.name,
                state,
                doc,
                lease,
                updated_at: row.updated_at,
            })
        })
        .collect()
}

/// The service `name`, or NotFound naming the services there are.
pub async fn service(ledger: &dyn Ledger, name: &str) -> Result<ServiceView> {
    let all = services(ledger).await?;
    let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
    all.into_iter().find(|s| s.name == name).ok_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "no service named '{name}' in ledger {} ({})",
                ledger.location(),
                if names.is_empty() {
                    "it holds none: `gpufleet serve --service FILE` starts one".to_string()
                } else {
                    format!("it holds {}", names.join(", "))
                }
            ),
        )
    })
}

/// Refuses `who` acting on service `s` when it is another owner's (`None`:
/// anyone may, as with `--any-owner`); `verb` names the command.
pub fn check_owner(s: &ServiceView, who: Option<&str>, verb: &str) -> Result<()> {
    match (who, s.doc.owner.as_deref()) {
        (Some(who), Some(theirs)) if who != theirs => Err(Error::invalid_input(format!(
            "service {} is {theirs}'s, not {who}'s: nothing was done; `{verb} --any-owner` acts on another owner's service",
            s.name
        ))),
        _ => Ok(()),
    }
}

/// Asks the controller serving `name` for `request` as `who` (another
/// owner's service is refused unless `who` is `None`); returns the
/// request's place in the log. A service no controller serves is refused
/// (Conflict), except that `down` of a service whose controller stopped
/// without taking it down marks it down.
pub async fn request(
    ledger: &dyn Ledger,
    name: &str,
    request: &ServiceRequest,
    who: Option<&str>,
) -> Result<u64> {
    let s = service(ledger, name).await?;
    let verb = match request {
        ServiceRequest::Down { .. } => "gpufleet serve down",
        ServiceRequest::Update { .. } => "gpufleet serve update",
    };
    check_owner(&s, who, verb)?;
    match (s.state, request) {
        (ServiceState::Serving, _) => {}
        (ServiceState::Stopped, ServiceRequest::Down { by }) => {
            let mut doc = s.doc.clone();
            doc.up = false;
            doc.down_because = Some(format!(
                "taken down by {by} after its controller ({}) had stopped",
                doc.holder
            ));
            let now = ledger.now().await?;
            ledger
                .save_service(&ServiceRow {
                    name: name.into(),
                    doc: encode(&doc)?,
                    fence: None,
                    updated_at: now,
                })
                .await?;
            return Ok(0);
        }
        (state, _) => {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "service {name} is {state}: no controller serves it{}",
                    if state == ServiceState::Down {
                        "; `gpufleet serve --service FILE` starts it again"
                    } else {
                        ""
                    }
                ),
            ))
        }
    }
    let now = ledger.now().await?;
    let entry = ServiceEntry::new(name, now, ServiceEntryKind::Request, encode(request)?);
    ledger.append_service_entry(&entry).await
}

/// Waits (polling every 200 ms, up to `timeout`) until `done` says yes of
/// the service's view; the last view either way, and whether `done` said
/// yes.
pub async fn wait_for(
    ledger: &dyn Ledger,
    name: &str,
    timeout: Duration,
    done: impl Fn(&ServiceView) -> bool,
) -> Result<(ServiceView, bool)> {
    let until = Instant::now() + timeout;
    loop {
        let s = service(ledger, name).await?;
        if done(&s) {
            return Ok((s, true));
        }
        if Instant::now() >= until || s.state != ServiceState::Serving {
            return Ok((s, false));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A service's log, oldest first.
pub async fn history(ledger: &dyn Ledger, name: &str) -> Result<Vec<ServiceEntry>> {
    ledger.service_entries(name, 0, None).await
}

/// The controller's side: its lease, and what it has written.
#[derive(Debug)]
pub(super) struct Book {
    ledger: Arc<dyn Ledger>,
    name: String,
    holder: String,
    owner: String,
    listen: Option<String>,
    lease: Option<Lease>,
    renewed: Instant,
    logged: HashMap<String, ReplicaState>,
    decisions: Option<ScaleDecision>,
    rollouts: HashMap<u32, String>,
    row: String,
    written: Option<Instant>,
    /// The last request read (only requests advance it: the controller's
    /// own entries, written meanwhile, never hide one).
    pub requests_after: u64,
    /// A call found the ledger not answering: the log and row are not
    /// written (each would wait its bound) until a renewal succeeds, and
    /// the lease is renewed at every step meanwhile.
    offline: std::sync::atomic::AtomicBool,
    /// The service file the row records.
    service_file: Option<String>,
}

impl Book {
    pub(super) fn new(
        ledger: Arc<dyn Ledger>,
        name: &str,
        holder: String,
        owner: String,
        listen: Option<String>,
    ) -> Self {
        Book {
            ledger,
            name: name.into(),
            holder,
            owner,
            listen,
            lease: None,
            renewed: Instant::now(),
            logged: HashMap::new(),
            decisions: None,
            rollouts: HashMap::new(),
            row: String::new(),
            written: None,
            requests_after: 0,
            offline: std::sync::atomic::AtomicBool::new(false),
            service_file: None,
        }
    }

    /// Takes the service's lease; Conflict naming the holder when another
    /// controller serves it. Requests made before now are not this run's.
    pub(super) async fn claim(&mut self) -> Result<()> {
        let key = service_lease(&self.name);
        match self
            .ledger
            .acquire_lease(&key, &self.holder, SERVICE_LEASE)
            .await?
        {
            Claim::Acquired(l) => {
                self.lease = Some(l);
                self.renewed = Instant::now();
            }
            Claim::Held(l) => {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "service {} is served by another controller ({}, its lease runs to {}); `gpufleet serve down {}` takes it down",
                        self.name, l.holder, l.expires_at, self.name
                    ),
                ))
            }
        }
        self.requests_after = self
            .ledger
            .service_entries(&self.name, 0, Some(ServiceEntryKind::Request))
            .await?
            .iter()
            .map(|e| e.seq)
            .max()
            .unwrap_or(0);
        Ok(())
    }

    fn fence(&self) -> Option<u64> {
        self.lease.as_ref().map(|l| l.token)
    }

    /// Renews the lease when a third of it has passed (each second once a
    /// renewal failed): `Ok` when it is held or still vouched for,
    /// Conflict when another controller has it (this one must stop without
    /// touching the replicas: they are the other's now), and the failure
    /// of the renewal (the ledger cut off) once the lease can no longer be
    /// vouched for ([`Book::vouched_until`] has passed): this controller
    /// must stop routing, as another may take the service over soon.
    pub(super) async fn renew(&mut self) -> Result<()> {
        let Some(lease) = self.lease.clone() else {
            return Ok(());
        };
        if !self.is_offline() && self.renewed.elapsed() < SERVICE_LEASE / 3 {
            return Ok(());
        }
        let sent = Instant::now();
        match bounded(
            "a lease renewal",
            self.ledger.renew_lease(&lease, SERVICE_LEASE),
        )
        .await
        {
            Ok(l) => {
                self.lease = Some(l);
                self.renewed = sent;
                self.set_offline(false);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::Conflict => Err(e),
            Err(e) if Instant::now() >= self.vouched_until().unwrap_or(sent) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "the lease on service {} could not be renewed for {:.0} s of its {:.0} s ({})",
                    self.name,
                    self.renewed.elapsed().as_secs_f64(),
                    SERVICE_LEASE.as_secs_f64(),
                    e.message()
                ),
            )),
            Err(e) => {
                self.set_offline(true);
                tracing::warn!(service = %self.name, error = %e, "renewing the service's lease failed; trying again");
                Ok(())
            }
        }
    }

    /// A failed call that says the ledger does not answer marks it so.
    fn note_failure(&self, e: &Error) {
        if matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable) {
            self.set_offline(true);
        }
    }

    fn is_offline(&self) -> bool {
        self.offline.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_offline(&self, off: bool) {
        self.offline
            .store(off, std::sync::atomic::Ordering::Relaxed);
    }

    /// Until when this controller may act as the service's: two thirds of
    /// the lease after the last renewal that succeeded was sent (the
    /// ledger's expiry is a lease from when it received it, later still),
    /// so that it stops a third of a lease before another may take over.
    /// `None` without a lease.
    pub(super) fn vouched_until(&self) -> Option<Instant> {
        self.lease
            .as_ref()
            .map(|_| self.renewed + SERVICE_LEASE * 2 / 3)
    }

    /// Takes the lease again after it could not be renewed (the ledger
    /// came back): `true` when taken (this controller serves again),
    /// `false` when the ledger still does not answer, Conflict naming the
    /// holder when another controller took the service meanwhile.
    pub(super) async fn reclaim(&mut self) -> Result<bool> {
        let key = service_lease(&self.name);
        let sent = Instant::now();
        match bounded(
            "a lease claim",
            self.ledger.acquire_lease(&key, &self.holder, SERVICE_LEASE),
        )
        .await
        {
            Ok(Claim::Acquired(l)) => {
                self.lease = Some(l);
                self.renewed = sent;
                self.set_offline(false);
                Ok(true)
            }
            Ok(Claim::Held(l)) => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "service {} was taken over by another controller ({}) while this one could not reach the ledger",
                    self.name, l.holder
                ),
            )),
            Err(e) => {
                tracing::warn!(service = %self.name, error = %e, "the ledger still does not answer; not serving");
                Ok(false)
            }
        }
    }

    /// The service file the row records from now on.
    pub(super) fn set_service_file(&mut self, text: Option<String>) {
        self.service_file = text;
    }

    /// Forgets the lease without giving it back (another controller holds
    /// it now): nothing more is written under it.
    pub(super) fn lose(&mut self) {
        self.lease = None;
    }

    /// The requests made since the last read, oldest first; a request that
    /// cannot be read is logged and skipped.
    pub(super) async fn requests(&mut self) -> Vec<(u64, ServiceRequest)> {
        if self.is_offline() {
            return Vec::new();
        }
        let entries = match bounded(
            "a read of the service's requests",
            self.ledger.service_entries(
                &self.name,
                self.requests_after,
                Some(ServiceEntryKind::Request),
            ),
        )
        .await
        {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(service = %self.name, error = %e, "reading the service's requests failed");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for e in entries {
            self.requests_after = self.requests_after.max(e.seq);
            match serde_json::from_str::<ServiceRequest>(&e.doc) {
                Ok(r) => out.push((e.seq, r)),
                Err(err) => {
                    tracing::warn!(service = %self.name, seq = e.seq, error = %err, "an unreadable request was skipped")
                }
            }
        }
        out
    }

    async fn append(&self, at: OffsetDateTime, kind: ServiceEntryKind, doc: String) {
        if self.is_offline() {
            return;
        }
        let mut entry = ServiceEntry::new(self.name.as_str(), at, kind, doc);
        entry.fence = self.fence();
        if let Err(e) = bounded("a log entry", self.ledger.append_service_entry(&entry)).await {
            self.note_failure(&e);
            tracing::warn!(service = %self.name, kind = kind.as_str(), error = %e, "recording in the service's log failed");
        }
    }

    /// Logs what changed since the last call (each replica's new state, new
    /// scale decisions, rollouts begun or ended) and writes the row when it
    /// changed or is due.
    pub(super) async fn record(
        &mut self,
        status: &ServiceStatus,
        up: bool,
        down_because: Option<&str>,
    ) {
        // Not while the ledger does not answer: what changed is logged once
        // it does (a replica's state is logged when it differs from the
        // last one logged).
        if self.is_offline() {
            return;
        }
        let now = OffsetDateTime::now_utc();
        let replicas: Vec<&ReplicaStatus> = status
            .replicas
            .iter()
            .filter(|r| self.logged.get(&r.id) != Some(&r.state))
            .collect();
        for r in replicas {
            let at = match r.state {
                ReplicaState::Starting => r.started_at,
                ReplicaState::Ready => r.ready_at.unwrap_or(now),
                ReplicaState::Draining => now,
                ReplicaState::Ended => r.ended_at.unwrap_or(now),
            };
            if let Ok(doc) = encode(r) {
                self.append(at, ServiceEntryKind::Replica, doc).await;
            }
            self.logged.insert(r.id.clone(), r.state);
        }
        // Ended replicas leave the status after a while: so do their marks.
        self.logged
            .retain(|id, _| status.replicas.iter().any(|r| &r.id == id));
        let new: Vec<&ScaleDecision> = match &self.decisions {
            Some(last) => {
                let from = status.decisions.iter().rposition(|d| d == last);
                status.decisions[from.map_or(0, |i| i + 1)..]
                    .iter()
                    .collect()
            }
            None => status.decisions.iter().collect(),
        };
        for d in new {
            if let Ok(doc) = encode(d) {
                self.append(d.at, ServiceEntryKind::Scale, doc).await;
            }
            self.decisions = Some(d.clone());
        }
        let rollouts: Vec<&RolloutStatus> = status
            .rollouts
            .iter()
            .filter(|r| self.rollouts.get(&r.version) != Some(&r.outcome))
            .collect();
        for r in rollouts {
            if let Ok(doc) = encode(r) {
                self.append(
                    r.ended_at.unwrap_or(r.began_at),
                    ServiceEntryKind::Rollout,
                    doc,
                )
                .await;
            }
            self.rollouts.insert(r.version, r.outcome.clone());
        }
        self.write_row(status, up, down_because, now).await;
    }

    async fn write_row(
        &mut self,
        status: &ServiceStatus,
        up: bool,
        down_because: Option<&str>,
        now: OffsetDateTime,
    ) {
        let doc = ServiceDoc {
            up,
            down_because: down_because.map(str::to_string),
            holder: self.holder.clone(),
            owner: Some(self.owner.clone()),
            listen: self.listen.clone(),
            requests_handled: self.requests_after,
            service_file: self.service_file.clone(),
            status: status.clone(),
        };
        // The load sample changes every step: it alone does not make a
        // write due before ROW_EVERY.
        let mut shape = doc.clone();
        shape.status.load = None;
        let Ok(shape) = encode(&shape) else { return };
        let due = self.written.is_none_or(|w| w.elapsed() >= ROW_EVERY);
        if shape == self.row && !due {
            return;
        }
        let Ok(text) = encode(&doc) else { return };
        let row = ServiceRow {
            name: self.name.clone(),
            doc: text,
            fence: self.fence(),
            updated_at: now,
        };
        match bounded("the service's row", self.ledger.save_service(&row)).await {
            Ok(()) => {
                self.row = shape;
                self.written = Some(Instant::now());
            }
            Err(e) => {
                self.note_failure(&e);
                tracing::warn!(service = %self.name, error = %e, "writing the service's record failed")
            }
        }
    }

    /// Logs the controller's start or end.
    pub(super) async fn lifecycle(&self, what: &str) {
        let doc = serde_json::json!({ "what": what, "holder": self.holder }).to_string();
        self.append(OffsetDateTime::now_utc(), ServiceEntryKind::Lifecycle, doc)
            .await;
    }

    /// Gives the lease up (the service is down).
    pub(super) async fn release(&mut self) {
        if let Some(l) = self.lease.take() {
            if let Err(e) = bounded("a lease release", self.ledger.release_lease(&l)).await {
                tracing::warn!(service = %self.name, error = %e, "releasing the service's lease failed");
            }
        }
    }
}
