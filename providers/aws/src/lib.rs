//! gpufleet's AWS provider.
//!
//! This release has the configuration (builder, endpoint overrides) and the EC2
//! error-code table; the live provider on `aws-sdk-ec2` builds on them.

mod builder;
mod error;

pub use builder::{AwsBuilder, AwsConfig};
pub use error::error_kind_for_code;
