//! gpufleet's AWS provider on `aws-sdk-ec2`.
//!
//! [`AwsProvider`] implements every gpufleet capability against EC2 in the
//! configured regions:
//!
//! - catalog: `DescribeInstanceTypes` (GPU types), `DescribeInstanceTypeOfferings`
//!   by zone and `DescribeAvailabilityZones` (zone names map to AZ IDs, which
//!   are the same in every account; offers carry both), with on-demand prices
//!   from the Price List API (`GetProducts`) or the embedded snapshot;
//! - spot: `DescribeSpotPriceHistory`, `GetSpotPlacementScores` and the
//!   embedded Spot Advisor interruption buckets;
//! - placement groups: cluster, spread and partition;
//! - compute: `RunInstances` (on-demand or one-time spot that terminates on
//!   interruption) with a `ClientToken` from the idempotency key, tags,
//!   `DescribeInstances` and `TerminateInstances`;
//! - interruption notices from IMDSv2 (`spot/instance-action` and the
//!   rebalance recommendation).
//!
//! Ids of instances and placement groups carry their region
//! (`us-east-1/i-0abc…`, `us-east-1/my-group`), because one provider spans
//! several regions and EC2 ids are regional.
//!
//! The SDK's own retries are off (`RetryConfig::disabled`), so that gpufleet's
//! `RetryLayer` is the one place that retries and the two never multiply.

mod builder;
mod catalog;
pub mod check;
mod compute;
mod error;
mod interruption;
mod placement;
mod pricing;
mod queue;
mod tags;
mod zones;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;
use gpufleet_model::{
    Capabilities, Cloud, Error, InstanceType, NoticeStream, Provider, Region, Result, Snapshot,
};
use time::OffsetDateTime;
use tokio::sync::Mutex;

pub use builder::{AwsBuilder, AwsConfig, SPOT_ADVISOR_URL};
pub use error::error_kind_for_code;
pub use queue::{parse_event, InterruptionQueue, LEFT_FOR, UNCLAIMED_AFTER};

/// The AWS provider. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct AwsProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: AwsConfig,
    ec2: HashMap<Region, aws_sdk_ec2::Client>,
    pricing: aws_sdk_pricing::Client,
    /// The SDK settings every client is built from (for the SQS client of
    /// an interruption queue).
    sdk: SdkConfig,
    snapshot: Snapshot,
    zones: Mutex<HashMap<Region, Arc<zones::Zones>>>,
    catalogs: Mutex<HashMap<Region, (Instant, Arc<catalog::RegionCatalog>)>>,
    types: Mutex<Option<(Instant, Vec<Arc<InstanceType>>)>>,
    advisor: std::sync::RwLock<Option<Arc<pricing::Advisor>>>,
}

