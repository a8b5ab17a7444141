//! AWS configuration: `new / from_env / with_* / build`.

use std::time::Duration;

use aws_config::SdkConfig;
use derive_setters::Setters;
use gpufleet_model::config::{env_var, parse_endpoint, parse_regions, Injected, Secret};
use gpufleet_model::{Error, Region, Result};

/// Checked AWS settings. Credentials come from the `aws-config` default chain
/// (environment, shared profile, SSO, credential process, IMDS role) unless
/// static ones are given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AwsConfig {
    /// Regions to scan, in order.
    pub regions: Vec<Region>,
    /// No region was given (builder or environment): the provider takes the
    /// shared config file's profile region, else `us-east-1`.
    pub regions_from_profile: bool,
    /// EC2 API endpoint override (`AWS_ENDPOINT_URL_EC2` or `AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    /// Price List API endpoint override (`AWS_ENDPOINT_URL_PRICING` or
    /// `AWS_ENDPOINT_URL`).
    pub pricing_endpoint_url: Option<String>,
    /// Instance metadata endpoint override (`AWS_EC2_METADATA_SERVICE_ENDPOINT`).
    pub metadata_endpoint: Option<String>,
    /// The instance metadata service is not to be asked
    /// (`AWS_EC2_METADATA_DISABLED=true`, as the SDKs and the CLI read it):
    /// no notice polling, no instance role probe.
    pub metadata_disabled: bool,
    /// SQS endpoint override, for the interruption queue
    /// (`AWS_ENDPOINT_URL_SQS` or `AWS_ENDPOINT_URL`).
    pub sqs_endpoint_url: Option<String>,
    /// Whether on-demand prices come from the Price List API (otherwise the
    /// embedded snapshot): `GPUFLEET_AWS_PRICE_LIST=0` turns it off.
    pub live_prices: bool,
    /// Regions queried at once.
    pub max_concurrency: usize,
    /// How long a region's catalog is reused before it is fetched again.
    pub catalog_ttl: Duration,
    /// How often the metadata service is polled for notices.
    pub notice_poll: Duration,
    /// Lifetime of an IMDSv2 session token.
    pub imds_token_ttl: Duration,
    /// Static credentials (access key id, secret access key), for stand-ins.
    pub static_credentials: Option<(String, Secret)>,
    /// Where [`crate::AwsProvider::refresh_spot_advisor`] fetches the Spot
    /// Advisor data (`GPUFLEET_AWS_SPOT_ADVISOR_URL`).
    pub spot_advisor_url: String,
    /// The caller's own `aws-config` settings (credentials provider, HTTP
    /// client, region), used instead of loading the default chain.
    pub sdk_config: Option<Injected<SdkConfig>>,
}

/// The Spot Instance Advisor's public data.
pub const SPOT_ADVISOR_URL: &str =
    "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json";

/// Builds an [`AwsConfig`].
#[derive(Debug, Clone, Default, Setters)]
#[setters(prefix = "with_", strip_option, into)]
pub struct AwsBuilder {
    /// Regions to scan, comma-separated.
    regions: Option<String>,
    /// An EC2 endpoint (a stand-in such as moto).
    endpoint_url: Option<String>,
    /// A Price List endpoint.
    pricing_endpoint_url: Option<String>,
    /// An instance metadata endpoint.
    metadata_endpoint: Option<String>,
    /// Whether the instance metadata service is off limits.
    #[setters(into = false)]
    metadata_disabled: Option<bool>,
    /// An SQS endpoint (the interruption queue's; a stand-in such as moto).
    sqs_endpoint_url: Option<String>,
    #[setters(skip)]
    live_prices: Option<String>,
    /// Regions queried at once (default 4).
    #[setters(into = false)]
    max_concurrency: Option<usize>,
    /// How long a region's catalog is reused (default 10 minutes).
    #[setters(into = false)]
    catalog_ttl: Option<Duration>,
    /// How often the metadata service is polled for notices (default 5 s).
    #[setters(into = false)]
    notice_poll: Option<Duration>,
    /// Lifetime of IMDSv2 session tokens (default 6 hours).
    #[setters(into = false)]
    imds_token_ttl: Option<Duration>,
    #[setters(skip)]
    static_credentials: Option<(String, Secret)>,
    /// Where the Spot Advisor data is fetched from.
    spot_advisor_url: Option<String>,
    #[setters(skip)]
    sdk_config: Option<Injected<SdkConfig>>,
}

