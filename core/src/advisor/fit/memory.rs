//! The memory a request needs, line by line with each line's formula (see
//! the module's documentation for the arithmetic and its sources).

use super::*;
use derive_setters::Setters;

pub(super) const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Default context for inference and sequence length for training.
pub const DEFAULT_CONTEXT: u32 = 4096;

/// Default share of parameters a LoRA adapter trains.
pub const DEFAULT_LORA_SHARE: f64 = 0.01;

/// Default headroom over the computed total.
pub const DEFAULT_HEADROOM: f64 = 0.10;

/// Default runtime overhead per GPU, GiB.
pub const DEFAULT_RUNTIME_GIB: f64 = 1.0;

/// A model to size. Start from [`FitRequest::params`] or [`FitRequest::preset`].
#[derive(Debug, Clone, PartialEq, Setters)]
#[setters(generate = false, prefix = "with_", strip_option)]
pub struct FitRequest {
    pub(super) params: f64,
    pub(super) params_basis: Basis,
    pub(super) arch: Architecture,
    pub(super) arch_basis: Basis,
    /// Precision of the weights (default bf16).
    #[setters(generate)]
    pub precision: Precision,
    /// What the memory is for (default inference at 4096 tokens, batch 1).
    #[setters(generate)]
    pub workload: Workload,
    /// Share of parameters LoRA trains.
    pub lora_share: f64,
    /// Headroom share over the computed total.
    pub headroom: f64,
    /// Runtime overhead per GPU, GiB.
    pub runtime_gib: f64,
    pub(super) overrides: Vec<&'static str>,
}

/// Setters that override one field of the architecture and note the
/// override under the flag's name.
macro_rules! arch_overrides {
    ($($(#[$doc:meta])* $name:ident => $field:ident, $flag:literal;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: u32) -> Self {
            self.arch.$field = value;
            self.overrides.push($flag);
            self
        }
    )*};
}

impl FitRequest {
    /// A model of `params` parameters, shaped like the nearest published dense
    /// model until the shape is overridden.
    pub fn params(params: f64, given_as: &str) -> Result<FitRequest> {
        if !params.is_finite() || params <= 0.0 {
            return Err(Error::invalid_input(format!(
                "invalid parameter count {params}: it must be more than zero"
            )));
        }
        let (name, _, shape) = DEFAULT_SHAPES
            .iter()
            .min_by(|a, b| {
                let da = (a.1.ln() - params.ln()).abs();
                let db = (b.1.ln() - params.ln()).abs();
                da.total_cmp(&db)
            })
            .copied()
            .unwrap_or(DEFAULT_SHAPES[0]);
        let arch_basis = Basis::Default(format!(
            "shape of {name}, the nearest published dense model by size"
        ));
        let params_basis = Basis::UserInput(format!("--params {given_as}"));
        Ok(FitRequest::with_defaults(
            (params, params_basis),
            (shape, arch_basis),
        ))
    }

    /// A published model.
    pub fn preset(preset: &Preset) -> FitRequest {
        let basis = || Basis::Preset(format!("{} ({})", preset.name, preset.source));
        FitRequest::with_defaults((preset.params, basis()), (preset.arch, basis()))
    }

    /// A request for a model of these parameters and shape, with every other
    /// setting at its default: bf16 inference of one default-length context.
    fn with_defaults(
        (params, params_basis): (f64, Basis),
        (arch, arch_basis): (Architecture, Basis),
    ) -> FitRequest {
        FitRequest {
            params,
            params_basis,
            arch,
            arch_basis,
            precision: Precision::Bf16,
            workload: Workload::Inference {
                context: DEFAULT_CONTEXT,
                batch: 1,
            },
            lora_share: DEFAULT_LORA_SHARE,
            headroom: DEFAULT_HEADROOM,
            runtime_gib: DEFAULT_RUNTIME_GIB,
            overrides: Vec::new(),
        }
    }

    /// Overrides the parameter count (keeping the shape).
    pub fn with_params(mut self, params: f64, given_as: &str) -> Self {
        self.params = params;
        self.params_basis = Basis::UserInput(format!("--params {given_as}"));
        self
    }

    arch_overrides! {
        /// Overrides the number of layers.
        with_layers => layers, "layers";
        /// Overrides the hidden dimension.
        with_hidden => hidden, "hidden";
        /// Overrides the number of KV heads.
        with_kv_heads => kv_heads, "kv-heads";
        /// Overrides the head dimension.
        with_head_dim => head_dim, "head-dim";
    }

    /// The parameter count.
    pub fn param_count(&self) -> f64 {
        self.params
    }

    /// The attention shape in use.
    pub fn architecture(&self) -> Architecture {
        self.arch
    }

