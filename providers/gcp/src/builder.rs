//! GCP configuration: `new / from_env / with_* / build`.

use std::time::Duration;

use derive_setters::Setters;
use google_cloud_auth::credentials::Credentials;
use gpufleet_model::config::{env_var, parse_endpoint, parse_regions, Injected};
use gpufleet_model::{Error, Region, Result};

/// Checked GCP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcpConfig {
    /// The project.
    pub project: String,
    /// Regions to scan (all with offers when empty).
    pub regions: Vec<Region>,
    /// Compute Engine API base URL override (`GPUFLEET_GCP_COMPUTE_ENDPOINT`,
    /// else gcloud's `api_endpoint_overrides/compute`), without gcloud's
    /// `/compute/v1` suffix.
    pub compute_endpoint: Option<String>,
    /// Where `compute_endpoint` came from: the variable, the gcloud property
    /// or the builder.
    pub compute_endpoint_from: Option<String>,
    /// Cloud Billing API base URL override (`GPUFLEET_GCP_BILLING_ENDPOINT`,
    /// else gcloud's `api_endpoint_overrides/cloudbilling`).
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
    #[setters(skip)]
    compute_endpoint: Option<String>,
    #[setters(skip)]
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
    /// Where the compute and billing overrides came from (for messages).
    #[setters(skip)]
    endpoints_from: [Option<String>; 2],
}

/// gpufleet's own variables for the two APIs, and gcloud's names for them:
/// the variable wins, then `CLOUDSDK_API_ENDPOINT_OVERRIDES_<API>`, then the
/// active gcloud configuration's `api_endpoint_overrides/<api>` (gcloud
/// itself puts an environment variable before a property).
const ENDPOINT_SOURCES: [(&str, &str); 2] = [
    ("GPUFLEET_GCP_COMPUTE_ENDPOINT", "compute"),
    ("GPUFLEET_GCP_BILLING_ENDPOINT", "cloudbilling"),
];

/// The source an override set through the builder's own setter names.
const SETTERS: [&str; 2] = ["with_compute_endpoint", "with_billing_endpoint"];

/// One API's endpoint override and where it came from, from the variables
/// `var` reads and the gcloud properties `property` reads.
fn endpoint_override(
    own: &str,
    api: &str,
    var: &impl Fn(&str) -> Option<String>,
    property: &impl Fn(&str, &str) -> Option<String>,
) -> Option<(String, String)> {
    let gcloud_var = format!("CLOUDSDK_API_ENDPOINT_OVERRIDES_{}", api.to_uppercase());
    var(own)
        .map(|v| (v, own.to_string()))
        .or_else(|| var(&gcloud_var).map(|v| (v, gcloud_var)))
        .or_else(|| {
            property("api_endpoint_overrides", api)
                .map(|v| (v, format!("gcloud property api_endpoint_overrides/{api}")))
        })
}

/// A Compute Engine base URL as the client library takes it: gcloud's
/// override carries the API's version path
/// (`https://compute.googleapis.com/compute/v1/`), which the library adds.
fn compute_root(url: String) -> String {
    ["/compute/v1", "/compute/beta", "/compute/alpha"]
        .iter()
        .find_map(|version| url.strip_suffix(version))
        .map_or_else(|| url.clone(), str::to_string)
}

impl GcpBuilder {
    /// Empty settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings from the environment: `GOOGLE_CLOUD_PROJECT` or
    /// `CLOUDSDK_CORE_PROJECT` (else gcloud's active configuration's project,
    /// read from its config directory), `GPUFLEET_GCP_REGIONS`,
    /// `GPUFLEET_GCP_COMPUTE_ENDPOINT` and `GPUFLEET_GCP_BILLING_ENDPOINT`
    /// (else gcloud's own overrides: `CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`
    /// and `…_CLOUDBILLING`, then the active configuration's
    /// `api_endpoint_overrides/compute` and `/cloudbilling`),
    /// `GCE_METADATA_HOST`, `GPUFLEET_GCP_ANONYMOUS=1`.
    pub fn from_env() -> Self {
        let gcloud = crate::check::GcloudConfiguration::active();
        let property =
            |section: &str, key: &str| gcloud.as_ref().and_then(|g| g.property(section, key));
        let [compute, billing] =
            ENDPOINT_SOURCES.map(|(own, api)| endpoint_override(own, api, &env_var, &property));
        GcpBuilder {
            project: env_var("GOOGLE_CLOUD_PROJECT")
                .or_else(|| env_var("CLOUDSDK_CORE_PROJECT"))
                .or_else(|| property("core", "project")),
            regions: env_var("GPUFLEET_GCP_REGIONS"),
            endpoints_from: [
                compute.as_ref().map(|c| c.1.clone()),
                billing.as_ref().map(|b| b.1.clone()),
            ],
            compute_endpoint: compute.map(|c| c.0),
            billing_endpoint: billing.map(|b| b.0),
            metadata_host: env_var("GCE_METADATA_HOST"),
            anonymous: env_var("GPUFLEET_GCP_ANONYMOUS")
                .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
            operation_poll: None,
            credentials: None,
        }
    }

    /// A Compute Engine API base URL (a stand-in, a Private Service Connect
    /// endpoint); gcloud's form, ending in `/compute/v1/`, is taken too.
    pub fn with_compute_endpoint(mut self, url: impl Into<String>) -> Self {
        self.compute_endpoint = Some(url.into());
        self.endpoints_from[0] = None;
        self
    }

