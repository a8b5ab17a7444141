//! # gpufleet
//!
//! Provision GPU capacity across AWS, GCP and Azure, and keep fault-tolerant
//! jobs on the cheapest pool that is stable enough to finish them.
//!
//! Everything goes through one set of traits ([`Provider`] and the capability
//! traits it bundles), so the same code runs against a real cloud, the
//! [fake cloud](fake::FakeCloud) in tests, or several at once behind
//! `Arc<dyn Provider>`.
//!
//! ## Find the cheapest GPU offers, with no credentials
//!
//! The catalog snapshot compiled into gpufleet holds real published on-demand
//! and spot prices for AWS, GCP and Azure:
//!
//! ```
//! use gpufleet::{Capacity, GpuModel, OfferQuery, OfferSort, Snapshot};
//!
//! let query = OfferQuery::new().gpu(GpuModel::H100, Some(8)).capacity(Capacity::Spot);
//! let mut offers = Snapshot::embedded().query(&query);
//! gpufleet::catalog::sort_offers(&mut offers, OfferSort::Price);
//! let best = &offers[0];
//! println!("{} at ${}/h ({})", best.pool, best.price, best.source);
//! assert!(offers.windows(2).all(|w| w[0].price <= w[1].price));
//! ```
//!
//! ## Launch and clean up, against the fake cloud
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::{sync::Arc, time::Duration};
//! use gpufleet::{fake::FakeCloud, layers::*, *};
//!
//! let cloud: Arc<dyn Provider> = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
//! let cloud = cloud.layer(TimeoutLayer::new(Duration::from_secs(30))).layer(RetryLayer::default());
//!
//! let offer = cloud.cheapest_offers(&OfferQuery::new().gpu(GpuModel::A10G, Some(1)), 1).await?.remove(0);
//! let request = LaunchRequest::new(offer.pool.clone(), "ami-0123456789abcdef0", IdempotencyKey::new("train-42")?)
//!     .with_tag(tags::JOB, "train-42")
//!     .with_ttl(Duration::from_secs(8 * 3600));
//! let instances = cloud.launch(&request).await?;
//! // Retrying with the same key does not launch twice.
//! assert_eq!(cloud.launch(&request).await?[0].id, instances[0].id);
//!
//! let report = cloud.terminate_all(&TagFilter::managed().with(tags::JOB, "train-42")).await?;
//! assert_eq!(report.terminated.len(), 1);
//! # Ok::<(), Error>(()) }).unwrap();
//! ```
//!
//! ## Crates
//!
//! | crate | what |
//! |---|---|
//! | `gpufleet-core` | model, traits, errors, layers, snapshot, placement policy, simulator, fake cloud, conformance suite |
//! | `gpufleet-runtime` (feature `runtime`) | provider factory, executor, job controller, reaper, SQLite ledger |
//! | `gpufleet-aws` (feature `aws`) | AWS provider |
//! | `gpufleet-gcp` (feature `gcp`) | GCP provider |
//! | `gpufleet-azure` (feature `azure`) | Azure provider |

pub use gpufleet_core::*;

/// What most programs using gpufleet need, in one import:
/// `use gpufleet::prelude::*;`
///
/// The provider traits (so their methods are in scope on
/// `Arc<dyn Provider>`), the layering extension and the standard layers, the
/// request and result types of a launch, offers and their queries, money, the
/// ledger trait, and the error type.
///
/// ```
/// use gpufleet::prelude::*;
///
/// let query = OfferQuery::new().gpu(GpuModel::H100, Some(8)).capacity(Capacity::Spot);
/// let offers = Snapshot::embedded().query(&query);
/// assert!(offers.iter().all(|o| o.price > Price::ZERO));
/// ```
pub mod prelude {
    pub use gpufleet_core::layers::{LayerExt, RetryLayer, TimeoutLayer, TracingLayer};
    pub use gpufleet_core::ledger::Ledger;
    pub use gpufleet_core::{
        async_trait, tags, Capacity, Catalog, Cloud, Compute, Error, ErrorKind, GpuModel,
        IdempotencyKey, Instance, InstanceState, InterruptionSource, LaunchRequest, Money,
        NoticeKind, Offer, OfferQuery, OfferSort, Placement, Pool, Price, Provider, ProviderExt,
        Result, Snapshot, SpotMarket, TagFilter,
    };
}

/// Execution: the provider factory, the executor, the job controller, the
/// reaper (the `gpufleet-runtime` crate).
#[cfg(feature = "runtime")]
pub use gpufleet_runtime as runtime;

/// The SQLite ledger.
#[cfg(feature = "runtime")]
pub use gpufleet_runtime::sqlite;

/// The PostgreSQL ledger, shared by several controllers.
#[cfg(feature = "postgres")]
pub use gpufleet_runtime::postgres;

/// The AWS provider.
#[cfg(feature = "aws")]
pub use gpufleet_aws as aws;

/// The Azure provider.
#[cfg(feature = "azure")]
pub use gpufleet_azure as azure;

/// The GCP provider.
#[cfg(feature = "gcp")]
pub use gpufleet_gcp as gcp;
