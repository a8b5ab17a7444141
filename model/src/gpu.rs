//! GPU models, normalised across the three clouds' naming.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::suggest;

/// A GPU model, normalised across clouds: AWS `H100`, GCP `nvidia-h100-80gb` and
/// Azure `Standard_ND96isr_H100_v5` are all [`GpuModel::H100`].
///
/// Models whose memory size changes what they can run or how fast they are get
/// their own variant (`A100` is the 40 GB part, `A100-80GB` the 80 GB one); smaller
/// differences (V100 16 vs 32 GB) live in [`crate::GpuSpec::memory_gib`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum GpuModel {
    /// NVIDIA Tesla K80 (Kepler).
    K80,
    /// NVIDIA Tesla M60 (Maxwell).
    M60,
    /// NVIDIA Tesla P4 (Pascal).
    P4,
    /// NVIDIA Tesla P100 (Pascal).
    P100,
    /// NVIDIA Tesla V100 (Volta), 16 or 32 GB.
    V100,
    /// NVIDIA T4 (Turing).
    T4,
    /// NVIDIA T4G (Turing, on AWS Graviton hosts).
    T4g,
    /// NVIDIA A10 (Ampere), 24 GB.
    A10,
    /// NVIDIA A10G (Ampere, AWS variant), 24 GB.
    A10G,
    /// NVIDIA L4 (Ada), 24 GB.
    L4,
    /// NVIDIA L40S (Ada), 48 GB.
    L40S,
    /// NVIDIA A100 40 GB (Ampere).
    A100,
    /// NVIDIA A100 80 GB (Ampere).
    A100_80GB,
    /// NVIDIA H100 80 GB (Hopper), SXM, PCIe or NVL.
    H100,
    /// NVIDIA H200 141 GB (Hopper).
    H200,
    /// NVIDIA B200 (Blackwell).
    B200,
    /// NVIDIA RTX PRO 6000 Blackwell Server Edition, 96 GB.
    RtxPro6000,
    /// AMD Radeon Instinct MI25.
    Mi25,
    /// A model gpufleet does not know, kept by the name the cloud gave it.
    Unknown(String),
}

/// Every known model, in a stable order (oldest first within a vendor).
pub const KNOWN_GPU_MODELS: &[GpuModel] = &[
    GpuModel::K80,
    GpuModel::M60,
    GpuModel::P4,
    GpuModel::P100,
    GpuModel::V100,
    GpuModel::T4,
    GpuModel::T4g,
    GpuModel::A10,
    GpuModel::A10G,
    GpuModel::L4,
    GpuModel::L40S,
    GpuModel::A100,
    GpuModel::A100_80GB,
    GpuModel::H100,
    GpuModel::H200,
    GpuModel::B200,
    GpuModel::RtxPro6000,
    GpuModel::Mi25,
];

/// Aliases the clouds and people use, lower-cased, mapped to the model. Canonical
/// names are matched separately.
const ALIASES: &[(&str, GpuModel)] = &[
    ("nvidia-tesla-k80", GpuModel::K80),
    ("tesla-k80", GpuModel::K80),
    ("nvidia-tesla-m60", GpuModel::M60),
    ("nvidia-tesla-p4", GpuModel::P4),
    ("nvidia-tesla-p100", GpuModel::P100),
    ("nvidia-tesla-v100", GpuModel::V100),
    ("v100-32gb", GpuModel::V100),
    ("v100-16gb", GpuModel::V100),
    ("nvidia-tesla-t4", GpuModel::T4),
    ("nvidia-t4", GpuModel::T4),
    ("t4g", GpuModel::T4g),
    ("nvidia-a10", GpuModel::A10),
    ("nvidia-a10g", GpuModel::A10G),
    ("nvidia-l4", GpuModel::L4),
    ("nvidia-l4-vws", GpuModel::L4),
    ("nvidia-l40s", GpuModel::L40S),
    ("nvidia-tesla-a100", GpuModel::A100),
    ("a100-40gb", GpuModel::A100),
    ("nvidia-a100-40gb", GpuModel::A100),
    ("nvidia-a100-80gb", GpuModel::A100_80GB),
    ("a100-80gb", GpuModel::A100_80GB),
    ("a100_80gb", GpuModel::A100_80GB),
    ("a10080gb", GpuModel::A100_80GB),
    ("nvidia-h100-80gb", GpuModel::H100),
    ("nvidia-h100-mega-80gb", GpuModel::H100),
    ("h100-80gb", GpuModel::H100),
    ("h100-mega", GpuModel::H100),
    ("h100-80gb-mega", GpuModel::H100),
    ("h100-nvl", GpuModel::H100),
    ("nvidia-h200-141gb", GpuModel::H200),
    ("h200-141gb", GpuModel::H200),
    ("nvidia-b200", GpuModel::B200),
    ("nvidia-rtx-pro-6000", GpuModel::RtxPro6000),
    ("rtx6000", GpuModel::RtxPro6000),
    ("rtx-pro-6000", GpuModel::RtxPro6000),
    ("radeon mi25", GpuModel::Mi25),
    ("radeon-mi25", GpuModel::Mi25),
];