    /// A Cloud Billing API base URL (a stand-in).
    pub fn with_billing_endpoint(mut self, url: impl Into<String>) -> Self {
        self.billing_endpoint = Some(url.into());
        self.endpoints_from[1] = None;
        self
    }

    /// The Compute Engine and Cloud Billing endpoint overrides as given
    /// (before gcloud's `/compute/v1` is stripped), each with where it came
    /// from: a variable, a gcloud property, or the builder.
    pub fn endpoint_overrides(&self) -> [Option<(&str, &str)>; 2] {
        let urls = [&self.compute_endpoint, &self.billing_endpoint];
        std::array::from_fn(|i| {
            urls[i]
                .as_deref()
                .map(|u| (u, self.endpoints_from[i].as_deref().unwrap_or(SETTERS[i])))
        })
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
        let [compute_from, billing_from] = self.endpoints_from;
        let compute_from = compute_from.unwrap_or_else(|| SETTERS[0].into());
        let compute_endpoint = self
            .compute_endpoint
            .map(|u| parse_endpoint(&compute_from, &u).map(compute_root))
            .transpose()?;
        let billing_from = billing_from.unwrap_or_else(|| SETTERS[1].into());
        let billing_endpoint = self
            .billing_endpoint
            .map(|u| parse_endpoint(&billing_from, &u))
            .transpose()?;
        if self.anonymous && self.credentials.is_some() {
            return Err(Error::invalid_input(
                "GPUFLEET_GCP_ANONYMOUS=1 and injected credentials exclude each other: choose one",
            ));
        }
        if self.anonymous && compute_endpoint.is_none() && billing_endpoint.is_none() {
            return Err(Error::invalid_input(
                "GPUFLEET_GCP_ANONYMOUS=1 is only allowed with an endpoint override set to a stand-in: GPUFLEET_GCP_COMPUTE_ENDPOINT or GPUFLEET_GCP_BILLING_ENDPOINT, or gcloud's api_endpoint_overrides",
            ));
        }
        Ok(GcpConfig {
            project,
            regions: parse_regions(self.regions.as_deref().unwrap_or("")),
            compute_endpoint_from: compute_endpoint.as_ref().map(|_| compute_from),
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

    /// gpufleet's variable, then gcloud's, then gcloud's property; gcloud's
    /// `/compute/v1/` form reaches the client library as the bare root, and
    /// a bad value is named with where it came from.
    #[test]
    fn endpoints_follow_gclouds_own_overrides() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                set.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let props = |section: &str, key: &str| {
            (section == "api_endpoint_overrides" && key == "compute")
                .then(|| "https://compute-psc.p.googleapis.com/compute/v1/".to_string())
        };
        let none = |_: &str, _: &str| None;
        let pick = |var: &dyn Fn(&str) -> Option<String>,
                    prop: &dyn Fn(&str, &str) -> Option<String>| {
            endpoint_override("GPUFLEET_GCP_COMPUTE_ENDPOINT", "compute", &var, &prop)
        };
        let both: &[(&str, &str)] = &[
            ("GPUFLEET_GCP_COMPUTE_ENDPOINT", "http://127.0.0.1:1"),
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE",
                "http://127.0.0.1:2/compute/v1/",
            ),
        ];
        assert_eq!(
            pick(&vars(both), &props),
            Some((
                "http://127.0.0.1:1".into(),
                "GPUFLEET_GCP_COMPUTE_ENDPOINT".into()
            ))
        );
        let gcloud: &[(&str, &str)] = &both[1..];
        assert_eq!(
            pick(&vars(gcloud), &props),
            Some((
                "http://127.0.0.1:2/compute/v1/".into(),
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE".into()
            ))
        );
        assert_eq!(
            pick(&vars(&[]), &props).map(|p| p.1),
            Some("gcloud property api_endpoint_overrides/compute".into())
        );
        assert_eq!(pick(&vars(&[]), &none), None);
        let billing = endpoint_override(
            "GPUFLEET_GCP_BILLING_ENDPOINT",
            "cloudbilling",
            &vars(&[("CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING", "http://b")]),
            &none,
        );
        assert_eq!(
            billing.map(|b| b.1).as_deref(),
            Some("CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING")
        );

        let mut b = GcpBuilder::new().with_project("p");
        b.compute_endpoint = Some("https://compute-psc.p.googleapis.com/compute/v1/".into());
        b.endpoints_from[0] = Some("gcloud property api_endpoint_overrides/compute".into());
        let c = b.clone().build().unwrap();
        assert_eq!(
            c.compute_endpoint.as_deref(),
            Some("https://compute-psc.p.googleapis.com")
        );
        assert_eq!(
            c.compute_endpoint_from.as_deref(),
            Some("gcloud property api_endpoint_overrides/compute")
        );
        b.compute_endpoint = Some("compute.internal/compute/v1".into());
        let e = b.clone().build().unwrap_err().to_string();
        assert!(
            e.contains("invalid gcloud property api_endpoint_overrides/compute 'compute.internal/compute/v1'"),
            "{e}"
        );
        // The builder's own setter is its own source.
        let c = b
            .with_compute_endpoint("http://127.0.0.1:9/compute/beta")
            .build()
            .unwrap();
        assert_eq!(c.compute_endpoint.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(
            c.compute_endpoint_from.as_deref(),
            Some("with_compute_endpoint")
        );
        let c = GcpBuilder::new().with_project("p").build().unwrap();
        assert_eq!((c.compute_endpoint, c.compute_endpoint_from), (None, None));
    }

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
