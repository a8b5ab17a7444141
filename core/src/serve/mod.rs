//! Inference services, pure: the service file ([`ServiceSpec`]), the
//! autoscaler ([`Autoscaler`]: load samples in, a target and its reason
//! out), the replicas' capacity ([`mix`]: how many on spot and
//! on-demand; [`replica_pools`] and [`spread`]: which pools, from the
//! placer's per-pool price and hazard), and the step that puts them
//! together ([`plan`]: what to launch and what to drain), with what the
//! controller remembers of its pools ([`PoolMemory`]). The runtime's
//! service controller and proxy act on them, and the simulator's `--serve`
//! ([`crate::sim::simulate_serve`]) runs the same code.

mod autoscale;
mod file;
mod memory;
mod plan;
mod replicas;

pub use autoscale::{Autoscaler, LoadSample, ScaleDecision, ScaleReason};
pub use file::{
    check_service_name, AutoscaleFile, AutoscaleSettings, ProxyFile, ProxySettings, Readiness,
    ReadinessFile, ReadinessTable, ReplicaBounds, ReplicasFile, ServiceFile, ServiceSpec, SpotFile,
    SpotSettings, MAX_EXTRA_REPLICAS, MAX_REPLICAS, MAX_SERVICE_DURATION, MAX_SERVICE_NAME_CHARS,
    MAX_TARGET_IN_FLIGHT,
};
pub use memory::{PoolMemory, FORGET_AFTER};
pub use plan::{drain_order, plan, secure_spot, Action, ReplicaPlan, ReplicaState, ReplicaView};
pub use replicas::{mix, replica_pools, sort_pools, spot_usable, spread, Mix, ReplicaPool};
