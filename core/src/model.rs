//! The core model: clouds, locations, instance types, pools, offers, stability,
//! placement groups, interruption notices, instances and launch requests.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::{Error, ErrorKind, Result};
use crate::gpu::GpuModel;
use crate::money::Price;
use crate::suggest;

/// A cloud provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Cloud {
    /// Amazon Web Services.
    Aws,
    /// Google Cloud.
    Gcp,
    /// Microsoft Azure.
    Azure,
    /// The in-memory fake cloud ([`crate::fake::FakeCloud`]).
    Fake,
}

impl Cloud {
    /// The three real clouds.
    pub const REAL: [Cloud; 3] = [Cloud::Aws, Cloud::Gcp, Cloud::Azure];

    /// The lower-case name: `aws`, `gcp`, `azure`, `fake`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
            Cloud::Azure => "azure",
            Cloud::Fake => "fake",
        }
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Cloud {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "aws" | "amazon" | "ec2" => Ok(Cloud::Aws),
            "gcp" | "google" | "gce" => Ok(Cloud::Gcp),
            "azure" | "az" => Ok(Cloud::Azure),
            "fake" => Ok(Cloud::Fake),
            _ => Err(Error::invalid_input(format!(
                "unknown cloud '{s}'; valid clouds: aws, gcp, azure, fake"
            ))),
        }
    }
}

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a name.
            pub fn new(name: impl Into<String>) -> Self {
                Self(name.into())
            }

            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }
    };
}

string_id!(
    /// A region as its cloud names it: `us-east-1`, `us-central1`, `eastus`.
    Region
);
string_id!(
    /// A zone by its stable identifier: the AWS AZ **ID** (`use1-az4`, the same in
    /// every account, unlike the AZ name), the GCP zone (`us-central1-a`), or the
    /// Azure logical zone (`eastus-1`).
    Zone
);
string_id!(
    /// A cloud's identifier for an instance (`i-0abc…`, a GCE instance name, an
    /// Azure VM resource id).
    InstanceId
);
string_id!(
    /// A cloud's identifier for a placement group.
    PlacementGroupId
);

/// On-demand or spot (GCP Spot VMs, Azure Spot VMs, AWS Spot Instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capacity {
    /// Pay-as-you-go capacity that is not preempted.
    OnDemand,
    /// Spare capacity at a discount that the cloud may take back with short notice.
    Spot,
}

impl Capacity {
    /// `on-demand` or `spot`.
    pub fn as_str(self) -> &'static str {
        match self {
            Capacity::OnDemand => "on-demand",
            Capacity::Spot => "spot",
        }
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Capacity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on-demand" | "ondemand" | "od" | "on_demand" => Ok(Capacity::OnDemand),
            "spot" | "preemptible" => Ok(Capacity::Spot),
            _ => Err(Error::invalid_input(format!(
                "unknown capacity type '{s}'; valid: spot, on-demand"
            ))),
        }
    }
}

/// The GPUs of an instance type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuSpec {
    /// The normalised model.
    pub model: GpuModel,
    /// How many GPUs the instance has.
    pub count: u32,
    /// Memory of one GPU in GiB.
    pub memory_gib: u32,
}

impl GpuSpec {
    /// All GPU memory of the instance in GiB.
    pub fn total_memory_gib(&self) -> u32 {
        self.memory_gib.saturating_mul(self.count)
    }
}

/// How the GPUs inside one instance talk to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuLink {
    /// Over PCIe only (or a single GPU).
    Pcie,
    /// NVLink bridges between some or all GPUs.
    Nvlink,
    /// An NVSwitch fabric: every GPU talks to every other at full NVLink bandwidth.
    Nvswitch,
}

/// The network between instances, for multi-node jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fabric {
    /// Ordinary cloud networking.
    Standard,
    /// AWS Elastic Fabric Adapter.
    Efa,
    /// InfiniBand (Azure HPC and ND sizes).
    Infiniband,
    /// GCP GPUDirect-TCPX / TCPXO.
    GpuDirect,
}

/// GPU-to-GPU and node-to-node interconnect of an instance type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Interconnect {
    /// Inside the node.
    pub gpu_link: GpuLink,
    /// Between nodes.
    pub fabric: Fabric,
    /// Network bandwidth of the node in Gbit/s, where published.
    pub network_gbps: Option<u32>,
}

