//! The settings' names: one [`ConfigKey`] per setting, parsed from the name
//! the file and `config show` use or from its environment variable, so a
//! program can set any of them from strings it was given.

use super::*;

/// One setting of [`Config`]: its name in the file (`aws.regions`), its
/// environment variable (`GPUFLEET_AWS_REGIONS`), and the way an embedding
/// program sets it ([`Flags::with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ConfigKey {
    /// `provider`: `live` or `fake`.
    Provider,
    /// `clouds`: the enabled clouds, comma-separated.
    Clouds,
    /// `owner`: who launches (the owner tag).
    Owner,
    /// `ttl`: the time to live of launched instances, or `none`.
    Ttl,
    /// `catalog_max_age`: how old a cached catalog may be.
    CatalogMaxAge,
    /// `ledger`: a SQLite file path or a `postgres://` URL.
    Ledger,
    /// `tags.team`: the team tag.
    Team,
    /// `tags.project`: the project tag.
    Project,
    /// `aws.regions`: the AWS regions scanned, comma-separated.
    AwsRegions,
    /// `aws.endpoint_url`: the EC2 endpoint.
    AwsEndpointUrl,
    /// `aws.price_list`: whether to ask the AWS Price List API.
    AwsPriceList,
    /// `aws.interruption_queue`: the SQS queue (URL or name) EventBridge
    /// fills with EC2's instance events, which controllers long-poll.
    AwsInterruptionQueue,
    /// `gcp.project`: the GCP project.
    GcpProject,
    /// `gcp.regions`: the GCP regions scanned, comma-separated.
    GcpRegions,
    /// `azure.subscription_id`: the Azure subscription.
    AzureSubscriptionId,
    /// `azure.regions`: the Azure regions scanned, comma-separated.
    AzureRegions,
    /// `azure.token`: a static bearer token (stand-ins only; a secret).
    AzureToken,
    /// `fake.state`: the fake cloud's state file.
    FakeState,
}

impl ConfigKey {
    /// Every key, in the order `config show` lists them.
    pub const ALL: [ConfigKey; 18] = [
        ConfigKey::Provider,
        ConfigKey::Clouds,
        ConfigKey::Owner,
        ConfigKey::Ttl,
        ConfigKey::CatalogMaxAge,
        ConfigKey::Team,
        ConfigKey::Project,
        ConfigKey::AwsRegions,
        ConfigKey::AwsEndpointUrl,
        ConfigKey::AwsPriceList,
        ConfigKey::AwsInterruptionQueue,
        ConfigKey::GcpProject,
        ConfigKey::GcpRegions,
        ConfigKey::AzureSubscriptionId,
        ConfigKey::AzureRegions,
        ConfigKey::AzureToken,
        ConfigKey::FakeState,
        ConfigKey::Ledger,
    ];

    /// The name in the file and in `config show`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKey::Provider => "provider",
            ConfigKey::Clouds => "clouds",
            ConfigKey::Owner => "owner",
            ConfigKey::Ttl => "ttl",
            ConfigKey::CatalogMaxAge => "catalog_max_age",
            ConfigKey::Ledger => "ledger",
            ConfigKey::Team => "tags.team",
            ConfigKey::Project => "tags.project",
            ConfigKey::AwsRegions => "aws.regions",
            ConfigKey::AwsEndpointUrl => "aws.endpoint_url",
            ConfigKey::AwsPriceList => "aws.price_list",
            ConfigKey::AwsInterruptionQueue => "aws.interruption_queue",
            ConfigKey::GcpProject => "gcp.project",
            ConfigKey::GcpRegions => "gcp.regions",
            ConfigKey::AzureSubscriptionId => "azure.subscription_id",
            ConfigKey::AzureRegions => "azure.regions",
            ConfigKey::AzureToken => "azure.token",
            ConfigKey::FakeState => "fake.state",
        }
    }

    /// The environment variable that sets it, where there is one.
    pub fn env_var(self) -> Option<&'static str> {
        Some(match self {
            ConfigKey::Provider => "GPUFLEET_PROVIDER",
            ConfigKey::Clouds => "GPUFLEET_CLOUDS",
            ConfigKey::Owner => "GPUFLEET_OWNER",
            ConfigKey::Ttl => "GPUFLEET_TTL",
            ConfigKey::CatalogMaxAge => "GPUFLEET_CATALOG_MAX_AGE",
            ConfigKey::Ledger => "GPUFLEET_LEDGER",
            ConfigKey::Team => "GPUFLEET_TEAM",
            ConfigKey::Project => "GPUFLEET_PROJECT",
            ConfigKey::AwsRegions => "GPUFLEET_AWS_REGIONS",
            ConfigKey::AwsEndpointUrl => "AWS_ENDPOINT_URL",
            ConfigKey::AwsPriceList => return None,
            ConfigKey::AwsInterruptionQueue => "GPUFLEET_AWS_INTERRUPTION_QUEUE",
            ConfigKey::GcpProject => "GOOGLE_CLOUD_PROJECT",
            ConfigKey::GcpRegions => "GPUFLEET_GCP_REGIONS",
            ConfigKey::AzureSubscriptionId => "AZURE_SUBSCRIPTION_ID",
            ConfigKey::AzureRegions => "GPUFLEET_AZURE_REGIONS",
            ConfigKey::AzureToken => "GPUFLEET_AZURE_TOKEN",
            ConfigKey::FakeState => "GPUFLEET_FAKE_STATE",
        })
    }

    /// Whether its value is a secret (never shown).
    pub fn is_secret(self) -> bool {
        self == ConfigKey::AzureToken
    }
}

