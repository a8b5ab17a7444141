//! Azure configuration: `new / from_env / with_* / build`.

use std::time::Duration;

use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use derive_setters::Setters;
use gpufleet_model::config::{env_var, parse_endpoint, parse_regions, Injected, Secret};
use gpufleet_model::{Error, Region, Result};

/// The public Azure Resource Manager endpoint.
pub const DEFAULT_ARM_ENDPOINT: &str = "https://management.azure.com";
/// Azure Government's Resource Manager endpoint.
pub const US_GOVERNMENT_ARM_ENDPOINT: &str = "https://management.usgovcloudapi.net";
/// Azure in China's Resource Manager endpoint.
pub const CHINA_ARM_ENDPOINT: &str = "https://management.chinacloudapi.cn";
/// The public Retail Prices endpoint.
pub const DEFAULT_PRICES_ENDPOINT: &str = "https://prices.azure.com";
/// The instance metadata endpoint.
pub const DEFAULT_IMDS_ENDPOINT: &str = "http://169.254.169.254";
/// The resource group gpufleet creates VMs and groups in, unless told.
pub const DEFAULT_RESOURCE_GROUP: &str = "gpufleet";

/// Checked Azure settings. `Debug` hides the token.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AzureConfig {
    /// The subscription.
    pub subscription_id: String,
    /// Regions to scan (all with offers when empty).
    pub regions: Vec<Region>,
    /// ARM endpoint (`GPUFLEET_AZURE_ARM_ENDPOINT`, else the az CLI's active
    /// cloud's: sovereign clouds, Azure Stack Hub, stand-ins).
    pub arm_endpoint: String,
    /// Where `arm_endpoint` came from when it is not the default: the
    /// variable, the az CLI's cloud or the builder.
    pub arm_endpoint_from: Option<String>,
    /// Retail Prices endpoint (`GPUFLEET_AZURE_PRICES_ENDPOINT`).
    pub prices_endpoint: String,
    /// Instance metadata endpoint (`GPUFLEET_AZURE_IMDS_ENDPOINT`).
    pub imds_endpoint: String,
    /// A static bearer token for stand-ins (`GPUFLEET_AZURE_TOKEN`).
    pub static_token: Option<Secret>,
    /// The resource group for VMs and proximity placement groups
    /// (`GPUFLEET_AZURE_RESOURCE_GROUP`, default `gpufleet`; it must exist).
    pub resource_group: String,
    /// The subnet VMs get their NIC in (`GPUFLEET_AZURE_SUBNET_ID`, an ARM id);
    /// needed to launch.
    pub subnet_id: Option<String>,
    /// The SSH public key for the admin user (`GPUFLEET_AZURE_SSH_PUBLIC_KEY`);
    /// needed to launch Linux VMs.
    pub ssh_public_key: Option<String>,
    /// The admin user name (`gpufleet`).
    pub admin_username: String,
    /// How long the live catalog, prices and eviction rates are reused.
    pub catalog_ttl: Duration,
    /// The shortest wait between polls of a long-running operation (ARM's
    /// `Retry-After` may ask for more, up to 60 s).
    pub operation_poll: Duration,
    /// How long a long-running operation may take.
    pub operation_timeout: Duration,
    /// The most pages one list follows (a guard against a `nextLink` loop).
    pub max_pages: usize,
    /// The caller's own credential (any `azure_identity` credential or one
    /// of its own), used instead of gpufleet's chain.
    pub credential: Option<Injected<dyn TokenCredential>>,
}

