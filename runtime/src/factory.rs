//! The one way a provider is opened: from its settings, always behind the
//! timeout, retry and tracing layers, so every command and every library user
//! gets the same bounded, retried, traced calls.

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::fake::FakeCloud;
use gpufleet_core::layers::{CapabilityLayer, LayerExt, RetryLayer, TimeoutLayer, TracingLayer};
use gpufleet_core::{Cloud, Error, Operation, Provider, Result};

/// What a provider is opened from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Settings {
    /// AWS (EC2, the Price List API, the Spot Advisor).
    #[cfg(feature = "aws")]
    Aws(gpufleet_aws::AwsConfig),
    /// Google Cloud (Compute Engine, Cloud Billing).
    #[cfg(feature = "gcp")]
    Gcp(gpufleet_gcp::GcpConfig),
    /// Azure (Resource Manager, Retail Prices).
    #[cfg(feature = "azure")]
    Azure(gpufleet_azure::AzureConfig),
    /// A fake cloud, shared with the caller (who may script it).
    Fake(Arc<FakeCloud>),
}

impl Settings {
    /// The cloud these settings open.
    pub fn cloud(&self) -> Cloud {
        match self {
            #[cfg(feature = "aws")]
            Settings::Aws(_) => Cloud::Aws,
            #[cfg(feature = "gcp")]
            Settings::Gcp(_) => Cloud::Gcp,
            #[cfg(feature = "azure")]
            Settings::Azure(_) => Cloud::Azure,
            Settings::Fake(f) => f.cloud(),
        }
    }

    /// The regions these settings scan (none for a fake cloud, which serves
    /// its whole catalog).
    pub fn regions(&self) -> Vec<gpufleet_core::Region> {
        match self {
            #[cfg(feature = "aws")]
            Settings::Aws(c) => c.regions.clone(),
            #[cfg(feature = "gcp")]
            Settings::Gcp(c) => c.regions.clone(),
            #[cfg(feature = "azure")]
            Settings::Azure(c) => c.regions.clone(),
            Settings::Fake(_) => Vec::new(),
        }
    }

    /// The same settings scanning only `regions` (unchanged when empty).
    pub fn with_regions(mut self, regions: &[gpufleet_core::Region]) -> Settings {
        if regions.is_empty() {
            return self;
        }
        match &mut self {
            #[cfg(feature = "aws")]
            Settings::Aws(c) => {
                c.regions = regions.to_vec();
                c.regions_from_profile = false;
            }
            #[cfg(feature = "gcp")]
            Settings::Gcp(c) => c.regions = regions.to_vec(),
            #[cfg(feature = "azure")]
            Settings::Azure(c) => c.regions = regions.to_vec(),
            Settings::Fake(_) => {}
        }
        self
    }

    /// The settings of `cloud` read from the standard environment variables
    /// (credentials chains, `AWS_ENDPOINT_URL`, `GOOGLE_CLOUD_PROJECT`,
    /// `AZURE_SUBSCRIPTION_ID`, the endpoint overrides …).
    pub fn from_env(cloud: Cloud) -> Result<Settings> {
        match cloud {
            #[cfg(feature = "aws")]
            Cloud::Aws => Ok(Settings::Aws(gpufleet_aws::AwsBuilder::from_env().build()?)),
            #[cfg(feature = "gcp")]
            Cloud::Gcp => Ok(Settings::Gcp(gpufleet_gcp::GcpBuilder::from_env().build()?)),
            #[cfg(feature = "azure")]
            Cloud::Azure => Ok(Settings::Azure(
                gpufleet_azure::AzureBuilder::from_env().build()?,
            )),
            other => Err(Error::invalid_input(format!(
                "no {other} provider in this build; built in: {}",
                built_in().join(", ")
            ))),
        }
    }
}

/// The clouds this build can open (besides the fake one).
pub fn built_in() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "aws") {
        v.push("aws");
    }
    if cfg!(feature = "gcp") {
        v.push("gcp");
    }
    if cfg!(feature = "azure") {
        v.push("azure");
    }
    v
}

/// The layers every opened provider gets.
#[derive(Debug, Clone)]
pub struct Layers {
    /// The limit on one call (one attempt of it), 120 s by default.
    pub timeout: Duration,
    /// The limit on one launch call: a multi-instance launch on GCP and Azure
    /// waits for one cloud operation per instance, and a launch cut short
    /// loses its clean-up, so it gets longer (20 min by default).
    pub launch_timeout: Duration,
    /// Retries of retryable failures.
    pub retry: RetryLayer,
}

impl Default for Layers {
    fn default() -> Self {
        Layers {
            timeout: Duration::from_secs(120),
            launch_timeout: Duration::from_secs(20 * 60),
            retry: RetryLayer::default(),
        }
    }
}

/// Puts `provider` behind the layers: tracing outermost (one span per call,
/// retries inside it), then retry, then the per-attempt timeout, and innermost
/// the capability check (an operation the provider does not declare is
/// refused before it is sent, and no retry or timeout is spent on it).
pub fn layered(provider: Arc<dyn Provider>, layers: &Layers) -> Arc<dyn Provider> {
    provider
        .layer(CapabilityLayer)
        .layer(
            TimeoutLayer::new(layers.timeout)
                .with_limit_for(Operation::Launch, layers.launch_timeout),
        )
        // Each provider is one account: a retry budget of its own.
        .layer(
            layers
                .retry
                .for_account(gpufleet_core::layers::RetryBudget::CAPACITY),
        )
        .layer(TracingLayer)
}