impl Interconnect {
    /// PCIe GPUs on ordinary networking.
    pub const BASIC: Interconnect = Interconnect {
        gpu_link: GpuLink::Pcie,
        fabric: Fabric::Standard,
        network_gbps: None,
    };

    /// Whether several of these nodes can train one model efficiently (an
    /// EFA / InfiniBand / GPUDirect class fabric).
    pub fn multi_node_capable(&self) -> bool {
        !matches!(self.fabric, Fabric::Standard)
    }
}

/// A shape of machine one cloud sells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    /// The cloud that sells it.
    pub cloud: Cloud,
    /// The cloud's name: `p4d.24xlarge`, `a3-highgpu-8g`,
    /// `n1-standard-8+nvidia-tesla-t4x1`, `Standard_ND96isr_H100_v5`.
    pub name: String,
    /// The GPUs, if any.
    pub gpu: Option<GpuSpec>,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in MiB (exact: GCP shapes have fractional GiB).
    pub memory_mib: u64,
    /// GPU and network interconnect.
    pub interconnect: Interconnect,
}

impl InstanceType {
    /// Memory in GiB.
    pub fn memory_gib(&self) -> f64 {
        self.memory_mib as f64 / 1024.0
    }

    /// The GPU count (0 without GPUs).
    pub fn gpu_count(&self) -> u32 {
        self.gpu.as_ref().map_or(0, |g| g.count)
    }
}

/// The unit the placer chooses: one instance type, in one location, with one kind
/// of capacity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pool {
    /// The cloud.
    pub cloud: Cloud,
    /// The region.
    pub region: Region,
    /// The zone, where the cloud prices or allocates per zone (`None` for a
    /// regional pool such as an Azure size priced per region).
    pub zone: Option<Zone>,
    /// The instance type name.
    pub instance_type: String,
    /// On-demand or spot.
    pub capacity: Capacity,
}

impl Pool {
    /// The location part, `region` or `region/zone`.
    pub fn location(&self) -> String {
        match &self.zone {
            Some(z) => format!("{}/{}", self.region, z),
            None => self.region.to_string(),
        }
    }
}

impl fmt::Display for Pool {
    /// `aws:us-east-1/use1-az4:p4d.24xlarge:spot`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.cloud,
            self.location(),
            self.instance_type,
            self.capacity
        )
    }
}

/// Where a price (or other observation) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// The snapshot compiled into gpufleet.
    Snapshot,
    /// A cloud API, just now.
    Live,
    /// A local cache of an earlier live fetch.
    Cache,
    /// Given by the user.
    User,
    /// The fake cloud.
    Fake,
}

/// Where a price was observed: the kind and a short name of the source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PriceSource {
    /// Snapshot, live, cache, user or fake.
    pub kind: SourceKind,
    /// The source's name: `skypilot-catalog-aws-v7`,
    /// `ec2:DescribeSpotPriceHistory`, …
    pub name: String,
}

impl PriceSource {
    /// A source of the given kind and name.
    pub fn new(kind: SourceKind, name: impl Into<String>) -> Self {
        PriceSource {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for PriceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            SourceKind::Snapshot => "snapshot",
            SourceKind::Live => "live",
            SourceKind::Cache => "cache",
            SourceKind::User => "user",
            SourceKind::Fake => "fake",
        };
        write!(f, "{kind}:{}", self.name)
    }
}

/// A published band of how often spot capacity is taken back: the AWS Spot
/// Advisor "frequency of interruption" (share of instances interrupted over the
/// trailing month) and the Azure Spot eviction rate use the same five bands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum InterruptionBucket {
    /// Under 5 %.
    #[serde(rename = "<5%")]
    Under5,
    /// 5 to 10 %.
    #[serde(rename = "5-10%")]
    From5To10,
    /// 10 to 15 %.
    #[serde(rename = "10-15%")]
    From10To15,
    /// 15 to 20 %.
    #[serde(rename = "15-20%")]
    From15To20,
    /// Over 20 %.
    #[serde(rename = ">20%")]
    Over20,
}

