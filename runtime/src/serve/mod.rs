//! Inference services: the proxy in front of a service's replicas
//! ([`Proxy`]). The pure parts (the service file, the autoscaler, the
//! replicas' capacity and pools) are `gpufleet_core::serve`.

mod proxy;

pub use proxy::{Proxy, ProxyBody, Route, MAX_REQUEST_BODY, METRICS_PATH};
