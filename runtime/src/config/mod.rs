//! `gpufleet.toml`, the environment and flags, in that order of precedence.
//!
//! The file is `--config PATH`, else `GPUFLEET_CONFIG`, else
//! `<platform config dir>/gpufleet/gpufleet.toml` (optional: absent is fine
//! unless named explicitly). Every setting remembers where it came from, and
//! `gpufleet config show` prints them with secrets hidden.
//!
//! An embedding program gets the same layering as the CLI: every setting
//! has a [`ConfigKey`], parsed from its name (`aws.regions`) or its
//! environment variable (`GPUFLEET_AWS_REGIONS`), and [`Flags::with`] sets
//! one as a flag would:
//!
//! ```no_run
//! use gpufleet_runtime::config::{Config, ConfigKey, Flags};
//!
//! let flags = Flags::default()
//!     .with("aws.regions".parse::<ConfigKey>()?, "us-east-1,us-west-2")
//!     .with(ConfigKey::Provider, "fake");
//! let cfg = Config::load(&flags)?;
//! assert_eq!(cfg.aws_regions, ["us-east-1", "us-west-2"]);
//! # Ok::<(), gpufleet_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpufleet_core::config::Secret;
use gpufleet_core::placer::parse_duration;
use gpufleet_core::{Cloud, Error};
use serde::{Deserialize, Serialize};

mod file;
mod key;
mod values;
use self::file::*;
pub use self::key::ConfigKey;
pub use self::values::*;

/// Which clouds gpufleet talks to: the real APIs or the fake cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The clouds' APIs (credentials from the usual places).
    Live,
    /// gpufleet's in-memory fake cloud, kept in a state file between commands.
    Fake,
    /// The fake cloud with each instance's boot script run as a process on
    /// this machine (`gpufleet serve` so far; see `runtime::local`).
    Local,
}

impl ProviderKind {
    /// `live` or `fake`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Live => "live",
            ProviderKind::Fake => "fake",
            ProviderKind::Local => "local",
        }
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        parse_provider(s, "provider")
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// gpufleet's default.
    Default,
    /// The config file.
    File,
    /// An environment variable (named).
    Env(String),
    /// A command-line flag.
    Flag,
    /// Another tool's configuration (gcloud's active configuration, the az
    /// CLI's default subscription).
    Tool(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File => f.write_str("file"),
            Origin::Env(v) => write!(f, "env {v}"),
            Origin::Flag => f.write_str("flag"),
            Origin::Tool(t) => f.write_str(t),
        }
    }
}

/// The effective settings (`Debug` shows the ledger with its password
/// masked, and no token).
#[derive(Clone)]
pub struct Config {
    /// The file read, if any.
    pub path: Option<PathBuf>,
    /// Live clouds or the fake one.
    pub provider: ProviderKind,
    /// Enabled clouds.
    pub clouds: Vec<Cloud>,
    /// Who launches (the owner tag).
    pub owner: String,
    /// Tags on everything gpufleet creates (team, project, …).
    pub tags: BTreeMap<String, String>,
    /// Time to live of launched instances, when set (`--ttl`, `ttl`,
    /// `GPUFLEET_TTL`).
    pub ttl: Option<Duration>,
    /// `ttl = "none"`: no time to live, not even `launch`'s default.
    pub ttl_off: bool,
    /// How old a cached catalog may be before `offers` and `place` ignore it.
    pub catalog_max_age: Duration,
    /// AWS regions (else the AWS environment decides).
    pub aws_regions: Vec<String>,
    /// AWS EC2 endpoint.
    pub aws_endpoint_url: Option<String>,
    /// Whether to ask the AWS Price List API.
    pub aws_price_list: Option<bool>,
    /// The SQS queue EventBridge fills with EC2's instance events, which
    /// controllers long-poll (its URL, or its name in the first region).
    pub aws_interruption_queue: Option<String>,
    /// GCP project.
    pub gcp_project: Option<String>,
    /// GCP regions.
    pub gcp_regions: Vec<String>,
    /// Azure subscription.
    pub azure_subscription: Option<String>,
    /// Azure regions.
    pub azure_regions: Vec<String>,
    /// A static Azure bearer token (stand-ins only).
    pub azure_token: Option<Secret>,
    /// The fake cloud's state file.
    pub fake_state: PathBuf,
    /// The ledger: a SQLite file path or a `postgres://` URL (`ledger`,
    /// `GPUFLEET_LEDGER`; default the data directory's SQLite file, or with
    /// the fake provider one beside its state file).
    pub ledger: String,
    /// Where each setting came from.
    pub origins: BTreeMap<&'static str, Origin>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .field("provider", &self.provider)
            .field("clouds", &self.clouds)
            .field("owner", &self.owner)
            .field("tags", &self.tags)
            .field("ttl", &self.ttl)
            .field("ttl_off", &self.ttl_off)
            .field("catalog_max_age", &self.catalog_max_age)
            .field("aws_regions", &self.aws_regions)
            .field(
                "aws_endpoint_url",
                &self
                    .aws_endpoint_url
                    .as_deref()
                    .map(crate::ledgers::mask_url),
            )
            .field("aws_price_list", &self.aws_price_list)
            .field("aws_interruption_queue", &self.aws_interruption_queue)
            .field("gcp_project", &self.gcp_project)
            .field("gcp_regions", &self.gcp_regions)
            .field("azure_subscription", &self.azure_subscription)
            .field("azure_regions", &self.azure_regions)
            .field("azure_token", &self.azure_token)
            .field("fake_state", &self.fake_state)
            .field("ledger", &crate::ledgers::shown(&self.ledger))
            .field("origins", &self.origins)
            .finish()
    }
}