impl InterruptionBucket {
    /// From the Spot Advisor's `r` index (0 to 4).
    pub fn from_index(r: u8) -> Option<Self> {
        Some(match r {
            0 => InterruptionBucket::Under5,
            1 => InterruptionBucket::From5To10,
            2 => InterruptionBucket::From10To15,
            3 => InterruptionBucket::From15To20,
            4 => InterruptionBucket::Over20,
            _ => return None,
        })
    }

    /// The Spot Advisor's `r` index (0 to 4).
    pub fn index(self) -> u8 {
        self as u8
    }

    /// The band's label: `<5%`, `5-10%`, `10-15%`, `15-20%`, `>20%`.
    pub fn label(self) -> &'static str {
        match self {
            InterruptionBucket::Under5 => "<5%",
            InterruptionBucket::From5To10 => "5-10%",
            InterruptionBucket::From10To15 => "10-15%",
            InterruptionBucket::From15To20 => "15-20%",
            InterruptionBucket::Over20 => ">20%",
        }
    }
}

impl fmt::Display for InterruptionBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Interruptions and capacity failures gpufleet itself saw in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Observed {
    /// Interruptions seen.
    pub interruptions: u32,
    /// Launches refused for lack of capacity.
    pub capacity_failures: u32,
    /// Instance-hours gpufleet watched the pool for.
    pub exposure_hours: f64,
    /// When the last interruption was seen.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_interruption_at: Option<OffsetDateTime>,
}

/// What is known about how likely a pool is to take its capacity back.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Stability {
    /// The estimated interruption hazard in interruptions per instance-hour, where
    /// an estimate has been made.
    pub interruption_rate_per_hour: Option<f64>,
    /// AWS spot placement score, 1 (unlikely to succeed) to 10 (very likely).
    pub placement_score: Option<u8>,
    /// AWS Spot Advisor interruption bucket or Azure eviction-rate band.
    pub bucket: Option<InterruptionBucket>,
    /// What gpufleet itself observed.
    pub observed: Option<Observed>,
}

/// A price point in a spot price history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PricePoint {
    /// The pool.
    pub pool: Pool,
    /// The price from this time on.
    pub price: Price,
    /// When the price took effect.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Where it came from.
    pub source: PriceSource,
}

impl PricePoint {
    /// The history of a cloud that publishes no spot price history (GCP,
    /// Azure): each of `offers` for `pool` as one point, in effect since the
    /// later of its `observed_at` (the price's effective date) and `since`.
    pub fn from_current(
        offers: impl IntoIterator<Item = Offer>,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Vec<PricePoint> {
        offers
            .into_iter()
            .filter(|o| o.pool == *pool)
            .map(|o| PricePoint {
                at: o.observed_at.max(since),
                pool: o.pool,
                price: o.price,
                source: o.source,
            })
            .collect()
    }
}

/// A price for a pool, observed at a time from a source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    /// The pool.
    pub pool: Pool,
    /// The instance type sold in the pool.
    pub instance_type: Arc<InstanceType>,
    /// The account-specific zone name where it differs from the zone ID (AWS
    /// `us-east-1a` for `use1-az4`).
    pub zone_name: Option<String>,
    /// The hourly price of one instance.
    pub price: Price,
    /// When the price was observed.
    #[serde(with = "time::serde::rfc3339")]
    pub observed_at: OffsetDateTime,
    /// Where it came from.
    pub source: PriceSource,
    /// Stability signals for the pool.
    pub stability: Stability,
}

impl Offer {
    /// The hourly price of one GPU of the instance (the whole price without GPUs).
    pub fn price_per_gpu(&self) -> Price {
        self.price.per(self.instance_type.gpu_count())
    }
}

/// How instances in a placement group are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "strategy", content = "partitions")]
pub enum PlacementStrategy {
    /// Close together for low latency (AWS cluster, GCP compact collocation, Azure
    /// proximity placement group).
    Cluster,
    /// On distinct hardware.
    Spread,
    /// Across the given number of partitions (AWS partition groups, 1 to 7).
    Partition(u8),
}

impl fmt::Display for PlacementStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementStrategy::Cluster => f.write_str("cluster"),
            PlacementStrategy::Spread => f.write_str("spread"),
            PlacementStrategy::Partition(n) => write!(f, "partition({n})"),
        }
    }
}

