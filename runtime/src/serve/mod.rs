//! Inference services: the controller that keeps a service's replicas
//! ([`ServiceController`]) and the proxy in front of them ([`Proxy`]). The pure parts (the service file, the autoscaler, the
//! replicas' capacity and pools) are `gpufleet_core::serve`.

pub mod book;
mod controller;
mod proxy;
mod run;
mod status;

pub use controller::{check_replica_script, replica_script, ServiceController};
pub use gpufleet_core::serve::ReplicaState;
pub use proxy::{Proxy, ProxyBody, Route, MAX_REQUEST_BODY, METRICS_PATH};
pub use run::{local_dir, run_service, ServeOptions};
pub use status::{
    Reach, ReplicaStatus, RolloutStatus, ServiceConfig, ServiceStatus, PORT_TAG, REPLICA_TAG,
    SERVICE_TAG, VERSION_TAG,
};
