//! The three clouds' stand-ins (moto_server and the EC2 mock, the Compute
//! Engine and Azure Resource Manager wiremocks) for the tests at the top
//! level, and the images their launches name.

#[path = "../../providers/aws/tests/support/mod.rs"]
#[allow(unused)]
pub mod aws_support;
// Both include `providers/test-support/rest.rs`: each keeps its own copy
// of `Fault` and `Faults`, as in its own crate.
#[path = "../../providers/azure/tests/support/mod.rs"]
#[allow(unused, clippy::duplicate_mod)]
pub mod azure_support;
#[path = "../../providers/gcp/tests/support/mod.rs"]
#[allow(unused, clippy::duplicate_mod)]
pub mod gcp_support;

/// The image the Compute Engine stand-in launches.
pub const GCE_IMAGE: &str = "projects/debian-cloud/global/images/family/debian-12";
/// The image the Azure stand-in launches.
pub const AZURE_IMAGE: &str = "Canonical:ubuntu-24_04-lts:server:latest";
