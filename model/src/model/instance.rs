//! Instances, their tags and states, why they ended, and idempotency keys.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::{Error, Result};

use super::*;

/// Tags (AWS, Azure) or labels (GCP), by key.
pub type Tags = BTreeMap<String, String>;

/// The tag keys gpufleet writes on what it creates. Providers translate them to
/// each cloud's rules (GCP labels allow no `:`; they become `-`).
pub mod tags {
    /// Present (value `true`) on everything gpufleet created.
    pub const MANAGED: &str = "gpufleet:managed";
    /// The job an instance runs.
    pub const JOB: &str = "gpufleet:job";
    /// The service whose replica an instance is (`gpufleet serve`).
    pub const SERVICE: &str = "gpufleet:service";
    /// Who launched it.
    pub const OWNER: &str = "gpufleet:owner";
    /// Which team pays for it.
    pub const TEAM: &str = "gpufleet:team";
    /// When it should be gone (RFC 3339).
    pub const EXPIRES_AT: &str = "gpufleet:expires-at";
    /// The idempotency key it was launched with.
    pub const IDEMPOTENCY_KEY: &str = "gpufleet:idempotency-key";
    /// How many instances the launch that made an instance asked for: a
    /// resumed launch of the same request is told from a different request
    /// under the same key.
    pub const LAUNCH_COUNT: &str = "gpufleet:launch-count";
    /// The project it belongs to (from the config's default tags).
    pub const PROJECT: &str = "gpufleet:project";
    /// The image it was launched from (a relaunch under the same name with
    /// another image is refused, not handed the old instance).
    pub const IMAGE: &str = "gpufleet:image";
    /// When the job on it last reported progress (RFC 3339); `gpufleet reap
    /// --idle` treats an instance without a recent one as forgotten.
    pub const HEARTBEAT: &str = "gpufleet:heartbeat";
    /// The share of its work the job on it reports done, in thousandths
    /// (`0`..`1000`; digits only, so it is a valid GCP label value), written
    /// by the node.
    pub const PROGRESS: &str = "gpufleet:progress";
    /// The job's exit status once it ended, written by the node.
    pub const EXIT: &str = "gpufleet:exit";
    /// When the node saw an interruption notice (Unix seconds), written by
    /// its watch agent.
    pub const NOTICE: &str = "gpufleet:notice";
    /// What the node's GPUs did lately, written by its agent with the
    /// heartbeat (see `gpufleet_core::usage`).
    pub const GPU: &str = "gpufleet:gpu";
    /// How long the node's GPUs have stayed under each utilisation level,
    /// written by its agent with the heartbeat (see `gpufleet_core::usage`).
    pub const GPU_QUIET: &str = "gpufleet:gpu-quiet";

    /// The tags a node writes on its own instance after launch (its boot
    /// script and watch agent), as against those gpufleet sets at launch.
    pub const NODE_REPORTED: [&str; 6] = [HEARTBEAT, PROGRESS, EXIT, NOTICE, GPU, GPU_QUIET];

    /// The tag a person names by its short name, as `ls` heads its columns
    /// and the config's `[tags]` sets them: `team`, `project`, `owner` and
    /// `job` are gpufleet's own (`gpufleet:team`, …); any other name is
    /// nobody's here.
    pub fn named(short: &str) -> Option<&'static str> {
        match short {
            "team" => Some(TEAM),
            "project" => Some(PROJECT),
            "owner" => Some(OWNER),
            "job" => Some(JOB),
            _ => None,
        }
    }

    /// A time as gpufleet writes it in a tag (RFC 3339, whole seconds, UTC),
    /// read back by [`parse_time`].
    pub fn format_time(at: time::OffsetDateTime) -> String {
        let at = at
            .to_offset(time::UtcOffset::UTC)
            .replace_nanosecond(0)
            .unwrap_or(at);
        at.format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| at.unix_timestamp().to_string())
    }

    /// A time a node or gpufleet wrote in a tag: RFC 3339 or Unix seconds
    /// (GCP label values cannot hold `:`).
    pub fn parse_time(value: &str) -> Option<time::OffsetDateTime> {
        if let Ok(secs) = value.trim().parse::<i64>() {
            return time::OffsetDateTime::from_unix_timestamp(secs).ok();
        }
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339).ok()
    }
}

/// Instances whose tags hold every given key with the given value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagFilter(pub Tags);

impl TagFilter {
    /// Everything gpufleet manages.
    pub fn managed() -> Self {
        TagFilter::default().with(tags::MANAGED, "true")
    }

    /// Adds a required key and value.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }

    /// Whether the tags match.
    pub fn matches(&self, tags: &Tags) -> bool {
        self.0.iter().all(|(k, v)| tags.get(k) == Some(v))
    }
}

/// The lifecycle state of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// Being created.
    Pending,
    /// Running and billed.
    Running,
    /// Being stopped.
    Stopping,
    /// Stopped.
    Stopped,
    /// Being terminated.
    ShuttingDown,
    /// Gone.
    Terminated,
}

impl InstanceState {
    /// Whether the instance may still cost money.
    pub fn is_live(self) -> bool {
        !matches!(self, InstanceState::Terminated)
    }
}

