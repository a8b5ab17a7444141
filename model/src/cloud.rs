//! The clouds gpufleet knows. Apart from the model so that errors can name
//! their cloud without depending on the model (which depends on errors).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A cloud provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
#[derive(strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Cloud {
    /// Amazon Web Services.
    Aws,
    /// Google Cloud.
    Gcp,
    /// Microsoft Azure.
    Azure,
    /// The in-memory fake cloud (`gpufleet_core::fake::FakeCloud`).
    Fake,
}

impl Cloud {
    /// The three real clouds.
    pub const REAL: [Cloud; 3] = [Cloud::Aws, Cloud::Gcp, Cloud::Azure];

    /// The name people write: `AWS`, `GCP`, `Azure`, `fake`.
    pub fn title(self) -> &'static str {
        match self {
            Cloud::Aws => "AWS",
            Cloud::Gcp => "GCP",
            Cloud::Azure => "Azure",
            Cloud::Fake => "fake",
        }
    }

    /// The lower-case name: `aws`, `gcp`, `azure`, `fake`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A name that is no cloud gpufleet knows; as a gpufleet [`crate::Error`] it
/// is `InvalidInput`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseCloudError(String);

impl fmt::Display for ParseCloudError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown cloud '{}'; valid clouds: aws, gcp, azure, fake",
            self.0
        )
    }
}

impl std::error::Error for ParseCloudError {}

impl FromStr for Cloud {
    type Err = ParseCloudError;
    fn from_str(s: &str) -> Result<Self, ParseCloudError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "aws" | "amazon" | "ec2" => Ok(Cloud::Aws),
            "gcp" | "google" | "gce" => Ok(Cloud::Gcp),
            "azure" | "az" => Ok(Cloud::Azure),
            "fake" => Ok(Cloud::Fake),
            _ => Err(ParseCloudError(s.to_string())),
        }
    }
}