/// A request for a placement group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementGroupRequest {
    /// A name unique in the account and region.
    pub name: String,
    /// How to place.
    pub strategy: PlacementStrategy,
    /// The region.
    pub region: Region,
    /// The zone, for clouds whose groups are zonal.
    pub zone: Option<Zone>,
    /// Tags.
    pub tags: Tags,
}

impl PlacementGroupRequest {
    /// Checks the request is well formed, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty()
            || self.name.len() > 63
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(Error::invalid_input(format!(
                "invalid placement group name '{}': use 1 to 63 letters, digits and '-'",
                self.name
            )));
        }
        if let PlacementStrategy::Partition(n) = self.strategy {
            if !(1..=7).contains(&n) {
                return Err(Error::invalid_input(format!(
                    "invalid partition count {n}: a partition placement group has 1 to 7 partitions"
                )));
            }
        }
        Ok(())
    }
}

/// A placement group: AWS cluster/spread/partition group, GCP compact resource
/// policy, Azure proximity placement group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementGroup {
    /// The cloud's identifier.
    pub id: PlacementGroupId,
    /// Its name.
    pub name: String,
    /// The cloud.
    pub cloud: Cloud,
    /// How it places.
    pub strategy: PlacementStrategy,
    /// The region.
    pub region: Region,
    /// The zone, for clouds whose groups are zonal.
    pub zone: Option<Zone>,
    /// Tags.
    pub tags: Tags,
}

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

/// Tags (AWS, Azure) or labels (GCP), by key.
pub type Tags = BTreeMap<String, String>;

/// The tag keys gpufleet writes on what it creates. Providers translate them to
/// each cloud's rules (GCP labels allow no `:`; they become `-`).
pub mod tags {
    /// Present (value `true`) on everything gpufleet created.
    pub const MANAGED: &str = "gpufleet:managed";
    /// The job an instance runs.
    pub const JOB: &str = "gpufleet:job";
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
    /// heartbeat (see [`crate::usage`]).
    pub const GPU: &str = "gpufleet:gpu";
    /// How long the node's GPUs have stayed under each utilisation level,
    /// written by its agent with the heartbeat (see [`crate::usage`]).
    pub const GPU_QUIET: &str = "gpufleet:gpu-quiet";

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

/// A request to launch instances into one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRequest {
    /// Where.
    pub pool: Pool,
    /// How many instances (1 to 1000).
    pub count: u32,
    /// The machine image (AMI id, GCE image URL, Azure image reference).
    pub image: String,
    /// A placement group to launch into.
    pub placement_group: Option<PlacementGroupId>,
    /// Tags for cost attribution; gpufleet adds [`tags::MANAGED`] and the key.
    pub tags: Tags,
    /// Makes the launch safe to retry.
    pub idempotency_key: IdempotencyKey,
    /// How long the instances may live; past it the reaper terminates them.
    #[serde(with = "opt_secs", default)]
    pub ttl: Option<Duration>,
    /// A script the instance runs at first boot, as plain text: EC2 `UserData`,
    /// the GCE `startup-script` metadata item, Azure `customData` (each
    /// provider encodes it as its API wants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_script: Option<String>,
    /// How the instance is reached and what it may do: SSH key, network,
    /// firewall, disk and identity.
    #[serde(default, skip_serializing_if = "Access::is_empty")]
    pub access: Access,
}

/// The largest boot script gpufleet sends: EC2's `UserData` limit of 16 KiB
/// (GCE metadata allows 256 KiB, Azure `customData` 64 KiB once encoded).
pub const MAX_BOOT_SCRIPT: usize = 16 * 1024;

