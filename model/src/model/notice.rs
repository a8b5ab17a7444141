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

/// What a cloud's event feed (AWS: EventBridge rules delivered to an SQS
/// queue) said about one instance, as the controller acts on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum CloudEventKind {
    /// The instance will be taken back (EC2 Spot Instance Interruption
    /// Warning), at `deadline` where said (two minutes after the warning).
    Interruption {
        /// When it will be stopped or terminated.
        #[serde(with = "time::serde::rfc3339::option")]
        deadline: Option<OffsetDateTime>,
    },
    /// The cloud sees a raised risk of interruption (EC2 Instance Rebalance
    /// Recommendation).
    Rebalance,
    /// The instance changed state (EC2 Instance State-change Notification).
    StateChange {
        /// The new state.
        state: InstanceState,
    },
}

/// One event about one instance from a cloud's event feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudEvent {
    /// The instance, as the cloud's provider names it.
    pub instance: InstanceId,
    /// What happened.
    #[serde(flatten)]
    pub kind: CloudEventKind,
    /// When the cloud says it happened.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The event's type in the cloud's words (its EventBridge `detail-type`).
    pub source: String,
    /// The cloud account the event is about, where the feed says (the
    /// EventBridge event's `account`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

impl CloudEvent {
    /// Why the event cannot be about `capacity`'s instance, or `None` when
    /// it can: an interruption warning or a rebalance recommendation is
    /// about a spot instance only (EC2 sends neither for on-demand), so one
    /// naming an on-demand instance is not obeyed.
    pub fn mismatch(&self, capacity: crate::Capacity) -> Option<String> {
        let spot_only = matches!(
            self.kind,
            CloudEventKind::Interruption { .. } | CloudEventKind::Rebalance
        );
        (spot_only && capacity != crate::Capacity::Spot).then(|| {
            format!(
                "'{}' is about spot instances, and {} is {capacity}",
                self.source, self.instance
            )
        })
    }

    /// Whether the event means the instance is being taken away or has
    /// stopped running: an interruption warning, or a state change to
    /// stopping, stopped, shutting down or terminated. A rebalance
    /// recommendation is not (the instance may run for hours).
    pub fn ends_instance(&self) -> bool {
        match &self.kind {
            CloudEventKind::Interruption { .. } => true,
            CloudEventKind::Rebalance => false,
            CloudEventKind::StateChange { state } => {
                !matches!(state, InstanceState::Pending | InstanceState::Running)
            }
        }
    }
}
