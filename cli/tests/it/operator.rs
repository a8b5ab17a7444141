//! The operator workflow on the fake cloud (`--provider fake`, state kept in a
//! file between commands): launch, ls, terminate, reap (`config show` and
//! `tf-external` have files of their own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use support::{stderr as err, words, FakeEnv};

use serde_json::Value;

use crate::support;

const FRIDAY: &str = "2026-01-09T18:00:00Z";
const MONDAY: &str = "2026-01-12T09:00:00Z";

fn launch_cluster(env: &FakeEnv, now: &str) -> Value {
    env.json_at(
        now,
        &words("launch --gpu A100:8 --hours 20 --deadline 48h --name train-weekend --count 4 --image img-1 --placement-group cluster --team ml-research --cloud aws"),
    )
}

/// Adds an instance nobody launched through gpufleet to the fake state.
fn add_unmanaged(state: &Path, id: &str) {
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    let instances = doc["clouds"]["aws"]["instances"].as_array_mut().unwrap();
    let mut other = instances[0].clone();
    other["id"] = id.into();
    other["tags"] = serde_json::json!({"Name": "someone-elses-box"});
    other["placement_group"] = Value::Null;
    instances.push(other);
    std::fs::write(state, serde_json::to_string(&doc).unwrap()).unwrap();
}

