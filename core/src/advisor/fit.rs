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
use crate::error::{Error, Result};
use crate::gpu::GpuModel;
use crate::model::{Capacity, Cloud, GpuLink, InstanceType, Offer, Region, Zone};
use crate::money::Price;
use crate::suggest::check_known;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Numeric precision of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit float.
    Fp32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    Fp16,
    /// 8-bit float (Hopper and later).
    Fp8,
    /// 8-bit integer quantisation.
    Int8,
    /// 4-bit integer quantisation (GPTQ, AWQ, NF4).
    Int4,
}

impl Precision {
    /// Every precision, in the order they are listed to users.
    pub const ALL: [Precision; 6] = [
        Precision::Fp32,
        Precision::Bf16,
        Precision::Fp16,
        Precision::Fp8,
        Precision::Int8,
        Precision::Int4,
    ];

    /// Bytes per parameter.
    pub fn bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Bf16 | Precision::Fp16 => 2.0,
            Precision::Fp8 | Precision::Int8 => 1.0,
            Precision::Int4 => 0.5,
        }
    }

    /// The name users type.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
            Precision::Int4 => "int4",
        }
    }

    /// Parses `fp32`, `bf16`, `fp16`, `fp8`, `int8` or `int4`.
    pub fn parse(s: &str) -> Result<Precision> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some(p) = Precision::ALL.into_iter().find(|p| p.as_str() == lower) {
            return Ok(p);
        }
        check_known("precision", s, Precision::ALL.map(Precision::as_str))?;
        Err(Error::invalid_input(format!("unknown precision '{s}'")))
    }

    /// Bytes per value of the KV cache at this weight precision.
    fn kv_bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Fp8 => 1.0,
            _ => 2.0,
        }
    }
}

/// Parses a parameter count: `7B`, `70b`, `1.3e9`, `350M`, `1.5T`, `7000000000`.
pub fn parse_params(input: &str) -> Result<f64> {
    let err = |why: &str| {
        Error::invalid_input(format!(
            "invalid parameter count '{input}': {why}; use a positive number with an optional K, M, B or T suffix, such as 7B, 1.3e9 or 350M"
        ))
    };
    let s = input.trim();
    let (num, scale) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('B') => (&s[..s.len() - 1], 1e9),
        Some('T') => (&s[..s.len() - 1], 1e12),
        Some(_) => (s, 1.0),
        None => return Err(err("it is empty")),
    };
    let value: f64 = num.trim().parse().map_err(|_| err("not a number"))?;
    let params = value * scale;
    if params.is_nan() || params <= 0.0 {
        return Err(err("it must be more than zero"));
    }
    if params < 1e6 {
        return Err(err(
            "fewer than a million parameters is not a model this advisor sizes",
        ));
    }
    if params > 1e14 {
        return Err(err("more than 100 trillion parameters"));
    }
    Ok(params)
}

/// The attention shape that sizes the KV cache and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Architecture {
    /// Transformer layers.
    pub layers: u32,
    /// Hidden (model) dimension.
    pub hidden: u32,
    /// Key/value heads (fewer than attention heads under grouped-query attention).
    pub kv_heads: u32,
    /// Dimension per head.
    pub head_dim: u32,
}

/// A published model family's size and shape (from its `config.json` or paper).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Preset {
    /// Name users type.
    pub name: &'static str,
    /// Parameters.
    pub params: f64,
    /// Shape.
    pub arch: Architecture,
    /// Where the shape is published.
    pub source: &'static str,
}

const fn arch(layers: u32, hidden: u32, kv_heads: u32, head_dim: u32) -> Architecture {
    Architecture {
        layers,
        hidden,
        kv_heads,
        head_dim,
    }
}

