//! `gpufleet place` end to end, on the embedded catalog.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::process::{Command, Output};
use support::words;

fn gpufleet(args: &[&str], ledger: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .env("GPUFLEET_LEDGER", ledger)
        .env_remove("GPUFLEET_LOG")
        .output()
        .expect("run gpufleet")
}

fn tmp(name: &str) -> support::TempDir {
    support::TempDir::new("place", name)
}

/// A ledger path that does not exist, in a scratch directory removed with
/// the first element.
fn no_ledger() -> (support::TempDir, String) {
    let dir = tmp("none");
    let path = dir.join("absent.sqlite3").display().to_string();
    (dir, path)
}

fn plans(o: &Output) -> Vec<serde_json::Value> {
    support::json_rows(o)
}

#[test]
fn json_plans_have_the_documented_fields_best_first() {
    let o = gpufleet(
        &words("place --gpu H100:8 --gpu A100-80GB:8 --hours 20 --deadline 48h -o json"),
        &no_ledger().1,
    );
    let rows = plans(&o);
    assert_eq!(rows.len(), 10);
    for r in &rows {
        for key in words("cloud region zone instance_type capacity price_per_hour_usd expected_cost_usd evaluated index_usd_per_work_hour expected_hours p_deadline interruption_rate_per_hour explanation chosen shortlisted fallback") {
            assert!(r.get(key).is_some(), "missing {key}: {r}");
        }
        if r["feasible"] == true {
            assert!(r["p_deadline"].as_f64().unwrap() >= 0.95);
        }
        // An expected cost is the policy's, and only where it evaluated.
        assert_eq!(r["evaluated"], r["expected_cost_usd"].is_number(), "{r}");
    }
    // The pools the policy evaluated come first, by its expected cost to
    // finish; the rest follow by the shortlist index.
    let evaluated: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["evaluated"] == true).collect();
    assert!(evaluated.len() >= 2, "{rows:?}");
    assert!(rows[..evaluated.len()]
        .iter()
        .all(|r| r["evaluated"] == true));
    let costs: Vec<f64> = evaluated
        .iter()
        .map(|r| r["expected_cost_usd"].as_f64().unwrap())
        .collect();
    assert!(costs.windows(2).all(|w| w[0] <= w[1]), "{costs:?}");
    let index: Vec<f64> = rows[evaluated.len()..]
        .iter()
        .map(|r| r["index_usd_per_work_hour"].as_f64().unwrap())
        .collect();
    assert!(index.windows(2).all(|w| w[0] <= w[1]), "{index:?}");
    assert_eq!(rows[0]["capacity"], "spot");
}

/// One number per pool: the decision line's expected cost for the chosen
/// pool is the chosen row's, to the cent, in the table and in JSON; the
/// ranking index's figures are labelled as the index and state no second
/// expected cost.
#[test]
fn the_decision_and_the_chosen_row_agree_to_the_cent() {
    let args = words("place --gpu H100:8 --gpu A100-80GB:8 --hours 20 --deadline 48h");
    let o = gpufleet(&args, &no_ledger().1);
    support::ok(&o);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let first = text.lines().next().unwrap();
    let decided = first
        .split(": $")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap()
        .to_string();
    let chosen_line = text.lines().find(|l| l.ends_with("chosen")).unwrap();
    assert!(
        chosen_line.split_whitespace().any(|w| w == decided),
        "{decided} not in {chosen_line}"
    );
    assert!(
        text.contains("E[COST]: the policy's expected cost"),
        "{text}"
    );
    assert!(
        text.contains("INDEX $/WORK-H: the shortlist index"),
        "{text}"
    );
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let rows = plans(&gpufleet(&json_args, &no_ledger().1));
    let chosen = rows.iter().find(|r| r["chosen"] == true).unwrap();
    assert_eq!(
        format!("{:.2}", chosen["expected_cost_usd"].as_f64().unwrap()),
        decided
    );
    for r in &rows {
        let e = r["explanation"].as_str().unwrap();
        assert!(!e.contains(" expected over "), "a second cost: {e}");
        assert!(!e.contains("cheaper than on-demand"), "{e}");
    }
    assert!(rows.iter().any(|r| r["explanation"]
        .as_str()
        .unwrap()
        .contains("under the on-demand price")));
}