/// An unknown GPU model name, with the nearest known names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ParseGpuModelError {
    input: String,
    suggestions: Vec<&'static str>,
}

impl ParseGpuModelError {
    /// What was typed.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The nearest known names, best first.
    pub fn suggestions(&self) -> &[&'static str] {
        &self.suggestions
    }

    fn describe(&self) -> String {
        let valid: Vec<&str> = KNOWN_GPU_MODELS.iter().map(GpuModel::as_str).collect();
        if self.input.is_empty() {
            format!("no GPU model given; valid models: {}", valid.join(", "))
        } else if self.suggestions.is_empty() {
            format!(
                "unknown GPU model '{}'; valid models: {}",
                self.input,
                valid.join(", ")
            )
        } else {
            format!(
                "unknown GPU model '{}' (did you mean {}?); valid models: {}",
                self.input,
                self.suggestions.join(", "),
                valid.join(", ")
            )
        }
    }
}

impl GpuModel {
    /// The canonical name: `H100`, `A100-80GB`, `T4G`, …
    pub fn as_str(&self) -> &str {
        match self {
            GpuModel::Unknown(name) => name,
            known => known.known_name(),
        }
    }

    /// The canonical name of a known model; empty for [`GpuModel::Unknown`].
    fn known_name(&self) -> &'static str {
        match self {
            GpuModel::K80 => "K80",
            GpuModel::M60 => "M60",
            GpuModel::P4 => "P4",
            GpuModel::P100 => "P100",
            GpuModel::V100 => "V100",
            GpuModel::T4 => "T4",
            GpuModel::T4g => "T4G",
            GpuModel::A10 => "A10",
            GpuModel::A10G => "A10G",
            GpuModel::L4 => "L4",
            GpuModel::L40S => "L40S",
            GpuModel::A100 => "A100",
            GpuModel::A100_80GB => "A100-80GB",
            GpuModel::H100 => "H100",
            GpuModel::H200 => "H200",
            GpuModel::B200 => "B200",
            GpuModel::RtxPro6000 => "RTXPRO6000",
            GpuModel::Mi25 => "MI25",
            GpuModel::Unknown(_) => "",
        }
    }

    /// Whether this is a model gpufleet knows.
    pub fn is_known(&self) -> bool {
        !matches!(self, GpuModel::Unknown(_))
    }

    /// Who makes it: `nvidia` (CUDA) or `amd` (ROCm); `None` for a model
    /// gpufleet does not know.
    pub fn vendor(&self) -> Option<&'static str> {
        match self {
            GpuModel::Mi25 => Some("amd"),
            GpuModel::Unknown(_) => None,
            _ => Some("nvidia"),
        }
    }

    /// Its architecture's generation, oldest first within its vendor
    /// (NVIDIA: Kepler 1, Maxwell 2, Pascal 3, Volta 4, Turing 5, Ampere 6,
    /// Ada 7, Hopper 8, Blackwell 9; AMD Vega 1).
    pub fn generation(&self) -> Option<u8> {
        Some(match self {
            GpuModel::K80 => 1,
            GpuModel::M60 => 2,
            GpuModel::P4 | GpuModel::P100 => 3,
            GpuModel::V100 => 4,
            GpuModel::T4 | GpuModel::T4g => 5,
            GpuModel::A10 | GpuModel::A10G | GpuModel::A100 | GpuModel::A100_80GB => 6,
            GpuModel::L4 | GpuModel::L40S => 7,
            GpuModel::H100 | GpuModel::H200 => 8,
            GpuModel::B200 | GpuModel::RtxPro6000 => 9,
            GpuModel::Mi25 => 1,
            GpuModel::Unknown(_) => return None,
        })
    }

    /// Why a job should not be moved to it unasked, if so: a GPU the current
    /// software stack no longer runs (K80: CUDA 12 dropped Kepler) or a
    /// graphics-virtualisation board rather than a compute one (M60, sold
    /// for GRID virtual workstations).
    pub fn unsuited(&self) -> Option<&'static str> {
        match self {
            GpuModel::K80 => {
                Some("retired: CUDA 12 and current frameworks no longer run on Kepler")
            }
            GpuModel::M60 => Some("a GRID-class board for virtual workstations, not compute"),
            _ => None,
        }
    }

    /// The memory of one GPU of this model in GiB as sold on the clouds (the
    /// smaller size where a model comes in two and the clouds sell both).
    pub fn default_memory_gib(&self) -> Option<u32> {
        Some(match self {
            GpuModel::K80 => 12,
            GpuModel::M60 => 8,
            GpuModel::P4 => 8,
            GpuModel::P100 => 16,
            GpuModel::V100 => 16,
            GpuModel::T4 | GpuModel::T4g => 16,
            GpuModel::A10 | GpuModel::A10G | GpuModel::L4 => 24,
            GpuModel::L40S => 48,
            GpuModel::A100 => 40,
            GpuModel::A100_80GB | GpuModel::H100 => 80,
            GpuModel::H200 => 141,
            GpuModel::B200 => 180,
            GpuModel::RtxPro6000 => 96,
            GpuModel::Mi25 => 16,
            GpuModel::Unknown(_) => return None,
        })
    }

    /// Parses a name a person typed: canonical names and every cloud alias,
    /// case-insensitively. An unknown name fails with the nearest known names.
    pub fn parse(input: &str) -> Result<GpuModel, ParseGpuModelError> {
        let trimmed = input.trim();
        Self::lookup(trimmed).ok_or_else(|| {
            let names = KNOWN_GPU_MODELS
                .iter()
                .map(GpuModel::as_str)
                .chain(ALIASES.iter().map(|(alias, _)| *alias));
            let mut suggestions: Vec<&'static str> = Vec::new();
            // Nothing typed is near nothing.
            let near = if trimmed.is_empty() {
                Vec::new()
            } else {
                suggest::nearest(trimmed, names, 6)
            };
            for near in near {
                if let Some(model) = Self::lookup(near) {
                    let name = model.known_name();
                    if !suggestions.contains(&name) {
                        suggestions.push(name);
                    }
                }
            }
            suggestions.truncate(3);
            ParseGpuModelError {
                input: trimmed.to_string(),
                suggestions,
            }
        })
    }

    /// Maps a name a cloud API returned to a model, never failing: names that
    /// contain a known model token (`Standard_ND96isr_H100_v5`,
    /// `nvidia-h100-mega-80gb`) are recognised, anything else is kept as
    /// [`GpuModel::Unknown`].
    pub fn from_cloud_name(name: &str) -> GpuModel {
        if let Some(model) = Self::lookup(name.trim()) {
            return model;
        }
        // Azure size names and similar: look for a model among the tokens.
        let lower = name.to_lowercase();
        let tokens: Vec<&str> = lower.split(['_', '-', ' ']).collect();
        let has = |t: &str| tokens.contains(&t);
        if has("a100")
            && (lower.contains("80gb") || lower.contains("amsr") || lower.contains("ads"))
        {
            return GpuModel::A100_80GB;
        }
        for model in KNOWN_GPU_MODELS {
            if has(&model.as_str().to_lowercase()) {
                return model.clone();
            }
        }
        GpuModel::Unknown(name.trim().to_string())
    }

    fn lookup(name: &str) -> Option<GpuModel> {
        let lower = name.to_lowercase();
        if let Some(model) = KNOWN_GPU_MODELS
            .iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(&lower))
        {
            return Some(model.clone());
        }
        ALIASES
            .iter()
            .find(|(alias, _)| *alias == lower)
            .map(|(_, model)| model.clone())
    }
}