/// How a launched instance is reached and what it may do. Every field is
/// optional; a cloud's default applies where one is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// An OpenSSH public key (`ssh-ed25519 AAAA… comment`) to install for the
    /// login user: an EC2 key pair name is not needed, the boot script adds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_key: Option<String>,
    /// The subnet (EC2 `subnet-…`, GCE subnetwork URL or name, Azure subnet
    /// resource id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// Security groups (EC2 `sg-…`), network tags (GCE) or a network security
    /// group id (Azure, first entry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// The boot disk size in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<u32>,
    /// The identity the node acts as: an EC2 instance profile name or ARN, a
    /// GCE service account e-mail, an Azure user-assigned identity id. The
    /// node writes its heartbeat and progress tags with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl Access {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Access::default()
    }

    /// Checks the settings, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if let Some(key) = &self.ssh_public_key {
            let mut parts = key.split_whitespace();
            let kind = parts.next().unwrap_or_default();
            let body = parts.next().unwrap_or_default();
            let known = [
                "ssh-ed25519",
                "ssh-rsa",
                "ecdsa-sha2-nistp256",
                "ecdsa-sha2-nistp384",
                "ecdsa-sha2-nistp521",
                "sk-ssh-ed25519@openssh.com",
            ];
            if !known.contains(&kind) || body.is_empty() || key.contains('\n') || key.contains('\'')
            {
                let shown: String = kind.chars().take(32).collect();
                return Err(Error::invalid_input(format!(
                    "invalid ssh_public_key starting '{shown}': give one OpenSSH public key line ({})",
                    known.join(", ")
                )));
            }
        }
        if let Some(gb) = self.disk_gb {
            if !(10..=65_536).contains(&gb) {
                return Err(Error::invalid_input(format!(
                    "invalid disk_gb {gb}: a boot disk is 10 to 65536 GiB"
                )));
            }
        }
        for (what, value) in [("subnet", &self.subnet), ("identity", &self.identity)] {
            if let Some(v) = value {
                if v.trim().is_empty() || v.len() > 1024 || v.chars().any(char::is_whitespace) {
                    return Err(Error::invalid_input(format!(
                        "invalid {what} '{v}': give one identifier without spaces"
                    )));
                }
            }
        }
        for g in &self.security_groups {
            if g.trim().is_empty() || g.len() > 1024 || g.chars().any(char::is_whitespace) {
                return Err(Error::invalid_input(format!(
                    "invalid security group '{g}': give one identifier without spaces"
                )));
            }
        }
        Ok(())
    }
}

/// Where a launch stands against the instances that already carry its key
/// (see [`LaunchRequest::resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// None exist: launch them all.
    Fresh,
    /// This many of the request's instances exist: create the rest.
    Partial(usize),
    /// All exist: the launch is done; return them.
    Done,
}

impl LaunchRequest {
    /// One instance of `pool` from `image`, with the given key.
    pub fn new(pool: Pool, image: impl Into<String>, idempotency_key: IdempotencyKey) -> Self {
        LaunchRequest {
            pool,
            count: 1,
            image: image.into(),
            placement_group: None,
            tags: Tags::new(),
            idempotency_key,
            ttl: None,
            boot_script: None,
            access: Access::default(),
        }
    }

    /// Sets the boot script.
    pub fn with_boot_script(mut self, script: impl Into<String>) -> Self {
        self.boot_script = Some(script.into());
        self
    }

    /// Sets the instance count.
    pub fn with_count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// Adds a tag.
    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// Sets a time to live.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Launches into a placement group.
    pub fn with_placement_group(mut self, id: PlacementGroupId) -> Self {
        self.placement_group = Some(id);
        self
    }

