//! `gpufleet simulate` end to end on the shipped 2022 traces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn gpufleet(args: &[&str]) -> Output {
    let traces = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/traces/2022-11-28T22-23"
    );
    let mut all = vec!["simulate", "--traces", traces];
    all.extend_from_slice(args);
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(&all)
        .output()
        .expect("run gpufleet")
}

#[test]
fn reports_every_policy_with_the_optimum_as_the_bound() {
    let o = gpufleet(&[
        "--instance-type",
        "p2.xlarge",
        "--job-hours",
        "4",
        "--deadline-hours",
        "6",
        "--starts",
        "10",
        "-o",
        "json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 1);
    let results = rows[0]["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "on-demand",
            "greedy",
            "uniform-progress",
            "uniform-progress-multi",
            "gpufleet",
            "optimal"
        ]
    );
    for r in results {
        assert_eq!(r["deadline_misses"], 0, "{r}");
        assert!(r["cost_vs_optimum"].as_f64().unwrap() >= 1.0 - 1e-9, "{r}");
        assert_eq!(r["runs"], 10);
    }
}

#[test]
fn bad_input_is_named() {
    for (args, needle) in [
        (
            vec!["--job-hours", "4"],
            "several instance types; choose one with --instance-type",
        ),
        (
            vec!["--instance-type", "p9.xlarge"],
            "unknown instance type 'p9.xlarge'",
        ),
        (
            vec![
                "--instance-type",
                "p2.xlarge",
                "--job-hours",
                "10",
                "--deadline-hours",
                "5",
            ],
            "leaves no time",
        ),
        (
            vec!["--instance-type", "p2.xlarge", "--policies", "yolo"],
            "unknown policy 'yolo'",
        ),
        (
            vec!["--instance-type", "p2.xlarge", "--job-hours", "-1"],
            "invalid number '-1'",
        ),
    ] {
        let o = gpufleet(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["simulate", "--traces", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read the pools manifest"));
}