    pub(super) fn validate(&self) -> Result<()> {
        if !self.params.is_finite() || self.params <= 0.0 {
            return Err(Error::invalid_input(format!(
                "invalid parameter count {}: it must be more than zero",
                self.params
            )));
        }
        for (v, what) in [
            (self.arch.layers, "layers"),
            (self.arch.hidden, "hidden size"),
            (self.arch.kv_heads, "KV heads"),
            (self.arch.head_dim, "head dim"),
        ] {
            if v == 0 {
                return Err(Error::invalid_input(format!(
                    "invalid {what} 0: it must be at least 1"
                )));
            }
        }
        let (context, batch) = match self.workload {
            Workload::Inference { context, batch } | Workload::Training { context, batch, .. } => {
                (context, batch)
            }
        };
        if context == 0 {
            return Err(Error::invalid_input(
                "invalid context 0: it must be at least 1 token",
            ));
        }
        if batch == 0 {
            return Err(Error::invalid_input(
                "invalid batch 0: it must be at least 1",
            ));
        }
        if let Workload::Training {
            method: TrainingMethod::Full,
            ..
        } = self.workload
        {
            if matches!(self.precision, Precision::Int8 | Precision::Int4) {
                return Err(Error::invalid_input(format!(
                    "full training at {} is not a thing optimizers do; use --training lora (QLoRA) or fp32, bf16, fp16 or fp8",
                    self.precision.as_str()
                )));
            }
        }
        if !(0.0..=1.0).contains(&self.lora_share) || self.lora_share.is_nan() {
            return Err(Error::invalid_input(format!(
                "invalid LoRA share {}: expected a fraction between 0 and 1",
                self.lora_share
            )));
        }
        if !(0.0..=1.0).contains(&self.headroom) || self.headroom.is_nan() {
            return Err(Error::invalid_input(format!(
                "invalid headroom {}: expected a fraction between 0 and 1",
                self.headroom
            )));
        }
        if !(0.0..=64.0).contains(&self.runtime_gib) || self.runtime_gib.is_nan() {
            return Err(Error::invalid_input(format!(
                "invalid runtime overhead {} GiB: expected 0 to 64",
                self.runtime_gib
            )));
        }
        Ok(())
    }

    pub(super) fn shape_basis(&self) -> Basis {
        if self.overrides.is_empty() {
            self.arch_basis.clone()
        } else {
            Basis::UserInput(format!(
                "--{} (the rest: {})",
                self.overrides.join(", --"),
                self.arch_basis
            ))
        }
    }

