//! The one way a provider is opened: from its settings, always behind the
//! timeout, retry and tracing layers, so every command and every library user
//! gets the same bounded, retried, traced calls.

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::fake::FakeCloud;
use gpufleet_core::layers::{LayerExt, RetryLayer, TimeoutLayer, TracingLayer};
use gpufleet_core::{Cloud, Error, Provider, Result};

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
/// retries inside it), then retry, then the per-attempt timeout.
pub fn layered(provider: Arc<dyn Provider>, layers: &Layers) -> Arc<dyn Provider> {
    provider
        .layer(TimeoutLayer::new(layers.timeout).with_limit_for("launch", layers.launch_timeout))
        .layer(layers.retry.clone())
        .layer(TracingLayer)
}

/// Opens the provider `settings` describe, behind the default [`Layers`].
pub async fn open(settings: Settings) -> Result<Arc<dyn Provider>> {
    open_with(settings, &Layers::default()).await
}

/// Opens the provider `settings` describe, behind `layers`.
pub async fn open_with(settings: Settings, layers: &Layers) -> Result<Arc<dyn Provider>> {
    let raw: Arc<dyn Provider> = match settings {
        #[cfg(feature = "aws")]
        Settings::Aws(c) => Arc::new(gpufleet_aws::AwsProvider::new(c).await?),
        #[cfg(feature = "gcp")]
        Settings::Gcp(c) => Arc::new(gpufleet_gcp::GcpProvider::new(c).await?),
        #[cfg(feature = "azure")]
        Settings::Azure(c) => Arc::new(gpufleet_azure::AzureProvider::new(c)?),
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
            "instance_types",
            Error::new(gpufleet_core::ErrorKind::RateLimited, "slow down"),
        );
        assert!(!p.instance_types().await.unwrap().is_empty());
    }

    #[test]
    fn the_launch_limit_is_separate() {
        let l = Layers::default();
        let t = TimeoutLayer::new(l.timeout).with_limit_for("launch", l.launch_timeout);
        assert_eq!(t.limit_for("launch"), Duration::from_secs(1200));
        assert_eq!(t.limit_for("offers"), Duration::from_secs(120));
    }
}
