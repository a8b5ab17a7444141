//! `gpufleet offers` end to end, on the embedded catalog.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use crate::support;
use support::{gpufleet, stderr, words};

#[test]
fn json_schema_and_sorting() {
    let o = gpufleet(&words(
        "offers --gpu H100:8 --capacity spot --limit 0 --output json",
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows.len() > 10);
    let mut last = 0.0;
    for r in &rows {
        for key in words("cloud region zone instance_type gpu_model gpu_count gpu_memory_gib vcpus memory_gib capacity price_per_hour_usd observed_at source") {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert_eq!(r["gpu_model"], "H100");
        assert_eq!(r["gpu_count"], 8);
        assert_eq!(r["capacity"], "spot");
        let price = r["price_per_hour_usd"].as_f64().expect("a number");
        assert!(price >= last, "not sorted by price");
        last = price;
        let at = r["observed_at"].as_str().unwrap();
        time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
            .expect("RFC 3339");
        assert!(r["source"].as_str().unwrap().starts_with("snapshot:"));
    }
    // All three clouds sell 8xH100 on spot in the snapshot.
    for cloud in ["aws", "gcp"] {
        assert!(rows.iter().any(|r| r["cloud"] == cloud), "no {cloud} offer");
    }
}

#[test]
fn filters_combine() {
    let o = gpufleet(&words("offers --gpu T4 --gpu L4:1 --cloud aws,gcp --region us-east-1,us-central1 --capacity on-demand --max-price 1.5 --sort price-per-gpu --limit 0 -o json"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!rows.is_empty());
    for r in &rows {
        let gpu = r["gpu_model"].as_str().unwrap();
        assert!(gpu == "T4" || (gpu == "L4" && r["gpu_count"] == 1), "{r}");
        assert!(["us-east-1", "us-central1"].contains(&r["region"].as_str().unwrap()));
        assert_eq!(r["capacity"], "on-demand");
        assert!(r["price_per_hour_usd"].as_f64().unwrap() <= 1.5);
    }
    let per_gpu: Vec<f64> = rows
        .iter()
        .map(|r| r["price_per_gpu_hour_usd"].as_f64().unwrap())
        .collect();
    assert!(per_gpu.windows(2).all(|w| w[0] <= w[1]));

    let o = gpufleet(&words("offers --min-gpu-memory 80 --cloud azure -o json"));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows
        .iter()
        .all(|r| r["gpu_memory_gib"].as_u64().unwrap() >= 80 && r["cloud"] == "azure"));
}

#[test]
fn table_and_csv() {
    let o = gpufleet(&["offers", "--gpu", "a100-80gb:8", "--limit", "3"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("CLOUD"));
    assert!(lines[1].contains("8xA100-80GB"));
    let o = gpufleet(&[
        "offers", "--gpu", "V100:1", "--limit", "2", "--output", "csv",
    ]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with("cloud,region,zone,instance_type,"));
    assert_eq!(out.lines().count(), 3);
    // The CSV holds the JSON's rows and columns (it used to leave out
    // gpu_link, fabric and network_gbps).
    let json = support::json_rows(&gpufleet(&words("offers --gpu V100:1 --limit 2 -o json")));
    support::csv_holds_json_rows(out.as_bytes(), &json);
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_value() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["offers", "--gpu", "H10"], &["'H10'", "did you mean H100"]),
        (&["offers", "--gpu", "H100:-1"], &["'-1'", "1 to 16"]),
        (&["offers", "--gpu", "H100:0"], &["'0'", "1 to 16"]),
        (&["offers", "--cloud", "ibm"], &["'ibm'", "aws, gcp, azure"]),
        (
            &["offers", "--capacity", "reserved"],
            &["'reserved'", "spot", "on-demand"],
        ),
        (&["offers", "--bogus"], &["'--bogus'"]),
        (&["offers", "--max-price", "-3"], &["'-3'", "negative"]),
        (&["offers", "--max-price", "cheap"], &["'cheap'"]),
        (
            &["offers", "--min-gpu-memory", "-5"],
            &["'-5'", "1 to 1024"],
        ),
        (
            &["offers", "--region", "us-east-9"],
            &["'us-east-9'", "us-east-1"],
        ),
        (
            &["offers", "--output", "xml"],
            &["'xml'", "table, json, csv"],
        ),
        // The fake cloud never reaches a real one (this asked the real
        // clouds' APIs with whatever credentials were at hand).
        (
            &["--provider", "fake", "offers", "--live"],
            &[
                "--live asks the clouds' APIs",
                "--provider fake never reaches a real cloud",
            ],
        ),
    ];
    for (args, needles) in cases {
        let o = gpufleet(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
            "{err}"
        );
        for n in *needles {
            assert!(err.contains(n), "{args:?}: '{n}' not in: {err}");
        }
        assert!(o.stdout.is_empty(), "{args:?} printed to stdout");
    }
}

#[test]
fn nothing_matched_exits_3() {
    let o = gpufleet(&words("offers --gpu H100:8 --max-price 0.5 -o json"));
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
    assert!(stderr(&o).contains("no offers match"));
}

/// `offers --cloud gcp --live` against a Compute Engine + Billing stand-in
/// (one zone with a2-highgpu-1g, SKUs for its parts), then with the
/// stand-in gone: a warning and the snapshot.
#[test]
fn gcp_live_offers_and_fallback() {
    use serde_json::json;

    let stand_in = support::StandIn::start();
    let sku = |id: &str, d: &str, usage: &str, unit: &str, nanos: i64| {
        json!({"name": format!("services/6F81-5844-456A/skus/{id}"), "skuId": id, "description": d,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute", "resourceGroup": "GPU", "usageType": usage},
            "serviceRegions": ["us-central1"],
            "pricingInfo": [{"summary": "", "effectiveTime": "2026-11-01T07:00:00Z", "currencyConversionRate": 1,
                "pricingExpression": {"usageUnit": unit, "displayQuantity": 1, "usageUnitDescription": "hour",
                    "tieredRates": [{"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": "0", "nanos": nanos}}]}}],
            "serviceProviderName": "Google"})
    };
    stand_in.answer("GET /compute/v1/projects/cli-test/aggregated/machineTypes", 200, json!({
                "kind": "compute#machineTypeAggregatedList",
                "items": {"zones/us-central1-f": {"machineTypes": [{
                    "kind": "compute#machineType", "id": "1000", "name": "a2-highgpu-1g",
                    "guestCpus": 12, "memoryMb": 87040, "zone": "us-central1-f",
                    "accelerators": [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}]}]}}
            }));
    stand_in.answer(
        "GET /compute/v1/projects/cli-test/aggregated/acceleratorTypes",
        200,
        json!({"items": {}}),
    );
    stand_in.answer(
        "GET /v1/services/6F81-5844-456A/skus",
        200,
        json!({"skus": [
                sku("1", "A2 Instance Core running in Americas", "OnDemand", "h", 31_611_000),
                sku("2", "A2 Instance Ram running in Americas", "OnDemand", "GiBy.h", 4_237_000),
                sku("3", "Nvidia Tesla A100 GPU running in Americas", "OnDemand", "h", 933_908_000),
            ], "nextPageToken": ""}),
    );
    let run = |endpoint: &str| {
        Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args([
                "offers", "--cloud", "gcp", "--live", "--gpu", "A100:1", "--output", "json",
                "--limit", "0",
            ])
            .env_remove("GPUFLEET_LOG")
            .env("GOOGLE_CLOUD_PROJECT", "cli-test")
            .env("GPUFLEET_GCP_COMPUTE_ENDPOINT", endpoint)
            .env("GPUFLEET_GCP_BILLING_ENDPOINT", endpoint)
            .env("GPUFLEET_GCP_ANONYMOUS", "1")
            .output()
            .unwrap()
    };
    let rows = support::json_rows(&run(&stand_in.uri()));
    let live: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|o| o["zone"] == "us-central1-f" && o["capacity"] == "on-demand")
        .collect();
    assert_eq!(live.len(), 1, "{rows:?}");
    // 12 x 0.031611 + 85 x 0.004237 + 0.933908
    assert_eq!(live[0]["price_per_hour_usd"], 1.673385, "{}", live[0]);
    drop(stand_in);
    falls_back_to_the_snapshot(run, "GCP");
}