/// Overrides from a command's flags.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--provider`.
    pub provider: Option<ProviderKind>,
    /// `--owner`.
    pub owner: Option<String>,
    /// `--team`.
    pub team: Option<String>,
    /// `--ttl`.
    pub ttl: Option<Duration>,
    /// Any other setting given as a flag would be (an embedding program's
    /// own values): they outrank the environment and the file. The fields
    /// above outrank these.
    pub overrides: Vec<(ConfigKey, String)>,
}

/// A time to live as a flag gives it: a duration (`24h`), or `none` / `off`
/// for no expiry (`launch --ttl`, as `ttl = "none"`); the message names what
/// is valid.
pub fn parse_ttl(s: &str) -> std::result::Result<String, String> {
    match s.trim() {
        "none" | "off" => Ok("none".into()),
        t => gpufleet_core::placer::parse_duration(t)
            .map(|_| t.to_string())
            .map_err(|e| format!("{}, or none", e.message())),
    }
}

impl Flags {
    /// Sets `key` to `value` as a flag would (checked when the config
    /// loads, like every other source).
    pub fn with(mut self, key: ConfigKey, value: impl Into<String>) -> Flags {
        self.overrides.retain(|(k, _)| *k != key);
        self.overrides.push((key, value.into()));
        self
    }

    fn flag(&self, key: ConfigKey) -> Option<String> {
        let given = match key {
            ConfigKey::Provider => self.provider.map(|p| p.as_str().to_string()),
            ConfigKey::Owner => self.owner.clone(),
            ConfigKey::Team => self.team.clone(),
            _ => None,
        };
        given.or_else(|| {
            self.overrides
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        })
    }
}

/// The time to live `gpufleet launch` gives instances when none is set: bare
/// instances nothing watches are found by `gpufleet reap` a day later
/// (managed jobs have a controller and get none).
pub const DEFAULT_LAUNCH_TTL: Duration = Duration::from_secs(24 * 3600);

impl Config {
    /// The clouds a command considers when it is given none: the enabled
    /// ones (`clouds`, `GPUFLEET_CLOUDS`; all three by default), as `run`,
    /// `launch` and `catalog refresh` do, so `place` says where `run` would
    /// start the same job.
    pub fn clouds_or_enabled(&self, given: &[Cloud]) -> Vec<Cloud> {
        if given.is_empty() {
            self.clouds.clone()
        } else {
            given.to_vec()
        }
    }

    /// The one placer every command decides through (`place`,
    /// `tf-external`, `run`, `launch`, `jobs serve`): built here once from
    /// the settings, so no command picks its own width, evidence window or
    /// cooldown.
    pub fn placer(&self) -> gpufleet_core::placer::Placer {
        gpufleet_core::placer::Placer::default()
    }

