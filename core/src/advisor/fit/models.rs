//! What is being fit: precisions, parameter counts, the architectures of
//! the presets (layers, hidden size, KV heads, head dim), inference or
//! training and how.

use super::*;

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
    pub(super) fn kv_bytes(self) -> f64 {
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
pub(super) const DEFAULT_SHAPES: &[(&str, f64, Architecture)] = &[
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
