//! gpufleet's model: the types every layer speaks (clouds, locations,
//! hardware, offers and prices, instances, launch requests, notices), fixed-
//! point money, typed errors, the capability traits a provider implements,
//! the layers around them, settings and paging helpers, and the catalog's
//! types with the embedded snapshot.
//!
//! This is the base the provider crates (`gpufleet-aws`, `gpufleet-gcp`,
//! `gpufleet-azure`) build on: it does no I/O of its own (no HTTP, no cloud
//! SDKs) and holds no decision logic. The placer, simulator, advisors,
//! service planning, fake cloud and conformance suite are `gpufleet-core`,
//! above it; `gpufleet-core` re-exports everything here, so most programs
//! name neither crate and use the `gpufleet` facade.

pub mod catalog;
pub mod check;
pub mod clock;
mod cloud;
pub mod config;
mod error;
mod gpu;
pub mod layers;
mod model;
mod money;
// Shared with the provider and CLI crates; not part of the library's API.
#[doc(hidden)]
pub mod paging;
// Shared with the provider and CLI crates; not part of the library's API.
#[doc(hidden)]
pub mod poll;
mod provider;
// Shared with the provider and CLI crates; not part of the library's API.
#[doc(hidden)]
pub mod suggest;
pub mod text;

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
