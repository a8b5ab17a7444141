//! What the catalog rows do not say: each GPU instance type's GPUs, memory
//! and interconnect per cloud (from the clouds' published specifications),
//! the N1 hosts GCP attaches GPUs to, and the plausible price per GPU a row
//! is checked against.

use super::*;

/// Published specs of one instance type: GPU model, count, GiB per GPU, link,
/// fabric, network Gbit/s.
pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) gpu: GpuModel,
    pub(super) count: u32,
    pub(super) mem: u32,
    pub(super) link: GpuLink,
    pub(super) fabric: Fabric,
    pub(super) gbps: Option<u32>,
}

/// AWS GPU instance types (AWS "Accelerated computing" instance specs).
#[rustfmt::skip]
pub(super) const AWS_SPECS: &[Spec] = &[
    spec("g4dn.xlarge", G::T4, 1, 16, Pcie, Standard, Some(25)),
    spec("g4dn.2xlarge", G::T4, 1, 16, Pcie, Standard, Some(25)),
    spec("g4dn.4xlarge", G::T4, 1, 16, Pcie, Standard, Some(25)),
    spec("g4dn.8xlarge", G::T4, 1, 16, Pcie, Standard, Some(50)),
    spec("g4dn.metal", G::T4, 8, 16, Pcie, Efa, Some(100)),
    spec("g5.xlarge", G::A10G, 1, 24, Pcie, Standard, Some(10)),
    spec("g5.2xlarge", G::A10G, 1, 24, Pcie, Standard, Some(10)),
    spec("g5.4xlarge", G::A10G, 1, 24, Pcie, Standard, Some(25)),
    spec("g5.8xlarge", G::A10G, 1, 24, Pcie, Efa, Some(25)),
    spec("g5.12xlarge", G::A10G, 4, 24, Pcie, Efa, Some(40)),
    spec("g5.16xlarge", G::A10G, 1, 24, Pcie, Efa, Some(25)),
    spec("g5.24xlarge", G::A10G, 4, 24, Pcie, Efa, Some(50)),
    spec("g5.48xlarge", G::A10G, 8, 24, Pcie, Efa, Some(100)),
    spec("g5g.16xlarge", G::T4g, 2, 16, Pcie, Standard, Some(25)),
    spec("g6.2xlarge", G::L4, 1, 24, Pcie, Standard, Some(10)),
    spec("g6.4xlarge", G::L4, 1, 24, Pcie, Standard, Some(25)),
    spec("g6.24xlarge", G::L4, 4, 24, Pcie, Efa, Some(50)),
    spec("g6.48xlarge", G::L4, 8, 24, Pcie, Efa, Some(100)),
    spec("p3.2xlarge", G::V100, 1, 16, Pcie, Standard, Some(10)),
    spec("p3.8xlarge", G::V100, 4, 16, Nvlink, Standard, Some(10)),
    spec("p3.16xlarge", G::V100, 8, 16, Nvlink, Standard, Some(25)),
    spec("p3dn.24xlarge", G::V100, 8, 32, Nvlink, Efa, Some(100)),
    spec("p4d.24xlarge", G::A100, 8, 40, Nvswitch, Efa, Some(400)),
    spec("p4de.24xlarge", G::A100_80GB, 8, 80, Nvswitch, Efa, Some(400)),
    spec("p5.48xlarge", G::H100, 8, 80, Nvswitch, Efa, Some(3200)),
    spec("p5e.48xlarge", G::H200, 8, 141, Nvswitch, Efa, Some(3200)),
    spec("p5en.48xlarge", G::H200, 8, 141, Nvswitch, Efa, Some(3200)),
];

