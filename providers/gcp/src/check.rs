//! `gpufleet check` for GCP, and the project gcloud would use: the project
//! from the environment, the config, or gcloud's active configuration;
//! Application Default Credentials and whose they are; and one bounded call
//! to Compute Engine (`acceleratorTypes.aggregatedList`, one result) that
//! proves credentials, project and endpoint together.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpufleet_model::check::{overridden, regions_scope, CloudCheck, Unset};
// The project's one reading of an environment variable (unset or blank is none).
use gpufleet_model::config::env_var as env;
use gpufleet_model::config::ini_value;
use gpufleet_model::{Cloud, ErrorKind};

use crate::{GcpConfig, GcpProvider};

/// What the check says when no project is set anywhere (its settings
/// cannot be built without one).
pub const UNSET: Unset = Unset {
    prefix: "no GCP project",
    problem: "no GCP project: GOOGLE_CLOUD_PROJECT, CLOUDSDK_CORE_PROJECT, gcp.project and gcloud's active configuration are all unset",
    advice: "set GOOGLE_CLOUD_PROJECT or gcp.project, or `gcloud config set project PROJECT`",
};

/// gcloud's configuration directory: `CLOUDSDK_CONFIG`, else
/// `~/.config/gcloud` (the same on every Unix).
pub fn gcloud_dir() -> Option<PathBuf> {
    env("CLOUDSDK_CONFIG")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config/gcloud")))
}

/// gcloud's active configuration (`CLOUDSDK_ACTIVE_CONFIG_NAME`, else the
/// one named in `active_config`, else `default`), read once.
#[derive(Debug, Clone)]
pub struct GcloudConfiguration {
    /// The configuration's name.
    pub name: String,
    text: String,
}

impl GcloudConfiguration {
    /// The active configuration, when gcloud has one on this machine. Reads
    /// two small files.
    pub fn active() -> Option<GcloudConfiguration> {
        let dir = gcloud_dir()?;
        let name = env("CLOUDSDK_ACTIVE_CONFIG_NAME")
            .or_else(|| {
                std::fs::read_to_string(dir.join("active_config"))
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| "default".into());
        let text =
            std::fs::read_to_string(dir.join("configurations").join(format!("config_{name}")))
                .ok()?;
        Some(GcloudConfiguration { name, text })
    }

    /// The property `section/key` (`gcloud config get section/key`), when set.
    pub fn property(&self, section: &str, key: &str) -> Option<String> {
        ini_value(&self.text, section, key)
    }
}

/// gcloud's active configuration: its name and `[core]` `key` value.
pub fn gcloud_setting(key: &str) -> Option<(String, String)> {
    let c = GcloudConfiguration::active()?;
    c.property("core", key).map(|v| (c.name, v))
}

/// The project gcloud would use (`gcloud config get project`), from its
/// active configuration; `None` when gcloud has none. Reads two small files.
pub fn gcloud_project() -> Option<(String, String)> {
    gcloud_setting("project")
}

/// Where Application Default Credentials come from and whose they are.
fn adc_source(cfg: &GcpConfig) -> Option<(String, Option<String>)> {
    if cfg.anonymous {
        return Some((
            "anonymous (GPUFLEET_GCP_ANONYMOUS, a stand-in)".into(),
            None,
        ));
    }
    let read = |p: &PathBuf| -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
    };
    let describe = |doc: &serde_json::Value, from: String| {
        let kind = doc["type"].as_str().unwrap_or("unknown");
        let who = match kind {
            "service_account" => doc["client_email"].as_str().map(str::to_string),
            "authorized_user" => gcloud_setting("account").map(|(_, a)| a),
            "external_account" => doc["service_account_impersonation_url"]
                .as_str()
                .map(|u| format!("workload identity federation ({u})")),
            _ => None,
        };
        (format!("{from} ({kind})"), who)
    };
    if let Some(p) = env("GOOGLE_APPLICATION_CREDENTIALS").map(PathBuf::from) {
        return Some(match read(&p) {
            Some(doc) => describe(
                &doc,
                format!("GOOGLE_APPLICATION_CREDENTIALS={}", p.display()),
            ),
            None => (
                format!(
                    "GOOGLE_APPLICATION_CREDENTIALS={} (unreadable)",
                    p.display()
                ),
                None,
            ),
        });
    }
    let well_known = gcloud_dir()?.join("application_default_credentials.json");
    let doc = read(&well_known)?;
    Some(describe(
        &doc,
        format!(
            "gcloud auth application-default login ({})",
            well_known.display()
        ),
    ))
}

