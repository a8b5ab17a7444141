//! gpufleet's Azure provider.
//!
//! This release has the configuration (builder, endpoint overrides, a token
//! hidden from `Debug`) and the ARM error-code table; interruption notices from the metadata service
//! (`interruption`) are in; the live provider on
//! `azure_core` 1.x builds on them.

mod builder;
mod error;
pub mod interruption;

pub use builder::{AzureBuilder, AzureConfig};
pub use error::error_kind_for_code;
