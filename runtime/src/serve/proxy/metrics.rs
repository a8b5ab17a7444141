//! The proxy's Prometheus metrics: requests by code, latency, in flight
//! and queued, replicas by state and capacity, the service's cost.

use super::*;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CodeLabel {
    pub(super) code: String,
}

/// The labels of the replicas gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReplicaLabel {
    pub(super) state: String,
    pub(super) capacity: String,
}

pub(super) struct Metrics {
    pub(super) registry: Registry,
    pub(super) requests: Family<CodeLabel, Counter>,
    pub(super) latency: Histogram,
    pub(super) in_flight: Gauge,
    pub(super) queued: Gauge,
    pub(super) retries: Counter,
    pub(super) replicas: Family<ReplicaLabel, Gauge>,
    pub(super) cost: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Metrics {
    pub(super) fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<CodeLabel, Counter>::default();
        let latency = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ]);
        let in_flight = Gauge::default();
        let queued = Gauge::default();
        let retries = Counter::default();
        let replicas = Family::<ReplicaLabel, Gauge>::default();
        let cost = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "gpufleet_service_requests",
            "Requests answered, by HTTP status",
            requests.clone(),
        );
        registry.register(
            "gpufleet_service_request_duration_seconds",
            "From a request's arrival to the end of its answer",
            latency.clone(),
        );
        registry.register(
            "gpufleet_service_in_flight",
            "Requests in flight, those held in the queue included",
            in_flight.clone(),
        );
        registry.register(
            "gpufleet_service_queued",
            "Requests held while no replica can take them",
            queued.clone(),
        );
        registry.register(
            "gpufleet_service_retries",
            "Requests sent again to another replica",
            retries.clone(),
        );
        registry.register(
            "gpufleet_service_replicas",
            "Replicas by state and capacity type",
            replicas.clone(),
        );
        registry.register(
            "gpufleet_service_cost_per_hour_usd",
            "What the service's replicas cost an hour",
            cost.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            in_flight,
            queued,
            retries,
            replicas,
            cost,
        }
    }
}