    /// Checks the request is well formed, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if !(1..=1000).contains(&self.count) {
            return Err(Error::invalid_input(format!(
                "invalid instance count {}: launch 1 to 1000 instances",
                self.count
            )));
        }
        if self.image.trim().is_empty() {
            return Err(Error::invalid_input(
                "missing image: give an AMI id, GCE image or Azure image reference",
            ));
        }
        if let Some(ttl) = self.ttl {
            if ttl.is_zero() {
                return Err(Error::invalid_input(
                    "invalid ttl 0s: a time to live must be positive",
                ));
            }
        }
        if let Some(script) = &self.boot_script {
            if script.len() > MAX_BOOT_SCRIPT {
                return Err(Error::invalid_input(format!(
                    "boot script of {} bytes is too long: at most {MAX_BOOT_SCRIPT} bytes (EC2's UserData limit); fetch a longer setup from the script",
                    script.len()
                )));
            }
        }
        self.access.validate()?;
        for (k, v) in &self.tags {
            if k.is_empty() || k.len() > 128 || v.len() > 256 {
                return Err(Error::invalid_input(format!(
                    "invalid tag '{k}={v}': keys are 1 to 128 characters, values at most 256"
                )));
            }
        }
        Ok(())
    }

    /// The tags as they go on the instances: the caller's, plus the managed
    /// marker, the idempotency key and the expiry.
    pub fn effective_tags(&self, now: OffsetDateTime) -> Tags {
        let mut tags = self.tags.clone();
        tags.insert(tags::MANAGED.into(), "true".into());
        tags.insert(
            tags::IDEMPOTENCY_KEY.into(),
            self.idempotency_key.to_string(),
        );
        tags.insert(tags::LAUNCH_COUNT.into(), self.count.to_string());
        if let Some(expiry) = self.expires_at(now) {
            if let Ok(s) = expiry.format(&time::format_description::well_known::Rfc3339) {
                tags.insert(tags::EXPIRES_AT.into(), s);
            }
        }
        tags
    }

    /// What a provider does with the instances it already holds under this
    /// request's key, for a provider that launches all of them in one call:
    /// `Ok(false)` when there are none (launch), `Ok(true)` when they are this
    /// request's (a retry: return them), and an error naming the earlier
    /// launch when the key was used for a different request (another count,
    /// instance type, region, or zone when this request names one).
    pub fn replayed(&self, existing: &[Instance]) -> Result<bool> {
        match self.resume(existing)? {
            Resume::Fresh => Ok(false),
            Resume::Done => Ok(true),
            Resume::Partial(_) => Err(self.reused(existing)),
        }
    }

    /// What a provider that creates a launch's instances one by one does with
    /// those it already holds under this request's key: [`Resume::Fresh`]
    /// when there are none, [`Resume::Done`] when all are there, and
    /// [`Resume::Partial`] when an earlier attempt of this same request was
    /// cut off part-way (its instances are progress: the missing ones are
    /// created). A key used for a different request (more instances, another
    /// type, region, or zone when this request names one) is an error naming
    /// the earlier launch.
    pub fn resume(&self, existing: &[Instance]) -> Result<Resume> {
        if existing.is_empty() {
            return Ok(Resume::Fresh);
        }
        let same_pool = existing.iter().all(|i| {
            i.pool
                .instance_type
                .eq_ignore_ascii_case(&self.pool.instance_type)
                && i.pool.region == self.pool.region
                && i.pool.capacity == self.pool.capacity
                && (self.pool.zone.is_none() || i.pool.zone == self.pool.zone)
        });
        let zones: std::collections::BTreeSet<_> = existing.iter().map(|i| &i.pool.zone).collect();
        let n = existing.len();
        let other_count = existing.iter().any(|i| {
            i.tags
                .get(tags::LAUNCH_COUNT)
                .is_some_and(|c| c.parse::<u32>().ok() != Some(self.count))
        });
        if !same_pool || other_count || zones.len() > 1 || n > self.count as usize {
            return Err(self.reused(existing));
        }
        Ok(if n == self.count as usize {
            Resume::Done
        } else {
            Resume::Partial(n)
        })
    }

    fn reused(&self, existing: &[Instance]) -> Error {
        let (kind, place) = existing
            .first()
            .map(|i| (i.pool.instance_type.clone(), i.pool.location()))
            .unwrap_or_default();
        Error::invalid_input(format!(
            "idempotency key '{}' was already used to launch {} instance(s) of {kind} in {place}; use a new key for a different request",
            self.idempotency_key,
            existing.len(),
        ))
        .with_context("code", "IdempotentParameterMismatch")
    }

    /// When instances launched now expire.
    pub fn expires_at(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.ttl
            .and_then(|ttl| time::Duration::try_from(ttl).ok())
            .and_then(|ttl| now.checked_add(ttl))
    }
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_secs))
    }
}

