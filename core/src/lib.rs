//! gpufleet core: the decisions above the model: the placer, the simulator,
//! the advisors, service planning, the ledger's model, the printed
//! documents, the fake cloud and the conformance suite.
//!
//! This crate does no I/O of its own: no HTTP and no cloud SDKs. The model
//! it decides over (types, money, errors, the capability traits, layers,
//! the catalog and its embedded snapshot) is `gpufleet-model`, re-exported
//! here whole, so `gpufleet_core::Offer` and `gpufleet_model::Offer` are one
//! type. The provider crates build on `gpufleet-model` alone; the
//! `gpufleet` facade re-exports everything.

pub use gpufleet_model::*;

pub mod advisor;
#[cfg(feature = "conformance")]
pub mod conformance;
mod csv_rows;
pub mod fake;
pub mod ledger;
pub mod placer;
pub mod report;
pub mod serve;
pub mod sim;
pub mod usage;
