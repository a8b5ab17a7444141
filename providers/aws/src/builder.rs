//! AWS configuration: `new / from_env / with_* / build`.

use gpufleet_core::config::{env_var, parse_endpoint, parse_regions};
use gpufleet_core::{Region, Result};

/// Checked AWS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AwsConfig {
    /// Regions to scan, in order.
    pub regions: Vec<Region>,
    /// EC2 API endpoint override (`AWS_ENDPOINT_URL_EC2` or `AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    /// Instance metadata endpoint override (`AWS_EC2_METADATA_SERVICE_ENDPOINT`).
    pub metadata_endpoint: Option<String>,
}

/// Builds an [`AwsConfig`].
#[derive(Debug, Clone, Default)]
pub struct AwsBuilder {
    regions: Option<String>,
    endpoint_url: Option<String>,
    metadata_endpoint: Option<String>,
}

impl AwsBuilder {
    /// Empty settings (region `us-east-1` unless set).
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings from the standard AWS environment variables:
    /// `GPUFLEET_AWS_REGIONS` (a list) or `AWS_REGION` / `AWS_DEFAULT_REGION`,
    /// `AWS_ENDPOINT_URL_EC2` or `AWS_ENDPOINT_URL`,
    /// `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn from_env() -> Self {
        AwsBuilder {
            regions: env_var("GPUFLEET_AWS_REGIONS")
                .or_else(|| env_var("AWS_REGION"))
                .or_else(|| env_var("AWS_DEFAULT_REGION")),
            endpoint_url: env_var("AWS_ENDPOINT_URL_EC2").or_else(|| env_var("AWS_ENDPOINT_URL")),
            metadata_endpoint: env_var("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
        }
    }

    /// Regions to scan, comma-separated.
    pub fn with_regions(mut self, regions: impl Into<String>) -> Self {
        self.regions = Some(regions.into());
        self
    }

    /// An EC2 endpoint (a stand-in such as moto).
    pub fn with_endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// An instance metadata endpoint.
    pub fn with_metadata_endpoint(mut self, url: impl Into<String>) -> Self {
        self.metadata_endpoint = Some(url.into());
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<AwsConfig> {
        let mut regions = parse_regions(self.regions.as_deref().unwrap_or("us-east-1"));
        if regions.is_empty() {
            regions.push(Region::new("us-east-1"));
        }
        Ok(AwsConfig {
            regions,
            endpoint_url: self
                .endpoint_url
                .map(|u| parse_endpoint("AWS_ENDPOINT_URL", &u))
                .transpose()?,
            metadata_endpoint: self
                .metadata_endpoint
                .map(|u| parse_endpoint("AWS_EC2_METADATA_SERVICE_ENDPOINT", &u))
                .transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_validates() {
        let c = AwsBuilder::new()
            .with_regions("us-east-1, us-west-2")
            .with_endpoint_url("http://127.0.0.1:5000/")
            .build()
            .unwrap();
        assert_eq!(c.regions.len(), 2);
        assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
        let e = AwsBuilder::new()
            .with_metadata_endpoint("169.254.169.254")
            .build()
            .unwrap_err();
        assert!(
            e.to_string().contains("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
            "{e}"
        );
    }
}