impl std::fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl AwsProvider {
    /// Connects with the given settings: loads the `aws-config` default chain
    /// (credentials and region sources), with the SDK's retries off and
    /// explicit timeouts.
    pub async fn new(mut config: AwsConfig) -> Result<AwsProvider> {
        let injected_region = config
            .sdk_config
            .as_ref()
            .and_then(|sdk| sdk.get().region().map(|r| r.to_string()));
        if config.regions_from_profile {
            if let Some(r) = injected_region {
                config.regions = vec![Region::new(r)];
            } else if config.sdk_config.is_none() {
                // The region of the shared config file's profile
                // (AWS_PROFILE), as the AWS CLI would use it.
                use aws_config::meta::region::ProvideRegion;
                if let Some(r) = aws_config::profile::ProfileFileRegionProvider::new()
                    .region()
                    .await
                {
                    config.regions = vec![Region::new(r.to_string())];
                }
            }
        }
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(30))
            .operation_attempt_timeout(Duration::from_secs(60))
            .build();
        let sdk: SdkConfig = match &config.sdk_config {
            Some(injected) => injected.get().as_ref().clone(),
            None => {
                aws_config::defaults(BehaviorVersion::latest())
                    .region(aws_config::Region::new(config.regions[0].to_string()))
                    .timeout_config(timeouts)
                    .load()
                    .await
            }
        };
        // Whatever the source, gpufleet's RetryLayer is the one place that
        // retries; static credentials (for stand-ins) win over any chain.
        let mut sdk = sdk.into_builder().retry_config(RetryConfig::disabled());
        if let Some((id, secret)) = &config.static_credentials {
            sdk.set_credentials_provider(Some(SharedCredentialsProvider::new(
                aws_sdk_ec2::config::Credentials::new(
                    id.clone(),
                    secret.expose().to_string(),
                    None,
                    None,
                    "gpufleet-static",
                ),
            )));
        }
        let sdk = sdk.build();
        let mut ec2 = HashMap::new();
        for region in &config.regions {
            let mut b = aws_sdk_ec2::config::Builder::from(&sdk)
                .region(aws_sdk_ec2::config::Region::new(region.to_string()));
            if let Some(url) = &config.endpoint_url {
                b = b.endpoint_url(url.clone());
            }
            ec2.insert(region.clone(), aws_sdk_ec2::Client::from_conf(b.build()));
        }
        // The Price List API is served from us-east-1 (and two other regions).
        let mut pb = aws_sdk_pricing::config::Builder::from(&sdk)
            .region(aws_sdk_pricing::config::Region::new("us-east-1"));
        if let Some(url) = &config.pricing_endpoint_url {
            pb = pb.endpoint_url(url.clone());
        }
        Ok(AwsProvider {
            inner: Arc::new(Inner {
                pricing: aws_sdk_pricing::Client::from_conf(pb.build()),
                sdk,
                snapshot: Snapshot::embedded().for_cloud(Cloud::Aws),
                config,
                ec2,
                zones: Mutex::new(HashMap::new()),
                catalogs: Mutex::new(HashMap::new()),
                types: Mutex::new(None),
                advisor: std::sync::RwLock::new(None),
            }),
        })
    }

    /// Connects with settings from the environment ([`AwsBuilder::from_env`]).
    pub async fn from_env() -> Result<AwsProvider> {
        AwsProvider::new(AwsBuilder::from_env().build()?).await
    }

    /// Fetches the Spot Instance Advisor's public data (from
    /// `spot_advisor_url`) and uses its interruption buckets from now on
    /// instead of the embedded copy. Returns how many Linux (region, type)
    /// buckets it read.
    pub async fn refresh_spot_advisor(&self) -> Result<usize> {
        let url = &self.inner.config.spot_advisor_url;
        let fail = |why: String| {
            Error::new(
                gpufleet_model::ErrorKind::Unavailable,
                format!("Spot Advisor data from {url}: {why}"),
            )
            .with_provider(Cloud::Aws)
            .with_operation("RefreshSpotAdvisor")
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let resp = client
            .get(url)
            .send()
            .await
            .map_err(|e| fail(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(fail(format!("HTTP {}", resp.status().as_u16())));
        }
        let body = resp.text().await.map_err(|e| fail(e.to_string()))?;
        let advisor = pricing::parse_spot_advisor(&body).map_err(|e| fail(e.to_string()))?;
        let n = advisor.len();
        if let Ok(mut slot) = self.inner.advisor.write() {
            *slot = Some(Arc::new(advisor));
        }
        Ok(n)
    }

    /// The settings in use.
    pub fn config(&self) -> &AwsConfig {
        &self.inner.config
    }

    fn client(&self, region: &Region) -> Result<&aws_sdk_ec2::Client> {
        self.inner.ec2.get(region).ok_or_else(|| {
            let known: Vec<&str> = self.inner.config.regions.iter().map(Region::as_str).collect();
            Error::new(
                gpufleet_model::ErrorKind::NotFound,
                format!(
                    "region '{region}' is not one this provider scans ({}); add it with GPUFLEET_AWS_REGIONS",
                    known.join(", ")
                ),
            )
            .with_provider(Cloud::Aws)
        })
    }
}

/// Log filter directives to add to any `tracing` subscriber that may run at
/// TRACE: the SDK's orchestrator logs whole requests at TRACE, headers
/// included, and the IMDSv2 session token header is not marked sensitive
/// (the `Authorization` header is). The `gpufleet` CLI adds these to
/// `GPUFLEET_LOG` itself when it enables TRACE; an application embedding
/// gpufleet should add them to an `EnvFilter` that enables TRACE (and only
/// then: they would raise a quieter filter to DEBUG for that target).
pub const REDACTING_LOG_DIRECTIVES: &[&str] = &["aws_smithy_runtime::client::orchestrator=debug"];

/// The interruption notices of the instance this runs on, from IMDSv2 at the
/// configured metadata endpoint (no EC2 API calls, no credentials needed).
pub fn imds_notices(config: &AwsConfig) -> Result<NoticeStream> {
    interruption::stream(config)
}

/// Whether an IMDSv2 endpoint answers at `endpoint` (default
/// `http://169.254.169.254`): a session token can be had within `timeout`.
pub async fn imds_probe(endpoint: Option<&str>, timeout: Duration) -> bool {
    let base = endpoint
        .unwrap_or("http://169.254.169.254")
        .trim_end_matches('/');
    let Ok(client) = reqwest::Client::builder().timeout(timeout).build() else {
        return false;
    };
    client
        .put(format!("{base}/latest/api/token"))
        .header("x-aws-ec2-metadata-token-ttl-seconds", "60")
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Entry points for the fuzz targets in `fuzz/` (not a stable API).
#[doc(hidden)]
pub mod fuzzing {
    /// Feeds `body` to the IMDS notice parsers and the Spot Advisor parser;
    /// none may panic.
    pub fn imds(body: &str) {
        let _ = crate::interruption::parse_action(body, None);
        let _ = crate::interruption::parse_rebalance(body, None);
        let _ = crate::pricing::parse_spot_advisor(body);
    }
}

/// `region/name` ids: EC2 ids are regional, one provider spans regions.
pub(crate) fn split_id<'a>(id: &'a str, what: &str) -> Result<(Region, &'a str)> {
    match id.split_once('/') {
        Some((region, rest)) if !region.is_empty() && !rest.is_empty() => {
            Ok((Region::new(region), rest))
        }
        _ => Err(Error::new(
            gpufleet_model::ErrorKind::NotFound,
            format!("no {what} '{id}': gpufleet's AWS ids look like us-east-1/i-0abc…"),
        )
        .with_provider(Cloud::Aws)),
    }
}

pub(crate) fn join_id(region: &Region, id: &str) -> String {
    format!("{region}/{id}")
}

pub(crate) fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

impl Provider for AwsProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Aws
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }
}
