//! `gpufleet fit`: the memory a model needs and the configurations that
//! hold it.

use serde::Serialize;

use super::round;
use crate::advisor::fit::{Architecture, FitConfig, FitReport, Workload};

/// One configuration as `fit --output json` prints it (a stable schema).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigRow {
    /// Cloud.
    pub cloud: String,
    /// Instance type.
    pub instance_type: String,
    /// GPU model.
    pub gpu_model: String,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Nodes.
    pub nodes: u32,
    /// GPUs the model is split over.
    pub gpus_used: u32,
    /// Memory of one GPU, GiB.
    pub gpu_memory_gib: u32,
    /// Memory each used GPU needs, GiB.
    pub need_per_gpu_gib: f64,
    /// Share of each used GPU's memory taken.
    pub utilisation: f64,
    /// How the GPUs are pooled.
    pub layout: String,
    /// Region of the cheapest on-demand offer.
    pub region: String,
    /// Its zone, if zonal.
    pub zone: Option<String>,
    /// On-demand price of all nodes, USD per hour.
    pub on_demand_per_hour_usd: Option<f64>,
    /// Spot price of all nodes, USD per hour.
    pub spot_per_hour_usd: Option<f64>,
    /// Where the prices came from.
    pub price_source: String,
}

impl From<&FitConfig> for ConfigRow {
    fn from(c: &FitConfig) -> Self {
        ConfigRow {
            cloud: c.cloud.to_string(),
            instance_type: c.instance_type.clone(),
            gpu_model: c.gpu.to_string(),
            gpus_per_node: c.gpus_per_node,
            nodes: c.nodes,
            gpus_used: c.gpus_used,
            gpu_memory_gib: c.gpu_memory_gib,
            need_per_gpu_gib: round(c.need_per_gpu_gib, 2),
            utilisation: round(c.utilisation, 3),
            layout: c.layout.clone(),
            region: c.region.to_string(),
            zone: c.zone.as_ref().map(|z| z.to_string()),
            on_demand_per_hour_usd: c.on_demand_per_hour.map(|p| p.usd_per_hour_f64()),
            spot_per_hour_usd: c.spot_per_hour.map(|p| p.usd_per_hour_f64()),
            price_source: c.price_basis.to_string(),
        }
    }
}

/// One line of the memory estimate.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRow {
    /// What it is (weights, KV cache, …).
    pub item: String,
    /// Bytes.
    pub bytes: u64,
    /// GiB, to three decimals.
    pub gib: f64,
    /// Split over the GPUs (else per GPU).
    pub sharded: bool,
    /// How it was computed.
    pub formula: String,
    /// Where the figures came from.
    pub basis: String,
}

/// What `fit --output json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct FitDoc {
    /// Parameters.
    pub params: f64,
    /// Weight precision.
    pub precision: &'static str,
    /// The architecture assumed.
    pub architecture: Architecture,
    /// Inference or training, with its context and batch.
    pub workload: Workload,
    /// Memory needed on one GPU, GiB.
    pub total_gib: f64,
    /// The estimate, line by line.
    pub memory: Vec<MemoryRow>,
    /// The configurations that hold it, cheapest first.
    pub configs: Vec<ConfigRow>,
}

impl From<&FitReport> for FitDoc {
    fn from(r: &FitReport) -> Self {
        FitDoc {
            params: r.params,
            precision: r.precision.as_str(),
            architecture: r.architecture,
            workload: r.workload,
            total_gib: round(r.total_gib, 3),
            memory: r
                .memory
                .lines
                .iter()
                .map(|l| MemoryRow {
                    item: l.item.clone(),
                    bytes: l.bytes,
                    gib: round(l.gib, 3),
                    sharded: l.sharded,
                    formula: l.formula.clone(),
                    basis: l.basis.to_string(),
                })
                .collect(),
            configs: r.configs.iter().map(ConfigRow::from).collect(),
        }
    }
}