/// Builds an [`AzureConfig`].
#[derive(Debug, Clone, Default, Setters)]
#[setters(prefix = "with_", strip_option, into)]
pub struct AzureBuilder {
    /// The subscription.
    subscription_id: Option<String>,
    /// Regions to scan, comma-separated.
    regions: Option<String>,
    #[setters(skip)]
    arm_endpoint: Option<String>,
    /// Where `arm_endpoint` came from (for messages).
    #[setters(skip)]
    arm_endpoint_from: Option<String>,
    /// Why the az CLI's active cloud gives no endpoint, when it names one
    /// it does not know (an error unless an endpoint is set).
    #[setters(skip)]
    arm_endpoint_problem: Option<String>,
    /// A Retail Prices endpoint.
    prices_endpoint: Option<String>,
    /// An instance metadata endpoint.
    imds_endpoint: Option<String>,
    #[setters(skip)]
    static_token: Option<Secret>,
    /// The resource group.
    resource_group: Option<String>,
    /// The subnet for VM NICs (an ARM id).
    subnet_id: Option<String>,
    /// The admin user's SSH public key.
    ssh_public_key: Option<String>,
    /// The shortest wait between operation polls (default 2 s).
    #[setters(into = false)]
    operation_poll: Option<Duration>,
    #[setters(skip)]
    credential: Option<Injected<dyn TokenCredential>>,
}

impl AzureBuilder {
    /// Empty settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings from the environment: `AZURE_SUBSCRIPTION_ID` (else the az
    /// CLI's default subscription in its active cloud, read from its profile
    /// file), `GPUFLEET_AZURE_REGIONS`, `GPUFLEET_AZURE_ARM_ENDPOINT` (else
    /// the az CLI's active cloud's Resource Manager: `AZURE_CLOUD_NAME` or
    /// `az cloud set`, a known sovereign cloud or one `az cloud register`
    /// wrote into `clouds.config`),
    /// `GPUFLEET_AZURE_PRICES_ENDPOINT`, `GPUFLEET_AZURE_IMDS_ENDPOINT`,
    /// `GPUFLEET_AZURE_TOKEN`, `GPUFLEET_AZURE_RESOURCE_GROUP`,
    /// `GPUFLEET_AZURE_SUBNET_ID`, `GPUFLEET_AZURE_SSH_PUBLIC_KEY`.
    pub fn from_env() -> Self {
        // Read once: it gives both the endpoint and whose default subscription.
        let cloud = crate::check::az_active_cloud();
        let (arm_endpoint, arm_endpoint_from, arm_endpoint_problem) =
            match env_var("GPUFLEET_AZURE_ARM_ENDPOINT") {
                Some(url) => (Some(url), Some("GPUFLEET_AZURE_ARM_ENDPOINT".into()), None),
                None => Self::arm_of(&cloud),
            };
        AzureBuilder {
            arm_endpoint,
            arm_endpoint_from,
            arm_endpoint_problem,
            subscription_id: env_var("AZURE_SUBSCRIPTION_ID")
                .or_else(|| crate::check::az_default_subscription_in(&cloud.name).map(|d| d.id)),
            regions: env_var("GPUFLEET_AZURE_REGIONS"),
            prices_endpoint: env_var("GPUFLEET_AZURE_PRICES_ENDPOINT"),
            imds_endpoint: env_var("GPUFLEET_AZURE_IMDS_ENDPOINT"),
            static_token: env_var("GPUFLEET_AZURE_TOKEN").map(Secret::new),
            resource_group: env_var("GPUFLEET_AZURE_RESOURCE_GROUP"),
            subnet_id: env_var("GPUFLEET_AZURE_SUBNET_ID"),
            ssh_public_key: env_var("GPUFLEET_AZURE_SSH_PUBLIC_KEY"),
            operation_poll: None,
            credential: None,
        }
    }

    /// The ARM endpoint the az CLI's active cloud gives: none for the
    /// public cloud, its endpoint for another, or what is wrong.
    fn arm_of(cloud: &crate::check::AzCloud) -> (Option<String>, Option<String>, Option<String>) {
        match &cloud.resource_manager {
            _ if cloud.is_public() => (None, None, None),
            Some(url) => (
                Some(url.clone()),
                Some(format!("az cloud {}", cloud.name)),
                None,
            ),
            None => (None, None, Some(cloud.unknown())),
        }
    }

    /// An ARM endpoint (a sovereign cloud, Azure Stack Hub, a stand-in).
    pub fn with_arm_endpoint(mut self, url: impl Into<String>) -> Self {
        self.arm_endpoint = Some(url.into());
        self.arm_endpoint_from = Some("with_arm_endpoint".into());
        self.arm_endpoint_problem = None;
        self
    }