#[test]
fn launch_is_idempotent_and_tags_everything() {
    let env = FakeEnv::new("op", "launch");
    let first = launch_cluster(&env, FRIDAY);
    assert_eq!(first["already_launched"], false);
    // The key derives from the job id (the name) and the attempt, hashed.
    let key = first["idempotency_key"].as_str().unwrap();
    assert!(
        key.starts_with("train-weekend-") && key.ends_with("-a1"),
        "{key}"
    );
    assert!(first["placement_group"].as_str().is_some());
    let instances = first["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 4);
    for i in instances {
        assert_eq!(i["cloud"], "aws");
        assert_eq!(i["job"], "train-weekend");
        assert_eq!(i["owner"], "ana");
        assert_eq!(i["team"], "ml-research");
        assert_eq!(i["placement_group"], first["placement_group"]);
    }
    // The same command again launches nothing.
    let again = launch_cluster(&env, "2026-01-09T18:10:00Z");
    assert_eq!(again["already_launched"], true);
    let ids = |v: &Value| -> Vec<String> {
        v["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&first), ids(&again));
    let ls = env.json_at("2026-01-09T19:00:00Z", &["ls"]);
    assert_eq!(ls.as_array().unwrap().len(), 4);
    let row = &ls[0];
    assert_eq!(row["age_hours"], 1.0);
    let price = row["price_per_hour_usd"].as_f64().unwrap();
    assert!((row["cost_so_far_usd"].as_f64().unwrap() - price).abs() < 0.01);
}

#[test]
fn the_idle_weekend_cluster_is_reaped_and_its_unmanaged_neighbour_survives() {
    let env = FakeEnv::new("op", "reap");
    launch_cluster(&env, FRIDAY);
    add_unmanaged(&env.state(), "i-0unmanaged");
    // Monday morning: 63 hours without a heartbeat.
    let dry = env.json_at(MONDAY, &["reap", "--idle", "12h"]);
    assert_eq!(dry["dry_run"], true);
    let candidates = dry["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 4);
    for c in candidates {
        assert_eq!(c["job"], "train-weekend");
        // `launch`'s default 24 h time to live passed on Saturday evening,
        // before the 12 h without a heartbeat would have counted.
        let reason = c["reason"].as_str().unwrap();
        assert!(reason.starts_with("expired 1d"), "{reason}");
        assert!(c["cost_so_far_usd"].as_f64().unwrap() > 0.0);
        assert!(c["cost_per_day_usd"].as_f64().unwrap() > 0.0);
    }
    // The dry run changed nothing.
    assert_eq!(env.json_at(MONDAY, &["ls"]).as_array().unwrap().len(), 4);
    let done = env.json_at(MONDAY, &["reap", "--idle", "12h", "--yes"]);
    assert_eq!(done["terminated"].as_array().unwrap().len(), 4);
    // Its placement group went with its last instance.
    assert_eq!(
        done["groups_deleted"].as_array().unwrap().len(),
        1,
        "{done}"
    );
    assert!(!std::fs::read_to_string(env.state())
        .unwrap()
        .contains("gpufleet-train-weekend"));
    assert_eq!(env.json_at(MONDAY, &["ls"]).as_array().unwrap().len(), 0);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(env.state()).unwrap()).unwrap();
    let unmanaged = support::row(&doc["clouds"]["aws"]["instances"], "id", "i-0unmanaged");
    assert_eq!(unmanaged["state"], "running");
    // Nothing is reaped on Friday evening: the cluster is two hours old.
    let env2 = FakeEnv::new("op", "reap-early");
    launch_cluster(&env2, FRIDAY);
    let early = env2.json_at("2026-01-09T20:00:00Z", &["reap", "--idle", "12h"]);
    assert!(early["candidates"].as_array().unwrap().is_empty());
}

/// Writes tags onto the `n`th instance in the fake state, as the node's own
/// identity would.
fn tag_instance(state: &Path, n: usize, tags: &[(&str, &str)]) -> String {
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    let i = &mut doc["clouds"]["aws"]["instances"][n];
    for (k, v) in tags {
        i["tags"][*k] = Value::String(v.to_string());
    }
    let id = i["id"].as_str().unwrap().to_string();
    std::fs::write(state, serde_json::to_string(&doc).unwrap()).unwrap();
    id
}

#[test]
fn reap_finds_gpus_that_do_nothing_and_never_guesses_about_silent_ones() {
    let env = FakeEnv::new("op", "reap-gpu");
    launch_cluster(&env, FRIDAY);
    // At 20:59 each node's agent published its last 15 minutes and how long
    // its GPUs have stayed under each level (the cluster came up at 18:00).
    let idle = tag_instance(
        &env.state(),
        0,
        &[
            ("gpufleet:gpu", "t1767992340-w900-n8-u2-x3-m1024-c81920"),
            (
                "gpufleet:gpu-quiet",
                "o178-1p0-2p0-5p178-10p178-20p178-50p178",
            ),
        ],
    );
    let busy = tag_instance(
        &env.state(),
        1,
        &[
            ("gpufleet:gpu", "t1767992340-w900-n8-u60-x71-m70000-c81920"),
            ("gpufleet:gpu-quiet", "o178-1p0-2p0-5p0-10p0-20p0-50p0"),
        ],
    );
    // Its agent stopped reporting at 18:50, after ten quiet minutes.
    let stale = tag_instance(
        &env.state(),
        2,
        &[
            ("gpufleet:gpu", "t1767984600-w600-n8-u0-x0-m0-c81920"),
            ("gpufleet:gpu-quiet", "o10-1p10-2p10-5p10-10p10-20p10-50p10"),
        ],
    );
    let now = "2026-01-09T21:00:00Z";
    let dry = env.json_at(now, &["reap", "--idle", "2h", "--below", "5%"]);
    assert_eq!(dry["dry_run"], true);
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&dry["candidates"]), vec![idle.clone()], "{dry}");
    let c = &dry["candidates"][0];
    let why = c["reason"].as_str().unwrap();
    assert!(why.starts_with("GPUs under 5% for 2h58m"), "{why}");
    assert!(c["cost_so_far_usd"].as_f64().unwrap() > 0.0);
    assert!(c["cost_per_day_usd"].as_f64().unwrap() > 0.0);
    // The silent ones are shown apart, never as idle; the busy one is not
    // listed at all.
    let unknown = ids(&dry["unknown"]);
    assert_eq!(unknown.len(), 2, "{dry}");
    assert!(unknown.contains(&stale));
    assert!(!unknown.contains(&busy) && !unknown.contains(&idle));
    let text: String = dry["unknown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("last GPU summary 2h10m ago"), "{text}");
    assert!(text.contains("no GPU summary"), "{text}");
    // ls shows what each node's GPUs do.
    let ls = env.json_at(now, &["ls"]);
    let row = support::row(&ls, "id", busy.as_str());
    assert_eq!(row["gpu_util_pct"], 60);
    assert_eq!(row["gpu_memory_peak_mib"], 70000);
    // Not idle for 4 hours, nor under 2 %.
    let none = env.json_at(now, &["reap", "--idle", "4h", "--below", "5"]);
    assert!(none["candidates"].as_array().unwrap().is_empty(), "{none}");
    let none = env.json_at(now, &["reap", "--idle", "2h", "--below", "2"]);
    assert!(none["candidates"].as_array().unwrap().is_empty(), "{none}");
    // --yes terminates the idle one only.
    let done = env.json_at(now, &["reap", "--idle", "2h", "--below", "5%", "--yes"]);
    assert_eq!(done["terminated"], serde_json::json!([idle]));
    assert_eq!(env.json_at(now, &["ls"]).as_array().unwrap().len(), 3);
    // Bad thresholds are refused, naming the value.
    for bad in ["0", "101", "-5", "five"] {
        let o = env.run_at(now, &["reap", "--idle", "2h", "--below", bad], None);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            err(&o).contains(&format!("invalid utilisation '{bad}'")),
            "{}",
            err(&o)
        );
    }
    let o = env.run_at(now, &["reap", "--below", "5"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--idle"), "{}", err(&o));
    // An idle window shorter than a few heartbeats would call every working
    // node idle (`--idle 0s --yes` terminated all of them): refused, and
    // nothing is terminated.
    for (bad, below) in [("0s", None), ("4m", None), ("30s", Some("5%"))] {
        let mut args = vec!["reap", "--idle", bad, "--yes"];
        args.extend(below.iter().flat_map(|b| ["--below", *b]));
        let o = env.run_at(now, &args, None);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            err(&o).contains(&format!("invalid idle time '{bad}'")) && err(&o).contains("5m"),
            "{}",
            err(&o)
        );
    }
    assert_eq!(env.json_at(now, &["ls"]).as_array().unwrap().len(), 3);
    assert!(env.json_at(now, &["reap", "--idle", "5m"]).is_object());
}

#[test]
fn expired_instances_are_reaped_without_idle() {
    let env = FakeEnv::new("op", "expiry");
    let o = env.run_at(
        FRIDAY,
        &[
            "launch", "--gpu", "T4:1", "--hours", "1", "--name", "short", "--image", "img",
            "--ttl", "2h", "--cloud", "gcp", "-o", "json",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let launched: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        launched["instances"][0]["expires_at"],
        "2026-01-09T20:00:00Z"
    );
    assert!(env.json_at("2026-01-09T19:00:00Z", &["reap"])["candidates"]
        .as_array()
        .unwrap()
        .is_empty());
    let late = env.json_at("2026-01-09T21:00:00Z", &["reap"]);
    assert!(late["candidates"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("expired 1h"));
}

#[test]
fn terminate_needs_yes_off_a_terminal_and_never_touches_unmanaged() {
    let env = FakeEnv::new("op", "terminate");
    launch_cluster(&env, FRIDAY);
    add_unmanaged(&env.state(), "i-0unmanaged");
    let o = env.run_at(FRIDAY, &["terminate", "--job", "train-weekend"], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--yes"), "{}", err(&o));
    assert_eq!(env.json_at(FRIDAY, &["ls"]).as_array().unwrap().len(), 4);
    let o = env.run_at(FRIDAY, &["terminate", "i-0unmanaged", "--yes"], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("not managed"), "{}", err(&o));
    // An id nothing holds matched nothing, as `--job` or `--tag` that
    // match nothing do (exit 3; it was 1, as for a cloud's failure).
    let o = env.run_at(FRIDAY, &["terminate", "i-0nosuch", "--yes"], None);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(err(&o).contains("i-0nosuch"));
    let o = env.run_at(FRIDAY, &["terminate", "--tag", "oops", "--yes"], None);
    assert_eq!(o.status.code(), Some(2));
    // `--tag team=…` is the tag `launch --team` wrote (`gpufleet:team`),
    // the column `ls` heads TEAM; it used to match nothing.
    let o = env.run_at(FRIDAY, &words("terminate --tag team=other --yes"), None);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let done = env.json_at(
        FRIDAY,
        &words("terminate --tag team=ml-research --tag gpufleet:job=train-weekend --yes"),
    );
    assert_eq!(done["terminated"].as_array().unwrap().len(), 4);
    assert!(env.json_at(FRIDAY, &["ls"]).as_array().unwrap().is_empty());
    let o = env.run_at(
        FRIDAY,
        &["terminate", "--job", "train-weekend", "--yes"],
        None,
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "nothing left to match: {}",
        err(&o)
    );
}

/// Spend comes from the ledger: an instance that ended keeps what it cost
/// (it used to drop out of `ls --cost-by` as soon as it was terminated), a
/// launch-only job ends with its last instance (it stayed `running`, its
/// cost growing), and `costs` groups the same figures by any key.
#[test]
fn spend_is_the_ledgers_and_outlives_the_instances() {
    let env = FakeEnv::new("op", "showback");
    launch_cluster(&env, FRIDAY);
    let o = env.run_at(
        FRIDAY,
        &words(
            "launch --gpu T4:1 --hours 1 --name notebook --image img --team analytics --cloud gcp",
        ),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    const SATURDAY: &str = "2026-01-10T18:00:00Z";
    let team = |at: &str, name: &str| {
        let doc = env.json_at(at, &["ls", "--cost-by", "team"]);
        assert_eq!(doc["by"], "team", "{doc}");
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["team"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {doc}"))
    };
    let ml = team(SATURDAY, "ml-research");
    assert_eq!(ml["instances"], 4);
    assert_eq!(ml["running"], 4);
    let per_hour = ml["per_hour_now_usd"].as_f64().unwrap();
    let day = ml["cost_usd"].as_f64().unwrap();
    assert!((day - 24.0 * per_hour).abs() < 0.05, "{ml}");
    assert!((ml["hours"].as_f64().unwrap() - 96.0).abs() < 1e-6, "{ml}");
    let done = env.json_at(SATURDAY, &words("terminate --job train-weekend --yes"));
    assert_eq!(done["terminated"].as_array().unwrap().len(), 4);
    // A day later: the cluster's day stands, to the cent; nothing runs.
    let ml = team("2026-01-11T18:00:00Z", "ml-research");
    assert_eq!(ml["running"], 0);
    assert!(
        (ml["cost_usd"].as_f64().unwrap() - day).abs() < 0.005,
        "{ml}"
    );
    let analytics = team("2026-01-11T18:00:00Z", "analytics");
    assert_eq!(analytics["running"], 1);
    // The launch-only job ended with its last instance, and its cost stopped.
    let jobs = env.json_at("2026-01-11T18:00:00Z", &["jobs", "ls"]);
    let job = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == "train-weekend")
        .unwrap()
        .clone();
    assert_eq!(job["state"], "cancelled", "{jobs}");
    assert!(
        (job["cost_so_far_usd"].as_f64().unwrap() - day).abs() < 0.005,
        "{job}"
    );
    // `costs` groups the same spend by any key; each row names its group.
    let by_job = env.json_at("2026-01-11T18:00:00Z", &words("costs --by job --since 7d"));
    let rows = by_job["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{by_job}");
    assert!(rows
        .iter()
        .any(|r| r["job"] == "train-weekend"
            && (r["cost_usd"].as_f64().unwrap() - day).abs() < 0.005));
    let total = by_job["total"]["cost_usd"].as_f64().unwrap();
    let by_day = env.json_at(
        "2026-01-11T18:00:00Z",
        &words("costs --by day --since 2026-01-01"),
    );
    let days: f64 = by_day["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cost_usd"].as_f64().unwrap())
        .sum();
    assert!(
        (days - total).abs() < 0.01,
        "split by day, the same total: {by_day}"
    );
    assert_eq!(by_day["rows"][0]["day"], "2026-01-09");
    let o = env.run_at(
        "2026-01-11T18:00:00Z",
        &words("costs --by capacity -o csv"),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("capacity,instances,"));
    for bad in ["costs --since soon", "costs --by colour"] {
        let o = env.run_at("2026-01-11T18:00:00Z", &words(bad), None);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", err(&o));
    }
}

#[test]
fn launch_refuses_bad_input_and_creates_nothing() {
    let env = FakeEnv::new("op", "bad-launch");
    for (args, want) in [
        (
            vec!["launch", "--gpu", "A100:8", "--hours", "2", "--image", "x"],
            "--name",
        ),
        (
            words("launch --pool aws:us-east-1:p4d --name j --image x"),
            "invalid --pool",
        ),
        (
            words("launch --gpu A100:8 --hours 2 --name j --image x --placement-group partition:9"),
            "partition:9",
        ),
        (
            vec![
                "launch", "--gpu", "A100:8", "--hours", "2", "--name", "j", "--image", "x",
                "--count", "0",
            ],
            "--count 0",
        ),
        (
            vec![
                "launch", "--gpu", "A100:8", "--hours", "2", "--name", "j", "--image", "x",
                "--key", "",
            ],
            "idempotency key",
        ),
        (
            vec![
                "launch", "--gpu", "A100:8", "--hours", "2", "--name", " ", "--image", "x",
            ],
            "invalid job name \" \"",
        ),
        (
            vec![
                "launch", "--gpu", "A100:8", "--hours", "2", "--name", "a\nb", "--image", "x",
            ],
            "no control characters",
        ),
    ] {
        let o = env.run_at(FRIDAY, &args, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(err(&o).contains(want), "{args:?}: {}", err(&o));
    }
    assert!(!env.state().exists(), "a refused launch wrote state");
}

#[test]
fn an_explicit_pool_is_launched_into() {
    let env = FakeEnv::new("op", "pool");
    let pool = "aws:us-east-1/use1-az1:p4d.24xlarge:on-demand";
    let out = env.json_at(
        FRIDAY,
        &[
            "launch", "--pool", pool, "--name", "pinned", "--image", "img",
        ],
    );
    assert_eq!(out["pool"], pool);
    assert_eq!(out["instances"][0]["zone"], "use1-az1");
    let o = env.run_at(
        FRIDAY,
        &words(
            "launch --pool aws:us-east-1/use1-az4:p4d.24xlarge:on-demand --name other --image img",
        ),
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("no pool"), "{}", err(&o));
}

/// Long and non-ASCII names launch (they used to panic in `truncate`); two
/// long names sharing 64 bytes are two jobs; a re-run asking for another
/// count exits non-zero and says so; the same request again creates nothing.
#[test]
fn names_never_collide_and_a_different_rerun_is_refused() {
    let env = FakeEnv::new("op", "names");
    let shared = "训练🚀".repeat(8);
    let (a, b) = (format!("{shared}-alpha"), format!("{shared}-beta"));
    let launch = |name: &str, count: &str| {
        env.run_at(
            FRIDAY,
            &[
                "launch", "--gpu", "T4:1", "--hours", "1", "--name", name, "--count", count,
                "--image", "img", "--cloud", "gcp", "-o", "json",
            ],
            None,
        )
    };
    let first = launch(&a, "1");
    assert_eq!(first.status.code(), Some(0), "{}", err(&first));
    let other = launch(&b, "3");
    assert_eq!(other.status.code(), Some(0), "{}", err(&other));
    assert!(
        !err(&other).contains("already launched"),
        "job B adopted job A's instance: {}",
        err(&other)
    );
    assert_eq!(env.json_at(FRIDAY, &["ls"]).as_array().unwrap().len(), 4);
    let again = launch(&a, "1");
    assert_eq!(again.status.code(), Some(0), "{}", err(&again));
    assert!(err(&again).contains("already launched"), "{}", err(&again));
    let different = launch(&a, "2");
    assert_eq!(different.status.code(), Some(2), "{}", err(&different));
    assert!(
        err(&different).contains("already holds 1 instance"),
        "{}",
        err(&different)
    );
    assert_eq!(env.json_at(FRIDAY, &["ls"]).as_array().unwrap().len(), 4);
}

/// A placement group a launch made goes with its last instance: terminate
/// deletes it, and a relaunch of the same job makes a new one.
#[test]
fn a_launch_group_is_deleted_with_its_last_instance() {
    let env = FakeEnv::new("op", "groups");
    let launch = || {
        env.run_at(
            FRIDAY,
            &words("launch --gpu A100:8 --hours 1 --name pgjob --count 2 --placement-group cluster --image img --cloud aws -o json"),
            None,
        )
    };
    let o = launch();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let launched: Value = serde_json::from_slice(&o.stdout).unwrap();
    let group = launched["placement_group"].as_str().unwrap().to_string();
    let done = env.json_at(FRIDAY, &["terminate", "--job", "pgjob", "--yes"]);
    assert_eq!(done["terminated"].as_array().unwrap().len(), 2, "{done}");
    assert_eq!(done["groups_deleted"], serde_json::json!([group]), "{done}");
    let o = launch();
    assert_eq!(o.status.code(), Some(0), "relaunch: {}", err(&o));
}

/// Ctrl-C, SIGTERM and SIGHUP during `launch` roll it back and say so: the
/// placement group it had made is deleted, no instance is left, the ledger
/// says it was rolled back, exit 130; the next run launches afresh. (SIGTERM
/// and SIGHUP used to end the process with nothing rolled back.)
#[test]
fn a_signal_during_launch_rolls_it_back_and_says_so() {
    use gpufleet::ledger::{JobState, Ledger};
    for (sig, named) in [("INT", "Ctrl-C"), ("TERM", "SIGTERM"), ("HUP", "SIGHUP")] {
        let env = FakeEnv::new("op", &format!("sig-{sig}"));
        let ledger_path = env.dir.join("ledger.sqlite3");
        let mut launch = env.command(FRIDAY, &words("launch --gpu A100:8 --hours 1 --name intr --count 2 --placement-group cluster --image img --cloud aws"));
        launch.env("GPUFLEET_FAKE_LATENCY", "launch=20s");
        let started = std::time::Instant::now();
        // Once the launch is under way (its `launching` record is written
        // before the group is made), and a moment for the group.
        let o = support::signal_when(
            launch,
            sig,
            &ledger_path,
            std::time::Duration::from_secs(20),
            std::time::Duration::from_millis(500),
            "the launch never began",
            |l| {
                let last = futures::executor::block_on(l.job_latest("intr")).ok()??;
                Some(last.state == JobState::Launching)
            },
        );
        let e = err(&o);
        assert_eq!(o.status.code(), Some(130), "{sig}: {e}");
        assert!(
            e.contains(&format!("interrupted ({named}): rolling back")),
            "{e}"
        );
        assert!(e.contains("rolled back: 0 instance(s) terminated"), "{e}");
        assert!(
            started.elapsed().as_secs() < 15,
            "{sig} waited for the launch"
        );
        let state = std::fs::read_to_string(env.state()).unwrap();
        assert!(
            !state.contains("gpufleet-"),
            "{sig}: a placement group is left: {state}"
        );
        let l = gpufleet::sqlite::SqliteLedger::open(&ledger_path).unwrap();
        let last = futures::executor::block_on(l.job_latest("intr"))
            .unwrap()
            .unwrap();
        // Nothing of it runs: the launch-only job ends (it stayed placing).
        assert_eq!(last.state, JobState::Cancelled);
        assert!(
            last.detail.contains(&format!("rolled back ({named})")),
            "{last:?}"
        );
        assert!(env.json_at(FRIDAY, &["ls"]).as_array().unwrap().is_empty());
    }
}

#[test]
fn an_empty_fleet_costs_zero_not_minus_zero() {
    let env = FakeEnv::new("op", "empty");
    let o = env.run_at(FRIDAY, &["ls"], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("0 managed instance(s); $0.00/hour, $0.00 so far"),
        "{e}"
    );
    assert!(!e.contains("-0.00"), "{e}");
}

/// An empty owner or team (`--owner ''`, `team = ""` in the config) is
/// refused before anything is launched: the instance used to carry an empty
/// owner tag, attributing its cost to nobody.
#[test]
fn an_empty_owner_or_team_is_refused_before_launch() {
    let env = FakeEnv::new("op", "empty-owner");
    let launch = words("launch --gpu A10G:1 --hours 1 --image img --name nobody --cloud aws");
    for (extra, named) in [
        (vec!["--owner", ""], "invalid owner ''"),
        (vec!["--team", " "], "invalid tag team ' '"),
    ] {
        let mut args = launch.clone();
        args.extend(extra);
        let o = env.run_at(FRIDAY, &args, None);
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        assert!(err(&o).contains(named), "{}", err(&o));
    }
    std::fs::write(env.dir.join("gpufleet.toml"), "[tags]\nteam = \"\"\n").unwrap();
    let o = env.run_at(FRIDAY, &launch, None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("invalid tag team ''"), "{}", err(&o));
    std::fs::write(env.dir.join("gpufleet.toml"), "").unwrap();
    assert!(env.json_at(FRIDAY, &["ls"]).as_array().unwrap().is_empty());
}

/// `launch --job FILE` takes what the file says its instances run: its
/// image (`--image` was required even when the file had one) and its
/// workload (the boot script with its `run` was left out, so the instance
/// booted bare). Without an image anywhere it is refused naming `--image`.
#[test]
fn launch_with_a_job_file_boots_its_image_and_workload() {
    let env = FakeEnv::new("op", "launch-job");
    let job = env.dir.join("job.toml");
    std::fs::write(
        &job,
        "name = \"wl\"\nhours = 2\nclouds = [\"aws\"]\nimage = \"ami-0fromthefile\"\nrun = \"python train.py --epochs 3\"\n[[gpu]]\nmodel = \"A10G\"\ncount = 1\n",
    )
    .unwrap();
    let launched = env.json_at(FRIDAY, &["launch", "--job", job.to_str().unwrap()]);
    assert_eq!(
        launched["instances"].as_array().unwrap().len(),
        1,
        "{launched}"
    );
    let o = env.run_at(FRIDAY, &["jobs", "logs", "wl"], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let console = String::from_utf8_lossy(&o.stdout);
    assert!(console.contains("python train.py --epochs 3"), "{console}");
    // As JSON: one document, an entry per instance.
    let logs = env.json_at(FRIDAY, &["jobs", "logs", "wl"]);
    assert_eq!(logs.as_array().map(Vec::len), Some(1), "{logs}");
    assert!(
        logs[0]["output"]
            .as_str()
            .unwrap()
            .contains("python train.py --epochs 3"),
        "{logs}"
    );
    let state = std::fs::read_to_string(env.state()).unwrap();
    assert!(state.contains("ami-0fromthefile"), "{state}");

    let o = env.run_at(
        FRIDAY,
        &words("launch --gpu A10G --hours 1 --name bare --cloud aws"),
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("give --image"), "{}", err(&o));
}

/// `reconcile` makes the ledger agree with the cloud: an instance the cloud
/// ended out of band is ended (with the time the cloud gives), a managed
/// instance of this owner the ledger never recorded is reported and, with
/// `--yes`, adopted; an unmanaged one is never touched. A dry run writes
/// nothing.
#[test]
fn reconcile_ends_adopts_and_never_touches_the_unmanaged() {
    let env = FakeEnv::new("op", "reconcile");
    launch_cluster(&env, FRIDAY);
    add_unmanaged(&env.state(), "i-0unmanaged");
    // The cloud ends one instance out of band, and a managed instance of
    // ours appears that the ledger never saw (a launch whose record was
    // lost).
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(env.state()).unwrap()).unwrap();
    let instances = doc["clouds"]["aws"]["instances"].as_array_mut().unwrap();
    let gone = instances[0]["id"].as_str().unwrap().to_string();
    instances[0]["state"] = "terminated".into();
    instances[0]["ended_at"] = "2026-01-09T20:00:00Z".into();
    instances[0]["end_reason"] = serde_json::json!({"cause": "requested", "code": "fake:console"});
    let mut stray = instances[1].clone();
    stray["id"] = "us-east-1/i-0stray".into();
    instances.push(stray);
    std::fs::write(env.state(), serde_json::to_string(&doc).unwrap()).unwrap();

    let later = "2026-01-10T18:00:00Z";
    let dry = env.json_at(later, &["reconcile"]);
    assert_eq!(dry["applied"], false);
    assert_eq!(dry["ended"][0]["id"], gone.as_str(), "{dry}");
    assert_eq!(dry["unknown"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(dry["unknown"][0]["id"], "us-east-1/i-0stray");
    assert!(dry["unknown"][0]["price_per_hour_usd"].as_f64().unwrap() > 0.0);
    // Nothing was written: the same again.
    assert_eq!(
        env.json_at(later, &["reconcile"])["unknown"],
        dry["unknown"]
    );

    let done = env.json_at(later, &["reconcile", "--yes"]);
    assert_eq!(done["applied"], true);
    assert_eq!(done["ended"].as_array().unwrap().len(), 1);
    assert!(env.json_at(later, &["reconcile"])["unknown"]
        .as_array()
        .unwrap()
        .is_empty());
    // The ended instance cost two hours, not a day: the cloud's end time.
    let by_job = env.json_at(later, &words("costs --by job"));
    let row = by_job["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job"] == "train-weekend")
        .unwrap()
        .clone();
    assert_eq!(row["instances"], 5, "{row}");
    assert_eq!(row["running"], 4, "{row}");
    assert!(
        (row["hours"].as_f64().unwrap() - (2.0 + 3.0 * 24.0 + 24.0)).abs() < 0.01,
        "{row}"
    );
    // The unmanaged neighbour was never touched.
    let state = std::fs::read_to_string(env.state()).unwrap();
    assert!(state.contains("i-0unmanaged"));
    assert!(!by_job.to_string().contains("i-0unmanaged"));
}

/// Issue 63: launch keys belong to their owner (and ledger). Alice and Bob,
/// each with a ledger of their own, both `launch --name shared`: two
/// launches (Bob used to get Alice's instance back and his `terminate --job
/// shared` ended it); Bob's terminate ends his only unless --any-owner; a
/// relaunch with another image is refused, not handed the old instance.
#[test]
fn two_owners_launches_of_one_name_are_two_launches() {
    let env = FakeEnv::new("op", "owners");
    let run = |user: &str, args: &str| {
        let mut c = env.command(FRIDAY, &words(args));
        c.env("USER", user)
            .env("GPUFLEET_LEDGER", env.dir.join(format!("{user}.sqlite3")));
        c.output().unwrap()
    };
    let launch = |user: &str, image: &str| {
        run(
            user,
            &format!(
                "launch --gpu A10G:1 --hours 1 --name shared --image {image} --cloud aws -o json"
            ),
        )
    };
    let a: Value = serde_json::from_slice(&launch("alice", "img").stdout).unwrap();
    let b: Value = serde_json::from_slice(&launch("bob", "img").stdout).unwrap();
    assert_eq!(a["already_launched"], false, "{a}");
    assert_eq!(b["already_launched"], false, "{b}");
    assert_ne!(a["idempotency_key"], b["idempotency_key"]);
    assert_ne!(a["instances"][0]["id"], b["instances"][0]["id"], "{a} {b}");
    assert_eq!(b["instances"][0]["owner"], "bob", "{b}");
    // Bob's terminate by job ends his own.
    let o = run("bob", "terminate --job shared --yes -o json");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let done: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        done["terminated"],
        serde_json::json!([b["instances"][0]["id"]]),
        "{done}"
    );
    let left = env.json_at(FRIDAY, &["ls"]);
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    assert_eq!(left[0]["owner"], "alice");
    let o = run("bob", "terminate --job shared --yes");
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(err(&o).contains("--any-owner"), "{}", err(&o));
    // Alice: another image under the same name is refused; the same is hers.
    let o = launch("alice", "other-img");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("launched from image img, not other-img"),
        "{}",
        err(&o)
    );
    let again: Value = serde_json::from_slice(&launch("alice", "img").stdout).unwrap();
    assert_eq!(again["already_launched"], true, "{again}");
    assert_eq!(again["instances"][0]["id"], a["instances"][0]["id"]);
}

/// `launch --ttl none` launches without an expiry, as `GPUFLEET_TTL=none`
/// does (the flag used to refuse it); a bad one names what is valid.
#[test]
fn launch_ttl_none_means_no_expiry() {
    let env = FakeEnv::new("op", "ttl-none");
    let launched = env.json_at(
        FRIDAY,
        &words("launch --gpu A10G:1 --hours 1 --name forever --image img --cloud aws --ttl none"),
    );
    assert!(
        launched["instances"][0]["expires_at"].is_null(),
        "{launched}"
    );
    let o = env.run_at(
        FRIDAY,
        &words("launch --gpu A10G:1 --hours 1 --name bad --image img --cloud aws --ttl soon"),
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("none"), "{}", err(&o));
}
