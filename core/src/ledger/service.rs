//! Services in the ledger: each service's row and log, and the rules of
//! their writes (the [ledger module's docs](super#services)).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{Error, ErrorKind};

/// The lease a service's controller holds: `service:NAME`.
pub fn service_lease(name: &str) -> String {
    format!("service:{name}")
}

/// What a service's controller last wrote of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRow {
    /// The service's name.
    pub name: String,
    /// The controller's account of it (a JSON document the runtime writes:
    /// its status, replicas, version, whether it is up).
    pub doc: String,
    /// The token of the lease the controller held when it wrote.
    pub fence: Option<u64>,
    /// When it was written (the writer's clock).
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// What a log entry is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceEntryKind {
    /// A person's request of the controller (its document says which).
    Request,
    /// A replica started, became ready, began draining or ended.
    Replica,
    /// The autoscaler changed the target.
    Scale,
    /// An update began, was promoted or rolled back.
    Rollout,
    /// The controller started serving or took the service down.
    Lifecycle,
}

impl ServiceEntryKind {
    /// Every kind.
    pub const ALL: [ServiceEntryKind; 5] = [
        ServiceEntryKind::Request,
        ServiceEntryKind::Replica,
        ServiceEntryKind::Scale,
        ServiceEntryKind::Rollout,
        ServiceEntryKind::Lifecycle,
    ];

    /// The kind's name in the ledger: `request`, `replica`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceEntryKind::Request => "request",
            ServiceEntryKind::Replica => "replica",
            ServiceEntryKind::Scale => "scale",
            ServiceEntryKind::Rollout => "rollout",
            ServiceEntryKind::Lifecycle => "lifecycle",
        }
    }

    /// Parses [`ServiceEntryKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One entry of a service's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEntry {
    /// Its place in the ledger's order (given by the ledger when written;
    /// ignored on writing).
    pub seq: u64,
    /// The service.
    pub service: String,
    /// When it happened (the writer's clock).
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// What it is about.
    pub kind: ServiceEntryKind,
    /// What happened (a JSON document the runtime writes).
    pub doc: String,
    /// The writer's lease token (none for a request).
    pub fence: Option<u64>,
}

impl ServiceEntry {
    /// An entry of `kind` for `service` at `at`, unfenced.
    pub fn new(
        service: impl Into<String>,
        at: OffsetDateTime,
        kind: ServiceEntryKind,
        doc: impl Into<String>,
    ) -> Self {
        ServiceEntry {
            seq: 0,
            service: service.into(),
            at,
            kind,
            doc: doc.into(),
            fence: None,
        }
    }

    /// With the writer's lease token.
    pub fn fenced(mut self, token: u64) -> Self {
        self.fence = Some(token);
        self
    }
}

/// Whether a service write under `fence` (of a request, when `request`)
/// passes the rules of the [ledger module's docs](super#services), given
/// the service's lease as `(token, live)`.
pub fn service_write_allowed(
    fence: Option<u64>,
    request: bool,
    lease: Option<(u64, bool)>,
) -> bool {
    match fence {
        Some(t) => lease.is_some_and(|(token, live)| live && token == t),
        None => request || !lease.is_some_and(|(_, live)| live),
    }
}

/// The error for a service write the fencing rules refuse.
pub fn service_fence_refused(service: &str, fence: Option<u64>) -> Error {
    let why = match fence {
        Some(t) => format!(
            "the lease on service {service} is no longer held under token {t} (it expired or another controller took it over)"
        ),
        None => format!("service {service} is served by a controller; only it may write its records"),
    };
    Error::new(ErrorKind::Conflict, format!("{why}; the write was refused"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_the_fencing_rules_hold() {
        for k in ServiceEntryKind::ALL {
            assert_eq!(ServiceEntryKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(ServiceEntryKind::parse("nope"), None);
        // A fenced write needs the live lease with its token.
        assert!(service_write_allowed(Some(3), false, Some((3, true))));
        assert!(!service_write_allowed(Some(3), false, Some((3, false))));
        assert!(!service_write_allowed(Some(2), false, Some((3, true))));
        assert!(!service_write_allowed(Some(3), false, None));
        // An unfenced one: a request always, another only with no live lease.
        assert!(service_write_allowed(None, true, Some((3, true))));
        assert!(!service_write_allowed(None, false, Some((3, true))));
        assert!(service_write_allowed(None, false, Some((3, false))));
        assert!(service_write_allowed(None, false, None));
    }
}