    /// The ARM endpoint override as given, with where it came from (the
    /// variable, the az CLI's cloud, the builder); `None` for the default.
    pub fn arm_endpoint_override(&self) -> Option<(&str, &str)> {
        self.arm_endpoint.as_deref().map(|u| {
            (
                u,
                self.arm_endpoint_from
                    .as_deref()
                    .unwrap_or("with_arm_endpoint"),
            )
        })
    }

    /// A static bearer token (stand-ins only: needs an ARM endpoint override).
    pub fn with_static_token(mut self, token: impl Into<String>) -> Self {
        self.static_token = Some(Secret::new(token));
        self
    }

    /// The caller's own credential (`azure_identity`'s
    /// `ClientSecretCredential`, `ManagedIdentityCredential`, … or its own
    /// `TokenCredential`), used instead of gpufleet's chain.
    pub fn with_credential(mut self, credential: Arc<dyn TokenCredential>) -> Self {
        self.credential = Some(Injected::new(credential));
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<AzureConfig> {
        // First: with the wrong cloud, az's subscription is the wrong one too.
        if let Some(problem) = self.arm_endpoint_problem {
            return Err(Error::invalid_input(problem));
        }
        let subscription_id = self
            .subscription_id
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| Error::invalid_input("no Azure subscription: set AZURE_SUBSCRIPTION_ID or the azure.subscription_id setting, or `az login`"))?;
        let endpoint = |setting: &str, v: Option<String>, default: &str| {
            parse_endpoint(setting, v.as_deref().unwrap_or(default))
        };
        let arm_endpoint = endpoint(
            self.arm_endpoint_from
                .as_deref()
                .unwrap_or("GPUFLEET_AZURE_ARM_ENDPOINT"),
            self.arm_endpoint,
            DEFAULT_ARM_ENDPOINT,
        )?;
        // A static token goes only to a stand-in on this machine: the host is
        // parsed (not compared as text, which `https://MANAGEMENT.azure.com`
        // or a trailing dot would pass) and must be a loopback address.
        if self.static_token.is_some() && self.credential.is_some() {
            return Err(Error::invalid_input(
                "GPUFLEET_AZURE_TOKEN and an injected credential exclude each other: choose one",
            ));
        }
        if self.static_token.is_some() && !is_loopback(&arm_endpoint) {
            return Err(Error::invalid_input(
                "GPUFLEET_AZURE_TOKEN is only allowed with GPUFLEET_AZURE_ARM_ENDPOINT set to a stand-in on this machine (localhost, 127.0.0.0/8 or ::1); against Azure, credentials come from azure_identity (environment, workload identity, managed identity, Azure CLI)",
            ));
        }
        let resource_group = self
            .resource_group
            .unwrap_or_else(|| DEFAULT_RESOURCE_GROUP.to_string());
        let rg_ok = !resource_group.is_empty()
            && resource_group.len() <= 90
            && resource_group
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '(' | ')'))
            && !resource_group.ends_with('.');
        if !rg_ok {
            return Err(Error::invalid_input(format!(
                "invalid resource group '{resource_group}': 1 to 90 letters, digits, '-', '_', '.', '(' or ')', not ending in '.'"
            )));
        }
        if let Some(s) = &self.subnet_id {
            if !s.starts_with("/subscriptions/") || !s.contains("/subnets/") {
                return Err(Error::invalid_input(format!(
                    "invalid GPUFLEET_AZURE_SUBNET_ID '{s}': expected /subscriptions/…/resourceGroups/…/providers/Microsoft.Network/virtualNetworks/…/subnets/…"
                )));
            }
        }
        Ok(AzureConfig {
            subscription_id,
            regions: parse_regions(self.regions.as_deref().unwrap_or("")),
            arm_endpoint_from: (arm_endpoint != DEFAULT_ARM_ENDPOINT)
                .then_some(self.arm_endpoint_from)
                .flatten(),
            arm_endpoint,
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
            resource_group,
            subnet_id: self.subnet_id,
            ssh_public_key: self.ssh_public_key,
            admin_username: "gpufleet".into(),
            catalog_ttl: Duration::from_secs(600),
            operation_poll: self.operation_poll.unwrap_or(Duration::from_secs(2)),
            operation_timeout: Duration::from_secs(900),
            max_pages: 1000,
            credential: self.credential,
        })
    }
}

