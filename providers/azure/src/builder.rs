//! Azure configuration: `new / from_env / with_* / build`.

use gpufleet_core::config::{env_var, parse_endpoint, parse_regions, Secret};
use gpufleet_core::{Error, Region, Result};

/// The public Azure Resource Manager endpoint.
pub const DEFAULT_ARM_ENDPOINT: &str = "https://management.azure.com";
/// The public Retail Prices endpoint.
pub const DEFAULT_PRICES_ENDPOINT: &str = "https://prices.azure.com";
/// The instance metadata endpoint.
pub const DEFAULT_IMDS_ENDPOINT: &str = "http://169.254.169.254";

/// Checked Azure settings. `Debug` hides the token.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AzureConfig {
    /// The subscription.
    pub subscription_id: String,
    /// Regions to scan (all with offers when empty).
    pub regions: Vec<Region>,
    /// ARM endpoint (`GPUFLEET_AZURE_ARM_ENDPOINT`; sovereign clouds, stand-ins).
    pub arm_endpoint: String,
    /// Retail Prices endpoint (`GPUFLEET_AZURE_PRICES_ENDPOINT`).
    pub prices_endpoint: String,
    /// Instance metadata endpoint (`GPUFLEET_AZURE_IMDS_ENDPOINT`).
    pub imds_endpoint: String,
    /// A static bearer token for stand-ins (`GPUFLEET_AZURE_TOKEN`).
    pub static_token: Option<Secret>,
}

/// Builds an [`AzureConfig`].
#[derive(Debug, Clone, Default)]
pub struct AzureBuilder {
    subscription_id: Option<String>,
    regions: Option<String>,
    arm_endpoint: Option<String>,
    prices_endpoint: Option<String>,
    imds_endpoint: Option<String>,
    static_token: Option<Secret>,
}

impl AzureBuilder {
    /// Empty settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings from the environment: `AZURE_SUBSCRIPTION_ID`,
    /// `GPUFLEET_AZURE_REGIONS`, `GPUFLEET_AZURE_ARM_ENDPOINT`,
    /// `GPUFLEET_AZURE_PRICES_ENDPOINT`, `GPUFLEET_AZURE_IMDS_ENDPOINT`,
    /// `GPUFLEET_AZURE_TOKEN`.
    pub fn from_env() -> Self {
        AzureBuilder {
            subscription_id: env_var("AZURE_SUBSCRIPTION_ID"),
            regions: env_var("GPUFLEET_AZURE_REGIONS"),
            arm_endpoint: env_var("GPUFLEET_AZURE_ARM_ENDPOINT"),
            prices_endpoint: env_var("GPUFLEET_AZURE_PRICES_ENDPOINT"),
            imds_endpoint: env_var("GPUFLEET_AZURE_IMDS_ENDPOINT"),
            static_token: env_var("GPUFLEET_AZURE_TOKEN").map(Secret::new),
        }
    }

    /// The subscription.
    pub fn with_subscription_id(mut self, id: impl Into<String>) -> Self {
        self.subscription_id = Some(id.into());
        self
    }

    /// Regions to scan, comma-separated.
    pub fn with_regions(mut self, regions: impl Into<String>) -> Self {
        self.regions = Some(regions.into());
        self
    }

    /// An ARM endpoint.
    pub fn with_arm_endpoint(mut self, url: impl Into<String>) -> Self {
        self.arm_endpoint = Some(url.into());
        self
    }

    /// A static bearer token, for stand-ins.
    pub fn with_static_token(mut self, token: impl Into<String>) -> Self {
        self.static_token = Some(Secret::new(token));
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<AzureConfig> {
        let subscription_id = self
            .subscription_id
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| Error::invalid_input("no Azure subscription: set AZURE_SUBSCRIPTION_ID or the azure.subscription_id setting"))?;
        let endpoint = |setting: &str, v: Option<String>, default: &str| {
            parse_endpoint(setting, v.as_deref().unwrap_or(default))
        };
        Ok(AzureConfig {
            subscription_id,
            regions: parse_regions(self.regions.as_deref().unwrap_or("")),
            arm_endpoint: endpoint(
                "GPUFLEET_AZURE_ARM_ENDPOINT",
                self.arm_endpoint,
                DEFAULT_ARM_ENDPOINT,
            )?,
            prices_endpoint: endpoint(
                "GPUFLEET_AZURE_PRICES_ENDPOINT",
                self.prices_endpoint,
                DEFAULT_PRICES_ENDPOINT,
            )?,
            imds_endpoint: endpoint(
                "GPUFLEET_AZURE_IMDS_ENDPOINT",
                self.imds_endpoint,
                DEFAULT_IMDS_ENDPOINT,
            )?,
            static_token: self.static_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_token() {
        let c = AzureBuilder::new()
            .with_subscription_id("sub")
            .with_static_token("eyJhbGciOiJSUzI1NiJ9.very-secret")
            .with_arm_endpoint("http://127.0.0.1:9999")
            .build()
            .unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("very-secret"), "{dbg}");
        assert_eq!(c.arm_endpoint, "http://127.0.0.1:9999");
        assert_eq!(c.prices_endpoint, DEFAULT_PRICES_ENDPOINT);
    }
}
