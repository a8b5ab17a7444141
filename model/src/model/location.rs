//! Regions and zones, and the string ids of cloud resources (the clouds
//! themselves are in `cloud.rs`, which errors name without the model).

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::cloud::{Cloud, ParseCloudError};

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
