//! `gpufleet check` for Azure, and the subscription the az CLI would use:
//! the subscription from the environment, the config, or the az CLI's
//! default (`az account show`, read from `azureProfile.json`); the
//! credential the provider would use; and one bounded Resource Manager call
//! (`GET /subscriptions/{id}`) that proves credentials, subscription and
//! endpoint together.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpufleet_model::check::{overridden, regions_scope, CloudCheck, Unset};
// The project's one reading of an environment variable (unset or blank is none).
use gpufleet_model::config::env_var as env;
use gpufleet_model::config::ini_value;
use gpufleet_model::{Cloud, ErrorKind};
use serde::Deserialize;

use crate::AzureConfig;

/// What the check says when no subscription is set anywhere (its
/// settings cannot be built without one).
pub const UNSET: Unset = Unset {
    prefix: "no Azure subscription",
    problem: "no Azure subscription: AZURE_SUBSCRIPTION_ID, azure.subscription_id and the az CLI's default are all unset",
    advice: "set AZURE_SUBSCRIPTION_ID or azure.subscription_id, or `az login` (then `az account set --subscription ID`)",
};

/// The az CLI's default subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzDefault {
    /// Its id.
    pub id: String,
    /// Its display name.
    pub name: String,
    /// Who is logged in (`user.name`: a user or a service principal id).
    pub user: Option<String>,
}

#[derive(Deserialize)]
struct Profile {
    #[serde(default)]
    subscriptions: Vec<ProfileSub>,
}

#[derive(Deserialize)]
struct ProfileSub {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default, rename = "isDefault")]
    is_default: bool,
    /// The cloud it belongs to (`AzureCloud`, `AzureUSGovernment`, …).
    #[serde(default, rename = "environmentName")]
    environment: Option<String>,
    #[serde(default)]
    user: Option<ProfileUser>,
}

#[derive(Deserialize)]
struct ProfileUser {
    name: String,
}

/// The az CLI's config directory: `AZURE_CONFIG_DIR`, else `~/.azure`.
pub fn az_dir() -> Option<PathBuf> {
    env("AZURE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".azure")))
}

/// The public cloud's name in the az CLI.
pub const AZ_PUBLIC_CLOUD: &str = "AzureCloud";

/// The clouds the az CLI knows without registering them, with their
/// Resource Manager endpoints (`az cloud show -n NAME`).
const AZ_KNOWN_CLOUDS: [(&str, &str); 3] = [
    (AZ_PUBLIC_CLOUD, crate::builder::DEFAULT_ARM_ENDPOINT),
    ("AzureChinaCloud", crate::builder::CHINA_ARM_ENDPOINT),
    (
        "AzureUSGovernment",
        crate::builder::US_GOVERNMENT_ARM_ENDPOINT,
    ),
];

/// The az CLI's active cloud (`az cloud show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzCloud {
    /// Its name (`AZURE_CLOUD_NAME`, else `[cloud] name` in the az config
    /// file, else `AzureCloud`).
    pub name: String,
    /// Its Resource Manager endpoint: `endpoint_resource_manager` of its
    /// section in `clouds.config` (`az cloud register`), else the known
    /// cloud's; `None` for a name neither knows.
    pub resource_manager: Option<String>,
}

impl AzCloud {
    /// The cloud named `name`, its endpoint looked up in `clouds_config`
    /// (the text of the az CLI's `clouds.config`) and the known clouds.
    pub fn resolve(name: &str, clouds_config: Option<&str>) -> AzCloud {
        let known = AZ_KNOWN_CLOUDS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name));
        let name = known.map_or(name, |(n, _)| n).to_string();
        let resource_manager = clouds_config
            .and_then(|t| ini_value(t, &name, "endpoint_resource_manager"))
            .or_else(|| known.map(|(_, url)| url.to_string()))
            .map(|url| url.trim_end_matches('/').to_string());
        AzCloud {
            name,
            resource_manager,
        }
    }

    /// Whether this is the public cloud at its usual endpoint.
    pub fn is_public(&self) -> bool {
        self.resource_manager.as_deref() == Some(crate::builder::DEFAULT_ARM_ENDPOINT)
    }

    /// What a name neither the known clouds nor `clouds.config` has should
    /// say.
    pub fn unknown(&self) -> String {
        format!(
            "the az CLI's active cloud '{}' is not one it knows ({}) and has no endpoint_resource_manager in clouds.config: `az cloud set --name` one of those, `az cloud register` it, or set GPUFLEET_AZURE_ARM_ENDPOINT",
            self.name,
            AZ_KNOWN_CLOUDS.map(|(n, _)| n).join(", ")
        )
    }
}