/// Model presets (`--model`), from each model's published configuration.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "llama-2-7b",
        params: 6.74e9,
        arch: arch(32, 4096, 32, 128),
        source: "meta-llama/Llama-2-7b-hf config.json",
    },
    Preset {
        name: "llama-2-13b",
        params: 13.0e9,
        arch: arch(40, 5120, 40, 128),
        source: "meta-llama/Llama-2-13b-hf config.json",
    },
    Preset {
        name: "llama-2-70b",
        params: 69.0e9,
        arch: arch(80, 8192, 8, 128),
        source: "meta-llama/Llama-2-70b-hf config.json",
    },
    Preset {
        name: "llama-3-8b",
        params: 8.03e9,
        arch: arch(32, 4096, 8, 128),
        source: "meta-llama/Meta-Llama-3-8B config.json",
    },
    Preset {
        name: "llama-3-70b",
        params: 70.6e9,
        arch: arch(80, 8192, 8, 128),
        source: "meta-llama/Meta-Llama-3-70B config.json",
    },
    Preset {
        name: "llama-3.1-405b",
        params: 405.9e9,
        arch: arch(126, 16384, 8, 128),
        source: "meta-llama/Llama-3.1-405B config.json",
    },
    Preset {
        name: "mistral-7b",
        params: 7.24e9,
        arch: arch(32, 4096, 8, 128),
        source: "mistralai/Mistral-7B-v0.1 config.json",
    },
    Preset {
        name: "mixtral-8x7b",
        params: 46.7e9,
        arch: arch(32, 4096, 8, 128),
        source: "mistralai/Mixtral-8x7B-v0.1 config.json",
    },
    Preset {
        name: "qwen2.5-7b",
        params: 7.62e9,
        arch: arch(28, 3584, 4, 128),
        source: "Qwen/Qwen2.5-7B config.json",
    },
    Preset {
        name: "qwen2.5-72b",
        params: 72.7e9,
        arch: arch(80, 8192, 8, 128),
        source: "Qwen/Qwen2.5-72B config.json",
    },
];

/// Shapes used when only a parameter count is given: the dense GPT-3 family
/// (Brown et al. 2020, table 2.1; full multi-head attention, so the KV cache
/// estimate is conservative) and, above it, Llama 2 70B and Llama 3.1 405B.
const DEFAULT_SHAPES: &[(&str, f64, Architecture)] = &[
    ("GPT-3 125M", 125e6, arch(12, 768, 12, 64)),
    ("GPT-3 350M", 350e6, arch(24, 1024, 16, 64)),
    ("GPT-3 760M", 760e6, arch(24, 1536, 16, 96)),
    ("GPT-3 1.3B", 1.3e9, arch(24, 2048, 16, 128)),
    ("GPT-3 2.7B", 2.7e9, arch(32, 2560, 32, 80)),
    ("GPT-3 6.7B", 6.7e9, arch(32, 4096, 32, 128)),
    ("GPT-3 13B", 13e9, arch(40, 5140, 40, 128)),
    ("Llama 2 70B", 69e9, arch(80, 8192, 8, 128)),
    ("GPT-3 175B", 175e9, arch(96, 12288, 96, 128)),
    ("Llama 3.1 405B", 405.9e9, arch(126, 16384, 8, 128)),
];

/// Looks up a preset by name (case-insensitive), naming the valid ones if it
/// is not known.
pub fn preset(name: &str) -> Result<&'static Preset> {
    let lower = name.trim().to_ascii_lowercase();
    if let Some(p) = PRESETS.iter().find(|p| p.name == lower) {
        return Ok(p);
    }
    check_known("model", name, PRESETS.iter().map(|p| p.name))?;
    Err(Error::invalid_input(format!("unknown model '{name}'")))
}

/// What the memory is for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Workload {
    /// Serving: weights, KV cache for `context` tokens × `batch` sequences.
    Inference {
        /// Tokens per sequence (prompt + output).
        context: u32,
        /// Concurrent sequences.
        batch: u32,
    },
    /// Training or fine-tuning.
    Training {
        /// Full fine-tuning or LoRA.
        method: TrainingMethod,
        /// Sequence length.
        context: u32,
        /// Micro-batch per GPU.
        batch: u32,
        /// Whether activations are recomputed in the backward pass.
        activation_checkpointing: bool,
    },
}

/// Full training or low-rank adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainingMethod {
    /// Every parameter trained with Adam.
    Full,
    /// Frozen base, trained adapters (QLoRA when the base is int4).
    Lora,
}

