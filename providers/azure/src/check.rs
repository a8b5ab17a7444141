//! `gpufleet check` for Azure, and the subscription the az CLI would use:
//! the subscription from the environment, the config, or the az CLI's
//! default (`az account show`, read from `azureProfile.json`); the
//! credential the provider would use; and one bounded Resource Manager call
//! (`GET /subscriptions/{id}`) that proves credentials, subscription and
//! endpoint together.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpufleet_core::check::CloudCheck;
// The project's one reading of an environment variable (unset or blank is none).
use gpufleet_core::config::env_var as env;
use gpufleet_core::Cloud;
use serde::Deserialize;

use crate::AzureConfig;

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

/// Parses `azureProfile.json` (which the az CLI writes with a byte-order
/// mark) for its default subscription.
pub fn parse_az_profile(text: &str) -> Option<AzDefault> {
    let p: Profile = serde_json::from_str(text.trim_start_matches('\u{feff}')).ok()?;
    let s = p.subscriptions.into_iter().find(|s| s.is_default)?;
    Some(AzDefault {
        id: s.id,
        name: s.name,
        user: s.user.map(|u| u.name),
    })
}

/// The az CLI's default subscription (`az account show`), read from its
/// profile file; `None` when not logged in. Reads one small file.
pub fn az_default_subscription() -> Option<AzDefault> {
    let text = std::fs::read_to_string(az_dir()?.join("azureProfile.json")).ok()?;
    parse_az_profile(&text)
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

/// Checks Azure within `budget`. `cfg` is an error (the reason) when no
/// subscription was found.
pub async fn check(cfg: Result<AzureConfig, String>, budget: Duration) -> CloudCheck {
    let started = Instant::now();
    let mut out = CloudCheck::new(Cloud::Azure);
    let done = |c: CloudCheck| c.took(started);
    let cfg = match cfg {
        Ok(c) => c,
        Err(why) if why.starts_with("no Azure subscription") => {
            return done(out.fail(
                "no Azure subscription: AZURE_SUBSCRIPTION_ID, azure.subscription_id and the az CLI's default are all unset",
                "set AZURE_SUBSCRIPTION_ID or azure.subscription_id, or `az login` (then `az account set --subscription ID`)",
            ))
        }
        Err(why) => {
            return done(out.fail(why, "fix the azure settings (`gpufleet config show`)"))
        }
    };
    let az = tokio::task::spawn_blocking(az_default_subscription)
        .await
        .ok()
        .flatten();
    let (source, who) = credential_source(&cfg, az.as_ref());
    out.credentials = Some(source);
    out.identity = who;
    out.endpoints = vec![if cfg.arm_endpoint.trim_end_matches('/')
        == crate::builder::DEFAULT_ARM_ENDPOINT.trim_end_matches('/')
    {
        cfg.arm_endpoint.clone()
    } else {
        format!("{} (override)", cfg.arm_endpoint)
    }];
    let probe = async {
        let arm = crate::arm::Arm::new(&cfg)?;
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
            "subscription {}{}{}; regions {}",
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
            cfg.regions
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    out.scope = Some(scope("", ""));
    match tokio::time::timeout(left, probe).await {
        Err(_) => done(out.fail(
            format!("Resource Manager did not answer within {budget:?} (no credential answered, or no route to Azure)"),
            "`az login`, or set AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET; check the network or proxy",
        )),
        Ok(Err(e)) => {
            let advice = match e.kind() {
                gpufleet_core::ErrorKind::Unauthenticated => {
                    "`az login`, or set AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET"
                }
                gpufleet_core::ErrorKind::PermissionDenied | gpufleet_core::ErrorKind::NotFound => {
                    "check the subscription id (`az account list`) and that the identity has a role on it (Reader to list, Virtual Machine Contributor to launch)"
                }
                _ => "check the network or proxy (HTTPS_PROXY), or GPUFLEET_AZURE_ARM_ENDPOINT for a stand-in",
            };
            done(out.fail(format!("Resource Manager refused: {}", e.message()), advice))
        }
        Ok(Ok(sub)) => {
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
        let d = parse_az_profile(text).unwrap();
        assert_eq!(d.id, "22222222-0000-0000-0000-000000000000");
        assert_eq!(d.name, "Prod");
        assert_eq!(d.user.as_deref(), Some("ana@example.com"));
        assert!(parse_az_profile("{\"subscriptions\":[]}").is_none());
        assert!(parse_az_profile("not json").is_none());
    }
}
