//! `gpufleet check` for AWS: where the credentials come from (in the
//! default chain's order: environment, profile, web identity, container,
//! instance role), whether they resolve, who they are (STS
//! `GetCallerIdentity`), and which EC2 endpoints calls go to — bounded, so
//! a machine with nothing configured hears so in about a second.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_credential_types::provider::ProvideCredentials;
use gpufleet_model::check::{overridden, regions_scope, CloudCheck};
// The project's one reading of an environment variable (unset or blank is none).
use gpufleet_model::config::env_var as env;
use gpufleet_model::Cloud;

use crate::AwsConfig;

/// What to do when no credentials are found.
pub const NO_CREDENTIALS_ADVICE: &str =
    "run `aws configure` or `aws sso login`, or set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";

/// `AKIA…WXYZ`: enough to tell keys apart, not the key.
pub fn mask_key_id(id: &str) -> String {
    // By characters, not bytes: the value comes from the environment and
    // need not be ASCII.
    let chars: Vec<char> = id.chars().collect();
    if chars.len() <= 8 {
        return "…".into();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

fn home() -> Option<PathBuf> {
    env("HOME").map(PathBuf::from)
}

/// Whether the shared config or credentials file has profile `name`.
async fn profile_in_files(name: &str) -> Option<String> {
    let creds = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".aws/credentials")));
    let config = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".aws/config")));
    let header = |line: &str, in_config: bool| {
        let l = line.trim();
        let Some(inner) = l.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
            return false;
        };
        let inner = inner.trim();
        if in_config && name != "default" {
            inner
                .strip_prefix("profile")
                .is_some_and(|rest| rest.trim() == name)
        } else {
            inner == name || (in_config && inner == "profile default")
        }
    };
    for (path, in_config) in [(creds, false), (config, true)] {
        let Some(path) = path else { continue };
        if let Ok(text) = tokio::fs::read_to_string(&path).await {
            if text.lines().any(|l| header(l, in_config)) {
                return Some(format!("profile {name} in {}", path.display()));
            }
        }
    }
    None
}

/// Where the default chain will find credentials, without calling anything
/// but the instance metadata service (probed within `imds_timeout` when
/// nothing else is configured); `None`: nowhere.
pub async fn credential_source(cfg: &AwsConfig, imds_timeout: Duration) -> Option<String> {
    if cfg.static_credentials.is_some() {
        return Some("static credentials given to gpufleet".into());
    }
    if let (Some(id), Some(_)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        return Some(format!(
            "environment variables (AWS_ACCESS_KEY_ID {})",
            mask_key_id(&id)
        ));
    }
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
    if let Some(p) = profile_in_files(&profile).await {
        return Some(p);
    }
    if env("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() && env("AWS_ROLE_ARN").is_some() {
        return Some("web identity token (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)".into());
    }
    if env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
    {
        return Some("container credentials (ECS task role or EKS Pod Identity)".into());
    }
    if cfg.metadata_disabled {
        return None;
    }
    crate::imds_probe(cfg.metadata_endpoint.as_deref(), imds_timeout)
        .await
        .then(|| "EC2 instance role (instance metadata service)".to_string())
}

