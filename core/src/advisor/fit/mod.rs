//! Memory fit: how much GPU memory a model needs for inference or training,
//! line by line, and which GPU configurations in the catalog hold it.
//!
//! The arithmetic (each line of [`MemoryBreakdown`] carries its formula):
//!
//! - **Weights**: parameters × bytes per parameter of the precision (fp32 4,
//!   bf16/fp16 2, fp8/int8 1, int4 0.5).
//! - **KV cache** (inference): 2 (K and V) × layers × KV heads × head dim ×
//!   context × batch × 2 bytes (fp16 cache; 1 byte when the weights are fp8,
//!   4 when fp32). Grouped-query attention is why KV heads matter.
//! - **Activations**, inference: one layer's transient buffers with
//!   FlashAttention-style attention (no context² term), about 8 × hidden values
//!   per token in 2 bytes. Training: Korthikanti et al. 2022, "Reducing
//!   Activation Recomputation in Large Transformer Models": 34 × sequence ×
//!   batch × hidden bytes per layer with the attention-score term recomputed;
//!   with activation checkpointing only each layer's 2-byte input is kept plus
//!   one layer's full set during the backward pass.
//! - **Gradients and optimizer states** (training, Adam): Rajbhandari et al.
//!   2020 (ZeRO): mixed precision keeps 2-byte weights and gradients plus a
//!   4-byte master copy and two 4-byte moments, 16 bytes per parameter in all
//!   (fp32 training: 4 + 4 + 8). LoRA trains adapters of `lora_share` of the
//!   parameters (default 1 %, r = 16 on every linear layer of a Llama-style
//!   model is 0.5 – 1 %), 16 bytes each, on frozen base weights (QLoRA when
//!   those are int4).
//! - **Runtime overhead**: CUDA context, cuBLAS/NCCL workspaces, default 1 GiB
//!   per GPU. **Headroom**: allocator fragmentation and framework buffers,
//!   default 10 % of everything above.
//!
//! Weights, gradients, optimizer states and the KV cache are sharded across
//! the GPUs of a configuration (tensor parallelism for inference, ZeRO-3/FSDP
//! for training); activations are per GPU. GPUs are only pooled where the
//! instance has NVLink or NVSwitch, and nodes only where it has an EFA /
//! InfiniBand / GPUDirect class fabric; a PCIe multi-GPU instance is offered
//! for a model that fits one of its GPUs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::advisor::Basis;
use crate::suggest::check_known;
use crate::GpuModel;
use crate::Price;
use crate::{Capacity, Cloud, GpuLink, InstanceType, Offer, Region, Zone};
use crate::{Error, Result};

mod memory;
mod models;
pub use self::{memory::*, models::*};

const fn arch(layers: u32, hidden: u32, kv_heads: u32, head_dim: u32) -> Architecture {
    Architecture {
        layers,
        hidden,
        kv_heads,
        head_dim,
    }
}

/// Default cap on nodes in one configuration.
pub const DEFAULT_MAX_NODES: u32 = 16;

/// The largest cap on nodes [`fit`] accepts: more than any one training
/// cluster a cloud rents as a single placement.
pub const MAX_NODES_LIMIT: u32 = 4096;

/// Which part of the catalog to consider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitOptions {
    /// Only these clouds (empty: all).
    pub clouds: Vec<Cloud>,
    /// Only these regions (empty: all).
    pub regions: Vec<Region>,
    /// Only these GPU models (empty: all).
    pub gpus: Vec<GpuModel>,
    /// At most this many nodes in one configuration.
    pub max_nodes: u32,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            clouds: Vec::new(),
            regions: Vec::new(),
            gpus: Vec::new(),
            max_nodes: DEFAULT_MAX_NODES,
        }
    }
}

/// A GPU configuration that holds the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitConfig {
    /// Cloud.
    pub cloud: Cloud,
    /// Instance type rented.
    pub instance_type: String,
    /// GPU model.
    pub gpu: GpuModel,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Nodes.
    pub nodes: u32,
    /// GPUs the model is split over.
    pub gpus_used: u32,
    /// Memory per GPU, GiB.
    pub gpu_memory_gib: u32,
    /// Memory each used GPU needs, GiB.
    pub need_per_gpu_gib: f64,
    /// Share of each used GPU's memory taken.
    pub utilisation: f64,
    /// How the GPUs are pooled.
    pub layout: String,
    /// Region of the cheapest on-demand offer.
    pub region: Region,
    /// Zone of the cheapest on-demand offer, if zonal.
    pub zone: Option<Zone>,
    /// On-demand price of all nodes per hour (cheapest region).
    pub on_demand_per_hour: Option<Price>,
    /// Spot price of all nodes per hour (cheapest pool), if sold as spot.
    pub spot_per_hour: Option<Price>,
    /// Where the prices came from.
    pub price_basis: Basis,
}

