//! Clouds, regions and zones, and the string ids of cloud resources.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A cloud provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Cloud {
    /// Amazon Web Services.
    Aws,
    /// Google Cloud.
    Gcp,
    /// Microsoft Azure.
    Azure,
    /// The in-memory fake cloud ([`crate::fake::FakeCloud`]).
    Fake,
}

impl Cloud {
    /// The three real clouds.
    pub const REAL: [Cloud; 3] = [Cloud::Aws, Cloud::Gcp, Cloud::Azure];

    /// The lower-case name: `aws`, `gcp`, `azure`, `fake`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
            Cloud::Azure => "azure",
            Cloud::Fake => "fake",
        }
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Cloud {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "aws" | "amazon" | "ec2" => Ok(Cloud::Aws),
            "gcp" | "google" | "gce" => Ok(Cloud::Gcp),
            "azure" | "az" => Ok(Cloud::Azure),
            "fake" => Ok(Cloud::Fake),
            _ => Err(Error::invalid_input(format!(
                "unknown cloud '{s}'; valid clouds: aws, gcp, azure, fake"
            ))),
        }
    }
}

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a name.
            pub fn new(name: impl Into<String>) -> Self {
                Self(name.into())
            }

            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }
    };
}

string_id!(
    /// A region as its cloud names it: `us-east-1`, `us-central1`, `eastus`.
    Region
);
string_id!(
    /// A zone by its stable identifier: the AWS AZ **ID** (`use1-az4`, the same in
    /// every account, unlike the AZ name), the GCP zone (`us-central1-a`), or the
    /// Azure logical zone (`eastus-1`).
    Zone
);
string_id!(
    /// A cloud's identifier for an instance (`i-0abc…`, a GCE instance name, an
    /// Azure VM resource id).
    InstanceId
);
string_id!(
    /// A cloud's identifier for a placement group.
    PlacementGroupId
);