/// With `clouds` set (here `GPUFLEET_CLOUDS`), `offers`, `place` and
/// `tf-external` consider the enabled clouds unless told otherwise, as `run`
/// and `launch` do, so `place` says where `run` would start the job (it used
/// to rank an Azure pool first with only AWS enabled).
#[test]
fn the_enabled_clouds_are_the_default_scope() {
    let ledger = no_ledger();
    let run = |clouds: &str, args: &[&str], stdin: Option<&str>| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(args)
            .env("GPUFLEET_CLOUDS", clouds)
            .env("GPUFLEET_LEDGER", &ledger.1)
            .env("GPUFLEET_CONFIG", ledger.0.join("gpufleet.toml"))
            .env_remove("GPUFLEET_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut pipe, stdin.unwrap_or("").as_bytes()).unwrap();
        drop(pipe);
        child.wait_with_output().unwrap()
    };
    let clouds_of = |o: &Output| -> Vec<String> {
        plans(o)
            .iter()
            .map(|r| r["cloud"].as_str().unwrap().to_string())
            .collect()
    };
    let place = words("place --gpu V100:1 --hours 10 --limit 0 -o json");
    let all = clouds_of(&run("aws,gcp,azure", &place, None));
    assert!(all.iter().any(|c| c != "aws"), "{all:?}");
    let aws = clouds_of(&run("aws", &place, None));
    assert!(!aws.is_empty() && aws.iter().all(|c| c == "aws"), "{aws:?}");
    // An explicit --cloud is what was asked for.
    let mut azure = place.clone();
    azure.extend(["--cloud", "azure"]);
    let azure = clouds_of(&run("aws", &azure, None));
    assert!(
        !azure.is_empty() && azure.iter().all(|c| c == "azure"),
        "{azure:?}"
    );
    let gcp = clouds_of(&run("gcp", &words("offers --gpu V100:1 -o json"), None));
    assert!(!gcp.is_empty() && gcp.iter().all(|c| c == "gcp"), "{gcp:?}");
    let o = run(
        "aws",
        &["tf-external"],
        Some(r#"{"gpu": "V100:1", "hours": "10"}"#),
    );
    support::ok(&o);
    let answer: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(answer["cloud"], "aws", "{answer}");
}

/// `--limit 0` shows every plan, as `offers --limit 0` shows every offer.
#[test]
fn limit_0_shows_every_plan() {
    let ledger = no_ledger();
    let all = plans(&gpufleet(
        &words("place --gpu H100:8 --hours 20 --deadline 48h --limit 0 -o json"),
        &ledger.1,
    ));
    let wide = plans(&gpufleet(
        &words("place --gpu H100:8 --hours 20 --deadline 48h --limit 100000 -o json"),
        &ledger.1,
    ));
    assert!(all.len() > 64, "{} plans", all.len());
    assert_eq!(all, wide);
}

#[test]
fn a_tight_deadline_or_not_interruptible_goes_on_demand() {
    let o = gpufleet(
        &words("place --gpu H100:8 --hours 20 --deadline 21h -o json"),
        &no_ledger().1,
    );
    assert_eq!(plans(&o)[0]["capacity"], "on-demand");
    let o = gpufleet(
        &words("place --gpu A10G:1 --hours 5 --not-interruptible -o json"),
        &no_ledger().1,
    );
    assert!(plans(&o).iter().all(|r| r["capacity"] == "on-demand"));
}

#[test]
fn job_files_in_toml_and_json() {
    let dir = tmp("files");
    let toml = dir.join("job.toml");
    std::fs::write(&toml, "name = \"ft\"\nhours = 12\ndeadline = \"36h\"\nclouds = [\"aws\"]\n[[gpu]]\nmodel = \"A100\"\ncount = 8\n").unwrap();
    let rows = plans(&gpufleet(
        &["place", "--job", toml.to_str().unwrap(), "-o", "json"],
        &no_ledger().1,
    ));
    assert!(rows
        .iter()
        .all(|r| r["cloud"] == "aws" && r["instance_type"] == "p4d.24xlarge"));
    let json = dir.join("job.json");
    std::fs::write(
        &json,
        r#"{"hours": 4, "gpu": [{"model": "V100", "count": 1}], "checkpoint_interval": "20m"}"#,
    )
    .unwrap();
    let rows = plans(&gpufleet(
        &["place", "--job", json.to_str().unwrap(), "-o", "json"],
        &no_ledger().1,
    ));
    assert!((rows[0]["checkpoint_interval_hours"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-3);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "hours = 3\n[[gpu]]\nmodel = \"H10\"\n").unwrap();
    let o = gpufleet(&["place", "--job", bad.to_str().unwrap()], &no_ledger().1);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown GPU model 'H10' (did you mean H100")
    );
    // A file's regions are checked as --region is, on the file's clouds.
    std::fs::write(
        &bad,
        "hours = 3\nclouds = [\"aws\"]\nregions = [\"eastus\"]\n[[gpu]]\nmodel = \"V100\"\n",
    )
    .unwrap();
    let o = gpufleet(&["place", "--job", bad.to_str().unwrap()], &no_ledger().1);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.toml: unknown region 'eastus'; known: af-south-1"),
        "{e}"
    );
    // So are its zones: each excluded every offer, and was named nowhere
    // ("1552 offers: zone not allowed"). An AWS zone name is explained, since
    // zones are AZ IDs here.
    for (zones, says) in [
        (
            "[\"us-east-1a\"]",
            "bad.toml: unknown zone 'us-east-1a': AWS zones are named by AZ ID here (use1-az1, ",
        ),
        (
            "[\"use1-az99\"]",
            "bad.toml: unknown zone 'use1-az99' (did you mean use1-az1",
        ),
        ("[\"us-central1-q\"]", "unknown zone 'us-central1-q'"),
    ] {
        std::fs::write(
            &bad,
            format!("hours = 3\nclouds = [\"aws\", \"gcp\"]\nzones = {zones}\n[[gpu]]\nmodel = \"V100\"\n"),
        )
        .unwrap();
        let o = gpufleet(&["place", "--job", bad.to_str().unwrap()], &no_ledger().1);
        assert_eq!(o.status.code(), Some(2), "{zones}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(says), "{e}");
    }
    std::fs::write(
        &bad,
        "hours = 3\nclouds = [\"aws\"]\nzones = [\"use1-az4\"]\n[[gpu]]\nmodel = \"T4\"\n",
    )
    .unwrap();
    let o = gpufleet(&["place", "--job", bad.to_str().unwrap()], &no_ledger().1);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn impossible_jobs_exit_3_saying_which_constraint_excluded_what() {
    let o = gpufleet(
        &words("place --gpu H100:8 --hours 20 --deadline 10h --budget 50"),
        &no_ledger().1,
    );
    assert_eq!(o.status.code(), Some(3));
    support::contains_all(
        &String::from_utf8_lossy(&o.stderr),
        &[
            "GPU model or count not among the job's options",
            "misses the 10h deadline",
            "over the $50.00 budget",
        ],
    );
}

#[test]
fn bad_flags_exit_2() {
    for (args, needle) in [
        (
            vec!["place", "--gpu", "H100:8", "--hours", "-3"],
            "invalid hours '-3'",
        ),
        (
            words("place --gpu H100:8 --hours 1e7"),
            "invalid hours '1e7': expected a positive number of hours of work up to 1000000",
        ),
        (
            words("place --gpu H100:8 --hours 3 --deadline tomorrow"),
            "invalid duration 'tomorrow'",
        ),
        (
            vec!["place", "--gpu", "H100:8", "--hours", "3", "--budget", "-5"],
            "'-5'",
        ),
        (
            words("place --gpu H100:8 --hours 3 --checkpoint-interval often"),
            "invalid duration 'often'",
        ),
        (
            // Checkpoints that take longer than the interval between them:
            // the job would do nothing else (it was ranked as if it could).
            words("place --gpu H100:8 --hours 3 --checkpoint-interval 1h --checkpoint-cost 2h"),
            "invalid checkpoint interval 1h with checkpoints that take 2h",
        ),
        (
            vec!["place", "--hours", "3"],
            "give --gpu MODEL:COUNT and --hours, or --job FILE",
        ),
        (
            vec!["place", "--job", "/nonexistent/job.toml"],
            "cannot read job file",
        ),
        // Beside a job file, a flag that describes the job was silently
        // ignored: the file's clouds and no budget were placed.
        (
            words("place --job job.toml --cloud gcp"),
            "'--job <FILE>' cannot be used with '--cloud <CLOUD>'",
        ),
        (
            words("launch --job job.toml --budget 1"),
            "'--job <FILE>' cannot be used with '--budget <USD>'",
        ),
        (
            words("place --job job.toml --deadline 2h"),
            "'--job <FILE>' cannot be used with '--deadline <DUR>'",
        ),
    ] {
        let o = gpufleet(&args, &no_ledger().1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A ledger URL of a kind gpufleet does not speak is refused, its password
/// masked (a `mysql://` URL used to become a directory `mysql:` holding a
/// SQLite file).
#[test]
fn a_ledger_of_another_kind_is_refused_and_nothing_is_made() {
    let dir = tmp("mysql");
    for args in [
        words("place --gpu H100:8 --hours 3"),
        words("--provider fake jobs ls"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(&args)
            .current_dir(&*dir)
            .env("GPUFLEET_CONFIG", dir.join("gpufleet.toml"))
            .env("GPUFLEET_LEDGER", "mysql://fleet:hunter2@db/gpufleet")
            .env("GPUFLEET_FAKE_STATE", dir.join("fake.json"))
            .env_remove("GPUFLEET_LOG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(
                "invalid ledger 'mysql://fleet:***@db/gpufleet': unsupported scheme 'mysql'"
            ),
            "{args:?}: {err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }
    let made: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(made, ["gpufleet.toml"], "{made:?}");
}

#[test]
fn a_corrupt_ledger_is_a_clear_error() {
    let dir = tmp("corrupt");
    let path = dir.join("ledger.sqlite3");
    std::fs::write(&path, b"garbage".repeat(1000)).unwrap();
    let o = gpufleet(
        &["place", "--gpu", "H100:8", "--hours", "3"],
        path.to_str().unwrap(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a gpufleet ledger or is corrupt"));
    // --no-ledger still works.
    let o = gpufleet(
        &words("place --gpu H100:8 --hours 3 --no-ledger -o json"),
        path.to_str().unwrap(),
    );
    assert!(!plans(&o).is_empty());
}

#[test]
fn the_ledger_is_remembered_across_runs_and_two_runs_agree() {
    use gpufleet::ledger::Ledger;
    use gpufleet::placer::{PoolEvent, PoolEventKind};

    let args = [
        "place", "--gpu", "A100:8", "--hours", "12", "--cloud", "aws", "--limit", "5", "-o", "json",
    ];
    let dir = tmp("memory");
    let path = dir.join("ledger.sqlite3");
    let ledger = path.to_str().unwrap();
    let before = plans(&gpufleet(&args, ledger));
    let best = &before[0];
    assert_eq!(best["capacity"], "spot");
    let pool = gpufleet::Pool {
        cloud: gpufleet::Cloud::Aws,
        region: gpufleet::Region::new(best["region"].as_str().unwrap()),
        zone: best["zone"].as_str().map(gpufleet::Zone::new),
        instance_type: best["instance_type"].as_str().unwrap().to_string(),
        capacity: gpufleet::Capacity::Spot,
    };
    // Yesterday's run saw that pool preempt three times in an hour.
    {
        let l = gpufleet::sqlite::SqliteLedger::open(&path).unwrap();
        let now = time::OffsetDateTime::now_utc();
        for m in [10, 30, 50] {
            futures::executor::block_on(l.record_event(
                &pool,
                PoolEvent {
                    at: now - time::Duration::minutes(m),
                    kind: PoolEventKind::Interruption,
                },
            ))
            .unwrap();
        }
        futures::executor::block_on(l.record_exposure(&pool, now - time::Duration::hours(1)..now))
            .unwrap();
    }
    let first = plans(&gpufleet(&args, ledger));
    let second = plans(&gpufleet(&args, ledger));
    let key = |rows: &[serde_json::Value]| {
        rows.iter()
            .map(|r| {
                (
                    r["zone"].to_string(),
                    r["instance_type"].to_string(),
                    r["capacity"].to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        key(&first),
        key(&second),
        "two runs over the same ledger agree"
    );
    let hazard = |rows: &[serde_json::Value]| {
        rows.iter()
            .find(|r| {
                r["zone"] == best["zone"]
                    && r["instance_type"] == best["instance_type"]
                    && r["capacity"] == "spot"
            })
            .map(|r| r["interruption_rate_per_hour"].as_f64().unwrap())
    };
    // Riskier than before, if it is still among the top five at all.
    if let Some(h) = hazard(&first) {
        assert!(
            h > best["interruption_rate_per_hour"].as_f64().unwrap() * 2.0,
            "{h}"
        );
    }
    assert_ne!(
        key(&first)[0],
        key(&before)[0],
        "the pool that just preempted is no longer first"
    );
}

/// `place` shows the placement policy's decision (the one the executor acts
/// on): a line in the table, `chosen` / `shortlisted` in JSON; a default
/// (assumed) hazard says so.
#[test]
fn shows_the_policys_decision() {
    let args = words("place --gpu H100:8 --gpu A100-80GB:8 --hours 20 --deadline 48h");
    let o = gpufleet(&args, &no_ledger().1);
    support::ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("Decision: start "), "{first}");
    assert!(
        first.contains("expected to finish") && first.contains("on-demand"),
        "{first}"
    );
    assert!(first.contains("slack"), "{first}");
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let rows = plans(&gpufleet(&json_args, &no_ledger().1));
    let chosen: Vec<&serde_json::Value> = rows.iter().filter(|r| r["chosen"] == true).collect();
    assert!(chosen.len() <= 1, "{chosen:?}");
    assert!(rows.iter().any(|r| r["shortlisted"] == true));
    for r in &chosen {
        assert_eq!(r["shortlisted"], true, "the chosen pool was modelled: {r}");
    }
    // An Azure spot pool has no published eviction rate in the snapshot.
    let o = gpufleet(
        &words("place --gpu A100-80GB:8 --hours 10 --deadline 30h --cloud azure"),
        &no_ledger().1,
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text.lines().next().unwrap();
    assert!(
        first.contains("assumed: no published interruption rate"),
        "{first}"
    );
    let json_args =
        words("place --gpu A100-80GB:8 --hours 10 --deadline 30h --cloud azure -o json");
    let rows = plans(&gpufleet(&json_args, &no_ledger().1));
    let spot = rows.iter().find(|r| r["capacity"] == "spot").unwrap();
    let plan_line = spot["explanation"].as_str().unwrap();
    assert!(
        plan_line.contains("(assumed: no published rate)"),
        "{plan_line}"
    );
}

/// `place` only reads the ledger: an absent one is not created, an existing
/// one is not changed (no WAL, no migration), and someone else's SQLite file
/// is refused untouched.
#[test]
fn place_reads_the_ledger_and_never_writes_it() {
    let args = ["place", "--gpu", "H100:8", "--hours", "3", "-o", "json"];
    let dir = tmp("ro");
    let absent = dir.join("absent.sqlite3");
    assert!(!plans(&gpufleet(&args, absent.to_str().unwrap())).is_empty());
    assert!(!absent.exists(), "place created the ledger");

    let ours = dir.join("ledger.sqlite3");
    drop(gpufleet::sqlite::SqliteLedger::open(&ours).unwrap());
    let before = std::fs::read(&ours).unwrap();
    assert!(!plans(&gpufleet(&args, ours.to_str().unwrap())).is_empty());
    assert_eq!(
        std::fs::read(&ours).unwrap(),
        before,
        "place changed the ledger"
    );

    let foreign = dir.join("app.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY);")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let o = gpufleet(&args, foreign.to_str().unwrap());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is not a gpufleet ledger") && err.contains("left untouched"),
        "{err}"
    );
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
}

/// `-o csv` gives CSV where the output is rows (the same rows and columns as
/// the JSON, lists joined with `; `) and is refused, exit 2, where it is a
/// document.
#[test]
fn csv_is_csv_or_refused() {
    let args = ["place", "--gpu", "H100:8", "--hours", "3", "--no-ledger"];
    let json_rows = plans(&gpufleet(
        &[&args[..], &["-o", "json"]].concat(),
        &no_ledger().1,
    ));
    let o = gpufleet(&[&args[..], &["-o", "csv"]].concat(), &no_ledger().1);
    support::ok(&o);
    assert!(o.stdout.starts_with(b"rank,"));
    support::csv_holds_json_rows(&o.stdout, &json_rows);
    for args in [
        vec![
            "launch", "--gpu", "T4:1", "--hours", "1", "--name", "x", "--image", "i", "-o", "csv",
        ],
        vec!["jobs", "show", "x", "-o", "csv"],
    ] {
        let o = gpufleet(&args, &no_ledger().1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("prints a document, not rows"),
            "{args:?}: {err}"
        );
    }
}

/// A negative value is the flag's bad value, named as such (it used to be
/// "unexpected argument '-1' found", naming no flag).
#[test]
fn negative_values_name_their_flag() {
    for (args, flag) in [
        (
            words("place --gpu H100:8 --hours 3 --deadline -1h"),
            "--deadline",
        ),
        (vec!["place", "--gpu", "H100:8", "--hours", "-3"], "--hours"),
        (vec!["offers", "--limit", "-1"], "--limit"),
        (
            words("--provider fake launch --gpu T4:1 --hours 1 --name x --image i --ttl -1h"),
            "--ttl",
        ),
    ] {
        let o = gpufleet(&args, &no_ledger().1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("for '{flag}")), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

/// A budget bounds what the policy expects to spend, never a penalty
/// added to it (issue 79: `--budget 1.5` printed "$71252293.40 expected to
/// finish"): within it, the decision is a real expected cost under the
/// budget; below the cheapest, exit 3 naming the budget and the closest.
#[test]
fn a_budget_excludes_and_is_never_shown_as_a_price() {
    let (_d, ledger) = no_ledger();
    let o = gpufleet(
        &words("place --gpu A10G:1 --hours 6 --deadline 24h --budget 1.5"),
        &ledger,
    );
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let decision = text.lines().next().unwrap();
    let cost: f64 = decision
        .split('$')
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(cost > 0.0 && cost <= 1.5, "{decision}");
    let rows = plans(&gpufleet(
        &words("place --gpu A10G:1 --hours 6 --deadline 24h --budget 1.5 -o json"),
        &ledger,
    ));
    for r in &rows {
        if let Some(c) = r["expected_cost_usd"].as_f64() {
            assert!(c < 100.0, "a penalty shown as a price: {r}");
        }
    }
    let o = gpufleet(
        &words("place --gpu A10G:1 --hours 6 --deadline 24h --budget 1.0"),
        &ledger,
    );
    assert_eq!(o.status.code(), Some(3), "{}", support::stderr(&o));
    let e = support::stderr(&o);
    assert!(
        e.contains("no plan is expected to finish within the $1.00 budget")
            && e.contains("expects $"),
        "{e}"
    );
    let o = gpufleet(
        &words("place --gpu A10G:1 --hours 6 --deadline 24h --budget 1.0 -o json"),
        &ledger,
    );
    assert_eq!(o.status.code(), Some(3), "{}", support::stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows.iter().all(|r| r["chosen"] == false), "{rows:?}");
}
