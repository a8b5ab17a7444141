//! The cross-cloud placer: what a job needs ([`JobSpec`]), how risky each pool
//! is ([`HazardModel`]), what finishing there is expected to cost
//! ([`cost::RunModel`]), and the pure [`rank`] function that orders the plans.

pub mod cost;
mod duration;
pub mod external;
pub mod hazard;
mod job;
pub mod policy;
mod rank;

pub use duration::{format_duration, parse_duration};
pub use hazard::{HazardEstimate, HazardModel, PoolEvent, PoolEventKind, PoolEvidence};
pub use job::{
    check_job_name, AccessFile, CheckpointInterval, GpuFileOption, GpuOption, ImageFile, JobFile,
    JobSpec, JobSpecBuilder, ThroughputTable, Workload, DEFAULT_THROUGHPUT, MAX_JOB_HOURS,
    MAX_JOB_NAME_CHARS,
};
pub use rank::{rank, Plan, RankContext, Ranking};
