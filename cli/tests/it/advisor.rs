//! `gpufleet fit` and `gpufleet mix` end to end, on the embedded catalog.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support;
use support::{gpufleet, json, stderr, words};

/// Writes a profile of `hours` hourly rows from 2026-01-05 to a temp file.
fn profile(name: &str, hours: usize, f: impl Fn(usize) -> u32) -> PathBuf {
    let path = std::env::temp_dir().join(format!("gpufleet-mix-{}-{name}.csv", std::process::id()));
    let mut text = String::from("time,instances\n");
    for h in 0..hours {
        text.push_str(&format!("{},{}\n", 1_767_571_200 + 3600 * h, f(h)));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// `gpufleet mix --profile PROFILE FLAGS MORE`: `flags` split at spaces,
/// `more` as they are.
fn mix(profile: &Path, flags: &str, more: &[&str]) -> Output {
    let mut all = vec!["mix", "--profile", profile.to_str().unwrap()];
    all.extend(flags.split_whitespace());
    all.extend_from_slice(more);
    gpufleet(&all)
}

/// `mix --profile PROFILE FLAGS -o json`'s document, after checking it
/// succeeded.
fn mix_json(profile: &Path, flags: &str) -> serde_json::Value {
    json(&mix(profile, &format!("{flags} -o json"), &[]))
}

#[test]
fn fit_json_has_the_breakdown_and_configs_cheapest_first() {
    let doc = json(&gpufleet(&words(
        "fit --params 70B --precision int8 --limit 0 -o json",
    )));
    let items: Vec<&str> = doc["memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["item"].as_str().unwrap())
        .collect();
    assert_eq!(
        items,
        [
            "weights",
            "kv cache",
            "activations",
            "runtime overhead",
            "headroom"
        ]
    );
    for l in doc["memory"].as_array().unwrap() {
        assert!(!l["formula"].as_str().unwrap().is_empty());
        assert!(!l["basis"].as_str().unwrap().is_empty());
    }
    assert_eq!(doc["memory"][0]["bytes"], 70_000_000_000u64);
    let total = doc["total_gib"].as_f64().unwrap();
    assert!(total < 80.0, "{total}");
    let configs = doc["configs"].as_array().unwrap();
    // 70B int8 at 4k context fits one 80 GB GPU: the cheapest rows are single GPUs.
    assert_eq!(configs[0]["gpus_used"], 1);
    assert!(configs
        .iter()
        .any(|c| c["gpu_model"] == "H100" && c["gpus_used"] == 1));
    let mut last = 0.0;
    for c in configs
        .iter()
        .filter(|c| !c["on_demand_per_hour_usd"].is_null())
    {
        let p = c["on_demand_per_hour_usd"].as_f64().unwrap();
        assert!(p >= last);
        last = p;
        assert!(c["price_source"].as_str().unwrap().contains("snapshot"));
        assert!(c["utilisation"].as_f64().unwrap() <= 1.0);
    }
    // `-o csv` is the configurations, as the JSON has them.
    let csv = gpufleet(&words("fit --params 70B --precision int8 --limit 0 -o csv"));
    assert_eq!(csv.status.code(), Some(0), "{}", stderr(&csv));
    support::csv_holds_json_rows(&csv.stdout, configs);
}

#[test]
fn fit_seventy_billion_fp16_never_lands_on_one_gpu() {
    let doc = json(&gpufleet(&words(
        "fit --params 70B --precision fp16 --limit 0 -o json",
    )));
    for c in doc["configs"].as_array().unwrap() {
        assert!(c["gpus_used"].as_u64().unwrap() >= 2, "{c}");
    }
}

#[test]
fn fit_bad_inputs_exit_2_and_name_the_value() {
    for (args, want) in [
        ("fit --params 0", "'0'"),
        ("fit --params -3B", "'-3B'"),
        ("fit --params 7B --context 0", "context 0"),
        ("fit --params 7B --batch -1", "batch -1"),
        ("fit --params 7B --precision fp12", "fp12"),
        ("fit --model llama-9", "llama-9"),
        ("fit --params 7B --gpu Z100", "Z100"),
        ("fit --params 7B --training full --precision int4", "lora"),
        ("fit", "--params"),
        // Ignored where it does not apply, before.
        (
            "fit --params 7B --headroom 2",
            "--headroom 2 applies to --from-job only",
        ),
        ("fit --from-job j --precision int4", "--precision"),
        (
            "fit --params 7B --max-nodes 4000000000",
            "max nodes 4000000000: use 1 to 4096",
        ),
    ] {
        let o = gpufleet(&words(args));
        assert_eq!(o.status.code(), Some(2), "{args}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args}");
    }
}

#[test]
fn fit_nothing_big_enough_exits_3_and_says_why() {
    let o = gpufleet(&words("fit --model llama-3.1-405b --max-nodes 1 --gpu T4"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("too small"), "{}", stderr(&o));
    // Only the levers not at their end: this is inference already.
    assert!(!stderr(&o).contains("--training lora"), "{}", stderr(&o));
}

#[test]
fn mix_flat_demand_commits_and_idle_demand_does_not() {
    let flat = profile("flat", 24 * 14, |_| 6);
    let doc = mix_json(&flat, "--instance-type a2-highgpu-1g --region us-central1");
    assert_eq!(doc["recommended"]["committed"], 6);
    assert_eq!(doc["recommended"]["on_demand_instance_hours"], 0.0);
    assert!(doc["terms"][0]["source"]
        .as_str()
        .unwrap()
        .contains("committed-use price"));
    let saving = doc["recommended"]["saving_share"].as_f64().unwrap();
    assert!(saving > 0.3, "{saving}");
    for i in doc["inputs"].as_array().unwrap() {
        assert!(!i["source"].as_str().unwrap().is_empty(), "{i}");
    }
    // `-o csv` is the options, as the JSON has them.
    let csv = mix(
        &flat,
        "--instance-type a2-highgpu-1g --region us-central1 -o csv",
        &[],
    );
    assert_eq!(csv.status.code(), Some(0), "{}", stderr(&csv));
    support::csv_holds_json_rows(&csv.stdout, doc["options"].as_array().unwrap());

    // Busy three hours a day: under every break-even.
    let idle = profile("idle", 24 * 7, |h| if h % 24 < 3 { 10 } else { 0 });
    let doc = mix_json(&idle, "--instance-type p4d.24xlarge --region us-east-1");
    assert_eq!(doc["recommended"]["committed"], 0);
    assert_eq!(doc["recommended"]["spot_instance_hours"], 0.0);
    // The line a person reads says what the option does, from its hours:
    // it named on-demand for the flat demand (none) and spot whenever a
    // share was interruptible (none, with spot dearer than on-demand).
    let line = |profile: &PathBuf, args: &str| {
        let o = mix(profile, args, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        out.lines().last().unwrap().to_string()
    };
    let flat_line = line(&flat, "--instance-type a2-highgpu-1g --region us-central1");
    assert!(
        flat_line.starts_with("recommended: commit to 6 instance(s) for ")
            && flat_line.contains(", which covers all of it;"),
        "{flat_line}"
    );
    let idle_line = line(&idle, "--instance-type p4d.24xlarge --region us-east-1");
    assert!(
        idle_line.starts_with("recommended: commit to nothing: all of it on-demand;"),
        "{idle_line}"
    );
    let dear_spot = line(
        &flat,
        "--instance-type a2-highgpu-1g --region us-central1 --interruptible-share 50% --spot-price 100",
    );
    assert!(!dear_spot.contains("spot"), "{dear_spot}");
    let _ = std::fs::remove_file(flat);
    let _ = std::fs::remove_file(idle);
}

#[test]
fn mix_puts_only_the_interruptible_share_on_spot() {
    let p = profile("share", 24 * 7, |h| if h % 24 < 12 { 10 } else { 0 });
    let doc = mix_json(
        &p,
        "--gpu A100:8 --region us-east-1 --interruptible-share 25% --discount-1y 35",
    );
    let demand: f64 = 10.0 * 12.0 * 7.0;
    let rec = &doc["recommended"];
    let spot = rec["spot_instance_hours"].as_f64().unwrap();
    let rework = support::row(&doc["inputs"], "name", "spot rework")["value"]
        .as_str()
        .unwrap()
        .trim_matches(|c| c == '+' || c == '%')
        .parse::<f64>()
        .unwrap();
    assert!(spot > 0.0);
    assert!(
        spot <= 0.25 * demand * (1.0 + rework / 100.0) + 1e-6,
        "{spot}"
    );
    assert!(
        rec["on_demand_instance_hours"].as_f64().unwrap() >= 0.75 * demand - 1e-6,
        "{rec}"
    );
    assert!(doc["terms"][0]["source"]
        .as_str()
        .unwrap()
        .contains("--discount-1y 35"));
    let _ = std::fs::remove_file(p);
}

#[test]
fn mix_bad_inputs_exit_2_and_name_the_value() {
    let ok = profile("ok", 24 * 7, |_| 1);
    let short = profile("short", 24, |_| 1);
    let empty = std::env::temp_dir().join(format!("gpufleet-mix-{}-empty.csv", std::process::id()));
    std::fs::write(&empty, "").unwrap();
    let missing = PathBuf::from("/nonexistent/p.csv");
    for (profile, instance_type, region, extra, want) in [
        (
            &short,
            "p4d.24xlarge",
            "us-east-1",
            &[][..],
            "at least a week",
        ),
        (&empty, "p4d.24xlarge", "us-east-1", &[], "empty"),
        (
            &missing,
            "p4d.24xlarge",
            "us-east-1",
            &[],
            "/nonexistent/p.csv",
        ),
        (&ok, "p9.huge", "us-east-1", &[], "p9.huge"),
        (&ok, "p4d.24xlarge", "us-east-9", &[], "us-east-9"),
        (
            &ok,
            "p4d.24xlarge",
            "us-east-1",
            &["--interruptible-share", "1.5"],
            "'1.5'",
        ),
        (
            &ok,
            "p4d.24xlarge",
            "us-east-1",
            &["--discount-3y", "120"],
            "'120'",
        ),
        // No demand on spot: the price was silently unused.
        (
            &ok,
            "p4d.24xlarge",
            "us-east-1",
            &["--spot-price", "5"],
            "--spot-price 5.0000 has no effect",
        ),
    ] {
        let flags = format!("--instance-type {instance_type} --region {region}");
        let o = mix(profile, &flags, extra);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{flags} {extra:?}: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains(want),
            "{flags} {extra:?}: {}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty(), "{flags} {extra:?}");
    }
    for p in [ok, short, empty] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn mix_draws_demand_against_the_commitment_and_refuses_a_bad_plot_path() {
    let p = profile("plot", 24 * 14, |h| if h % 24 < 12 { 8 } else { 3 });
    let svg = std::env::temp_dir().join(format!("gpufleet-mix-{}.svg", std::process::id()));
    let o = mix(
        &p,
        "--gpu A100:8 --region us-east-1 --plot",
        &[svg.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..80]);
    assert!(text.contains("demand vs. commitment"));
    assert!(text.contains("committed: "));
    assert!(text.contains("mean demand: "));
    let _ = std::fs::remove_file(&svg);
    for (bad, says) in [
        ("chart.png", "expected a file name ending in .svg"),
        ("/no/such/dir/chart.svg", "does not exist"),
    ] {
        let o = mix(&p, "--gpu A100:8 --region us-east-1 --plot", &[bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
    }
    let _ = std::fs::remove_file(p);
}