/// With nothing answering at the endpoint, `run` still succeeds: a warning
/// that the live `cloud` catalog is unavailable, and the snapshot's rows.
fn falls_back_to_the_snapshot(run: impl Fn(&str) -> std::process::Output, cloud: &str) {
    let o = run("http://127.0.0.1:9");
    // The snapshot's rows, and exit 4: a partial answer.
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let warning = format!("live {cloud} catalog is unavailable");
    assert!(stderr(&o).contains(&warning), "{}", stderr(&o));
    // Said once, as gpufleet's warning: not also as the tracing layer's log
    // line of the failed call.
    assert!(!stderr(&o).contains(" WARN "), "{}", stderr(&o));
    assert!(!rows.is_empty());
}

/// `offers --cloud azure --live` against an ARM + Retail Prices stand-in,
/// then with nothing answering: a warning and the snapshot.
#[test]
fn azure_live_offers_and_fallback() {
    use serde_json::json;
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, ResponseTemplate};
    let stand_in = support::StandIn::start();
    stand_in.mount(
        Mock::given(method("GET"))
            .and(path("/subscriptions/sub-1/providers/Microsoft.Compute/skus"))
            .and(header("authorization", "Bearer stand-in-token"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"value": [{
                "resourceType": "virtualMachines", "name": "Standard_NC24ads_A100_v4",
                "locations": ["eastus"], "locationInfo": [{"location": "eastus", "zones": ["2"]}],
                "capabilities": [{"name": "vCPUs", "value": "24"}, {"name": "MemoryGB", "value": "220"}, {"name": "GPUs", "value": "1"}],
                "restrictions": []}]}))),
    );
    stand_in.answer("POST /providers/Microsoft.ResourceGraph/resources", 200, json!({"data": [
                {"skuName": "Standard_NC24ads_A100_v4", "location": "eastus", "evictionRate": "5-10"}]}));
    stand_in.answer("GET /api/retail/prices", 200, json!({"Items": [
                {"currencyCode": "USD", "retailPrice": 0.8123, "armRegionName": "eastus", "meterName": "NC24ads A100 v4 Spot",
                 "productName": "Virtual Machines NCads A100 v4 Series", "skuName": "NC24ads A100 v4 Spot",
                 "armSkuName": "Standard_NC24ads_A100_v4", "unitOfMeasure": "1 Hour", "type": "Consumption",
                 "effectiveStartDate": "2026-10-01T00:00:00Z"}], "NextPageLink": null}));
    let run = |endpoint: &str| {
        Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(words("offers --cloud azure --live --region eastus --capacity spot --output json --limit 0"))
            .env_remove("GPUFLEET_LOG")
            .env("AZURE_SUBSCRIPTION_ID", "sub-1")
            .env("GPUFLEET_AZURE_ARM_ENDPOINT", endpoint)
            .env("GPUFLEET_AZURE_PRICES_ENDPOINT", endpoint)
            .env("GPUFLEET_AZURE_TOKEN", "stand-in-token")
            .output()
            .unwrap()
    };
    let o = run(&stand_in.uri());
    let a = support::json_rows(&o);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["zone"], "eastus-2");
    assert_eq!(a[0]["price_per_hour_usd"], 0.8123);
    assert_eq!(a[0]["interruption_bucket"], "5-10%");
    assert!(!stderr(&o).contains("stand-in-token"));
    drop(stand_in);
    falls_back_to_the_snapshot(run, "Azure");
}

