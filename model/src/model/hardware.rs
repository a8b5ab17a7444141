//! Instance types: their GPUs and interconnect.

use serde::{Deserialize, Serialize};

use crate::gpu::GpuModel;

use super::*;

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