    /// Where `cloud`'s live catalog comes from: `default`, or the endpoint
    /// overrides in force (`aws.endpoint_url`, `AWS_ENDPOINT_URL(_EC2)`;
    /// GCP's Compute and Billing endpoints; Azure's Resource Manager). The
    /// catalog cache records it, so a stand-in's catalog is never taken for
    /// the cloud's.
    pub fn catalog_source(&self, cloud: Cloud) -> String {
        let urls: Vec<String> = match cloud {
            Cloud::Aws => [
                std::env::var("AWS_ENDPOINT_URL_EC2")
                    .ok()
                    .filter(|u| !u.trim().is_empty()),
                self.aws_endpoint_url.clone(),
            ]
            .into_iter()
            .flatten()
            .take(1)
            .collect(),
            #[cfg(feature = "gcp")]
            Cloud::Gcp => gpufleet_gcp::GcpBuilder::from_env()
                .endpoint_overrides()
                .iter()
                .flatten()
                .map(|(u, _)| u.to_string())
                .collect(),
            #[cfg(feature = "azure")]
            Cloud::Azure => gpufleet_azure::AzureBuilder::from_env()
                .arm_endpoint_override()
                .map(|(u, _)| u.to_string())
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        if urls.is_empty() {
            "default".into()
        } else {
            // One word in the cache's header line.
            urls.join(",")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join("")
        }
    }

    /// Opens (creating and migrating as needed) the configured ledger
    /// (`ledger`, `GPUFLEET_LEDGER`: a SQLite path or a `postgres://` URL).
    pub async fn open_ledger(
        &self,
    ) -> Result<std::sync::Arc<dyn gpufleet_core::ledger::Ledger>, Error> {
        crate::ledgers::open(&self.ledger).await
    }

    /// The time to live of a `gpufleet launch`: the one set, else
    /// [`DEFAULT_LAUNCH_TTL`], unless `ttl = "none"`.
    pub fn launch_ttl(&self) -> Option<Duration> {
        if self.ttl_off {
            None
        } else {
            self.ttl.or(Some(DEFAULT_LAUNCH_TTL))
        }
    }
}

impl Config {
    /// The tags everything launched carries: the owner, and the config's
    /// tags (`team` and `project` as gpufleet's own keys).
    pub fn resource_tags(&self) -> gpufleet_core::Tags {
        let mut tags = gpufleet_core::Tags::new();
        tags.insert(gpufleet_core::tags::OWNER.into(), self.owner.clone());
        for (k, v) in &self.tags {
            let key = match k.as_str() {
                "team" => gpufleet_core::tags::TEAM.to_string(),
                "project" => gpufleet_core::tags::PROJECT.to_string(),
                other => other.to_string(),
            };
            tags.insert(key, v.clone());
        }
        tags
    }

