//! The operator commands on the live GCP and Azure providers, pointed at
//! stand-ins: `ls` lists what the API holds; an unconfigured cloud is
//! skipped with the reason, and a command with no cloud left fails saying
//! why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn gpufleet(args: &[&str], envs: &[(&str, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .env_remove("GPUFLEET_LOG")
        .env_remove("AZURE_SUBSCRIPTION_ID")
        .env_remove("GOOGLE_CLOUD_PROJECT")
        .env_remove("CLOUDSDK_CORE_PROJECT")
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

#[test]
fn ls_on_gcp_lists_managed_instances_and_skips_unconfigured_azure() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(MockServer::start());
    rt.block_on(async {
        Mock::given(method("GET"))
            .and(path("/compute/v1/projects/ops-test/aggregated/instances"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "kind": "compute#instanceAggregatedList",
                "items": {"zones/us-central1-a": {"instances": [{
                    "kind": "compute#instance", "id": "9000000000000000001", "name": "gf-0011223344556677-0",
                    "creationTimestamp": "2026-11-22T01:00:00.000-08:00",
                    "machineType": "https://www.googleapis.com/compute/v1/projects/ops-test/zones/us-central1-a/machineTypes/a2-highgpu-1g",
                    "zone": "https://www.googleapis.com/compute/v1/projects/ops-test/zones/us-central1-a",
                    "status": "RUNNING",
                    "labels": {"gpufleet-managed": "true", "gpufleet-job": "train-7"},
                    "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
                }]}}
            })))
            .mount(&server)
            .await;
    });
    let envs = [
        ("GPUFLEET_CLOUDS", "gcp,azure".to_string()),
        ("GOOGLE_CLOUD_PROJECT", "ops-test".to_string()),
        ("GPUFLEET_GCP_COMPUTE_ENDPOINT", server.uri()),
        ("GPUFLEET_GCP_BILLING_ENDPOINT", server.uri()),
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

#[test]
fn no_configured_cloud_is_an_error_that_says_why() {
    let o = gpufleet(&["ls"], &[("GPUFLEET_CLOUDS", "azure".to_string())]);
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no provider could be opened"), "{err}");
    assert!(err.contains("AZURE_SUBSCRIPTION_ID"), "{err}");
}
