//! `gpufleet tf-external`, Terraform's `external` data source protocol, on
//! the fake cloud: the query in, the placement policy's choice out, bad and
//! oversized queries refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};
use support::{gpufleet_fed, stderr as err, words, FakeEnv};

use serde_json::Value;

use crate::support;

fn tf(query: &str) -> Output {
    gpufleet_fed(&["tf-external"], &[], query)
}

#[test]
fn tf_external_speaks_terraforms_protocol() {
    let o = tf(
        r#"{"gpu": "A100:8", "clouds": "aws", "capacity": "spot", "hours": "20", "deadline": "48h", "max_price": "40"}"#,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let obj = out.as_object().unwrap();
    for (k, v) in obj {
        assert!(v.is_string(), "{k} is not a string: {v}");
    }
    for k in words("cloud region zone zone_name instance_type capacity price_per_hour_usd expected_cost_usd expected_hours p_deadline") {
        assert!(obj.contains_key(k), "no {k}");
    }
    assert_eq!(out["cloud"], "aws");
    assert_eq!(out["capacity"], "spot");
    assert_eq!(out["gpu_count"], "8");
    assert!(
        out["price_per_hour_usd"]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap()
            <= 40.0
    );
    for (q, want) in [
        (
            r#"{"gpu": "A100:8", "colour": "blue"}"#,
            "unknown query key 'colour'",
        ),
        (r#"{"gpu": "A100:8", "count": 8}"#, "not a string"),
        (r#"{"gpu": "Z100"}"#, "Z100"),
        (r#"["gpu"]"#, "JSON object"),
        ("not json", "not JSON"),
        (r#"{"gpu": "A100", "capacity": "cheap"}"#, "cheap"),
    ] {
        let o = tf(q);
        assert_eq!(o.status.code(), Some(2), "{q}: {}", err(&o));
        assert!(err(&o).contains(want), "{q}: {}", err(&o));
        assert!(o.stdout.is_empty());
    }
    let o = tf(r#"{"gpu": "H100:8", "max_price": "0.01"}"#);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
}

/// `tf-external` answers where the placement policy starts the job, the
/// pool `place` marks `chosen` for the same job, not the ranking's first
/// row: for 2 hours of A10G work due in 3, the cheapest spot plan ranks first
/// but the 0.3 h of slack cannot absorb a loss, so the policy starts on
/// on-demand (and `place -o json` shows that row even below `--limit`).
#[test]
fn tf_external_answers_the_placement_policys_choice() {
    let env = FakeEnv::new("op", "tf-policy");
    let ledger = env.dir.join("absent.sqlite3");
    let config = env.dir.join("gpufleet.toml");
    let envs = [
        ("GPUFLEET_LEDGER", ledger.as_path()),
        ("GPUFLEET_CONFIG", config.as_path()),
    ];
    let run = |args: &[&str], input: &str| gpufleet_fed(args, &envs, input);
    let o = run(
        &[
            "place",
            "--gpu",
            "A10G:1",
            "--hours",
            "2",
            "--deadline",
            "3h",
            "--limit",
            "2",
            "-o",
            "json",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    // The pools the policy evaluated come first: the choice is a row.
    assert_eq!(rows.len(), 2, "{rows:?}");
    let chosen: Vec<&Value> = rows.iter().filter(|r| r["chosen"] == true).collect();
    assert_eq!(chosen.len(), 1, "{rows:?}");
    assert_eq!(chosen[0]["capacity"], "on-demand");
    // The index ranks a spot pool first, which the policy ruled out.
    let index = |r: &Value| r["index_usd_per_work_hour"].as_f64().unwrap();
    let spot = rows.iter().find(|r| r["capacity"] == "spot").unwrap();
    assert!(index(spot) < index(chosen[0]), "{rows:?}");
    assert_eq!(spot["ruled_out"], true, "{rows:?}");

    let job = r#"{"gpu": "A10G:1", "hours": "2", "deadline": "3h"}"#;
    let o = run(&["tf-external"], job);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["pool"].as_str().unwrap(), support::pool_of(chosen[0]));
    let policy = out["policy"].as_str().unwrap();
    assert!(policy.starts_with("start on-demand"), "{policy}");
    assert!(policy.contains("slack 0.3 h"), "{policy}");

    // Spot asked for: the best spot plan, and `policy` says what the policy
    // would do instead.
    let o = run(
        &["tf-external"],
        r#"{"gpu": "A10G:1", "hours": "2", "deadline": "3h", "capacity": "spot"}"#,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    // (The first spot pool in `place`'s order: the policy ruled spot out.)
    assert_eq!(out["pool"].as_str().unwrap(), support::pool_of(spot));
    assert!(out["policy"]
        .as_str()
        .unwrap()
        .starts_with("start on-demand"));

    // A price limit nothing meets says so, and a deadline nothing meets is
    // refused as `place` refuses it.
    let o = run(
        &["tf-external"],
        r#"{"gpu": "A10G:1", "hours": "2", "max_price": "0.01"}"#,
    );
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(err(&o).contains("above max_price $0.01/h"), "{}", err(&o));
    assert!(o.stdout.is_empty());
    let o = run(
        &["tf-external"],
        r#"{"gpu": "A10G:1", "hours": "6", "deadline": "1h"}"#,
    );
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(err(&o).contains("misses the 1h deadline"), "{}", err(&o));
    assert!(o.stdout.is_empty());
}

/// `tf-external` reads at most 64 KiB of query (36 MB used to take 839 MB of
/// memory) and honours `--config` like every command.
#[test]
fn tf_external_bounds_its_query_and_reads_its_config() {
    let env = FakeEnv::new("op", "tf-bounds");
    let run = |args: &[&str], input: Vec<u8>| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(args)
            .arg("tf-external")
            .env("GPUFLEET_CONFIG", env.dir.join("gpufleet.toml"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // The program stops reading past its bound: a broken pipe is fine.
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let o = child.wait_with_output().unwrap();
        writer.join().unwrap();
        o
    };
    let mut huge = String::from("{");
    while huge.len() < 4 << 20 {
        huge.push_str(&format!("\"k{}\": \"v\", ", huge.len()));
    }
    huge.push_str("\"gpu\": \"A100:8\"}");
    let o = run(&[], huge.into_bytes());
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("over 65536 bytes"), "{}", err(&o));
    let broken = env.dir.join("broken.toml");
    std::fs::write(&broken, "provider = [unterminated\n").unwrap();
    let o = run(
        &["--config", broken.to_str().unwrap()],
        br#"{"gpu": "A100:8", "hours": "2"}"#.to_vec(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("broken.toml"), "{}", err(&o));
}

/// `count` is instances launched together, as `launch --count` means it
/// (issue 79: it replaced the GPU count, so `{"gpu":"A100:8","count":"1"}`
/// asked for one GPU); the keys are in `--help`.
#[test]
fn count_means_instances_and_help_lists_the_keys() {
    let one: Value = serde_json::from_slice(
        &tf(r#"{"gpu": "A100:8", "count": "1", "clouds": "aws", "hours": "20"}"#).stdout,
    )
    .unwrap();
    assert_eq!(
        (one["gpu_count"].as_str(), one["count"].as_str()),
        (Some("8"), Some("1")),
        "{one}"
    );
    let two: Value = serde_json::from_slice(
        &tf(r#"{"gpu": "A100:8", "count": "2", "clouds": "aws", "hours": "20"}"#).stdout,
    )
    .unwrap();
    assert_eq!(
        (two["gpu_count"].as_str(), two["count"].as_str()),
        (Some("8"), Some("2")),
        "{two}"
    );
    let cost = |v: &Value| {
        v["expected_cost_usd"]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert!(cost(&two) > cost(&one) * 1.5, "{one} {two}");
    let o = tf(r#"{"gpu": "A100:8", "count": "0"}"#);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("invalid count '0'"), "{}", err(&o));
    let o = gpufleet_fed(&["tf-external", "--help"], &[], "");
    let help = String::from_utf8_lossy(&o.stdout);
    for k in gpufleet::placer::external::KEYS {
        assert!(help.contains(k), "{k} not in --help:\n{help}");
    }
}