impl FitConfig {
    /// The price it is ranked by: on-demand where sold, else spot (and those
    /// sold only as spot come after all the others).
    pub fn rank_price(&self) -> Option<Price> {
        self.on_demand_per_hour.or(self.spot_per_hour)
    }
}

/// The answer to "what does this model fit on".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// Parameters.
    pub params: f64,
    /// Precision.
    pub precision: Precision,
    /// Shape used.
    pub architecture: Architecture,
    /// Workload.
    pub workload: Workload,
    /// Memory needed, line by line.
    pub memory: MemoryBreakdown,
    /// Total on one GPU, GiB.
    pub total_gib: f64,
    /// Configurations that hold it, cheapest first.
    pub configs: Vec<FitConfig>,
    /// Instance types that could not hold it (for the "nothing fits" message).
    pub too_small: usize,
}

impl FitReport {
    /// What would make the model need less memory or give it more GPUs,
    /// as the CLI's flags, for a request nothing holds: only the levers
    /// that are not already at their end (no `--training lora` for a LoRA
    /// run, no lower precision below the lowest its workload allows).
    pub fn levers(&self, max_nodes: u32) -> String {
        let (full, checkpointing) = match self.workload {
            Workload::Training {
                method,
                activation_checkpointing,
                ..
            } => (method == TrainingMethod::Full, activation_checkpointing),
            Workload::Inference { .. } => (false, true),
        };
        // Full training stops at fp8 (int4 is for frozen weights).
        let lowest = if full {
            Precision::Fp8
        } else {
            Precision::Int4
        };
        let mut out = Vec::new();
        if self.precision != lowest {
            out.push("lower --precision".to_string());
        }
        out.push("lower --context or --batch".into());
        if full {
            out.push("use --training lora".into());
        }
        if !checkpointing {
            out.push("drop --no-activation-checkpointing".into());
        }
        if max_nodes < MAX_NODES_LIMIT {
            out.push(format!("raise --max-nodes (up to {MAX_NODES_LIMIT})"));
        }
        match out.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{}, or {last}", rest.join(", ")),
            _ => out.join(""),
        }
    }
}

/// The cheapest on-demand and spot offer of one instance type.
type Cheapest<'a> = (Option<&'a Offer>, Option<&'a Offer>);

