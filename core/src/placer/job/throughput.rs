//! Relative training throughput of GPU models, which turns hours of work
//! on one GPU into hours on another (any-of jobs).

use super::*;

/// Training throughput of one GPU relative to one V100, fp16, as the geometric
/// mean over Lambda's PyTorch benchmarks (`lambdal/deeplearning-benchmark`,
/// `derived_relative_to_V100_single_gpu_fp16.csv`; H200 and B200 scaled from
/// H100 SXM by the v2 tables' geometric mean ratios 1.184 and 1.695). A10G uses
/// the A10's figure as its nearest measured stand-in. T4, L4, K80, M60, P4, P100
/// and the rest were not measured there and have no default.
pub const DEFAULT_THROUGHPUT: &[(GpuModel, f64)] = &[
    (GpuModel::V100, 1.0),
    (GpuModel::A10, 0.892),
    (GpuModel::A10G, 0.892),
    (GpuModel::A100, 2.205),
    (GpuModel::A100_80GB, 2.635),
    (GpuModel::H100, 4.417),
    (GpuModel::H200, 5.230),
    (GpuModel::B200, 7.487),
];

/// Relative GPU throughput per model, defaults plus the user's overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputTable(BTreeMap<GpuModel, f64>);

impl Default for ThroughputTable {
    fn default() -> Self {
        ThroughputTable(DEFAULT_THROUGHPUT.iter().cloned().collect())
    }
}

impl ThroughputTable {
    /// An empty table (no model is convertible).
    pub fn empty() -> Self {
        ThroughputTable(BTreeMap::new())
    }

    /// Sets a model's factor.
    pub fn set(&mut self, model: GpuModel, factor: f64) -> Result<()> {
        if !(factor.is_finite() && factor > 0.0 && factor < 1000.0) {
            return Err(Error::invalid_input(format!(
                "invalid throughput factor {factor} for {model}: expected a positive number (1.0 = one V100)"
            )));
        }
        self.0.insert(model, factor);
        Ok(())
    }

    /// A model's factor, if known.
    pub fn factor(&self, model: &GpuModel) -> Option<f64> {
        self.0.get(model).copied()
    }
}