    /// Reads the file, then the environment, then `flags`.
    pub fn load(flags: &Flags) -> Result<Config, Error> {
        let (path, explicit) = match (&flags.config, env("GPUFLEET_CONFIG")) {
            (Some(p), _) => (Some(p.clone()), true),
            (None, Some(p)) => (Some(PathBuf::from(p)), true),
            (None, None) => (default_path(), false),
        };
        let file = match &path {
            Some(p) if p.exists() => Some(read_file(p)?),
            Some(p) if explicit => {
                return Err(Error::invalid_input(format!(
                    "config file '{}' does not exist",
                    p.display()
                )))
            }
            _ => None,
        };
        let used_path = file.as_ref().and(path.clone());
        let f = file.unwrap_or_default();
        let mut origins = BTreeMap::new();
        let mut pick = |key: ConfigKey, file: Option<String>| -> Option<String> {
            if let Some(v) = flags.flag(key) {
                origins.insert(key.as_str(), Origin::Flag);
                return Some(v);
            }
            if let Some(name) = key.env_var() {
                if let Some(v) = env(name) {
                    origins.insert(key.as_str(), Origin::Env(name.to_string()));
                    return Some(v);
                }
            }
            if let Some(v) = file {
                origins.insert(key.as_str(), Origin::File);
                return Some(v);
            }
            origins.insert(key.as_str(), Origin::Default);
            None
        };
        let provider = match pick(ConfigKey::Provider, f.provider.clone()) {
            Some(p) => parse_provider(&p, "provider")?,
            None => ProviderKind::Live,
        };
        let clouds = match pick(ConfigKey::Clouds, f.clouds.clone().map(|c| c.join(","))) {
            Some(c) => parse_clouds(&[c], "clouds")?,
            None => Cloud::REAL.to_vec(),
        };
        let owner = pick(ConfigKey::Owner, f.owner.clone())
            .or_else(|| env("USER"))
            .or_else(|| env("LOGNAME"))
            // Where the environment names no one (cron, systemd units, CI
            // containers), the account the process runs as: every instance was
            // attributed to "unknown" there.
            .or_else(|| whoami::username().ok().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| "unknown".into());
        if owner.trim().is_empty() {
            return Err(Error::invalid_input(format!(
                "invalid owner '{owner}' (from {}): expected a name such as ana, which the owner tag carries",
                origins.get("owner").cloned().unwrap_or(Origin::Default)
            )));
        }
        let ttl_text = pick(ConfigKey::Ttl, f.ttl.clone());
        let ttl_off = ttl_text
            .as_deref()
            .is_some_and(|t| matches!(t.trim(), "none" | "off"));
        let ttl = ttl_text
            .filter(|_| !ttl_off)
            .map(|t| dur(&t, "ttl (a duration such as 24h, or none)"))
            .transpose()?;
        let ttl_from_flag = flags.ttl.is_some();
        let ttl = flags.ttl.or(ttl);
        let catalog_max_age = pick(ConfigKey::CatalogMaxAge, f.catalog_max_age.clone())
            .map(|t| dur(&t, "catalog_max_age"))
            .transpose()?
            .unwrap_or(Duration::from_secs(24 * 3600));
        let mut tags = f.tags.clone();
        for (key, tag) in [(ConfigKey::Team, "team"), (ConfigKey::Project, "project")] {
            let file_value = tags.remove(tag);
            if let Some(v) = pick(key, file_value) {
                tags.insert(tag.to_string(), v);
            }
        }
        for (k, v) in &tags {
            if v.trim().is_empty() {
                return Err(Error::invalid_input(format!(
                    "invalid tag {k} '{v}': expected a value such as research (a tag without one attributes cost to nobody)"
                )));
            }
            if k.is_empty() || k.len() > 63 {
                return Err(Error::invalid_input(format!(
                    "invalid tag key '{k}' in the config: 1 to 63 characters"
                )));
            }
        }
        let aws = f.aws.unwrap_or_default();
        let gcp = f.gcp.unwrap_or_default();
        let azure = f.azure.unwrap_or_default();
        let fake_state = pick(
            ConfigKey::FakeState,
            f.fake
                .and_then(|s| s.state)
                .map(|p| p.display().to_string()),
        )
        .map(PathBuf::from)
        .unwrap_or_else(default_fake_state);
        let azure_token = pick(ConfigKey::AzureToken, azure.token).map(Secret::new);
        let ledger = match pick(ConfigKey::Ledger, f.ledger.clone()) {
            Some(l) => l,
            // The fake (and local) cloud's jobs and evidence stay out of the
            // real clouds' ledger: its pools carry real pools' names, and a live
            // `jobs serve` would launch its detached jobs on real clouds.
            None if matches!(provider, ProviderKind::Fake | ProviderKind::Local) => {
                fake_ledger_beside(&fake_state)
            }
            None => crate::ledgers::default_path()?.display().to_string(),
        };
        crate::ledgers::check_location(&ledger)?;
        let aws_regions = split_list(pick(
            ConfigKey::AwsRegions,
            aws.regions.map(|r| r.join(",")),
        ));
        let aws_endpoint_url = pick(ConfigKey::AwsEndpointUrl, aws.endpoint_url);
        let aws_interruption_queue = pick(ConfigKey::AwsInterruptionQueue, aws.interruption_queue)
            .filter(|q| !q.trim().is_empty());
        let aws_price_list = pick(
            ConfigKey::AwsPriceList,
            aws.price_list.map(|b| b.to_string()),
        )
        .map(|v| match v.trim() {
            "true" | "on" | "yes" => Ok(true),
            "false" | "off" | "no" => Ok(false),
            other => Err(Error::invalid_input(format!(
                "aws.price_list: invalid value {}; valid: true, false",
                shown(other)
            ))),
        })
        .transpose()?;
        #[cfg_attr(not(feature = "gcp"), allow(unused_mut))]
        let mut gcp_project = pick(ConfigKey::GcpProject, gcp.project);
        let gcp_regions = split_list(pick(
            ConfigKey::GcpRegions,
            gcp.regions.map(|r| r.join(",")),
        ));
        #[cfg_attr(not(feature = "azure"), allow(unused_mut))]
        let mut azure_subscription = pick(ConfigKey::AzureSubscriptionId, azure.subscription_id);
        let azure_regions = split_list(pick(
            ConfigKey::AzureRegions,
            azure.regions.map(|r| r.join(",")),
        ));
        // As gcloud and az would: their own defaults when nothing here says.
        #[cfg(feature = "gcp")]
        if gcp_project.is_none() {
            if let Some((name, p)) = gpufleet_gcp::check::gcloud_project() {
                origins.insert("gcp.project", Origin::Tool(format!("gcloud config {name}")));
                gcp_project = Some(p);
            }
        }
        #[cfg(feature = "azure")]
        if azure_subscription.is_none() {
            if let Some(d) = gpufleet_azure::check::az_default_subscription() {
                origins.insert(
                    "azure.subscription_id",
                    Origin::Tool(format!("az CLI default ({})", d.name)),
                );
                azure_subscription = Some(d.id);
            }
        }
        if ttl_from_flag {
            origins.insert("ttl", Origin::Flag);
        }
        Ok(Config {
            path: used_path,
            provider,
            clouds,
            owner,
            tags,
            ttl,
            ttl_off,
            catalog_max_age,
            aws_regions,
            aws_endpoint_url,
            aws_price_list,
            aws_interruption_queue,
            gcp_project,
            gcp_regions,
            azure_subscription,
            azure_regions,
            azure_token,
            fake_state,
            ledger,
            origins,
        })
    }