/// Sizes the model and finds every GPU configuration among `offers` that holds
/// it, cheapest first (one row per instance type, at its cheapest region).
pub fn fit(request: &FitRequest, offers: &[Offer], options: &FitOptions) -> Result<FitReport> {
    if options.max_nodes == 0 || options.max_nodes > MAX_NODES_LIMIT {
        return Err(Error::invalid_input(format!(
            "invalid max nodes {}: use 1 to {MAX_NODES_LIMIT}",
            options.max_nodes
        )));
    }
    let memory = request.memory()?;
    // The cheapest on-demand and spot offer per instance type.
    let mut types: BTreeMap<(Cloud, String), Cheapest<'_>> = BTreeMap::new();
    for o in offers {
        let Some(gpu) = &o.instance_type.gpu else {
            continue;
        };
        if (!options.clouds.is_empty() && !options.clouds.contains(&o.pool.cloud))
            || (!options.regions.is_empty() && !options.regions.contains(&o.pool.region))
            || (!options.gpus.is_empty() && !options.gpus.contains(&gpu.model))
            || gpu.count == 0
            || gpu.memory_gib == 0
        {
            continue;
        }
        let slot = types
            .entry((o.pool.cloud, o.instance_type.name.clone()))
            .or_default();
        let cheaper = |cur: Option<&Offer>| cur.is_none_or(|c| o.price < c.price);
        match o.pool.capacity {
            Capacity::OnDemand if cheaper(slot.0) => slot.0 = Some(o),
            Capacity::Spot if cheaper(slot.1) => slot.1 = Some(o),
            _ => {}
        }
    }
    let mut configs = Vec::new();
    let mut too_small = 0;
    for (od, spot) in types.values() {
        let Some(offer) = od.or(*spot) else {
            continue;
        };
        let Some(layout) = layout_for(&memory, &offer.instance_type, options.max_nodes) else {
            too_small += 1;
            continue;
        };
        let nodes = layout.nodes;
        let mul = |o: &Offer| o.price.checked_mul(nodes);
        let source = |o: &Offer| {
            format!(
                "{} ({}), observed {}",
                o.source,
                o.pool.capacity.as_str(),
                o.observed_at.date()
            )
        };
        let basis = match (od, spot) {
            (Some(a), Some(b)) if a.source == b.source => source(a),
            (Some(a), Some(b)) => format!("{}; {}", source(a), source(b)),
            (Some(a), None) | (None, Some(a)) => source(a),
            (None, None) => String::new(),
        };
        let Some(gpu) = offer.instance_type.gpu.as_ref() else {
            continue;
        };
        let gpu_bytes = f64::from(gpu.memory_gib) * GIB;
        let need = memory.per_gpu_bytes(layout.gpus);
        configs.push(FitConfig {
            cloud: offer.pool.cloud,
            instance_type: offer.instance_type.name.clone(),
            gpu: gpu.model.clone(),
            gpus_per_node: gpu.count,
            nodes,
            gpus_used: layout.gpus,
            gpu_memory_gib: gpu.memory_gib,
            need_per_gpu_gib: need / GIB,
            utilisation: need / gpu_bytes,
            layout: layout.describe,
            region: offer.pool.region.clone(),
            zone: offer.pool.zone.clone(),
            on_demand_per_hour: od.and_then(mul),
            spot_per_hour: spot.and_then(mul),
            price_basis: Basis::Price(basis),
        });
    }
    // On-demand price first; types sold only as spot after them, by spot price.
    configs.sort_by(|a, b| {
        let key = |c: &FitConfig| {
            (
                c.on_demand_per_hour.is_none(),
                c.rank_price().map_or(i64::MAX, Price::micros_per_hour),
            )
        };
        key(a)
            .cmp(&key(b))
            .then(a.cloud.cmp(&b.cloud))
            .then_with(|| a.instance_type.cmp(&b.instance_type))
    });
    Ok(FitReport {
        params: request.params,
        precision: request.precision,
        architecture: request.arch,
        workload: request.workload,
        total_gib: memory.total_bytes() / GIB,
        memory,
        configs,
        too_small,
    })
}

struct Layout {
    gpus: u32,
    nodes: u32,
    describe: String,
}

/// The smallest way to hold the model on this instance type, if any.
fn layout_for(memory: &MemoryBreakdown, t: &InstanceType, max_nodes: u32) -> Option<Layout> {
    let gpu = t.gpu.as_ref()?;
    let cap = f64::from(gpu.memory_gib) * GIB;
    let fits = |gpus: u32| memory.per_gpu_bytes(gpus) <= cap;
    if fits(1) {
        let describe = if gpu.count == 1 {
            "1 GPU".to_string()
        } else {
            format!("1 of {} GPUs (one replica per GPU)", gpu.count)
        };
        return Some(Layout {
            gpus: 1,
            nodes: 1,
            describe,
        });
    }
    if gpu.count == 1 || t.interconnect.gpu_link == GpuLink::Pcie {
        return None;
    }
    let link = match t.interconnect.gpu_link {
        GpuLink::Nvswitch => "NVSwitch",
        _ => "NVLink",
    };
    // Tensor-parallel degrees are powers of two, or the whole node.
    let mut k = 2;
    while k < gpu.count {
        if fits(k) {
            return Some(Layout {
                gpus: k,
                nodes: 1,
                describe: format!("split over {k} of {} GPUs ({link})", gpu.count),
            });
        }
        k *= 2;
    }
    if fits(gpu.count) {
        return Some(Layout {
            gpus: gpu.count,
            nodes: 1,
            describe: format!("split over {} GPUs ({link})", gpu.count),
        });
    }
    if !t.interconnect.multi_node_capable() {
        return None;
    }
    let fabric = format!("{:?}", t.interconnect.fabric).to_ascii_uppercase();
    (2..=max_nodes)
        .find(|n| gpu.count.checked_mul(*n).is_some_and(&fits))
        .map(|nodes| Layout {
            gpus: gpu.count * nodes,
            nodes,
            describe: format!(
                "split over {nodes} nodes x {} GPUs ({link} + {fabric})",
                gpu.count
            ),
        })
}

#[cfg(test)]
mod tests;
