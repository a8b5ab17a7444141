//! `gpufleet simulate` end to end on the shipped 2022 traces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::process::{Command, Output};
use support::words;

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
    let o = gpufleet(&words(
        "--instance-type p2.xlarge --job-hours 4 --deadline-hours 6 --starts 10 -o json",
    ));
    let rows = support::json_rows(&o);
    assert_eq!(rows.len(), 1);
    let results = rows[0]["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        words("on-demand greedy uniform-progress uniform-progress-multi gpufleet optimal")
    );
    for r in results {
        assert_eq!(r["deadline_misses"], 0, "{r}");
        assert!(r["cost_vs_optimum"].as_f64().unwrap() >= 1.0 - 1e-9, "{r}");
        assert_eq!(r["runs"], 10);
    }
}

/// The known-rates diagnostic runs when asked for by name, beside the
/// policies asked for, bounded by the optimum like them.
#[test]
fn the_known_rates_diagnostic_runs_when_asked() {
    let o = gpufleet(&words(
        "--instance-type p3.2xlarge --job-hours 12 --deadline-hours 18 --starts 6 \
         --policies gpufleet,gpufleet-known-rates,optimal -o json",
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = support::json_rows(&o);
    let results = rows[0]["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, words("gpufleet gpufleet-known-rates optimal"));
    for r in results {
        assert_eq!(r["deadline_misses"], 0, "{r}");
        assert!(r["cost_vs_optimum"].as_f64().unwrap() >= 1.0 - 1e-9, "{r}");
    }
}

#[test]
fn bad_input_is_named() {
    for (args, needle) in [
        (
            "--job-hours 4",
            "several instance types; choose one or more with --instance-type",
        ),
        (
            "--instance-type p9.xlarge",
            "unknown instance type 'p9.xlarge'",
        ),
        (
            "--instance-type p2.xlarge --job-hours 10 --deadline-hours 5",
            "leaves no time",
        ),
        (
            "--instance-type p2.xlarge --policies yolo",
            "unknown policy 'yolo'",
        ),
        (
            "--instance-type p2.xlarge --job-hours -1",
            "invalid number '-1'",
        ),
        // Once a panic (index out of bounds), now named with the valid range.
        (
            "--instance-type p2.xlarge --deadline-hours 1e19",
            "invalid deadline hours 10000000000000000000: expected a positive number of hours up to the traces' span",
        ),
        // Once unbounded.
        (
            "--instance-type p2.xlarge --starts 100000000",
            "invalid number of starts '100000000': expected a whole number from 1 to 10000",
        ),
        // Once printed the results of one run.
        (
            "--instance-type p2.xlarge --starts 0",
            "invalid number of starts '0'",
        ),
        (
            "--instance-type p2.xlarge --starts -3",
            "invalid number of starts '-3'",
        ),
        (
            "--instance-type p2.xlarge --starts 10 --timeline 10",
            "invalid start 10: expected 0 to 9 (the scenario has 10 starts)",
        ),
        (
            "--instance-type p2.xlarge --timeline -1",
            "invalid start '-1': expected a whole number from 0 to one less than --starts",
        ),
        (
            "--grid --timeline 1",
            "the argument '--grid' cannot be used with '--timeline <START>'",
        ),
        // The grid picks its own jobs and pools: these were ignored.
        (
            "--grid --job-hours 5",
            "the argument '--grid' cannot be used with '--job-hours <JOB_HOURS>'",
        ),
        (
            "--grid --zone us-west-2a",
            "the argument '--grid' cannot be used with '--zone <ZONE>'",
        ),
    ] {
        let o = gpufleet(&args.split_whitespace().collect::<Vec<_>>());
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
    // A manifest's errors name the manifest given (they said "pools.csv").
    let dir = support::TempDir::new("simulate", "manifest");
    let manifest = dir.join("mine.csv");
    std::fs::write(
        &manifest,
        "file,cloud,region,zone,instance_type,on_demand_price,spot_price\n\
         us-west-2a_v100_1.csv,aws,us-west-2,us-west-2a,p3.2xlarge,-3.06,0.9\n",
    )
    .unwrap();
    let o = gpufleet(&["--pools", manifest.to_str().unwrap(), "--job-hours", "4"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} line 2: invalid on_demand_price '-3.06'",
            manifest.display()
        )),
        "{err}"
    );
}

/// An any-of job over two instance types with the manifest's throughput
/// column, and 12 pools assembled from three windows: every policy finishes
/// in time and gpufleet is at or below greedy and Uniform Progress.
#[test]
fn any_of_and_many_pools() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/traces");
    for (traces, pools) in [
        (
            format!("{dir}/2022-11-28T22-23"),
            format!("{dir}/2022-11-28T22-23/pools-any-of.csv"),
        ),
        (
            format!("{dir}/many-pools"),
            format!("{dir}/many-pools/pools.csv"),
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args([
                "simulate",
                "--traces",
                &traces,
                "--pools",
                &pools,
                "--instance-type",
                "p3.2xlarge,p2.xlarge",
                "--job-hours",
                "6",
                "--deadline-hours",
                "9",
                "--starts",
                "4",
                "-o",
                "json",
            ])
            .output()
            .unwrap();
        let rows = support::json_rows(&o);
        let pools = rows[0]["pools"].as_array().unwrap().len();
        assert!(pools == 4 || pools == 12, "{pools}");
        // Windows assembled into one set are lined up by sample, and it says
        // so; one window's traces start together and it says nothing.
        let said = String::from_utf8_lossy(&o.stderr)
            .contains("simulate: note: the traces start at different times (../2022-10-26T22-05/");
        assert_eq!(said, pools == 12, "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(rows[0]["instance_type"], "p3.2xlarge|p2.xlarge");
        let results = rows[0]["results"].as_array().unwrap();
        let cost = |n: &str| {
            results.iter().find(|r| r["policy"] == n).unwrap()["mean_cost_usd"]
                .as_f64()
                .unwrap()
        };
        for r in results {
            assert_eq!(r["deadline_misses"], 0, "{r}");
        }
        assert!(cost("gpufleet") <= cost("greedy") + 1e-6, "{results:?}");
        assert!(
            cost("gpufleet") <= cost("uniform-progress-multi") + 1e-6,
            "{results:?}"
        );
    }
}

/// The grid runs its scenarios in parallel but reports them in the grid's
/// order, with a line per finished scenario when stderr is not a terminal.
#[test]
fn the_grid_runs_in_parallel_and_keeps_its_order() {
    let o = gpufleet(&words(
        "--grid --starts 1 --policies greedy,optimal -o json",
    ));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(0), "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    // 12 pool sets (per type: all zones, then each zone) x 18 scenarios.
    assert_eq!(rows.len() % 18, 0);
    let total = rows.len();
    assert!(
        err.contains(&format!("simulate: {total}/{total} done")),
        "{err}"
    );
    assert!(
        err.contains(&format!("simulate: {total} scenarios in ")),
        "{err}"
    );
    // The order is the grid's: for each pool set, jobs 12, 24, 48 h, each
    // with deadline factors 1.25, 1.5, 2 and changeovers 10 and 30 minutes.
    for chunk in rows.chunks(18) {
        let key: Vec<(f64, f64, f64)> = chunk
            .iter()
            .map(|r| {
                (
                    r["job_hours"].as_f64().unwrap(),
                    r["deadline_hours"].as_f64().unwrap(),
                    r["changeover_hours"].as_f64().unwrap(),
                )
            })
            .collect();
        let mut expected = Vec::new();
        for job in [12.0, 24.0, 48.0] {
            for f in [1.25, 1.5, 2.0] {
                for co in [1.0 / 6.0, 0.5] {
                    expected.push((job, job * f, co));
                }
            }
        }
        for (k, e) in key.iter().zip(&expected) {
            assert!(
                (k.0 - e.0).abs() < 1e-9 && (k.1 - e.1).abs() < 1e-9 && (k.2 - e.2).abs() < 1e-6,
                "{key:?}"
            );
        }
        let pools = &chunk[0]["pools"];
        assert!(chunk.iter().all(|r| &r["pools"] == pools));
    }
}

#[test]
fn simulate_draws_cost_against_the_optimum_per_policy() {
    let svg = std::env::temp_dir().join(format!("gpufleet-sim-{}.svg", std::process::id()));
    let o = gpufleet(&[
        "--instance-type",
        "p2.xlarge",
        "--job-hours",
        "4",
        "--deadline-hours",
        "6",
        "--starts",
        "5",
        "--plot",
        svg.to_str().unwrap(),
        "-o",
        "json",
    ]);
    support::ok(&o);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    for policy in [
        "greedy",
        "uniform-progress",
        "gpufleet",
        "optimal (clairvoyant)",
    ] {
        assert!(text.contains(policy), "{policy} missing");
    }
    let _ = std::fs::remove_file(&svg);
    let o = gpufleet(&["--grid", "--plot", "out.pdf"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ending in .svg"));
}

/// `--timeline` shows one start tick by tick: every policy's line and every
/// pool's availability, the optimum's path included; the JSON carries the
/// same, and a spot tick is only ever where the pool had capacity.
#[test]
fn a_timeline_shows_each_policy_beside_the_pools() {
    let o = gpufleet(&words(
        "--instance-type p3.2xlarge --job-hours 12 --deadline-hours 18 --starts 10 --timeline 3",
    ));
    support::ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    support::contains_all(
        &text,
        &[
            "start 3 of 10 (2022-12-03T15:13:37Z), 10-minute ticks",
            "A = spot p3.2xlarge us-west-2/us-west-2a ($1.0100/h, speed 1.00)",
            "from hour 12.0",
        ],
    );
    // Each policy has a line of ticks, the optimum too.
    for policy in words("on-demand greedy gpufleet optimal") {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(policy)
                && l.trim_end().ends_with(|c: char| "ABOab.".contains(c))),
            "{policy}: {text}"
        );
    }

    let o = gpufleet(&words(
        "--instance-type p3.2xlarge --job-hours 12 --deadline-hours 18 --starts 10 --timeline 3 -o json",
    ));
    let r = support::json(&o);
    assert_eq!(r["start"], 3);
    let pools = r["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2);
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    for run in runs {
        let ticks = run["ticks"].as_array().unwrap();
        assert!(!ticks.is_empty() && ticks.len() <= 108, "{run}");
    }
    spot_only_where_available(pools, runs);
    let optimal = runs.iter().find(|r| r["policy"] == "optimal").unwrap();
    let greedy = runs.iter().find(|r| r["policy"] == "greedy").unwrap();
    assert!(optimal["cost_usd"].as_f64() <= greedy["cost_usd"].as_f64());
}

/// Past 26 pools a timeline has no letters left: the table is refused with
/// the way out named, and the JSON, which names pools by index, has every
/// pool (and a letter for the first 26).
#[test]
fn a_timeline_of_many_pools_is_json() {
    use gpufleet::sim::{generate, GenerateSpec, Regime};
    let set = generate(&GenerateSpec {
        regime: Regime::Mixed,
        pools: 28,
        types: 1,
        days: 3.0,
        tick_seconds: 600,
        seed: 3,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pools.csv"), &set.manifest).unwrap();
    for (name, text) in &set.traces {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let run = |extra: &str| {
        let rest = format!("--job-hours 6 --deadline-hours 9 --starts 2 --timeline 1 {extra}");
        let mut args = vec!["simulate", "--traces", dir.path().to_str().unwrap()];
        args.extend(words(&rest));
        Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(&args)
            .output()
            .expect("run gpufleet")
    };
    let o = run("");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    support::contains_all(
        &err,
        &["at most 26 pools", "this set has 28", "--output json"],
    );
    assert!(o.stdout.is_empty());

    let r = support::json(&run("-o json"));
    let pools = r["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 28);
    assert_eq!(pools[25]["letter"], "Z");
    assert!(pools[26].get("letter").is_none());
    let runs = r["runs"].as_array().unwrap();
    assert!(runs.iter().any(|run| run["policy"] == "gpufleet"));
    spot_only_where_available(pools, runs);
}

/// A timeline's JSON runs on spot only where that pool had capacity.
fn spot_only_where_available(pools: &[serde_json::Value], runs: &[serde_json::Value]) {
    for run in runs {
        for (t, tick) in run["ticks"].as_array().unwrap().iter().enumerate() {
            if tick["at"] == "spot" {
                let k = tick["pool"].as_u64().unwrap() as usize;
                assert_eq!(
                    pools[k]["available"][t], true,
                    "{}: tick {t}",
                    run["policy"]
                );
            }
        }
    }
}

/// Issue 63: a trace that is a symlink out of the trace directory is not
/// followed (its first line used to be quoted in the header error).
#[test]
fn a_trace_symlinked_out_of_its_directory_is_not_read() {
    let dir = support::TempDir::new("sim", "symlink");
    let outside = support::TempDir::new("sim", "outside");
    std::fs::write(outside.join("secret.csv"), "SECRET-LINE,1,2\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.csv"), dir.join("evil.csv")).unwrap();
    std::fs::write(
        dir.join("pools.csv"),
        "file,cloud,region,zone,instance_type,on_demand_price,spot_price\nevil.csv,aws,us-west-2,us-west-2a,p2.xlarge,0.90,0.27\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["simulate", "--traces"])
        .arg(&*dir)
        .args(words("--job-hours 4 --deadline-hours 6"))
        .output()
        .unwrap();
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("leads outside the trace directory"), "{err}");
    assert!(!err.contains("SECRET-LINE"), "{err}");
}

/// `simulate --serve` on the November window (two V100 zones, 14.9 days):
/// every policy reported, on-demand the reference, the spot policies
/// cheaper; gpufleet no dearer than SpotHedge and serving at least as many
/// minutes. A demand CSV and a service file are read; the plot is drawn.
#[test]
fn serve_replays_a_service_for_every_policy() {
    let o = gpufleet(&words("--serve --instance-type p3.2xlarge -o json"));
    assert!(o.status.success(), "{}", support::stderr(&o));
    let doc = support::json(&o);
    assert_eq!(doc["minutes"], 2140 * 10);
    assert_eq!(doc["peak_target"], 10);
    let results = doc["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        words("on-demand spot-only spothedge gpufleet gpufleet-survive")
    );
    let by = |name: &str| results.iter().find(|r| r["policy"] == name).unwrap();
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let od = by("on-demand");
    assert_eq!(f(od, "cost_vs_on_demand"), 1.0);
    assert_eq!(od["preemptions"], 0);
    assert!(f(od, "served_share") > 0.999, "{od}");
    for name in ["spot-only", "spothedge", "gpufleet"] {
        assert!(f(by(name), "cost_vs_on_demand") < 0.5, "{}", by(name));
    }
    let (g, h) = (by("gpufleet"), by("spothedge"));
    assert!(
        f(g, "cost_vs_on_demand") <= f(h, "cost_vs_on_demand"),
        "{g} {h}"
    );
    assert!(f(g, "served_share") >= f(h, "served_share"), "{g} {h}");
    // Guarding against a zone's loss serves more minutes, for more money.
    let s = by("gpufleet-survive");
    assert!(f(s, "served_share") > f(g, "served_share"), "{s} {g}");
    assert!(
        f(s, "cost_vs_on_demand") > f(g, "cost_vs_on_demand"),
        "{s} {g}"
    );

    let dir = support::TempDir::new("simulate", "serve");
    let demand = dir.join("demand.csv");
    std::fs::write(&demand, "minute,requests\n0,0\n1,30\n").unwrap();
    let service = dir.join("svc.toml");
    std::fs::write(
        &service,
        "name = \"svc\"\nrun = \"serve\"\nreadiness = \"/health\"\n[[gpu]]\nmodel = \"V100\"\n[replicas]\nmin = 1\nmax = 2\n[spot]\nshare = 0.5\nmin_on_demand = 1\n",
    )
    .unwrap();
    let plot = dir.join("serve.svg");
    let o = gpufleet(&[
        "--serve",
        "--instance-type",
        "p3.2xlarge",
        "--policies",
        "on-demand,gpufleet",
        "--demand",
        demand.to_str().unwrap(),
        "--service",
        service.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains(demand.to_str().unwrap()), "{table}");
    assert!(table.contains("gpufleet"), "{table}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.contains("needed by the load") && svg.contains("gpufleet: $"),
        "svg"
    );
}

#[test]
fn serve_bad_input_is_named() {
    let dir = support::TempDir::new("simulate", "serve-bad");
    let demand = dir.join("demand.csv");
    std::fs::write(&demand, "requests\n5\nlots\n").unwrap();
    let service = dir.join("svc.toml");
    std::fs::write(
        &service,
        "name = \"svc\"\nrun = \"x\"\nreadiness = \"/health\"\n[[gpu]]\nmodel = \"V100\"\n[spot]\nshare = 2\n",
    )
    .unwrap();
    for (args, needle) in [
        (
            "--serve --instance-type p3.2xlarge --policies yolo".to_string(),
            "unknown service policy \"yolo\": expected one of on-demand, spot-only, spothedge, gpufleet, gpufleet-survive",
        ),
        (
            "--serve --instance-type p3.2xlarge --utilization 1.5".into(),
            "invalid utilization '1.5': expected more than 0 and at most 1",
        ),
        (
            "--serve --instance-type p3.2xlarge --request-seconds 0".into(),
            "invalid request time '0'",
        ),
        (
            "--serve --instance-type p3.2xlarge --peak-rpm 10 --trough-rpm 100".into(),
            "expected 0 <= trough <= peak",
        ),
        (
            "--serve --instance-type p3.2xlarge --cold-start 2000".into(),
            "2000 is not in 0..=1440",
        ),
        (
            "--instance-type p3.2xlarge --peak-rpm 10".into(),
            "the following required arguments were not provided",
        ),
        (
            "--serve --instance-type p3.2xlarge --job-hours 5".into(),
            "the argument '--serve' cannot be used with '--job-hours <JOB_HOURS>'",
        ),
        (
            format!("--serve --instance-type p3.2xlarge --demand {}", demand.display()),
            "line 3: invalid number of requests \"lots\"",
        ),
        (
            format!("--serve --instance-type p3.2xlarge --service {}", service.display()),
            "spot.share = 2",
        ),
        (
            "--serve --instance-type p3.2xlarge --demand /nonexistent.csv".into(),
            "cannot read the demand file '/nonexistent.csv'",
        ),
    ] {
        let o = gpufleet(&args.split_whitespace().collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}