    /// The AWS provider's settings: the AWS environment, then this config.
    #[cfg(feature = "aws")]
    pub fn aws(&self) -> Result<gpufleet_aws::AwsConfig, Error> {
        let mut b = gpufleet_aws::AwsBuilder::from_env();
        if !self.aws_regions.is_empty() {
            b = b.with_regions(self.aws_regions.join(","));
        }
        if let Some(url) = &self.aws_endpoint_url {
            b = b.with_endpoint_url(url.clone());
        }
        if let Some(on) = self.aws_price_list {
            b = b.with_live_prices(on);
        }
        b.build()
    }

    /// The GCP provider's settings: the environment, then this config.
    #[cfg(feature = "gcp")]
    pub fn gcp(&self) -> Result<gpufleet_gcp::GcpConfig, Error> {
        let mut b = gpufleet_gcp::GcpBuilder::from_env();
        if let Some(p) = &self.gcp_project {
            b = b.with_project(p.clone());
        }
        if !self.gcp_regions.is_empty() {
            b = b.with_regions(self.gcp_regions.join(","));
        }
        b.build()
    }

    /// The Azure provider's settings: the environment, then this config.
    #[cfg(feature = "azure")]
    pub fn azure(&self) -> Result<gpufleet_azure::AzureConfig, Error> {
        let mut b = gpufleet_azure::AzureBuilder::from_env();
        if let Some(s) = &self.azure_subscription {
            b = b.with_subscription_id(s.clone());
        }
        if !self.azure_regions.is_empty() {
            b = b.with_regions(self.azure_regions.join(","));
        }
        if let Some(t) = &self.azure_token {
            b = b.with_static_token(t.expose().to_string());
        }
        b.build()
    }

