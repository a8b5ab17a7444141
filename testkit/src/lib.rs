//! gpufleet's test kit (dev-only, never published): the stand-ins every
//! crate's tests run against, in one place instead of files included by
//! path.
//!
//! - [`aws`]: `moto_server` per test ([`aws::Moto`], installed into
//!   `target/moto-venv` on first use), an EC2 mock for faults moto cannot
//!   play ([`aws::ec2_mock`]) and an IMDS stand-in ([`aws::imds`]);
//! - [`gcp`]: a stateful Compute Engine + Cloud Billing stand-in on
//!   wiremock, bodies shaped as the REST references show, and the GCE
//!   metadata server;
//! - [`azure`]: a stateful Azure Resource Manager stand-in on wiremock;
//! - [`Fault`] and [`Faults`]: fault injection and the call log the REST
//!   stand-ins share;
//! - the checks every cloud's tests share (notice streams, secrets in
//!   messages), re-exported at the root;
//! - [`secrets`]: GCP Secret Manager and Azure Key Vault on wiremock;
//! - [`postgres`]: a throwaway PostgreSQL 15 cluster on 127.0.0.1;
//! - [`catalogs`]: the executor tests' catalogs and launch template.

#![allow(
    missing_docs,
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::type_complexity,
    clippy::too_many_arguments
)]

#[macro_use]
mod faults;
mod common;

pub mod aws;
pub mod azure;
pub mod catalogs;
pub mod docs;
pub mod fleet;
pub mod forwarder;
pub mod gcp;
pub mod postgres;
pub mod replica;
pub mod secrets;

pub use common::*;
pub use faults::{Fault, Faults};

/// The image the Compute Engine stand-in launches.
pub const GCE_IMAGE: &str = "projects/debian-cloud/global/images/family/debian-12";
/// The image the Azure stand-in launches.
pub const AZURE_IMAGE: &str = "Canonical:ubuntu-24_04-lts:server:latest";