/// Opens the provider `settings` describe, behind the default [`Layers`].
pub async fn open(settings: Settings) -> Result<Arc<dyn Provider>> {
    open_with(settings, &Layers::default()).await
}

/// Opens the provider `settings` describe, behind `layers`.
pub async fn open_with(settings: Settings, layers: &Layers) -> Result<Arc<dyn Provider>> {
    // Built without any provider feature, only `Fake` is left to match.
    #[allow(clippy::infallible_destructuring_match)]
    let raw: Arc<dyn Provider> = match settings {
        #[cfg(feature = "aws")]
        Settings::Aws(c) => Arc::new(gpufleet_aws::AwsProvider::new(c).await?),
        #[cfg(feature = "gcp")]
        Settings::Gcp(c) => Arc::new(gpufleet_gcp::GcpProvider::new(c).await?),
        #[cfg(feature = "azure")]
        Settings::Azure(c) => Arc::new(gpufleet_azure::AzureProvider::new(c).await?),
        Settings::Fake(f) => f,
    };
    Ok(layered(raw, layers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fake_opens_behind_the_layers() {
        let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
        let p = open(Settings::Fake(fake.clone())).await.unwrap();
        assert_eq!(p.cloud(), Cloud::Aws);
        // A retryable failure is retried by the layer: the call succeeds.
        fake.fail_next(
            gpufleet_core::Operation::InstanceTypes,
            Error::new(gpufleet_core::ErrorKind::RateLimited, "slow down"),
        );
        assert!(!p.instance_types().await.unwrap().is_empty());
    }

    #[test]
    fn the_launch_limit_is_separate() {
        let l = Layers::default();
        let t = TimeoutLayer::new(l.timeout)
            .with_limit_for(gpufleet_core::Operation::Launch, l.launch_timeout);
        assert_eq!(
            t.limit_for(gpufleet_core::Operation::Launch),
            Duration::from_secs(1200)
        );
        assert_eq!(
            t.limit_for(gpufleet_core::Operation::Offers),
            Duration::from_secs(120)
        );
    }
}

/// Where a node's metadata services are: the clouds' link-local addresses,
/// or the standard overrides (`AWS_EC2_METADATA_SERVICE_ENDPOINT`,
/// `GCE_METADATA_HOST`, `GPUFLEET_AZURE_IMDS_ENDPOINT`) for a stand-in.
#[derive(Debug, Clone, Default)]
pub struct NodeEndpoints {
    /// The EC2 instance metadata service (IMDSv2), when overridden.
    pub aws: Option<String>,
    /// The Compute Engine metadata server's base URL.
    pub gcp: String,
    /// Azure's instance metadata service's base URL.
    pub azure: String,
}

impl NodeEndpoints {
    /// From the environment.
    pub fn from_env() -> NodeEndpoints {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        NodeEndpoints {
            aws: env("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
            #[cfg(feature = "gcp")]
            gcp: gpufleet_gcp::interruption::metadata_base(env("GCE_METADATA_HOST").as_deref()),
            #[cfg(not(feature = "gcp"))]
            gcp: String::new(),
            azure: env("GPUFLEET_AZURE_IMDS_ENDPOINT")
                .unwrap_or_else(|| "http://169.254.169.254".into()),
        }
    }

    /// Which cloud this node is on, asking the three metadata services at
    /// once (each bounded by `timeout`): GCE and Azure identify themselves;
    /// an IMDSv2 token alone is AWS. `None` off a cloud.
    pub async fn detect(&self, timeout: Duration) -> Option<Cloud> {
        // (Unused in a build without any cloud.)
        let _ = timeout;
        #[cfg(feature = "aws")]
        let aws = gpufleet_aws::imds_probe(self.aws.as_deref(), timeout);
        #[cfg(not(feature = "aws"))]
        let aws = async { false };
        #[cfg(feature = "gcp")]
        let gcp = gpufleet_gcp::interruption::probe(&self.gcp, timeout);
        #[cfg(not(feature = "gcp"))]
        let gcp = async { false };
        #[cfg(feature = "azure")]
        let azure = gpufleet_azure::interruption::probe(&self.azure, timeout);
        #[cfg(not(feature = "azure"))]
        let azure = async { false };
        let (aws, gcp, azure) = futures::join!(aws, gcp, azure);
        if gcp {
            Some(Cloud::Gcp)
        } else if azure {
            Some(Cloud::Azure)
        } else if aws {
            Some(Cloud::Aws)
        } else {
            None
        }
    }

    /// The interruption notices of this node on `cloud`, polled every `poll`:
    /// the one way a node's notice stream is opened (`gpufleet watch`, the
    /// boot script's agent, embedders).
    pub fn notices(&self, cloud: Cloud, poll: Duration) -> Result<gpufleet_core::NoticeStream> {
        // (Unused in a build without any cloud.)
        let _ = poll;
        match cloud {
            #[cfg(feature = "aws")]
            Cloud::Aws => {
                let mut b = gpufleet_aws::AwsBuilder::new().with_notice_poll(poll);
                if let Some(url) = &self.aws {
                    b = b.with_metadata_endpoint(url.clone());
                }
                gpufleet_aws::imds_notices(&b.build()?)
            }
            #[cfg(feature = "gcp")]
            Cloud::Gcp => gpufleet_gcp::interruption::notices(self.gcp.clone(), poll),
            #[cfg(feature = "azure")]
            Cloud::Azure => gpufleet_azure::interruption::notices(self.azure.clone(), poll),
            other => Err(Error::invalid_input(format!(
                "no notices for {other}: watch runs on an AWS, GCP or Azure node (of the clouds this build includes)"
            ))),
        }
    }
}