    /// The settings as (key, value, origin) rows, secrets hidden.
    pub fn rows(&self) -> Vec<(String, String, String)> {
        let o = |k: &str| {
            self.origins
                .get(k)
                .map_or_else(|| "default".to_string(), ToString::to_string)
        };
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(",")
            }
        };
        let mut rows = vec![
            (
                "config_file".to_string(),
                self.path
                    .as_ref()
                    .map_or("(none)".into(), |p| p.display().to_string()),
                "-".to_string(),
            ),
            ("provider".into(), self.provider.to_string(), o("provider")),
            (
                "clouds".into(),
                self.clouds
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                o("clouds"),
            ),
            ("owner".into(), self.owner.clone(), o("owner")),
            (
                "ttl".into(),
                match (self.ttl, self.ttl_off) {
                    (Some(t), _) => gpufleet_core::placer::format_duration(t),
                    (None, true) => "none".into(),
                    (None, false) => format!(
                        "{} for `launch` (managed jobs: none)",
                        gpufleet_core::placer::format_duration(DEFAULT_LAUNCH_TTL)
                    ),
                },
                o("ttl"),
            ),
            (
                "catalog_max_age".into(),
                gpufleet_core::placer::format_duration(self.catalog_max_age),
                o("catalog_max_age"),
            ),
        ];
        for (k, v) in &self.tags {
            let key = format!("tags.{k}");
            let origin = match k.as_str() {
                "team" => o("tags.team"),
                "project" => o("tags.project"),
                _ => "file".into(),
            };
            rows.push((key, v.clone(), origin));
        }
        // The GCP and Azure endpoints as their builders find them (gpufleet's
        // variables, then gcloud's overrides and the az CLI's cloud).
        let endpoint = |key: &str, found: Option<(&str, &str)>| match found {
            Some((url, from)) => {
                let env_name = from.chars().all(|c| c.is_ascii_uppercase() || c == '_');
                let origin = if env_name {
                    Origin::Env(from.into())
                } else {
                    Origin::Tool(from.into())
                };
                (key.to_string(), url.to_string(), origin.to_string())
            }
            None => (
                key.to_string(),
                "-".to_string(),
                Origin::Default.to_string(),
            ),
        };
        #[cfg(feature = "gcp")]
        let gcp = gpufleet_gcp::GcpBuilder::from_env();
        #[cfg(feature = "gcp")]
        let [compute, billing] = gcp.endpoint_overrides();
        #[cfg(not(feature = "gcp"))]
        let [compute, billing]: [Option<(&str, &str)>; 2] = [None, None];
        #[cfg(feature = "azure")]
        let azure = gpufleet_azure::AzureBuilder::from_env();
        #[cfg(feature = "azure")]
        let arm = azure.arm_endpoint_override();
        #[cfg(not(feature = "azure"))]
        let arm: Option<(&str, &str)> = None;
        rows.extend([
            (
                "aws.regions".into(),
                list(&self.aws_regions),
                o("aws.regions"),
            ),
            (
                "aws.endpoint_url".into(),
                self.aws_endpoint_url.clone().unwrap_or_else(|| "-".into()),
                o("aws.endpoint_url"),
            ),
            (
                "aws.interruption_queue".into(),
                self.aws_interruption_queue
                    .clone()
                    .unwrap_or_else(|| "-".into()),
                o("aws.interruption_queue"),
            ),
            (
                "gcp.project".into(),
                self.gcp_project.clone().unwrap_or_else(|| "-".into()),
                o("gcp.project"),
            ),
            (
                "gcp.regions".into(),
                list(&self.gcp_regions),
                o("gcp.regions"),
            ),
            endpoint("gcp.compute_endpoint", compute),
            endpoint("gcp.billing_endpoint", billing),
            (
                "azure.subscription_id".into(),
                self.azure_subscription
                    .clone()
                    .unwrap_or_else(|| "-".into()),
                o("azure.subscription_id"),
            ),
            (
                "azure.regions".into(),
                list(&self.azure_regions),
                o("azure.regions"),
            ),
            endpoint("azure.arm_endpoint", arm),
            (
                "azure.token".into(),
                self.azure_token
                    .as_ref()
                    .map_or("-".into(), |t| t.to_string()),
                o("azure.token"),
            ),
            (
                "fake.state".into(),
                self.fake_state.display().to_string(),
                o("fake.state"),
            ),
            (
                "ledger".into(),
                crate::ledgers::shown(&self.ledger),
                o("ledger"),
            ),
        ]);
        // A password in any URL shown (an endpoint with userinfo, a tag
        // someone pasted one into) is masked.
        for row in &mut rows {
            row.1 = crate::ledgers::mask_url(&row.1);
        }
        rows
    }
}