/// The az CLI's active cloud, from `AZURE_CLOUD_NAME` or its config
/// directory; the public cloud when neither names one. Reads two small
/// files.
pub fn az_active_cloud() -> AzCloud {
    let dir = az_dir();
    let read = |file: &str| {
        dir.as_ref()
            .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
    };
    let name = env("AZURE_CLOUD_NAME")
        .or_else(|| read("config").and_then(|t| ini_value(&t, "cloud", "name")))
        .unwrap_or_else(|| AZ_PUBLIC_CLOUD.into());
    AzCloud::resolve(&name, read("clouds.config").as_deref())
}

/// Parses `azureProfile.json` (which the az CLI writes with a byte-order
/// mark) for the default subscription in `cloud` (the az CLI keeps one per
/// cloud it has logged in to).
pub fn parse_az_profile(text: &str, cloud: &str) -> Option<AzDefault> {
    let p: Profile = serde_json::from_str(text.trim_start_matches('\u{feff}')).ok()?;
    let s = p.subscriptions.into_iter().find(|s| {
        s.is_default
            && s.environment
                .as_deref()
                .is_none_or(|e| e.eq_ignore_ascii_case(cloud))
    })?;
    Some(AzDefault {
        id: s.id,
        name: s.name,
        user: s.user.map(|u| u.name),
    })
}

/// The az CLI's default subscription in its active cloud (`az account
/// show`), read from its profile file; `None` when not logged in. Reads
/// three small files.
pub fn az_default_subscription() -> Option<AzDefault> {
    az_default_subscription_in(&az_active_cloud().name)
}

/// The az CLI's default subscription in `cloud`, read from its profile
/// file. Reads one small file.
pub fn az_default_subscription_in(cloud: &str) -> Option<AzDefault> {
    let text = std::fs::read_to_string(az_dir()?.join("azureProfile.json")).ok()?;
    parse_az_profile(&text, cloud)
}

/// Which credential the provider will use, in its order.
fn credential_source(cfg: &AzureConfig, az: Option<&AzDefault>) -> (String, Option<String>) {
    if cfg.static_token.is_some() {
        return (
            "a static token for a stand-in (GPUFLEET_AZURE_TOKEN)".into(),
            None,
        );
    }
    if let (Some(_), Some(t), Some(c)) = (
        env("AZURE_CLIENT_SECRET"),
        env("AZURE_TENANT_ID"),
        env("AZURE_CLIENT_ID"),
    ) {
        return (
            "service principal (AZURE_CLIENT_ID, AZURE_CLIENT_SECRET)".into(),
            Some(format!("application {c} in tenant {t}")),
        );
    }
    if env("AZURE_FEDERATED_TOKEN_FILE").is_some() {
        return (
            "workload identity (AZURE_FEDERATED_TOKEN_FILE)".into(),
            env("AZURE_CLIENT_ID").map(|c| format!("application {c}")),
        );
    }
    match az.and_then(|a| a.user.clone()) {
        Some(user) => (
            "managed identity, else the Azure CLI's login".into(),
            Some(user),
        ),
        None => ("managed identity, else the Azure CLI's login".into(), None),
    }
}

#[derive(Deserialize)]
struct Subscription {
    #[serde(default, rename = "displayName")]
    display_name: String,
    #[serde(default)]
    state: String,
}

/// Checks Azure within `budget`, with settings built (a cloud whose settings
/// cannot be built is [`CloudCheck::unconfigured`], with [`UNSET`] when the
/// subscription is missing).
pub async fn check(cfg: &AzureConfig, budget: Duration) -> CloudCheck {
    let started = Instant::now();
    let mut out = CloudCheck::new(Cloud::Azure);
    let done = |c: CloudCheck| c.took(started);
    let az = tokio::task::spawn_blocking(az_default_subscription)
        .await
        .ok()
        .flatten();
    let (source, who) = credential_source(cfg, az.as_ref());
    out.credentials = Some(source);
    out.identity = who;
    let default = cfg.arm_endpoint.trim_end_matches('/')
        == crate::builder::DEFAULT_ARM_ENDPOINT.trim_end_matches('/');
    out.endpoints = vec![if default {
        cfg.arm_endpoint.clone()
    } else {
        overridden(&cfg.arm_endpoint, cfg.arm_endpoint_from.as_deref())
    }];
    let probe = async {
        let arm = crate::arm::Arm::new(cfg)?;
        let url = arm.url(
            &format!("/subscriptions/{}", cfg.subscription_id),
            "2022-12-01",
        )?;
        arm.call::<Subscription>(
            azure_core::http::Method::Get,
            url,
            None::<&()>,
            "subscriptions.get",
        )
        .await
    };
    let left = budget.saturating_sub(started.elapsed());
    let scope = |name: &str, state: &str| {
        format!(
            "subscription {}{}{}; {}",
            cfg.subscription_id,
            if name.is_empty() {
                String::new()
            } else {
                format!(" ({name})")
            },
            if state.is_empty() || state == "Enabled" {
                String::new()
            } else {
                format!(", {state}")
            },
            regions_scope(&cfg.regions)
        )
    };
    out.scope = Some(scope("", ""));
    let answer = tokio::time::timeout(left, probe).await.ok();
    let silence = (
        " (no credential answered, or no route to Azure)",
        "`az login`, or set AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET; check the network or proxy",
    );
    let (mut out, sub) = match out.answered("Resource Manager", budget, answer, silence, refused) {
        ControlFlow::Continue(answered) => answered,
        ControlFlow::Break(out) => return done(out),
    };
    out.scope = Some(scope(&sub.display_name, &sub.state));
    if sub.state.is_empty() || sub.state == "Enabled" {
        out.usable = true;
        done(out)
    } else {
        done(out.fail(
            format!("subscription {} is {}", cfg.subscription_id, sub.state),
            "use an enabled subscription (`az account list`)",
        ))
    }
}