    /// The memory this model needs, line by line.
    pub fn memory(&self) -> Result<MemoryBreakdown> {
        self.validate()?;
        let p = self.params;
        let prec = self.precision;
        let a = self.arch;
        let (l, h) = (f64::from(a.layers), f64::from(a.hidden));
        let mut lines = Vec::new();
        let pb = self.params_basis.clone();
        let shape = self.shape_basis();
        let mut line = |item: &str, bytes: f64, sharded: bool, formula: String, basis: Basis| {
            lines.push(MemoryLine {
                item: item.to_string(),
                bytes: bytes.round() as u64,
                gib: bytes / GIB,
                sharded,
                formula,
                basis,
            });
        };
        // The weights come first, whatever the workload; LoRA trains
        // adapters beside them and leaves them frozen.
        let lora = matches!(
            self.workload,
            Workload::Training {
                method: TrainingMethod::Lora,
                ..
            }
        );
        line(
            if lora { "weights (frozen)" } else { "weights" },
            p * prec.bytes(),
            true,
            format!("{p:.3e} params x {} B ({})", prec.bytes(), prec.as_str()),
            pb.clone(),
        );
        match self.workload {
            Workload::Inference { context, batch } => {
                let kvb = prec.kv_bytes();
                let kv = 2.0
                    * l
                    * f64::from(a.kv_heads)
                    * f64::from(a.head_dim)
                    * f64::from(context)
                    * f64::from(batch)
                    * kvb;
                line(
                    "kv cache",
                    kv,
                    true,
                    format!(
                        "2 x {} layers x {} kv heads x {} head dim x {context} tokens x batch {batch} x {kvb} B",
                        a.layers, a.kv_heads, a.head_dim
                    ),
                    shape.clone(),
                );
                let act = f64::from(context) * f64::from(batch) * 8.0 * h * 2.0;
                line(
                    "activations",
                    act,
                    false,
                    format!("{context} tokens x batch {batch} x 8 x hidden {} x 2 B (one layer, FlashAttention)", a.hidden),
                    shape.clone(),
                );
            }
            Workload::Training {
                method,
                context,
                batch,
                activation_checkpointing,
            } => {
                let sbh = f64::from(context) * f64::from(batch) * h;
                match method {
                    TrainingMethod::Full => {
                        let grad_bytes = prec.bytes().max(2.0);
                        let opt_bytes = if prec == Precision::Fp32 { 8.0 } else { 12.0 };
                        line(
                            "gradients",
                            p * grad_bytes,
                            true,
                            format!("{p:.3e} params x {grad_bytes} B"),
                            pb.clone(),
                        );
                        line(
                            "optimizer states",
                            p * opt_bytes,
                            true,
                            if opt_bytes == 8.0 {
                                format!("{p:.3e} params x 8 B (Adam moments, fp32)")
                            } else {
                                format!(
                                    "{p:.3e} params x 12 B (fp32 master copy + Adam moments; ZeRO)"
                                )
                            },
                            pb.clone(),
                        );
                    }
                    TrainingMethod::Lora => {
                        let adapters = p * self.lora_share;
                        line(
                            "adapters + gradients + optimizer",
                            adapters * 16.0,
                            true,
                            format!(
                                "{:.1}% of params = {adapters:.3e} x 16 B (weights, gradients, Adam)",
                                self.lora_share * 100.0
                            ),
                            Basis::Default(format!(
                                "LoRA trains {:.1}% of the parameters",
                                self.lora_share * 100.0
                            )),
                        );
                    }
                }
                let act = if activation_checkpointing {
                    2.0 * sbh * l + 34.0 * sbh
                } else {
                    34.0 * sbh * l
                };
                line(
                    "activations",
                    act,
                    false,
                    if activation_checkpointing {
                        format!(
                            "(2 x {} layers + 34) x {context} seq x batch {batch} x hidden {} B (checkpointed; Korthikanti et al. 2022)",
                            a.layers, a.hidden
                        )
                    } else {
                        format!(
                            "34 x {} layers x {context} seq x batch {batch} x hidden {} B (Korthikanti et al. 2022)",
                            a.layers, a.hidden
                        )
                    },
                    shape.clone(),
                );
            }
        }
        let sharded: f64 = lines
            .iter()
            .filter(|l| l.sharded)
            .map(|l| l.bytes as f64)
            .sum();
        let replicated: f64 = lines
            .iter()
            .filter(|l| !l.sharded)
            .map(|l| l.bytes as f64)
            .sum();
        let runtime = self.runtime_gib * GIB;
        lines.push(MemoryLine {
            item: "runtime overhead".into(),
            bytes: runtime.round() as u64,
            gib: self.runtime_gib,
            sharded: false,
            formula: format!(
                "{} GiB per GPU (CUDA context, library workspaces)",
                self.runtime_gib
            ),
            basis: Basis::Default("runtime overhead per GPU".into()),
        });
        let headroom = (sharded + replicated) * self.headroom;
        lines.push(MemoryLine {
            item: "headroom".into(),
            bytes: headroom.round() as u64,
            gib: headroom / GIB,
            sharded: false,
            formula: format!(
                "{:.0}% of the lines above but the runtime (fragmentation, framework buffers)",
                self.headroom * 100.0
            ),
            basis: Basis::Default("headroom share".into()),
        });
        Ok(MemoryBreakdown {
            lines,
            sharded_bytes: sharded,
            replicated_bytes: replicated,
            headroom: self.headroom,
            runtime_bytes: runtime,
        })
    }
}

/// One line of the memory needed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryLine {
    /// What it is: `weights`, `kv cache`, …
    pub item: String,
    /// Bytes (for one GPU holding everything).
    pub bytes: u64,
    /// The same in GiB.
    pub gib: f64,
    /// Whether it is split across the GPUs of a configuration.
    pub sharded: bool,
    /// The arithmetic.
    pub formula: String,
    /// Where its inputs came from.
    pub basis: Basis,
}

/// The memory a model needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// Each line.
    pub lines: Vec<MemoryLine>,
    /// Bytes split across GPUs.
    pub sharded_bytes: f64,
    /// Bytes every GPU needs.
    pub replicated_bytes: f64,
    /// Headroom share.
    pub headroom: f64,
    /// Runtime overhead per GPU, bytes.
    pub runtime_bytes: f64,
}

impl MemoryBreakdown {
    /// Bytes one GPU needs when the model is split over `gpus` GPUs.
    pub fn per_gpu_bytes(&self, gpus: u32) -> f64 {
        (self.sharded_bytes / f64::from(gpus.max(1)) + self.replicated_bytes)
            * (1.0 + self.headroom)
            + self.runtime_bytes
    }

    /// Bytes on a single GPU holding everything.
    pub fn total_bytes(&self) -> f64 {
        self.per_gpu_bytes(1)
    }

    /// Bytes of the line named `item` (0 when there is none).
    pub fn line(&self, item: &str) -> u64 {
        self.lines
            .iter()
            .find(|l| l.item == item)
            .map_or(0, |l| l.bytes)
    }
}
