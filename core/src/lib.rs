//! gpufleet core: the model, the capability traits, errors, layers, the embedded
//! catalog snapshot, the fake cloud and the conformance suite.
//!
//! This crate does no I/O of its own: no HTTP and no cloud SDKs. The provider
//! crates (`gpufleet-aws`, `gpufleet-gcp`, `gpufleet-azure`) implement
//! [`Provider`] on top of it, and the `gpufleet` facade re-exports everything.

pub mod advisor;
pub mod catalog;
pub mod check;
pub mod clock;
mod cloud;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
mod csv_rows;
mod error;
pub mod fake;
mod gpu;
pub mod layers;
pub mod ledger;
mod model;
mod money;
// Shared with the provider and CLI crates; not part of the library's API.
#[doc(hidden)]
pub mod paging;
pub mod placer;
// Shared with the provider and CLI crates; not part of the library's API.
#[doc(hidden)]
pub mod poll;
mod provider;
pub mod report;
pub mod serve;
pub mod sim;
// Shared with the provider and CLI crates; not part of the library's API.
#[doc(hidden)]
pub mod suggest;
pub mod usage;

/// Re-exported so that implementations of gpufleet's async traits (a
/// provider, a ledger, a checkpoint hook) need no dependency of their own.
pub use async_trait::async_trait;
pub use catalog::{GpuRequirement, OfferQuery, OfferSort, Snapshot};
pub use error::{Error, ErrorKind, Result};
pub use gpu::{GpuModel, ParseGpuModelError, KNOWN_GPU_MODELS};
pub use model::*;
pub use money::{Money, ParseMoneyError, Price};
pub use provider::{
    clean_up_launch, current_price_history, provider_for, Capabilities, Capability, Catalog,
    CloudEvents, Compute, InterruptionSource, NoticeStream, Operation, Placement, Provider,
    ProviderExt, SpotMarket, TerminateReport,
};
#[doc(hidden)]
pub use suggest::check_known;