/// Azure GPU sizes (Azure "GPU optimized virtual machine sizes"). Fractional-GPU
/// sizes are left out: gpufleet counts whole GPUs.
#[rustfmt::skip]
pub(super) const AZURE_SPECS: &[Spec] = &[
    spec("Standard_NC6", G::K80, 1, 12, Pcie, Standard, None),
    spec("Standard_NC12", G::K80, 2, 12, Pcie, Standard, None),
    spec("Standard_NC24", G::K80, 4, 12, Pcie, Standard, None),
    spec("Standard_NC24r", G::K80, 4, 12, Pcie, Infiniband, Some(56)),
    spec("Standard_NC6s_v3", G::V100, 1, 16, Pcie, Standard, None),
    spec("Standard_NC12s_v3", G::V100, 2, 16, Pcie, Standard, None),
    spec("Standard_NC24s_v3", G::V100, 4, 16, Pcie, Standard, None),
    spec("Standard_NC24rs_v3", G::V100, 4, 16, Pcie, Infiniband, Some(100)),
    spec("Standard_NC4as_T4_v3", G::T4, 1, 16, Pcie, Standard, Some(8)),
    spec("Standard_NC8as_T4_v3", G::T4, 1, 16, Pcie, Standard, Some(8)),
    spec("Standard_NC16as_T4_v3", G::T4, 1, 16, Pcie, Standard, Some(8)),
    spec("Standard_NC64as_T4_v3", G::T4, 4, 16, Pcie, Standard, Some(32)),
    spec("Standard_NC24ads_A100_v4", G::A100_80GB, 1, 80, Pcie, Standard, Some(20)),
    spec("Standard_NC48ads_A100_v4", G::A100_80GB, 2, 80, Pcie, Standard, Some(40)),
    spec("Standard_NC96ads_A100_v4", G::A100_80GB, 4, 80, Pcie, Standard, Some(80)),
    spec("Standard_NC40ads_H100_v5", G::H100, 1, 94, Pcie, Standard, Some(40)),
    spec("Standard_NC80adis_H100_v5", G::H100, 2, 94, Nvlink, Standard, Some(80)),
    spec("Standard_ND40rs_v2", G::V100, 8, 32, Nvlink, Infiniband, Some(100)),
    spec("Standard_ND96asr_v4", G::A100, 8, 40, Nvswitch, Infiniband, Some(1600)),
    spec("Standard_ND96amsr_A100_v4", G::A100_80GB, 8, 80, Nvswitch, Infiniband, Some(1600)),
    spec("Standard_ND96isr_H100_v5", G::H100, 8, 80, Nvswitch, Infiniband, Some(3200)),
    spec("Standard_NV6", G::M60, 1, 8, Pcie, Standard, None),
    spec("Standard_NV12", G::M60, 2, 8, Pcie, Standard, None),
    spec("Standard_NV24", G::M60, 4, 8, Pcie, Standard, None),
    spec("Standard_NV12s_v3", G::M60, 1, 8, Pcie, Standard, None),
    spec("Standard_NV24s_v3", G::M60, 2, 8, Pcie, Standard, None),
    spec("Standard_NV48s_v3", G::M60, 4, 8, Pcie, Standard, None),
    spec("Standard_NV32as_v4", G::Mi25, 1, 16, Pcie, Standard, None),
    spec("Standard_NV36ads_A10_v5", G::A10, 1, 24, Pcie, Standard, None),
    spec("Standard_NV36adms_A10_v5", G::A10, 1, 24, Pcie, Standard, None),
    spec("Standard_NV72ads_A10_v5", G::A10, 2, 24, Pcie, Standard, None),
];

/// N1 hosts gpufleet offers for GPUs attached to N1 VMs, within Compute
/// Engine's published vCPU limits per GPU count.
pub(super) const GCP_N1_HOSTS: &[(&str, GpuModel, u32, &str)] = &[
    ("T4", G::T4, 1, "n1-standard-4"),
    ("T4", G::T4, 1, "n1-standard-8"),
    ("T4", G::T4, 2, "n1-standard-16"),
    ("T4", G::T4, 4, "n1-standard-32"),
    ("V100", G::V100, 1, "n1-standard-8"),
    ("V100", G::V100, 2, "n1-standard-16"),
    ("V100", G::V100, 4, "n1-standard-32"),
    ("V100", G::V100, 8, "n1-standard-64"),
    ("P100", G::P100, 1, "n1-standard-8"),
    ("P100", G::P100, 2, "n1-standard-16"),
    ("P100", G::P100, 4, "n1-standard-32"),
    ("P4", G::P4, 1, "n1-standard-8"),
    ("P4", G::P4, 2, "n1-standard-16"),
    ("P4", G::P4, 4, "n1-standard-32"),
];

/// Plausible on-demand price of one GPU-hour, host included, in USD. Outside it a
/// row is dropped as a data error.
pub(super) fn plausible_per_gpu(model: &GpuModel) -> (f64, f64) {
    match model {
        G::K80 | G::M60 | G::P4 | G::Mi25 => (0.05, 3.0),
        G::T4 | G::T4g | G::L4 => (0.1, 6.0),
        G::A10 | G::A10G | G::P100 => (0.2, 6.0),
        G::V100 => (0.5, 6.0),
        G::A100 | G::A100_80GB | G::L40S | G::RtxPro6000 => (0.5, 10.0),
        G::H100 | G::H200 => (1.0, 20.0),
        _ => (0.05, 30.0),
    }
}

pub(super) fn spec_type(cloud: Cloud, s: &Spec, vcpus: u32, memory_gib: f64) -> InstanceType {
    InstanceType {
        cloud,
        name: s.name.to_string(),
        gpu: Some(GpuSpec {
            model: s.gpu.clone(),
            count: s.count,
            memory_gib: s.mem,
        }),
        vcpus,
        memory_mib: (memory_gib * 1024.0).round() as u64,
        interconnect: Interconnect {
            gpu_link: s.link,
            fabric: s.fabric,
            network_gbps: s.gbps,
        },
    }
}