/// Checks AWS within `budget`.
pub async fn check(cfg: &AwsConfig, budget: Duration) -> CloudCheck {
    let started = Instant::now();
    let mut out = CloudCheck::new(Cloud::Aws);
    out.scope = Some(regions_scope(&cfg.regions));
    // Without a variable, the shared config file's `endpoint_url` (which
    // the SDK's loader applies) is the override, unless an SdkConfig was
    // injected (it carries its own).
    let profile_endpoint = match (&cfg.endpoint_url, &cfg.sdk_config) {
        (None, None) => {
            aws_config::default_provider::endpoint_url::endpoint_url_provider_with_origin(
                &aws_config::provider_config::ProviderConfig::default(),
            )
            .await
            .0
        }
        _ => None,
    };
    out.endpoints = match (&cfg.endpoint_url, profile_endpoint) {
        (Some(u), _) => vec![overridden(u, None)],
        (None, Some(u)) => vec![overridden(&u, Some("endpoint_url in the AWS profile"))],
        (None, None) => cfg
            .regions
            .iter()
            .take(3)
            .map(|r| format!("https://ec2.{r}.amazonaws.com"))
            .collect(),
    };
    let done = |c: CloudCheck| c.took(started);
    let Some(source) = credential_source(cfg, budget.min(Duration::from_millis(800))).await else {
        return done(out.fail(
            "no AWS credentials: no AWS_ACCESS_KEY_ID, no profile in ~/.aws, not on an EC2 instance with a role",
            NO_CREDENTIALS_ADVICE,
        ));
    };
    out.credentials = Some(source.clone());
    let left = |started: Instant| budget.saturating_sub(started.elapsed());
    let region = aws_config::Region::new(cfg.regions[0].to_string());
    let creds: aws_credential_types::provider::SharedCredentialsProvider =
        match &cfg.static_credentials {
            Some((id, secret)) => aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(
                    id.clone(),
                    secret.expose().to_string(),
                    None,
                    None,
                    "gpufleet-static",
                ),
            ),
            None => {
                let imds = aws_config::imds::Client::builder()
                    .connect_timeout(Duration::from_millis(500))
                    .read_timeout(Duration::from_millis(800))
                    .max_attempts(1)
                    .build();
                aws_credential_types::provider::SharedCredentialsProvider::new(
                    aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
                        .region(region.clone())
                        .imds_client(imds)
                        .build()
                        .await,
                )
            }
        };
    match tokio::time::timeout(left(started), creds.provide_credentials()).await {
        Err(_) => {
            return done(out.fail(
                format!("the credentials from {source} did not resolve within {budget:?}"),
                "check the profile's SSO session (`aws sso login`) or credential_process",
            ))
        }
        Ok(Err(e)) => {
            return done(out.fail(
                format!("the credentials from {source} did not resolve: {e}"),
                NO_CREDENTIALS_ADVICE,
            ))
        }
        Ok(Ok(_)) => {}
    }
    // Who they are: STS GetCallerIdentity (at the same override as EC2, for
    // a stand-in that serves every service on one address).
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(region)
        .credentials_provider(creds)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_millis(1500))
                .operation_attempt_timeout(left(started).max(Duration::from_millis(100)))
                .build(),
        )
        .load()
        .await;
    let mut sts = aws_sdk_sts::config::Builder::from(&sdk);
    if let (Some(u), None) = (&cfg.endpoint_url, env("AWS_ENDPOINT_URL_STS")) {
        sts = sts.endpoint_url(u.clone());
    }
    let client = aws_sdk_sts::Client::from_conf(sts.build());
    // The SDK's own attempt timeout is the same budget as the outer one;
    // whichever fires first, the answer is the same: no reply in time.
    let answer =
        match tokio::time::timeout(left(started), client.get_caller_identity().send()).await {
            Err(_) => None,
            Ok(Err(e)) => {
                let err = crate::error::from_sdk("GetCallerIdentity", e);
                (err.kind() != gpufleet_model::ErrorKind::Timeout).then_some(Err(err))
            }
            Ok(Ok(id)) => Some(Ok(id)),
        };
    match answer {
        None => {
            return done(out.fail(
                format!("STS did not answer within {budget:?}: no route to AWS from here?"),
                "check the network or proxy (HTTPS_PROXY), or set AWS_ENDPOINT_URL for a stand-in",
            ))
        }
        Some(Err(err)) => {
            let text = err.message().to_string();
            let advice = if text.contains("Expired") || text.contains("expired") {
                "the session expired: `aws sso login`, or refresh the credentials"
            } else if text.contains("InvalidClientTokenId")
                || text.contains("SignatureDoesNotMatch")
            {
                "the key is not valid: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile"
            } else {
                "check the network or proxy (HTTPS_PROXY), or the endpoint override"
            };
            return done(out.fail(format!("STS GetCallerIdentity failed: {text}"), advice));
        }
        Some(Ok(id)) => {
            out.identity = id
                .arn()
                .map(str::to_string)
                .or(id.account().map(|a| format!("account {a}")));
        }
    }
    out.usable = true;
    done(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_are_masked() {
        assert_eq!(mask_key_id("AKIAIOSFODNN7EXAMPLE"), "AKIA…MPLE");
        assert_eq!(mask_key_id("short"), "…");
        // Not ASCII: masked, never a panic on a byte boundary.
        assert_eq!(mask_key_id("ÄÖÜßéèêëïîô"), "ÄÖÜß…ëïîô");
    }
}
