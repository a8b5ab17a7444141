//! gpufleet's Azure provider.
//!
//! This release has the configuration (builder, endpoint overrides, a token
//! hidden from `Debug`) and the ARM error-code table; the live provider on
//! `azure_core` 1.x builds on them.

mod builder;
mod error;

pub use builder::{AzureBuilder, AzureConfig};
pub use error::error_kind_for_code;
