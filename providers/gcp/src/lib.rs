//! gpufleet's GCP provider.
//!
//! This release has the configuration (builder, endpoint overrides) and the
//! Compute Engine error-reason table; interruption notices from the metadata service
//! (`interruption`) are in; the live provider on
//! `google-cloud-compute-v1` builds on them.

mod builder;
mod error;
pub mod interruption;

pub use builder::{GcpBuilder, GcpConfig};
pub use error::error_kind_for_reason;