impl AwsBuilder {
    /// Empty settings (region `us-east-1` unless set).
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings from the standard AWS environment variables:
    /// `GPUFLEET_AWS_REGIONS` (a list) or `AWS_REGION` / `AWS_DEFAULT_REGION`,
    /// `AWS_ENDPOINT_URL_EC2` or `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_PRICING`,
    /// `AWS_ENDPOINT_URL_SQS`, `AWS_EC2_METADATA_SERVICE_ENDPOINT`,
    /// `AWS_EC2_METADATA_DISABLED`,
    /// `GPUFLEET_AWS_PRICE_LIST`.
    /// Credentials are read later, by the default chain.
    pub fn from_env() -> Self {
        AwsBuilder {
            regions: env_var("GPUFLEET_AWS_REGIONS")
                .or_else(|| env_var("AWS_REGION"))
                .or_else(|| env_var("AWS_DEFAULT_REGION")),
            endpoint_url: env_var("AWS_ENDPOINT_URL_EC2").or_else(|| env_var("AWS_ENDPOINT_URL")),
            pricing_endpoint_url: env_var("AWS_ENDPOINT_URL_PRICING")
                .or_else(|| env_var("AWS_ENDPOINT_URL")),
            metadata_endpoint: env_var("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
            metadata_disabled: env_var("AWS_EC2_METADATA_DISABLED")
                .map(|v| v.trim().eq_ignore_ascii_case("true")),
            sqs_endpoint_url: env_var("AWS_ENDPOINT_URL_SQS")
                .or_else(|| env_var("AWS_ENDPOINT_URL")),
            live_prices: env_var("GPUFLEET_AWS_PRICE_LIST"),
            spot_advisor_url: env_var("GPUFLEET_AWS_SPOT_ADVISOR_URL"),
            ..Self::default()
        }
    }

    /// Whether to ask the Price List API for on-demand prices (default yes).
    pub fn with_live_prices(mut self, on: bool) -> Self {
        self.live_prices = Some(if on { "1" } else { "0" }.into());
        self
    }

    /// Static credentials instead of the default chain (for stand-ins).
    pub fn with_static_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.static_credentials = Some((access_key_id.into(), Secret::new(secret_access_key)));
        self
    }

    /// The caller's own SDK settings (`aws_config::load_defaults(..)` with
    /// its credentials provider, HTTP client or region), used instead of the
    /// default chain. gpufleet still turns the SDK's retries off (its
    /// `RetryLayer` is the one place that retries) and still applies the
    /// endpoint overrides. Its region is the one scanned unless regions are
    /// given.
    pub fn with_sdk_config(mut self, sdk: SdkConfig) -> Self {
        self.sdk_config = Some(Injected::new(std::sync::Arc::new(sdk)));
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<AwsConfig> {
        let regions_from_profile = self.regions.is_none();
        let mut regions = parse_regions(self.regions.as_deref().unwrap_or("us-east-1"));
        if regions.is_empty() {
            regions.push(Region::new("us-east-1"));
        }
        for r in &regions {
            let ok = r.as_str().split('-').count() >= 3
                && r.as_str()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !ok {
                return Err(Error::invalid_input(format!(
                    "invalid AWS region '{r}': expected a region code such as us-east-1 or eu-west-2"
                )));
            }
        }
        let live_prices = match self.live_prices.as_deref().map(str::trim) {
            None | Some("1" | "true" | "yes" | "on") => true,
            Some("0" | "false" | "no" | "off") => false,
            Some(other) => {
                return Err(Error::invalid_input(format!(
                    "invalid GPUFLEET_AWS_PRICE_LIST '{other}': expected 1 or 0"
                )))
            }
        };
        let max_concurrency = self.max_concurrency.unwrap_or(4);
        if !(1..=64).contains(&max_concurrency) {
            return Err(Error::invalid_input(format!(
                "invalid AWS max concurrency {max_concurrency}: expected 1 to 64"
            )));
        }
        let imds_token_ttl = self.imds_token_ttl.unwrap_or(Duration::from_secs(6 * 3600));
        if !(Duration::from_secs(1)..=Duration::from_secs(21_600)).contains(&imds_token_ttl) {
            return Err(Error::invalid_input(format!(
                "invalid IMDS token TTL {imds_token_ttl:?}: IMDSv2 accepts 1 s to 6 h"
            )));
        }
        let notice_poll = self.notice_poll.unwrap_or(Duration::from_secs(5));
        if notice_poll.is_zero() || notice_poll > Duration::from_secs(60) {
            return Err(Error::invalid_input(format!(
                "invalid notice poll interval {notice_poll:?}: expected more than 0 and at most 60 s (a spot notice gives 2 minutes)"
            )));
        }
        let endpoint =
            |var: &str, u: Option<String>| u.map(|u| parse_endpoint(var, &u)).transpose();
        Ok(AwsConfig {
            regions,
            regions_from_profile,
            endpoint_url: endpoint("AWS_ENDPOINT_URL", self.endpoint_url)?,
            pricing_endpoint_url: endpoint("AWS_ENDPOINT_URL_PRICING", self.pricing_endpoint_url)?,
            metadata_endpoint: endpoint(
                "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                self.metadata_endpoint,
            )?,
            metadata_disabled: self.metadata_disabled.unwrap_or(false),
            sqs_endpoint_url: endpoint("AWS_ENDPOINT_URL_SQS", self.sqs_endpoint_url)?,
            live_prices,
            max_concurrency,
            catalog_ttl: self.catalog_ttl.unwrap_or(Duration::from_secs(600)),
            notice_poll,
            imds_token_ttl,
            static_credentials: self.static_credentials,
            sdk_config: self.sdk_config,
            spot_advisor_url: match self.spot_advisor_url {
                Some(u) => parse_endpoint("GPUFLEET_AWS_SPOT_ADVISOR_URL", &u)?,
                None => SPOT_ADVISOR_URL.to_string(),
            },
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
        assert!(c.live_prices);
        let e = AwsBuilder::new()
            .with_metadata_endpoint("169.254.169.254")
            .build()
            .unwrap_err();
        assert!(
            e.to_string().contains("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
            "{e}"
        );
        let e = AwsBuilder::new()
            .with_regions("us_east_1")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("us_east_1"), "{e}");
        let e = AwsBuilder::new()
            .with_notice_poll(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("poll"), "{e}");
    }

    #[test]
    fn debug_hides_the_secret_key() {
        let c = AwsBuilder::new()
            .with_static_credentials(
                "AKIAGPUFLEETTEST",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY",
            )
            .build()
            .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("SECRETKEY"), "{shown}");
    }
}
