//! The operator commands on the live GCP and Azure providers, pointed at
//! stand-ins: `ls` lists what the API holds; an unconfigured cloud is
//! skipped with the reason, and a command with no cloud left fails saying
//! why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::process::{Command, Output};

use serde_json::json;

fn gpufleet(args: &[&str], envs: &[(&str, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .env_remove("GPUFLEET_LOG")
        .env_remove("AZURE_SUBSCRIPTION_ID")
        .env_remove("GOOGLE_CLOUD_PROJECT")
        .env_remove("CLOUDSDK_CORE_PROJECT")
        .env_remove("CLOUDSDK_CONFIG")
        .env_remove("CLOUDSDK_ACTIVE_CONFIG_NAME")
        .env_remove("AZURE_CONFIG_DIR")
        .env_remove("AZURE_CLOUD_NAME")
        .env_remove("CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE")
        .env_remove("CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING")
        .env_remove("GPUFLEET_CONFIG")
        .env(
            "HOME",
            std::env::temp_dir().join("gpufleet-live-gcp-azure-home"),
        )
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("gpufleet-live-gcp-azure-home"),
        )
        .envs(envs.iter().map(|(k, v)| (*k, v.clone())))
        .output()
        .expect("run gpufleet")
}

/// Project `ops-test` on the Compute Engine stand-in holds one managed
/// spot instance, `us-central1-a/gf-0011223344556677-0`.
fn answer_one_spot_instance(stand_in: &support::StandIn) {
    stand_in.answer(
        "GET /compute/v1/projects/ops-test/aggregated/instances",
        200,
        support::gce_one_instance("SPOT", "train-7"),
    );
}

#[test]
fn ls_on_gcp_lists_managed_instances_and_skips_unconfigured_azure() {
    let stand_in = support::StandIn::start();
    answer_one_spot_instance(&stand_in);
    let envs = [
        ("GPUFLEET_CLOUDS", "gcp,azure".to_string()),
        ("GOOGLE_CLOUD_PROJECT", "ops-test".to_string()),
        ("GPUFLEET_GCP_COMPUTE_ENDPOINT", stand_in.uri()),
        ("GPUFLEET_GCP_BILLING_ENDPOINT", stand_in.uri()),
        ("GPUFLEET_GCP_ANONYMOUS", "1".to_string()),
    ];
    let o = gpufleet(&["ls", "-o", "json"], &envs);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("skipped azure: no Azure subscription"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["id"], "us-central1-a/gf-0011223344556677-0");
    assert_eq!(rows[0]["capacity"], "spot");
}

/// Pointed at a stand-in the way gcloud is (its `api_endpoint_overrides`,
/// as a variable or as a property of the active configuration, in gcloud's
/// `/compute/v1/` form), `ls` and `check` go there and say where the
/// override came from.
#[test]
fn gclouds_own_endpoint_overrides_point_gcp_at_a_stand_in() {
    let stand_in = support::StandIn::start();
    answer_one_spot_instance(&stand_in);
    stand_in.answer(
        "GET /compute/v1/projects/ops-test/aggregated/acceleratorTypes",
        200,
        json!({"kind": "compute#acceleratorTypeAggregatedList", "items": {}}),
    );
    let listed = |o: &Output| {
        support::json_rows(o)
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let one = vec!["us-central1-a/gf-0011223344556677-0".to_string()];
    let common = [
        ("GPUFLEET_CLOUDS", "gcp".to_string()),
        ("GPUFLEET_GCP_ANONYMOUS", "1".to_string()),
    ];

    // gcloud's variables.
    let mut envs = common.to_vec();
    envs.extend([
        ("GOOGLE_CLOUD_PROJECT", "ops-test".to_string()),
        (
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE",
            format!("{}/compute/v1/", stand_in.uri()),
        ),
        (
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING",
            format!("{}/", stand_in.uri()),
        ),
    ]);
    assert_eq!(listed(&gpufleet(&["ls", "-o", "json"], &envs)), one);
    let shown = |envs: &[(&str, String)], key: &str| {
        let v = support::json(&gpufleet(&["config", "show", "-o", "json"], envs));
        let row = support::row(&v, "key", key);
        (
            row["value"].as_str().unwrap().to_string(),
            row["from"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(
        shown(&envs, "gcp.compute_endpoint"),
        (
            format!("{}/compute/v1/", stand_in.uri()),
            "env CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE".to_string()
        )
    );

    // gcloud's active configuration, nothing in the environment.
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("configurations")).unwrap();
    std::fs::write(dir.join("active_config"), "stand-in\n").unwrap();
    std::fs::write(
        dir.join("configurations/config_stand-in"),
        format!(
            "[core]\nproject = ops-test\n\n[api_endpoint_overrides]\ncompute = {0}/compute/v1/\ncloudbilling = {0}/\n",
            stand_in.uri()
        ),
    )
    .unwrap();
    let mut envs = common.to_vec();
    envs.push(("CLOUDSDK_CONFIG", dir.display().to_string()));
    assert_eq!(listed(&gpufleet(&["ls", "-o", "json"], &envs)), one);
    assert_eq!(
        shown(&envs, "gcp.billing_endpoint"),
        (
            format!("{}/", stand_in.uri()),
            "gcloud property api_endpoint_overrides/cloudbilling".to_string()
        )
    );
    let v = support::json(&gpufleet(&["check", "-o", "json"], &envs));
    assert_eq!(v[0]["usable"], true, "{v}");
    assert_eq!(
        v[0]["endpoints"][0],
        format!(
            "{} (override: gcloud property api_endpoint_overrides/compute)",
            stand_in.uri()
        )
    );

    // A bad override is named with where it came from, and nothing runs.
    std::fs::write(
        dir.join("configurations/config_stand-in"),
        "[core]\nproject = ops-test\n[api_endpoint_overrides]\ncompute = compute.internal/compute/v1/\n",
    )
    .unwrap();
    let o = gpufleet(&["ls"], &envs);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "invalid gcloud property api_endpoint_overrides/compute 'compute.internal/compute/v1/'"
        ),
        "{err}"
    );
}

/// Pointed at a stand-in the way the az CLI is (`az cloud register` and
/// `az cloud set`), `check` goes there with the subscription az holds for
/// that cloud and says where the endpoint came from; a cloud az cannot
/// place is an error that names it.
#[test]
fn the_az_clis_active_cloud_points_azure_at_a_stand_in() {
    let stand_in = support::StandIn::start();
    stand_in.answer(
        "GET /subscriptions/00000000-0000-0000-0000-0000000000dd",
        200,
        json!({
            "id": "/subscriptions/00000000-0000-0000-0000-0000000000dd",
            "subscriptionId": "00000000-0000-0000-0000-0000000000dd",
            "displayName": "Stack lab", "state": "Enabled", "tenantId": "t"
        }),
    );
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    std::fs::write(
        dir.join("config"),
        "[cloud]\nname = StandIn\n\n[core]\noutput = json\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("clouds.config"),
        format!(
            "[StandIn]\nendpoint_resource_manager = {}/\nprofile = latest\n",
            stand_in.uri()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("azureProfile.json"),
        "\u{feff}{\"subscriptions\":[\
         {\"id\":\"00000000-0000-0000-0000-0000000000cc\",\"name\":\"Public\",\"isDefault\":true,\"environmentName\":\"AzureCloud\"},\
         {\"id\":\"00000000-0000-0000-0000-0000000000dd\",\"name\":\"Stack lab\",\"isDefault\":true,\"environmentName\":\"StandIn\"}]}",
    )
    .unwrap();
    let envs = vec![
        ("GPUFLEET_CLOUDS", "azure".to_string()),
        ("AZURE_CONFIG_DIR", dir.display().to_string()),
        ("GPUFLEET_AZURE_TOKEN", "stand-in-token".to_string()),
    ];
    let v = support::json(&gpufleet(&["check", "-o", "json"], &envs));
    assert_eq!(v[0]["usable"], true, "{v}");
    assert!(
        v[0]["scope"].as_str().unwrap().contains("(Stack lab)"),
        "{v}"
    );
    assert_eq!(
        v[0]["endpoints"][0],
        format!("{} (override: az cloud StandIn)", stand_in.uri())
    );

    let v = support::json(&gpufleet(&["config", "show", "-o", "json"], &envs));
    let row = support::row(&v, "key", "azure.arm_endpoint");
    assert_eq!(row["value"], stand_in.uri(), "{v}");
    assert_eq!(row["from"], "az cloud StandIn", "{v}");

    let mut envs = envs;
    envs.push(("AZURE_CLOUD_NAME", "Nope".to_string()));
    let o = gpufleet(&["ls"], &envs);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("active cloud 'Nope'"), "{err}");
    assert!(err.contains("AzureUSGovernment"), "{err}");
}

#[test]
fn no_configured_cloud_is_an_error_that_says_why() {
    let o = gpufleet(&["ls"], &[("GPUFLEET_CLOUDS", "azure".to_string())]);
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no cloud is usable from here"), "{err}");
    assert!(err.contains("AZURE_SUBSCRIPTION_ID"), "{err}");
    assert!(err.contains("`gpufleet check` says more"), "{err}");
    // No SDK noise on the way.
    assert!(!err.contains(" WARN "), "{err}");
    // A job the ledger does not hold is said first: its logs need no cloud.
    let dir = support::TempDir::new("live", "logs");
    let o = gpufleet(
        &["jobs", "logs", "nope"],
        &[
            ("GPUFLEET_CLOUDS", "azure".to_string()),
            (
                "GPUFLEET_LEDGER",
                dir.join("ledger.sqlite3").display().to_string(),
            ),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no job 'nope' in the ledger"), "{err}");
}

/// `gpufleet check` against the GCP and Azure stand-ins: usable when the
/// API answers, with the scope it answered for; a refusal says what to do.
#[test]
fn check_says_which_cloud_is_usable_and_what_to_do_about_the_others() {
    let stand_in = support::StandIn::start();
    stand_in.answer(
        "GET /compute/v1/projects/ops-test/aggregated/acceleratorTypes",
        200,
        json!({
            "kind": "compute#acceleratorTypeAggregatedList", "items": {}
        }),
    );
    stand_in.answer("GET /compute/v1/projects/no-access/aggregated/acceleratorTypes", 403, json!({
                "error": {"code": 403, "message": "Required 'compute.acceleratorTypes.list' permission for 'projects/no-access'", "status": "PERMISSION_DENIED"}
            }));
    stand_in.answer(
        "GET /subscriptions/00000000-0000-0000-0000-0000000000aa",
        200,
        json!({
            "id": "/subscriptions/00000000-0000-0000-0000-0000000000aa",
            "subscriptionId": "00000000-0000-0000-0000-0000000000aa",
            "displayName": "GPU research", "state": "Enabled", "tenantId": "t"
        }),
    );
    stand_in.answer("GET /subscriptions/00000000-0000-0000-0000-0000000000bb", 404, json!({
                "error": {"code": "SubscriptionNotFound", "message": "The subscription '00000000-0000-0000-0000-0000000000bb' could not be found."}
            }));
    let envs = |project: &str, sub: &str| {
        vec![
            ("GPUFLEET_CLOUDS", "gcp,azure".to_string()),
            ("GOOGLE_CLOUD_PROJECT", project.to_string()),
            ("GPUFLEET_GCP_COMPUTE_ENDPOINT", stand_in.uri()),
            ("GPUFLEET_GCP_BILLING_ENDPOINT", stand_in.uri()),
            ("GPUFLEET_GCP_ANONYMOUS", "1".to_string()),
            ("AZURE_SUBSCRIPTION_ID", sub.to_string()),
            ("GPUFLEET_AZURE_ARM_ENDPOINT", stand_in.uri()),
            ("GPUFLEET_AZURE_TOKEN", "stand-in-token".to_string()),
        ]
    };
    let o = gpufleet(
        &["check", "-o", "json"],
        &envs("ops-test", "00000000-0000-0000-0000-0000000000aa"),
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let gcp = &v[0];
    assert_eq!(gcp["cloud"], "gcp");
    assert_eq!(gcp["usable"], true, "{v}");
    // No regions configured: all of them (it said "regions " and nothing).
    assert_eq!(gcp["scope"], "project ops-test; all regions", "{v}");
    assert!(gcp["endpoints"][0]
        .as_str()
        .unwrap()
        .ends_with("(override: GPUFLEET_GCP_COMPUTE_ENDPOINT)"));
    let az = &v[1];
    assert_eq!(az["usable"], true, "{v}");
    let scope = az["scope"].as_str().unwrap();
    assert!(
        scope.contains("(GPU research)") && scope.ends_with("; all regions"),
        "{v}"
    );
    // The secret never shows.
    assert!(!String::from_utf8_lossy(&o.stdout).contains("stand-in-token"));

    let o = gpufleet(
        &["check"],
        &envs("no-access", "00000000-0000-0000-0000-0000000000bb"),
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("gcp: Compute Engine refused"), "{err}");
    assert!(err.contains("roles/compute.viewer"), "{err}");
    assert!(err.contains("azure: Resource Manager refused"), "{err}");
    assert!(err.contains("az account list"), "{err}");
    assert!(err.contains("no cloud is usable from here"), "{err}");
}

/// With nothing in the environment, the project and subscription come
/// from gcloud's active configuration and the az CLI's default, and
/// `config show` says so.
#[test]
fn gcloud_and_az_defaults_are_used_and_shown_as_such() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path();
    let gcloud = home.join(".config/gcloud");
    std::fs::create_dir_all(gcloud.join("configurations")).unwrap();
    std::fs::write(gcloud.join("active_config"), "work\n").unwrap();
    std::fs::write(
        gcloud.join("configurations/config_work"),
        "[core]\naccount = ana@example.com\nproject = from-gcloud\n\n[compute]\nregion = us-east1\n",
    )
    .unwrap();
    let az = home.join(".azure");
    std::fs::create_dir_all(&az).unwrap();
    std::fs::write(
        az.join("azureProfile.json"),
        "\u{feff}{\"subscriptions\":[{\"id\":\"00000000-0000-0000-0000-0000000000cc\",\"name\":\"Research\",\"isDefault\":true,\"user\":{\"name\":\"ana@example.com\",\"type\":\"user\"}}]}",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["config", "show", "-o", "json"])
        .env_remove("GPUFLEET_LOG")
        .env_remove("AZURE_SUBSCRIPTION_ID")
        .env_remove("GOOGLE_CLOUD_PROJECT")
        .env_remove("CLOUDSDK_CORE_PROJECT")
        .env_remove("CLOUDSDK_CONFIG")
        .env_remove("AZURE_CONFIG_DIR")
        .env_remove("GPUFLEET_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", home)
        .output()
        .unwrap();
    let v = support::json(&o);
    let row = |k: &str| support::row(&v, "key", k);
    assert_eq!(row("gcp.project")["value"], "from-gcloud");
    assert_eq!(row("gcp.project")["from"], "gcloud config work");
    assert_eq!(
        row("azure.subscription_id")["value"],
        "00000000-0000-0000-0000-0000000000cc"
    );
    assert_eq!(
        row("azure.subscription_id")["from"],
        "az CLI default (Research)"
    );
    // Regions nobody set are defaults, not "file".
    assert_eq!(row("gcp.regions")["from"], "default");
    assert_eq!(row("azure.regions")["from"], "default");
}

/// `catalog refresh --cloud gcp` with no regions configured refreshes the
/// regions where the embedded catalog has GPU offers and says which (it
/// said "nothing to refresh: none of the clouds asked for is usable" while
/// `check` said GCP was).
#[test]
fn catalog_refresh_without_regions_takes_the_catalogs_gpu_regions() {
    let stand_in = support::StandIn::start();
    for list in ["machineTypes", "acceleratorTypes"] {
        stand_in.answer(
            &format!("GET /compute/v1/projects/ops-test/aggregated/{list}"),
            200,
            json!({"kind": format!("compute#{}AggregatedList", list.trim_end_matches('s')), "items": {}}),
        );
    }
    stand_in.answer(
        "GET /v1/services/6F81-5844-456A/skus",
        200,
        json!({"skus": [], "nextPageToken": ""}),
    );
    let scratch = tempfile::tempdir().unwrap();
    let envs = [
        ("GPUFLEET_CLOUDS", "gcp".to_string()),
        ("GOOGLE_CLOUD_PROJECT", "ops-test".to_string()),
        ("GPUFLEET_GCP_COMPUTE_ENDPOINT", stand_in.uri()),
        ("GPUFLEET_GCP_BILLING_ENDPOINT", stand_in.uri()),
        ("GPUFLEET_GCP_ANONYMOUS", "1".to_string()),
        (
            "GPUFLEET_CATALOG_CACHE",
            scratch.path().join("cache.txt").display().to_string(),
        ),
    ];
    let o = gpufleet(
        &["catalog", "refresh", "--cloud", "gcp", "-o", "json"],
        &envs,
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("gcp: no regions configured; refreshing the ")
            && err.contains("where the embedded catalog has GPU offers: ")
            && err.contains("us-central1"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let refreshed = v["refreshed"].as_array().unwrap();
    assert!(refreshed.len() > 5, "{v}");
    assert!(refreshed
        .iter()
        .all(|r| r.as_str().unwrap().starts_with("gcp:")));
}