impl TrainingMethod {
    /// Parses `full` or `lora`.
    pub fn parse(s: &str) -> Result<TrainingMethod> {
        match s.trim().to_ascii_lowercase().as_str() {
            "full" => Ok(TrainingMethod::Full),
            "lora" | "qlora" => Ok(TrainingMethod::Lora),
            _ => Err(Error::invalid_input(format!(
                "invalid training method '{s}': expected full or lora"
            ))),
        }
    }
}

/// Default context for inference and sequence length for training.
pub const DEFAULT_CONTEXT: u32 = 4096;
/// Default share of parameters a LoRA adapter trains.
pub const DEFAULT_LORA_SHARE: f64 = 0.01;
/// Default headroom over the computed total.
pub const DEFAULT_HEADROOM: f64 = 0.10;
/// Default runtime overhead per GPU, GiB.
pub const DEFAULT_RUNTIME_GIB: f64 = 1.0;
/// Default cap on nodes in one configuration.
pub const DEFAULT_MAX_NODES: u32 = 16;

/// A model to size. Start from [`FitRequest::params`] or [`FitRequest::preset`].
#[derive(Debug, Clone, PartialEq)]
pub struct FitRequest {
    params: f64,
    params_basis: Basis,
    arch: Architecture,
    arch_basis: Basis,
    /// Precision of the weights (default bf16).
    pub precision: Precision,
    /// What the memory is for (default inference at 4096 tokens, batch 1).
    pub workload: Workload,
    /// Share of parameters LoRA trains.
    pub lora_share: f64,
    /// Headroom share over the computed total.
    pub headroom: f64,
    /// Runtime overhead per GPU, GiB.
    pub runtime_gib: f64,
    overrides: Vec<&'static str>,
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
        Ok(FitRequest {
            params,
            params_basis: Basis::UserInput(format!("--params {given_as}")),
            arch: shape,
            arch_basis: Basis::Default(format!(
                "shape of {name}, the nearest published dense model by size"
            )),
            precision: Precision::Bf16,
            workload: Workload::Inference {
                context: DEFAULT_CONTEXT,
                batch: 1,
            },
            lora_share: DEFAULT_LORA_SHARE,
            headroom: DEFAULT_HEADROOM,
            runtime_gib: DEFAULT_RUNTIME_GIB,
            overrides: Vec::new(),
        })
    }

    /// A published model.
    pub fn preset(preset: &Preset) -> FitRequest {
        FitRequest {
            params: preset.params,
            params_basis: Basis::Preset(format!("{} ({})", preset.name, preset.source)),
            arch: preset.arch,
            arch_basis: Basis::Preset(format!("{} ({})", preset.name, preset.source)),
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

    /// Sets the precision.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Sets the workload.
    pub fn with_workload(mut self, workload: Workload) -> Self {
        self.workload = workload;
        self
    }

    /// Overrides the number of layers.
    pub fn with_layers(mut self, layers: u32) -> Self {
        self.arch.layers = layers;
        self.overrides.push("layers");
        self
    }

    /// Overrides the hidden dimension.
    pub fn with_hidden(mut self, hidden: u32) -> Self {
        self.arch.hidden = hidden;
        self.overrides.push("hidden");
        self
    }

    /// Overrides the number of KV heads.
    pub fn with_kv_heads(mut self, kv_heads: u32) -> Self {
        self.arch.kv_heads = kv_heads;
        self.overrides.push("kv-heads");
        self
    }

    /// Overrides the head dimension.
    pub fn with_head_dim(mut self, head_dim: u32) -> Self {
        self.arch.head_dim = head_dim;
        self.overrides.push("head-dim");
        self
    }

    /// The parameter count.
    pub fn param_count(&self) -> f64 {
        self.params
    }

    /// The attention shape in use.
    pub fn architecture(&self) -> Architecture {
        self.arch
    }

    fn validate(&self) -> Result<()> {
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

    fn shape_basis(&self) -> Basis {
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
        match self.workload {
            Workload::Inference { context, batch } => {
                line(
                    "weights",
                    p * prec.bytes(),
                    true,
                    format!("{p:.3e} params x {} B ({})", prec.bytes(), prec.as_str()),
                    pb.clone(),
                );
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
                            "weights",
                            p * prec.bytes(),
                            true,
                            format!("{p:.3e} params x {} B ({})", prec.bytes(), prec.as_str()),
                            pb.clone(),
                        );
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
                        line(
                            "weights (frozen)",
                            p * prec.bytes(),
                            true,
                            format!("{p:.3e} params x {} B ({})", prec.bytes(), prec.as_str()),
                            pb.clone(),
                        );
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

/// The cheapest on-demand and spot offer of one instance type.
type Cheapest<'a> = (Option<&'a Offer>, Option<&'a Offer>);

/// Sizes the model and finds every GPU configuration among `offers` that holds
/// it, cheapest first (one row per instance type, at its cheapest region).
pub fn fit(request: &FitRequest, offers: &[Offer], options: &FitOptions) -> Result<FitReport> {
    if options.max_nodes == 0 {
        return Err(Error::invalid_input(
            "invalid max nodes 0: it must be at least 1",
        ));
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
        .find(|n| fits(gpu.count * n))
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
mod tests {
    use super::*;
    use crate::catalog::Snapshot;

    const GB: f64 = 1e9;

    fn inference(params: &str, precision: Precision, context: u32) -> FitRequest {
        FitRequest::params(parse_params(params).unwrap(), params)
            .unwrap()
            .with_precision(precision)
            .with_workload(Workload::Inference { context, batch: 1 })
    }

    #[test]
    fn seven_billion_weights_match_the_published_figures() {
        for (p, gb) in [
            (Precision::Fp16, 14.0),
            (Precision::Int8, 7.0),
            (Precision::Int4, 3.5),
        ] {
            let m = inference("7B", p, 4096).memory().unwrap();
            let w = m.line("weights") as f64 / GB;
            assert!((w - gb).abs() < 0.05, "{p:?}: {w} GB");
        }
    }

    #[test]
    fn seventy_billion_int8_fits_one_80gb_gpu_for_short_contexts_only() {
        let m = inference("70B", Precision::Int8, 4096).memory().unwrap();
        assert!(m.total_bytes() <= 80.0 * GIB, "{}", m.total_bytes() / GIB);
        let long = inference("70B", Precision::Int8, 32_768).memory().unwrap();
        assert!(long.total_bytes() > 80.0 * GIB);
        let fp16 = inference("70B", Precision::Fp16, 4096).memory().unwrap();
        assert!(fp16.total_bytes() > 80.0 * GIB);
        assert!(fp16.per_gpu_bytes(2) <= 80.0 * GIB);
    }

    #[test]
    fn grouped_query_attention_shrinks_the_kv_cache() {
        let mha = FitRequest::preset(preset("llama-2-7b").unwrap());
        let gqa = FitRequest::preset(preset("mistral-7b").unwrap());
        let kv = |r: &FitRequest| r.memory().unwrap().line("kv cache");
        // 32 KV heads against 8: four times the cache.
        assert_eq!(kv(&mha), 4 * kv(&gqa));
        // Llama 2 7B at fp16, 4096 tokens: 2 GiB of cache (the well-known 0.5 MiB per token).
        assert_eq!(kv(&mha), 2 * 32 * 32 * 128 * 4096 * 2);
    }

    #[test]
    fn full_training_needs_sixteen_bytes_per_parameter_before_activations() {
        let r = inference("7B", Precision::Bf16, 1).with_workload(Workload::Training {
            method: TrainingMethod::Full,
            context: 2048,
            batch: 1,
            activation_checkpointing: true,
        });
        let m = r.memory().unwrap();
        let states = m.line("weights") + m.line("gradients") + m.line("optimizer states");
        assert_eq!(states, 16 * 7_000_000_000);
        let lora = r
            .clone()
            .with_workload(Workload::Training {
                method: TrainingMethod::Lora,
                context: 2048,
                batch: 1,
                activation_checkpointing: true,
            })
            .memory()
            .unwrap();
        assert!(lora.total_bytes() < m.total_bytes() / 4.0);
        let int4 = r.with_precision(Precision::Int4).memory().unwrap_err();
        assert!(int4.to_string().contains("lora"), "{int4}");
    }

    #[test]
    fn checkpointing_cuts_activations() {
        let w = |ckpt| Workload::Training {
            method: TrainingMethod::Full,
            context: 4096,
            batch: 1,
            activation_checkpointing: ckpt,
        };
        let p = preset("llama-2-7b").unwrap();
        let on = FitRequest::preset(p)
            .with_workload(w(true))
            .memory()
            .unwrap();
        let off = FitRequest::preset(p)
            .with_workload(w(false))
            .memory()
            .unwrap();
        // 34 x 32 layers x 4096 x 4096 bytes without; (2 x 32 + 34) x ... with.
        assert_eq!(off.line("activations"), 34 * 32 * 4096 * 4096);
        assert_eq!(on.line("activations"), (2 * 32 + 34) * 4096 * 4096);
    }

    #[test]
    fn bad_inputs_are_named() {
        for bad in ["0", "-7B", "abc", "", "7X", "1e400", "12"] {
            let e = parse_params(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
        assert_eq!(parse_params("1.3e9").unwrap(), 1.3e9);
        assert_eq!(parse_params("350M").unwrap(), 350e6);
        let e = Precision::parse("fp12").unwrap_err().to_string();
        assert!(e.contains("fp12") && e.contains("bf16"), "{e}");
        let e = preset("llama-9").unwrap_err().to_string();
        assert!(e.contains("llama-9") && e.contains("llama-"), "{e}");
        let zero = inference("7B", Precision::Bf16, 0).memory().unwrap_err();
        assert!(zero.to_string().contains("context 0"), "{zero}");
        let zero_layers = inference("7B", Precision::Bf16, 10)
            .with_layers(0)
            .memory()
            .unwrap_err();
        assert!(zero_layers.to_string().contains("layers 0"));
    }

    #[test]
    fn configurations_come_cheapest_first_and_only_pool_gpus_over_nvlink() {
        let offers = Snapshot::embedded().offers();
        // 70B at fp16 needs about 150 GiB: never one GPU, never PCIe pooling.
        let r = inference("70B", Precision::Fp16, 4096);
        let report = fit(&r, offers, &FitOptions::default()).unwrap();
        assert!(!report.configs.is_empty());
        for w in report.configs.windows(2) {
            let key = |c: &FitConfig| (c.on_demand_per_hour.is_none(), c.rank_price());
            assert!(key(&w[0]) <= key(&w[1]));
        }
        for c in &report.configs {
            assert!(c.gpus_used >= 2, "{c:?}");
            assert!(c.utilisation <= 1.0, "{c:?}");
            assert!(!c.layout.contains("1 of"), "{c:?}");
            let t = offers
                .iter()
                .find(|o| o.instance_type.name == c.instance_type)
                .unwrap();
            assert_ne!(
                t.instance_type.interconnect.gpu_link,
                GpuLink::Pcie,
                "{c:?}"
            );
        }
        // A 7B model at int4 fits a single T4-class GPU; the cheapest is a 1-GPU type.
        let small = fit(
            &inference("7B", Precision::Int4, 2048),
            offers,
            &FitOptions::default(),
        )
        .unwrap();
        assert_eq!(small.configs[0].gpus_used, 1);
        assert_eq!(small.configs[0].gpus_per_node, 1);
    }

    #[test]
    fn a_model_too_big_for_one_node_spans_nodes_only_over_a_fabric() {
        let offers = Snapshot::embedded().offers();
        let r = FitRequest::preset(preset("llama-3.1-405b").unwrap()).with_workload(
            Workload::Training {
                method: TrainingMethod::Full,
                context: 4096,
                batch: 1,
                activation_checkpointing: true,
            },
        );
        let report = fit(&r, offers, &FitOptions::default()).unwrap();
        assert!(!report.configs.is_empty());
        for c in &report.configs {
            assert!(c.nodes > 1, "{c:?}");
            let t = offers
                .iter()
                .find(|o| o.instance_type.name == c.instance_type)
                .unwrap();
            assert!(t.instance_type.interconnect.multi_node_capable(), "{c:?}");
        }
        let one_node = fit(
            &r,
            offers,
            &FitOptions {
                max_nodes: 1,
                ..FitOptions::default()
            },
        )
        .unwrap();
        assert!(one_node.configs.is_empty());
        assert!(one_node.too_small > 0);
    }
}