/// What to do when Resource Manager refuses the check's call.
fn refused(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Unauthenticated => {
            "`az login`, or set AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET"
        }
        ErrorKind::PermissionDenied | ErrorKind::NotFound => {
            "check the subscription id (`az account list`) and that the identity has a role on it (Reader to list, Virtual Machine Contributor to launch)"
        }
        _ => "check the network or proxy (HTTPS_PROXY), or GPUFLEET_AZURE_ARM_ENDPOINT for a stand-in",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_az_cli_default_subscription_is_read_with_its_bom() {
        let text = "\u{feff}{\"installationId\":\"x\",\"subscriptions\":[\
            {\"id\":\"11111111-0000-0000-0000-000000000000\",\"name\":\"Dev\",\"isDefault\":false,\"user\":{\"name\":\"ana@example.com\",\"type\":\"user\"}},\
            {\"id\":\"22222222-0000-0000-0000-000000000000\",\"name\":\"Prod\",\"isDefault\":true,\"user\":{\"name\":\"ana@example.com\",\"type\":\"user\"}}]}";
        let d = parse_az_profile(text, AZ_PUBLIC_CLOUD).unwrap();
        assert_eq!(d.id, "22222222-0000-0000-0000-000000000000");
        assert_eq!(d.name, "Prod");
        assert_eq!(d.user.as_deref(), Some("ana@example.com"));
        assert!(parse_az_profile("{\"subscriptions\":[]}", AZ_PUBLIC_CLOUD).is_none());
        assert!(parse_az_profile("not json", AZ_PUBLIC_CLOUD).is_none());
    }

    /// Logged in to two clouds, the az CLI keeps a default in each: the
    /// active cloud's is the one.
    #[test]
    fn the_default_subscription_is_the_active_clouds() {
        let text = "{\"subscriptions\":[\
            {\"id\":\"aaaaaaaa-0000-0000-0000-000000000000\",\"name\":\"Public\",\"isDefault\":true,\"environmentName\":\"AzureCloud\"},\
            {\"id\":\"bbbbbbbb-0000-0000-0000-000000000000\",\"name\":\"Gov\",\"isDefault\":true,\"environmentName\":\"AzureUSGovernment\"}]}";
        assert_eq!(parse_az_profile(text, "AzureCloud").unwrap().name, "Public");
        assert_eq!(
            parse_az_profile(text, "azureusgovernment").unwrap().name,
            "Gov"
        );
        assert!(parse_az_profile(text, "AzureChinaCloud").is_none());
    }

    #[test]
    fn the_active_clouds_endpoint_comes_from_clouds_config_else_the_known_clouds() {
        let gov = AzCloud::resolve("azureusgovernment", None);
        assert_eq!(gov.name, "AzureUSGovernment");
        assert_eq!(
            gov.resource_manager.as_deref(),
            Some("https://management.usgovcloudapi.net")
        );
        assert!(!gov.is_public());
        assert!(AzCloud::resolve("AzureCloud", None).is_public());
        let registered = "[AzureCloud]\nendpoint_resource_manager = https://management.azure.com/\n\n\
            [StackHub]\nendpoint_resource_manager = https://management.local.azurestack.external/\nsuffix_storage_endpoint = local.azurestack.external\n";
        let hub = AzCloud::resolve("StackHub", Some(registered));
        assert_eq!(
            hub.resource_manager.as_deref(),
            Some("https://management.local.azurestack.external")
        );
        assert!(AzCloud::resolve("AzureCloud", Some(registered)).is_public());
        let nope = AzCloud::resolve("Nope", Some(registered));
        assert_eq!(nope.resource_manager, None);
        let why = nope.unknown();
        assert!(
            why.contains("'Nope'") && why.contains("AzureUSGovernment"),
            "{why}"
        );
    }
}