impl fmt::Display for GpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for GpuModel {
    type Err = ParseGpuModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GpuModel::parse(s)
    }
}

impl Serialize for GpuModel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for GpuModel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(GpuModel::from_cloud_name(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_each_clouds_names() {
        let unknown = |name: &str| GpuModel::Unknown(name.into());
        for (name, want) in [
            ("H100", GpuModel::H100),
            ("nvidia-h100-80gb", GpuModel::H100),
            ("Standard_ND96isr_H100_v5", GpuModel::H100),
            ("nvidia-tesla-t4", GpuModel::T4),
            ("Standard_NC24ads_A100_v4", GpuModel::A100_80GB),
            ("Standard_ND96asr_v4", unknown("Standard_ND96asr_v4")),
            ("a100-80gb", GpuModel::A100_80GB),
            ("Radeon MI25", GpuModel::Mi25),
            ("Gaudi", unknown("Gaudi")),
        ] {
            assert_eq!(GpuModel::from_cloud_name(name), want, "{name}");
        }
    }

    #[test]
    fn parse_suggests_nearest_names() {
        let err = GpuModel::parse("H10").unwrap_err();
        assert_eq!(err.suggestions()[0], "H100");
        assert!(err
            .to_string()
            .starts_with("unknown GPU model 'H10' (did you mean H100"));
        // An empty name suggests nothing (it suggested L4, P4, T4).
        let empty = GpuModel::parse(" ").unwrap_err();
        assert!(empty.suggestions().is_empty());
        assert!(empty
            .to_string()
            .starts_with("no GPU model given; valid models: K80"));
        assert!(err.to_string().contains("valid models: K80, M60"));
        let err = GpuModel::parse("a100-80").unwrap_err();
        assert_eq!(err.suggestions()[0], "A100-80GB");
        assert_eq!(GpuModel::parse(" h100 ").unwrap(), GpuModel::H100);
    }

    #[test]
    fn every_known_model_round_trips() {
        for m in KNOWN_GPU_MODELS {
            assert_eq!(&GpuModel::parse(m.as_str()).unwrap(), m);
            assert_eq!(m.known_name(), m.as_str());
            assert!(m.default_memory_gib().is_some());
        }
    }
}