/// Checks that `name` is one of `valid`, or fails naming the nearest valid names.
#[doc(hidden)]
pub fn check_known<'a, I>(what: &str, name: &str, valid: I) -> Result<()>
where
    I: IntoIterator<Item = &'a str> + Clone,
{
    if valid.clone().into_iter().any(|v| v == name) {
        return Ok(());
    }
    let near = suggest::nearest(name, valid.clone(), 3);
    let mut all: Vec<&str> = valid.into_iter().collect();
    all.sort_unstable();
    all.dedup();
    let listed = if all.len() > 12 {
        format!("{} and {} more", all[..12].join(", "), all.len() - 12)
    } else {
        all.join(", ")
    };
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", near.join(", "))
    };
    Err(Error::new(
        ErrorKind::InvalidInput,
        format!("unknown {what} '{name}'{hint}; known: {listed}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(zone: Option<&str>, instance_type: &str) -> Pool {
        Pool {
            cloud: Cloud::Aws,
            region: Region::new("us-east-1"),
            zone: zone.map(Zone::new),
            instance_type: instance_type.into(),
            capacity: Capacity::Spot,
        }
    }

    fn instance(zone: &str, instance_type: &str) -> Instance {
        Instance {
            id: InstanceId::new(format!("i-{zone}")),
            pool: pool(Some(zone), instance_type),
            state: InstanceState::Running,
            tags: Tags::new(),
            launched_at: OffsetDateTime::UNIX_EPOCH,
            expires_at: None,
            placement_group: None,
            end_reason: None,
        }
    }

    #[test]
    fn a_replayed_launch_is_recognised_and_a_reused_key_refused() {
        let key = IdempotencyKey::new("job-7").unwrap();
        let req = LaunchRequest::new(pool(None, "p4d.24xlarge"), "ami-1", key.clone());
        assert!(!req.replayed(&[]).unwrap());
        // A launch that named no zone matches its instance in whatever zone.
        assert!(req
            .replayed(&[instance("use1-az4", "p4d.24xlarge")])
            .unwrap());
        let zoned = LaunchRequest::new(pool(Some("use1-az4"), "p4d.24xlarge"), "ami-1", key);
        assert!(zoned
            .replayed(&[instance("use1-az4", "P4D.24xlarge")])
            .unwrap());
        for (existing, why) in [
            (vec![instance("use1-az6", "p4d.24xlarge")], "another zone"),
            (vec![instance("use1-az4", "p5.48xlarge")], "another type"),
            (
                vec![
                    instance("use1-az4", "p4d.24xlarge"),
                    instance("use1-az4", "p4d.24xlarge"),
                ],
                "another count",
            ),
        ] {
            let e = zoned.replayed(&existing).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{why}");
            assert!(
                e.to_string().contains("'job-7' was already used"),
                "{why}: {e}"
            );
        }
    }

    #[test]
    fn a_partial_launch_is_resumed_and_an_oversized_one_refused() {
        let key = IdempotencyKey::new("job-8").unwrap();
        let req =
            LaunchRequest::new(pool(Some("use1-az4"), "p4d.24xlarge"), "ami-1", key).with_count(4);
        let one = instance("use1-az4", "p4d.24xlarge");
        assert_eq!(req.resume(&[]).unwrap(), Resume::Fresh);
        assert_eq!(
            req.resume(std::slice::from_ref(&one)).unwrap(),
            Resume::Partial(1)
        );
        assert_eq!(req.resume(&vec![one.clone(); 4]).unwrap(), Resume::Done);
        assert!(req.resume(&vec![one.clone(); 5]).is_err());
        // Instances that say their launch asked for another count are
        // another request's, however many there are.
        let mut of_two = one.clone();
        of_two.tags.insert(tags::LAUNCH_COUNT.into(), "2".into());
        assert!(req.resume(std::slice::from_ref(&of_two)).is_err());
        of_two.tags.insert(tags::LAUNCH_COUNT.into(), "4".into());
        assert_eq!(req.resume(&[of_two]).unwrap(), Resume::Partial(1));
        // A one-call provider never sees a partial launch of its own: refused.
        assert!(req.replayed(std::slice::from_ref(&one)).is_err());
        let mut other = one;
        other.pool.capacity = Capacity::OnDemand;
        let e = req.resume(&[other]).unwrap_err();
        assert!(e.to_string().contains("'job-8' was already used"), "{e}");
    }

    #[test]
    fn names_derived_from_a_key_never_change() {
        let key = IdempotencyKey::new("abc").unwrap();
        assert_eq!(key.fingerprint(), "e71fa2190541574b");
        assert_eq!(key.resource_name(3), "gf-e71fa2190541574b-3");
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }
}