/// Whether `endpoint`'s host is this machine: `localhost` or a loopback IP.
pub(crate) fn is_loopback(endpoint: &str) -> bool {
    let Ok(url) = azure_core::http::Url::parse(endpoint) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
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
        assert_eq!(c.resource_group, "gpufleet");
    }

    #[test]
    fn a_static_token_goes_only_to_a_loopback_stand_in() {
        for endpoint in [
            "https://MANAGEMENT.azure.com",
            "https://management.azure.com.",
            "https://management.azure.com:443/",
            "http://10.0.0.7:8080",
            "https://127.0.0.1.nip.io",
        ] {
            let e = AzureBuilder::new()
                .with_subscription_id("sub")
                .with_static_token("t")
                .with_arm_endpoint(endpoint)
                .build()
                .unwrap_err();
            assert!(
                e.to_string().contains("GPUFLEET_AZURE_TOKEN"),
                "{endpoint}: {e}"
            );
        }
        for endpoint in ["http://127.0.0.1:9", "http://localhost:9", "http://[::1]:9"] {
            AzureBuilder::new()
                .with_subscription_id("sub")
                .with_static_token("t")
                .with_arm_endpoint(endpoint)
                .build()
                .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
        }
    }

    /// The az CLI's active cloud sets the endpoint unless one is given; a
    /// cloud it cannot place is an error naming it, unless one is given.
    #[test]
    fn the_az_clis_active_cloud_gives_the_endpoint() {
        use crate::check::AzCloud;
        let with = |cloud: &AzCloud| {
            let (arm_endpoint, arm_endpoint_from, arm_endpoint_problem) =
                AzureBuilder::arm_of(cloud);
            AzureBuilder {
                subscription_id: Some("sub".into()),
                arm_endpoint,
                arm_endpoint_from,
                arm_endpoint_problem,
                ..AzureBuilder::default()
            }
        };
        let c = with(&AzCloud::resolve("AzureUSGovernment", None))
            .build()
            .unwrap();
        assert_eq!(c.arm_endpoint, "https://management.usgovcloudapi.net");
        assert_eq!(
            c.arm_endpoint_from.as_deref(),
            Some("az cloud AzureUSGovernment")
        );
        let c = with(&AzCloud::resolve("AzureCloud", None)).build().unwrap();
        assert_eq!(
            (c.arm_endpoint.as_str(), c.arm_endpoint_from),
            (DEFAULT_ARM_ENDPOINT, None)
        );
        let nope = AzCloud::resolve("Nope", None);
        let e = with(&nope).build().unwrap_err().to_string();
        assert!(e.contains("active cloud 'Nope'"), "{e}");
        let c = with(&nope)
            .with_arm_endpoint("http://127.0.0.1:9")
            .build()
            .unwrap();
        assert_eq!(c.arm_endpoint_from.as_deref(), Some("with_arm_endpoint"));
        let mut bad = AzCloud::resolve(
            "StackHub",
            Some("[StackHub]\nendpoint_resource_manager = management.local\n"),
        );
        let e = with(&bad).build().unwrap_err().to_string();
        assert!(
            e.contains("invalid az cloud StackHub 'management.local'"),
            "{e}"
        );
        bad.resource_manager = None;
        assert!(with(&bad).build().is_err());
    }

    #[test]
    fn bad_settings_are_named() {
        type Setting = fn(AzureBuilder) -> AzureBuilder;
        let bad: [(Setting, &str); 3] = [
            (|b| b.with_static_token("t"), "GPUFLEET_AZURE_TOKEN"),
            (|b| b.with_resource_group("bad/group"), "bad/group"),
            (|b| b.with_subnet_id("subnet-1"), "GPUFLEET_AZURE_SUBNET_ID"),
        ];
        for (set, named) in bad {
            let e = set(AzureBuilder::new().with_subscription_id("sub"))
                .build()
                .unwrap_err();
            assert!(e.to_string().contains(named), "{e}");
        }
    }
}
