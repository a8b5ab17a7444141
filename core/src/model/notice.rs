//! Interruption notices.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::*;

/// What an interruption notice warns of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeKind {
    /// The instance will be taken back (AWS instance-action, GCP `preempted`,
    /// Azure `Preempt`).
    Preemption,
    /// The cloud recommends moving off (AWS rebalance recommendation).
    Rebalance,
    /// Host maintenance (GCP maintenance-event, Azure Reboot/Redeploy/Terminate).
    Maintenance,
}

impl NoticeKind {
    /// `preemption`, `rebalance` or `maintenance`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Preemption => "preemption",
            NoticeKind::Rebalance => "rebalance",
            NoticeKind::Maintenance => "maintenance",
        }
    }
}

/// A warning that an instance will be interrupted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptionNotice {
    /// The instance, where the source names it.
    pub instance: Option<InstanceId>,
    /// What is coming.
    pub kind: NoticeKind,
    /// When the instance will be stopped, where known.
    #[serde(with = "time::serde::rfc3339::option")]
    pub deadline: Option<OffsetDateTime>,
    /// Which signal delivered it (`aws-imds:spot/instance-action`, …).
    pub source: String,
    /// When gpufleet received it.
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
}
