//! GCP configuration: `new / from_env / with_* / build`.

use std::time::Duration;

use derive_setters::Setters;
use google_cloud_auth::credentials::Credentials;
use gpufleet_core::config::{env_var, parse_endpoint, parse_regions, Injected};
use gpufleet_core::{Error, Region, Result};

/// Checked GCP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcpConfig {
    /// The project.
    pub project: String,
    /// Regions to scan (all with offers when empty).
    pub regions: Vec<Region>,
    /// Compute Engine API base URL override (`GPUFLEET_GCP_COMPUTE_ENDPOINT`).
    pub compute_endpoint: Option<String>,
    /// Cloud Billing API base URL override (`GPUFLEET_GCP_BILLING_ENDPOINT`).
    pub billing_endpoint: Option<String>,
    /// Metadata server host override (`GCE_METADATA_HOST`, `host:port`).
    pub metadata_host: Option<String>,
    /// Use anonymous credentials (only with an endpoint override).
    pub anonymous: bool,
    /// How long the live catalog and SKU prices are reused.
    pub catalog_ttl: Duration,
    /// How often a zone or region operation is polled.
    pub operation_poll: Duration,
    /// How long an operation may take before gpufleet gives up on it.
    pub operation_timeout: Duration,
    /// The most pages one list call follows (a guard against a token that
    /// never ends).
    pub max_pages: usize,
    /// The caller's own credentials (a service account key, impersonation,
    /// external account), used instead of Application Default Credentials.
    pub credentials: Option<Injected<Credentials>>,
}

/// Builds a [`GcpConfig`].
#[derive(Debug, Clone, Default, Setters)]
#[setters(prefix = "with_", strip_option, into)]
pub struct GcpBuilder {
    /// The project.
    project: Option<String>,
    /// Regions to scan, comma-separated.
    regions: Option<String>,
    /// A Compute Engine API base URL (a stand-in).
    compute_endpoint: Option<String>,
    /// A Cloud Billing API base URL (a stand-in).
    billing_endpoint: Option<String>,
    /// A metadata server `host:port` (as `GCE_METADATA_HOST`).
    metadata_host: Option<String>,
    /// Anonymous credentials, for stand-ins.
    #[setters(into = false)]
    anonymous: bool,
    /// How often operations are polled (default 2 s; stand-ins use less).
    #[setters(into = false)]
    operation_poll: Option<Duration>,
    #[setters(skip)]
    credentials: Option<Injected<Credentials>>,
}

impl GcpBuilder {
    /// Empty settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings from the environment: `GOOGLE_CLOUD_PROJECT` or
    /// `CLOUDSDK_CORE_PROJECT` (else gcloud's active configuration's project,
    /// read from its config directory), `GPUFLEET_GCP_REGIONS`,
    /// `GPUFLEET_GCP_COMPUTE_ENDPOINT`, `GPUFLEET_GCP_BILLING_ENDPOINT`,
    /// `GCE_METADATA_HOST`, `GPUFLEET_GCP_ANONYMOUS=1`.
    pub fn from_env() -> Self {
        GcpBuilder {
            project: env_var("GOOGLE_CLOUD_PROJECT")
                .or_else(|| env_var("CLOUDSDK_CORE_PROJECT"))
                .or_else(|| crate::check::gcloud_project().map(|(_, p)| p)),
            regions: env_var("GPUFLEET_GCP_REGIONS"),
            compute_endpoint: env_var("GPUFLEET_GCP_COMPUTE_ENDPOINT"),
            billing_endpoint: env_var("GPUFLEET_GCP_BILLING_ENDPOINT"),
            metadata_host: env_var("GCE_METADATA_HOST"),
            anonymous: env_var("GPUFLEET_GCP_ANONYMOUS")
                .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
            operation_poll: None,
            credentials: None,
        }
    }

    /// The caller's own credentials (built with `google-cloud-auth`: a
    /// service account key, impersonation, workload identity federation),
    /// used instead of Application Default Credentials.
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(Injected::new(std::sync::Arc::new(credentials)));
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<GcpConfig> {
        let project = self
            .project
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| {
                Error::invalid_input(
                    "no GCP project: set GOOGLE_CLOUD_PROJECT or the gcp.project setting, or `gcloud config set project PROJECT`",
                )
            })?;
        let compute_endpoint = self
            .compute_endpoint
            .map(|u| parse_endpoint("GPUFLEET_GCP_COMPUTE_ENDPOINT", &u))
            .transpose()?;
        let billing_endpoint = self
            .billing_endpoint
            .map(|u| parse_endpoint("GPUFLEET_GCP_BILLING_ENDPOINT", &u))
            .transpose()?;
        if self.anonymous && self.credentials.is_some() {
            return Err(Error::invalid_input(
                "GPUFLEET_GCP_ANONYMOUS=1 and injected credentials exclude each other: choose one",
            ));
        }
        if self.anonymous && compute_endpoint.is_none() && billing_endpoint.is_none() {
            return Err(Error::invalid_input(
                "GPUFLEET_GCP_ANONYMOUS=1 is only allowed with GPUFLEET_GCP_COMPUTE_ENDPOINT or GPUFLEET_GCP_BILLING_ENDPOINT set to a stand-in",
            ));
        }
        Ok(GcpConfig {
            project,
            regions: parse_regions(self.regions.as_deref().unwrap_or("")),
            compute_endpoint,
            billing_endpoint,
            metadata_host: self.metadata_host,
            anonymous: self.anonymous,
            catalog_ttl: Duration::from_secs(600),
            operation_poll: self.operation_poll.unwrap_or(Duration::from_secs(2)),
            operation_timeout: Duration::from_secs(600),
            max_pages: 1000,
            credentials: self.credentials,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_needs_a_stand_in() {
        let e = GcpBuilder::new()
            .with_project("p")
            .with_anonymous(true)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("GPUFLEET_GCP_ANONYMOUS"), "{e}");
        let c = GcpBuilder::new()
            .with_project("p")
            .with_anonymous(true)
            .with_compute_endpoint("http://127.0.0.1:8080")
            .build()
            .unwrap();
        assert!(c.anonymous);
        assert!(GcpBuilder::new()
            .build()
            .unwrap_err()
            .to_string()
            .contains("no GCP project"));
    }
}
