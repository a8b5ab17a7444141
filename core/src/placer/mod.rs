//! The cross-cloud placer: what a job needs ([`JobSpec`]), how risky each pool
//! is ([`HazardModel`]), what finishing there is expected to cost
//! ([`cost::RunModel`]), the pure [`rank`] function that orders the plans (the
//! index that shortlists), and the one [`Placer`] every caller decides through.

pub mod cost;
mod duration;
pub mod external;
pub mod hazard;
pub(crate) mod job;
mod placing;
pub mod policy;
mod rank;

pub use duration::{format_duration, parse_duration};
pub use hazard::{HazardEstimate, HazardModel, PoolEvent, PoolEventKind, PoolEvidence};
pub use job::{
    check_job_name, AccessFile, CheckpointInterval, GpuFileOption, GpuOption, ImageFile, JobFile,
    JobSpec, JobSpecBuilder, SecretFile, SecretRef, Secrets, ThroughputTable, Workload,
    DEFAULT_THROUGHPUT, MAX_JOB_HOURS, MAX_JOB_NAME_CHARS,
};
pub use placing::{
    Current, PlaceRequest, Placement, Placer, PlacerConfig, Remaining, DEFAULT_EVIDENCE_WINDOW,
    DEFAULT_WIDTH,
};
pub use rank::{rank, Plan, RankContext, Ranking};