/// Checks GCP within `budget`, with settings built (a cloud whose settings
/// cannot be built is [`CloudCheck::unconfigured`], with [`UNSET`] when the
/// project is missing).
pub async fn check(cfg: &GcpConfig, budget: Duration) -> CloudCheck {
    let started = Instant::now();
    let mut out = CloudCheck::new(Cloud::Gcp);
    let done = |c: CloudCheck| c.took(started);
    out.scope = Some(format!(
        "project {}; {}",
        cfg.project,
        regions_scope(&cfg.regions)
    ));
    out.endpoints = vec![match &cfg.compute_endpoint {
        Some(u) => overridden(u, cfg.compute_endpoint_from.as_deref()),
        None => "https://compute.googleapis.com".into(),
    }];
    let source = {
        let c = cfg.clone();
        tokio::task::spawn_blocking(move || adc_source(&c))
            .await
            .ok()
            .flatten()
    };
    let on_gce = match &source {
        Some(_) => false,
        None => {
            crate::interruption::probe(
                &crate::interruption::metadata_base(cfg.metadata_host.as_deref()),
                budget.min(Duration::from_millis(800)),
            )
            .await
        }
    };
    match (source, on_gce) {
        (Some((from, who)), _) => {
            out.credentials = Some(from);
            out.identity = who;
        }
        (None, true) => {
            out.credentials = Some("the VM's service account (metadata server)".into());
        }
        (None, false) => {
            return done(out.fail(
                "no Google credentials: no GOOGLE_APPLICATION_CREDENTIALS, no application-default login, not on a GCE VM",
                "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service account key",
            ))
        }
    }
    let left = budget.saturating_sub(started.elapsed());
    let probe = async {
        let p = GcpProvider::new(cfg.clone()).await?;
        p.probe().await
    };
    let answer = tokio::time::timeout(left, probe).await.ok();
    let silence = (
        "",
        "check the network or proxy (HTTPS_PROXY), or GPUFLEET_GCP_COMPUTE_ENDPOINT for a stand-in",
    );
    match out.answered("Compute Engine", budget, answer, silence, refused) {
        ControlFlow::Continue((mut out, ())) => {
            out.usable = true;
            done(out)
        }
        ControlFlow::Break(out) => done(out),
    }
}

/// What to do when Compute Engine refuses the check's call.
fn refused(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Unauthenticated => {
            "refresh the credentials: `gcloud auth application-default login`"
        }
        ErrorKind::PermissionDenied => {
            "grant the identity roles/compute.viewer (and compute.instanceAdmin.v1 to launch) on the project"
        }
        ErrorKind::NotFound => {
            "check the project id (`gcloud projects list`) and that the Compute Engine API is enabled"
        }
        _ => "check the network or proxy (HTTPS_PROXY), or the endpoint override",
    }
}

impl GcpProvider {
    /// One cheap authenticated call (`acceleratorTypes.aggregatedList`,
    /// one result): credentials, project and endpoint in one.
    pub(crate) async fn probe(&self) -> gpufleet_model::Result<()> {
        self.inner
            .accelerator_types
            .aggregated_list()
            .set_project(self.project())
            .set_max_results(1u32)
            .send()
            .await
            .map_err(|e| crate::error::from_gax("acceleratorTypes.aggregatedList", e))?;
        Ok(())
    }
}