impl std::fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses a key's name (`aws.regions`, `team` for `tags.team`) or its
/// environment variable (`GPUFLEET_AWS_REGIONS`), case-insensitively.
impl std::str::FromStr for ConfigKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim();
        let short = |k: ConfigKey| k.as_str().strip_prefix("tags.");
        ConfigKey::ALL
            .into_iter()
            .find(|k| {
                k.as_str().eq_ignore_ascii_case(t)
                    || short(*k).is_some_and(|n| n.eq_ignore_ascii_case(t))
                    || k.env_var().is_some_and(|v| v.eq_ignore_ascii_case(t))
            })
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "unknown setting {}; valid: {}",
                    shown(t),
                    ConfigKey::ALL.map(ConfigKey::as_str).join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_parses_from_its_name_and_its_variable() {
        for k in ConfigKey::ALL {
            assert_eq!(k.as_str().parse::<ConfigKey>().unwrap(), k);
            if let Some(v) = k.env_var() {
                assert_eq!(v.parse::<ConfigKey>().unwrap(), k, "{v}");
                assert_eq!(v.to_lowercase().parse::<ConfigKey>().unwrap(), k);
            }
        }
        assert_eq!("team".parse::<ConfigKey>().unwrap(), ConfigKey::Team);
        let e = "aws.region".parse::<ConfigKey>().unwrap_err();
        assert!(e.message().contains("'aws.region'"), "{}", e.message());
        assert!(e.message().contains("aws.regions"), "{}", e.message());
        let e = "sk-live-0123456789abcdef0123456789"
            .parse::<ConfigKey>()
            .unwrap_err();
        assert!(!e.message().contains("sk-live"), "{}", e.message());
    }

    #[test]
    fn a_key_set_by_a_program_outranks_the_environment_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gpufleet.toml");
        std::fs::write(
            &file,
            "provider = \"fake\"\n[aws]\nregions = [\"eu-west-1\"]\n[gcp]\nregions = [\"us-central1\"]\n",
        )
        .unwrap();
        let flags = Flags {
            config: Some(file),
            ..Flags::default()
        }
        .with(ConfigKey::AwsRegions, "us-east-1, us-west-2")
        .with(ConfigKey::AwsPriceList, "false")
        .with(
            ConfigKey::Ledger,
            dir.path().join("l.db").display().to_string(),
        );
        let cfg = Config::load(&flags).unwrap();
        assert_eq!(cfg.aws_regions, ["us-east-1", "us-west-2"]);
        assert_eq!(cfg.origins["aws.regions"], Origin::Flag);
        assert_eq!(cfg.aws_price_list, Some(false));
        // The file still decides what nothing outranks.
        assert_eq!(cfg.provider, ProviderKind::Fake);
        assert_eq!(cfg.origins["provider"], Origin::File);
        let bad = Flags::default().with(ConfigKey::AwsPriceList, "maybe");
        let e = Config::load(&bad).unwrap_err();
        assert!(e.message().contains("aws.price_list"), "{}", e.message());
        assert!(e.message().contains("'maybe'"), "{}", e.message());
    }
}
