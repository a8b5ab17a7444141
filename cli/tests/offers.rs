//! `gpufleet offers` end to end, on the embedded catalog.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn gpufleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .env_remove("GPUFLEET_LOG")
        .output()
        .expect("run gpufleet")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn json_schema_and_sorting() {
    let o = gpufleet(&[
        "offers",
        "--gpu",
        "H100:8",
        "--capacity",
        "spot",
        "--limit",
        "0",
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows.len() > 10);
    let mut last = 0.0;
    for r in &rows {
        for key in [
            "cloud",
            "region",
            "zone",
            "instance_type",
            "gpu_model",
            "gpu_count",
            "gpu_memory_gib",
            "vcpus",
            "memory_gib",
            "capacity",
            "price_per_hour_usd",
            "observed_at",
            "source",
        ] {
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
    let o = gpufleet(&[
        "offers",
        "--gpu",
        "T4",
        "--gpu",
        "L4:1",
        "--cloud",
        "aws,gcp",
        "--region",
        "us-east-1,us-central1",
        "--capacity",
        "on-demand",
        "--max-price",
        "1.5",
        "--sort",
        "price-per-gpu",
        "--limit",
        "0",
        "-o",
        "json",
    ]);
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

    let o = gpufleet(&[
        "offers",
        "--min-gpu-memory",
        "80",
        "--cloud",
        "azure",
        "-o",
        "json",
    ]);
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
    let o = gpufleet(&[
        "offers",
        "--gpu",
        "H100:8",
        "--max-price",
        "0.5",
        "-o",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
    assert!(stderr(&o).contains("no offers match"));
}
