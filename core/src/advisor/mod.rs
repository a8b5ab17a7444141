//! The advisor: which GPUs a model fits on ([`fit`]), and which mix of
//! committed, on-demand and spot capacity a demand profile should buy ([`mix`]).
//!
//! Both are pure functions over the catalog and the user's inputs, and every
//! figure they return says where it came from (a [`Basis`]), so a person can
//! check the arithmetic. The formulas and their published sources are in the
//! README's "Advisor" section.

pub mod compatible;
pub mod fit;
pub mod mix;
mod mix_prices;
pub mod rightsize;

use serde::Serialize;

/// Where a figure in the advisor's output came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum Basis {
    /// The user gave it.
    UserInput(String),
    /// A documented default assumption (what it assumes).
    Default(String),
    /// A model preset's published architecture.
    Preset(String),
    /// Computed by a documented formula from other figures.
    Formula(String),
    /// A price from the catalog: its source and when it was observed.
    Price(String),
}

impl std::fmt::Display for Basis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Basis::UserInput(s) => write!(f, "user input: {s}"),
            Basis::Default(s) => write!(f, "default: {s}"),
            Basis::Preset(s) => write!(f, "preset: {s}"),
            Basis::Formula(s) => write!(f, "formula: {s}"),
            Basis::Price(s) => write!(f, "price: {s}"),
        }
    }
}