/// `gpufleet offers | head -1`: the reader closes its end after one line;
/// gpufleet stops quietly with exit 0 (it used to say `error: writing
/// output: Broken pipe` and exit 1), in a table and in JSON.
#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    for format in ["table", "json"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["offers", "--limit", "100000", "-o", format])
            .env_remove("GPUFLEET_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty());
        // The reader is dropped here: the pipe is closed.
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{format}: {err}");
        assert!(
            !err.contains("error") && !err.contains("panicked"),
            "{format}: {err}"
        );
    }
}

/// `gpufleet … 2>&1 | head`: standard error is the closed pipe too. A line
/// on it (`fit`'s summary) used to panic with exit 101; now the command ends
/// quietly with exit 0 as on a closed standard output, and a failing command
/// still exits with its own code.
#[test]
fn a_closed_standard_error_ends_quietly_and_keeps_the_exit_code() {
    use std::process::Stdio;
    let run = |args: &[&str], stdout: Stdio| {
        let (reader, writer) = std::io::pipe().unwrap();
        // Closed before the command writes anything.
        drop(reader);
        Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(args)
            .env_remove("GPUFLEET_LOG")
            .stdout(stdout)
            .stderr(writer)
            .status()
            .unwrap()
    };
    // The table goes to a file; the summary line after it meets the closed pipe.
    let fit = run(&["fit", "--model", "llama-3-70b"], Stdio::null());
    assert_eq!(fit.code(), Some(0), "fit: {fit:?}");
    // Both ends closed, as with `2>&1 | head -0`.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let both = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["fit", "--model", "llama-3-70b"])
        .env_remove("GPUFLEET_LOG")
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(both.code(), Some(0), "fit 2>&1: {both:?}");
    // Bad input, nothing matched: the error line is lost, its exit code is not.
    let bad = run(
        &["place", "--gpu", "H100:8", "--hours", "5", "--cloud", "ibm"],
        Stdio::null(),
    );
    assert_eq!(bad.code(), Some(2), "bad input: {bad:?}");
    let none = run(
        &[
            "offers",
            "--gpu",
            "H100:8",
            "--max-price",
            "0.5",
            "-o",
            "json",
        ],
        Stdio::null(),
    );
    assert_eq!(none.code(), Some(3), "nothing matched: {none:?}");
}

#[test]
fn a_model_the_catalog_does_not_sell_is_named_with_what_it_has() {
    let o = gpufleet(&["offers", "--gpu", "B200"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("has B200 (it has "), "{e}");
    assert!(e.contains("H100"), "{e}");
}