/// Who ended an instance, as far as its cloud says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndCause {
    /// The cloud took spot capacity back: EC2 `Server.SpotInstanceTermination`
    /// (or `...Shutdown`), a GCE `compute.instances.preempted` operation, an
    /// Azure Spot eviction.
    Reclaimed,
    /// An API caller, a user or the instance itself stopped or terminated it
    /// (EC2 `Client.*`, a GCE `stop`/`delete` operation).
    Requested,
    /// Another cause the cloud named (a host failure, a scheduled event).
    Other,
}

/// Why a stopped or terminated instance ended: the cause and the cloud's own
/// code for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndReason {
    /// The cause, classified.
    pub cause: EndCause,
    /// The cloud's code: `Server.SpotInstanceTermination`,
    /// `compute.instances.preempted`, `PowerState/deallocated`, ...
    pub code: String,
}

impl EndReason {
    /// A reason with `cause` and the cloud's `code`.
    pub fn new(cause: EndCause, code: impl Into<String>) -> Self {
        Self {
            cause,
            code: code.into(),
        }
    }
}

/// An instance gpufleet launched or found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// The cloud's identifier.
    pub id: InstanceId,
    /// Where it runs.
    pub pool: Pool,
    /// Its state.
    pub state: InstanceState,
    /// Its tags.
    pub tags: Tags,
    /// When it was launched.
    #[serde(with = "time::serde::rfc3339")]
    pub launched_at: OffsetDateTime,
    /// When it should be gone, from its TTL.
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// The placement group it is in.
    pub placement_group: Option<PlacementGroupId>,
    /// Why it stopped or ended, where the cloud says (`None` while it runs,
    /// and where the cloud gives no reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<EndReason>,
    /// When it ended, where the cloud says (EC2's state transition time, the
    /// fake cloud's clock); `None` while it runs and where the cloud does
    /// not say.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub ended_at: Option<OffsetDateTime>,
    /// Its network addresses, where the cloud reports them (none until the
    /// cloud has given them: a Compute Engine instance being inserted, an
    /// Azure VM whose network interface is still being made).
    #[serde(default, skip_serializing_if = "Addresses::is_empty")]
    pub addresses: Addresses,
}

/// An instance's network addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addresses {
    /// Its primary private address, in its network (EC2's
    /// `PrivateIpAddress`, Compute Engine's `networkIP`, the primary IP
    /// configuration of an Azure VM's primary network interface).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<IpAddr>,
    /// Its public address, where it has one (EC2's `PublicIpAddress`,
    /// Compute Engine's `natIP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<IpAddr>,
}

impl Addresses {
    /// No address known.
    pub fn is_empty(&self) -> bool {
        self.private.is_none() && self.public.is_none()
    }

    /// Parses the addresses a cloud gives as text (an unparsable or empty
    /// one is taken as absent).
    pub fn parse(private: Option<&str>, public: Option<&str>) -> Self {
        let ip = |s: Option<&str>| s.and_then(|s| s.trim().parse::<IpAddr>().ok());
        Addresses {
            private: ip(private),
            public: ip(public),
        }
    }
}

/// An idempotency key: a launch with a key the cloud has seen returns the
/// instances of the first launch instead of launching again. Becomes the EC2
/// `ClientToken`, the GCE `requestId` and the Azure resource name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A key of 1 to 64 ASCII letters, digits, `-`, `_` and `.` (the EC2
    /// `ClientToken` limit is 64 ASCII characters).
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if !Self::is_valid(&key) {
            return Err(Error::invalid_input(format!(
                "invalid idempotency key '{key}': use 1 to 64 ASCII letters, digits, '-', '_' or '.'"
            )));
        }
        Ok(IdempotencyKey(key))
    }

    /// Whether `key` is 1 to 64 ASCII letters, digits, `-`, `_` and `.`
    /// (also the rule for job ids, which keys derive from).
    pub fn is_valid(key: &str) -> bool {
        !key.is_empty()
            && key.len() <= 64
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// 16 hex digits of the key's FNV-1a 64-bit hash: stable across releases
    /// and platforms, for clouds whose names or labels cannot hold the key
    /// itself (names derived from it must not change when gpufleet is
    /// upgraded, or a retried launch would not find its instances).
    pub fn fingerprint(&self) -> String {
        format!("{:016x}", fnv1a64(self.0.as_bytes()))
    }

    /// The name of the `index`th instance of a launch with this key,
    /// `gf-<fingerprint>-<index>`: lower-case letters, digits and `-`, at most
    /// 29 characters, valid on GCP and Azure alike.
    pub fn resource_name(&self, index: u32) -> String {
        format!("gf-{}-{index}", self.fingerprint())
    }
}

/// FNV-1a, 64 bits. Stable by definition (names and request ids are derived
/// from it), unlike `std`'s hashers.
#[doc(hidden)]
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl TryFrom<String> for IdempotencyKey {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        IdempotencyKey::new(s)
    }
}

impl From<IdempotencyKey> for String {
    fn from(k: IdempotencyKey) -> String {
        k.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
