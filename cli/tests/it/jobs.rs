//! `gpufleet run` and `gpufleet jobs` on the persistent fake cloud: a job
//! interrupted twice (once reported by the node, once seen from the
//! controller), refused capacity once and moved once completes, with the
//! events in order and nothing left running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use support::{stderr as err, words, FakeEnv};

use serde_json::Value;

use crate::support;

const NOW: &str = "2026-01-05T00:00:00Z";

/// A fake cloud's directory, with a fault script in `script`.
fn env_named(name: &str) -> FakeEnv {
    FakeEnv::new("jobs", name).with_script()
}

/// A checkpointing job in AWS us-east-1: `hours` on `count` `model` GPUs.
fn job_toml(name: &str, hours: u32, (model, count): (&str, u32)) -> String {
    format!(
        "name = \"{name}\"\nhours = {hours}\ncheckpoint_interval = \"30m\"\n\
         clouds = [\"aws\"]\nregions = [\"us-east-1\"]\n\
         [[gpu]]\nmodel = \"{model}\"\ncount = {count}\n"
    )
}

/// The job most tests run: 6 h on one A10G.
fn job() -> String {
    job_toml("ft", 6, ("A10G", 1))
}

#[test]
fn a_job_survives_two_interruptions_a_capacity_error_and_a_move() {
    let env = env_named("survive");
    std::fs::write(env.dir.join("job.toml"), job()).unwrap();
    std::fs::write(
        env.dir.join("script"),
        "1h notice\n3h preempt\n3h capacity-error\n4h price aws:us-east-1/use1-az1:g5.xlarge:spot 0.02\n",
    )
    .unwrap();
    let (done, id) = env.run_job(NOW);
    assert_eq!(done["preemptions"], 2);
    assert_eq!(done["moves"], 1);

    let (show, states) = env.events(NOW, &id, "state");
    assert_eq!(
        states,
        [
            "placing",
            "launching",
            "running", // placed
            "interrupted",
            "launching",
            "running", // the node's notice
            "interrupted",
            "launching",
            "placing",
            // Preempted, then refused once: the next three pools are
            // launched at once, one runs.
            "launching",
            "launching",
            "launching",
            "running",
            "moving",
            "launching",
            "running",
            "moved", // moved to the cheaper pool
            "succeeded",
        ],
        "{show}"
    );
    let (_, details) = env.events(NOW, &id, "detail");
    assert!(details[3].starts_with("node:"), "{}", details[3]);
    assert!(details[6].starts_with("controller:"), "{}", details[6]);
    assert!(
        details[8].contains("insufficient-capacity"),
        "{}",
        details[8]
    );
    assert!(show["cost_per_completed_job_usd"].as_f64().unwrap() > 0.0);
    assert_eq!(show["pools"].as_array().unwrap().len(), 4);

    // Nothing is left running, and ls -o json has the promised fields.
    assert_eq!(env.json_at(NOW, &["ls"]).as_array().unwrap().len(), 0);
    let jobs = env.json_at(NOW, &["jobs", "ls"]);
    let row = &jobs[0];
    for key in words("id name state pool started_at cost_so_far_usd") {
        assert!(row.get(key).is_some(), "jobs ls lacks {key}: {row}");
    }
    let csv = env.run_at(NOW, &["jobs", "ls", "-o", "csv"], None);
    assert_eq!(csv.status.code(), Some(0), "{}", err(&csv));
    support::csv_holds_json_rows(&csv.stdout, jobs.as_array().unwrap());

    // The same command again finds the job done and launches nothing.
    let (_, again) = env.run_job(NOW);
    assert_eq!(again, id);
    assert_eq!(env.events(NOW, &id, "state").1.len(), states.len());
    // So does `--detach`, and says so (it used to say the job was recorded
    // for `jobs serve` to drive).
    let job = env.dir.join("job.toml");
    let detach = ["run", "--job", job.to_str().unwrap(), "--detach"];
    let o = env.run_at(NOW, &detach, None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains(&format!("job {id} already succeeded"))
            && err(&o).contains("nothing to drive"),
        "{}",
        err(&o)
    );
    assert_eq!(env.json_at(NOW, &detach)["state"], "succeeded");
    assert_eq!(env.events(NOW, &id, "state").1.len(), states.len());
}

#[test]
fn a_cancelled_job_leaves_nothing_and_bad_input_creates_nothing() {
    let env = env_named("cancel");
    std::fs::write(env.dir.join("script"), "").unwrap();
    // A job with a bad field is refused before anything is recorded.
    std::fs::write(
        env.dir.join("bad.toml"),
        format!("env = {{ \"1X\" = \"y\" }}\n{}", job()),
    )
    .unwrap();
    let o = env.run_at(
        NOW,
        &["run", "--job", env.dir.join("bad.toml").to_str().unwrap()],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("invalid env name '1X'"), "{}", err(&o));
    let o = env.run_at(
        NOW,
        &[
            "run",
            "--job",
            env.dir.join("job.toml").to_str().unwrap(),
            "--poll",
            "0s",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--poll"), "{}", err(&o));
    // A move review more often than the poll would rank every poll; one
    // over a year was quietly made hourly.
    // A boot grace under the poll could never be seen; one over a day
    // would pay for a silent node all that time.
    for (flag, bad, named) in [
        ("--move-review", "30s", "invalid --move-review 30s"),
        ("--move-review", "400d", "to 365d"),
        ("--boot-grace", "30s", "invalid --boot-grace 30s"),
        ("--boot-grace", "2d", "to 24h"),
    ] {
        let job = env.dir.join("job.toml");
        let o = env.run_at(
            NOW,
            &["run", "--job", job.to_str().unwrap(), flag, bad],
            None,
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", err(&o));
        assert!(err(&o).contains(named), "{bad}: {}", err(&o));
    }
    // With --detach another controller drives the job with its own
    // settings: the flags of driving were silently ignored, and so was
    // `jobs serve --down-on-exit`.
    let file = env.dir.join("job.toml");
    for extra in [
        ["--poll", "5s"],
        ["--boot-grace", "0s"],
        ["--down-on-exit", "--detach"],
    ] {
        let mut args = vec!["run", "--job", file.to_str().unwrap(), "--detach"];
        args.extend(extra.iter().filter(|a| **a != "--detach"));
        let o = env.run_at(NOW, &args, None);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", err(&o));
        assert!(
            err(&o).contains("'--detach' cannot be used with"),
            "{extra:?}: {}",
            err(&o)
        );
    }
    let o = env.run_at(NOW, &["jobs", "serve", "--down-on-exit"], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    // A region no cloud has, or the library's `fake` cloud, is named as a
    // flag would be (it used to be recorded nowhere with "no offer
    // satisfies the job among 0 considered: ", naming nothing).
    for (from, to, named) in [
        ("\"us-east-1\"", "\"mars-1\"", "unknown region 'mars-1'"),
        ("[\"aws\"]", "[\"fake\"]", "unknown cloud 'fake'"),
    ] {
        let file = env.dir.join("where.toml");
        std::fs::write(&file, job().replace(from, to)).unwrap();
        let o = env.run_at(NOW, &["run", "--job", file.to_str().unwrap()], None);
        assert_eq!(o.status.code(), Some(2), "{to}: {}", err(&o));
        assert!(
            err(&o).contains(named) && err(&o).contains("where.toml"),
            "{to}: {}",
            err(&o)
        );
    }
    assert!(
        !env.dir.join("ledger.sqlite3").exists(),
        "a refused run wrote the ledger"
    );
    // A job no pool can finish by its deadline (6 h of A10G work in 1 h)
    // is refused as `place` refuses it, exit 3, and not recorded: the
    // controller used to record it and wait for capacity until the deadline
    // passed, then fail it as "past its deadline".
    std::fs::write(
        env.dir.join("tight.toml"),
        format!("deadline = \"1h\"\n{}", job()),
    )
    .unwrap();
    let tight = env.dir.join("tight.toml");
    let o = env.run_at(NOW, &["run", "--job", tight.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        err(&o).contains("was not recorded") && err(&o).contains("misses the 1h deadline"),
        "{}",
        err(&o)
    );
    assert!(env
        .json_at(NOW, &["jobs", "ls"])
        .as_array()
        .unwrap()
        .is_empty());
    let o = env.run_at(NOW, &["jobs", "cancel", "nope"], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("no job 'nope'"), "{}", err(&o));
}

/// A `run` that exits non-zero is started again up to
/// `max_restarts_on_errors` times (not counted against the pool), then the
/// job fails with the exit code; without restarts it fails at once.
#[test]
fn a_failing_run_is_restarted_as_often_as_asked_then_fails() {
    let env = env_named("restarts");
    let with = |n: u32| format!("{}\nmax_restarts_on_errors = {n}\n", job());
    // The job file's keys come before its tables: put the setting first.
    let file = |n: u32| {
        let body = with(n);
        let (head, tables) = body.split_once("[[gpu]]").unwrap();
        let (tables, setting) = tables.split_once("\nmax_restarts_on_errors").unwrap();
        format!("{head}max_restarts_on_errors{setting}\n[[gpu]]{tables}")
    };
    std::fs::write(env.dir.join("script"), "1h exit 3\n2h exit 0\n").unwrap();
    std::fs::write(env.dir.join("job.toml"), file(1)).unwrap();
    let (done, id) = env.run_job(NOW);
    let (_, details) = env.events(NOW, &id, "detail");
    assert!(
        details
            .iter()
            .any(|d| d.contains("run exited with 3; restart 1 of 1")),
        "{details:?}"
    );
    assert_eq!(done["preemptions"], 0, "{done}");
    assert_eq!(done["restarts"], 1, "{done}");
    assert_eq!(env.json_at(NOW, &["ls"]).as_array().unwrap().len(), 0);
    // The same command again names the same job, already over: said so, and
    // how to run it again, with nothing launched (it read as a new run).
    let job = env.dir.join("job.toml");
    let o = env.run_at(NOW, &["run", "--job", job.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains(&format!("job {id} already ended (succeeded at "))
            && err(&o).contains("nothing was launched")
            && err(&o).contains("--id ft-2"),
        "{}",
        err(&o)
    );
    let (_, again) = env.events(NOW, &id, "detail");
    assert_eq!(again, details);

    // No restarts left: the second failure ends the job.
    let env = env_named("restarts-0");
    std::fs::write(env.dir.join("script"), "1h exit 3\n").unwrap();
    std::fs::write(env.dir.join("job.toml"), file(0)).unwrap();
    let job = env.dir.join("job.toml");
    let o = env.run_at(
        NOW,
        &["run", "--job", job.to_str().unwrap(), "-o", "json"],
        None,
    );
    let done: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(done["state"], "failed", "{}: {}", err(&o), done);
    assert_eq!(env.json_at(NOW, &["ls"]).as_array().unwrap().len(), 0);
    // In a table, the failure is said once, on the summary line (it was
    // said again as `error: …`), and the exit code is 1.
    let env2 = env_named("restarts-0-table");
    std::fs::write(env2.dir.join("script"), "1h exit 3\n").unwrap();
    std::fs::write(env2.dir.join("job.toml"), file(0)).unwrap();
    let job2 = env2.dir.join("job.toml");
    let o = env2.run_at(NOW, &["run", "--job", job2.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let said = err(&o).matches(" failed: ").count();
    assert_eq!(said, 1, "{}", err(&o));
    // Each transition shows as it is recorded: launching, running on its
    // instance, and the end.
    let printed = err(&o);
    let lines: Vec<&str> = printed.lines().filter(|l| l.starts_with("  20")).collect();
    let states: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(states, ["launching", "running", "failed"], "{printed}");
    assert!(lines[1].contains("  on "), "{}", lines[1]);
    assert!(lines[2].ends_with("run exited with 3"), "{}", lines[2]);

    // More than the bound is refused, naming it.
    std::fs::write(env.dir.join("job.toml"), file(1000)).unwrap();
    let o = env.run_at(NOW, &["run", "--job", job.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("max_restarts_on_errors 1000"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_jobs_measured_gpu_use_is_shown_and_right_sizes_it() {
    let env = env_named("rightsize");
    // Eight A100s holding 6 GB each and 9 % busy: a job that needs far less.
    let oversized = job_toml("oversized", 4, ("A100", 8));
    std::fs::write(env.dir.join("job.toml"), oversized).unwrap();
    std::fs::write(env.dir.join("script"), "1m gpu 9 6000\n").unwrap();
    let (_, id) = env.run_job(NOW);

    let show = env.json_at(NOW, &["jobs", "show", &id]);
    let u = &show["gpu_usage"];
    assert_eq!(u["gpus_per_instance"], 8, "{show}");
    assert_eq!(u["peak_memory_mib"], 6000);
    assert_eq!(u["mean_util_pct"], 9.0);
    assert!(u["measured_hours"].as_f64().unwrap() > 3.0, "{u}");
    let o = env.run_at(NOW, &["jobs", "show", &id], None);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("gpu use    9% mean"), "{text}");

    let fit = env.json_at(NOW, &["fit", "--from-job", &id]);
    let r = &fit["report"];
    assert_eq!(r["bound"], "memory", "{fit}");
    let current = r["current"]["monthly_usd"].as_f64().unwrap();
    let best = &r["options"][0];
    assert_ne!(best["instance_type"], "p4d.24xlarge", "{fit}");
    assert_eq!(best["gpus"], 8);
    assert!(best["gpu_memory_gib"].as_u64().unwrap() as f64 >= 6000.0 * 1.2 / 1024.0);
    assert!(best["monthly_usd"].as_f64().unwrap() < current, "{fit}");
    assert!(best["saving_monthly_usd"].as_f64().unwrap() > 0.0);
    // Only GPUs an A100 (Ampere, CUDA) job can move to: no retired K80, no
    // GRID-class M60, no AMD MI25, nothing older than Ampere; each one left
    // out is named with why.
    let suggested: Vec<&str> = r["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["gpu"].as_str().unwrap())
        .collect();
    for old in ["K80", "M60", "MI25", "V100", "T4", "P100"] {
        assert!(!suggested.contains(&old), "{old} suggested: {suggested:?}");
    }
    let left = fit["left_out"].as_array().unwrap();
    let named = |m: &str| {
        left.iter()
            .any(|l| l.as_str().unwrap().starts_with(&format!("{m} (")))
    };
    assert!(named("K80") && named("MI25") && named("V100"), "{left:?}");
    let asked = env.json_at(
        NOW,
        &["fit", "--from-job", &id, "--gpu", "T4", "--limit", "0"],
    );
    let options = asked["report"]["options"].as_array().unwrap();
    assert!(
        options.iter().any(|o| o["gpu"] == "T4")
            && options
                .iter()
                .all(|o| o["gpu"] == "T4" || o["current"] == true),
        "{asked}"
    );
    // Tables for people; a job never measured, or unknown, is a clear error.
    let o = env.run_at(NOW, &["fit", "--from-job", &id], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(err(&o).contains("not compute-bound"), "{}", err(&o));
    let o = env.run_at(NOW, &["fit", "--from-job", "nope"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("no job 'nope'"), "{}", err(&o));
    let o = env.run_at(NOW, &["fit", "--from-job", &id, "--headroom", "9"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("invalid headroom 9"), "{}", err(&o));
}

/// With no ledger configured, the fake cloud keeps its jobs in a ledger of its
/// own beside its state file: a job tried on it (`--provider fake run
/// --detach`, as the README suggests) is not in the real clouds' ledger, where
/// a live `jobs serve` would have launched it on a real cloud, and its pools'
/// evidence (named as real pools) does not reach live rankings.
#[test]
fn the_fake_cloud_keeps_its_jobs_out_of_the_real_clouds_ledger() {
    let home = support::TempDir::new("jobs", "own-ledger");
    std::fs::write(home.join("job.toml"), job()).unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(args)
            .args(["-o", "json"])
            .env("HOME", &*home)
            .env("XDG_DATA_HOME", home.join("data"))
            .env("GPUFLEET_CONFIG", home.join("gpufleet.toml"))
            .env("GPUFLEET_FAKE_NOW", NOW)
            .env_remove("GPUFLEET_LEDGER")
            .env_remove("GPUFLEET_FAKE_STATE")
            .env_remove("GPUFLEET_LOG")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", err(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let job = home.join("job.toml");
    let detached = run(&[
        "--provider",
        "fake",
        "run",
        "--job",
        job.to_str().unwrap(),
        "--detach",
    ]);
    assert_eq!(detached["state"], "placing");
    assert_eq!(
        run(&["--provider", "fake", "jobs", "ls"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        run(&["jobs", "ls"]).as_array().unwrap().len(),
        0,
        "the real clouds' ledger holds a fake job"
    );
    // Where each is, and that the fake one sits beside the fake state.
    let ledger_of = |provider: &str| {
        let rows = run(&["--provider", provider, "config", "show"]);
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == "ledger")
            .cloned()
            .unwrap_or_else(|| panic!("no ledger row in {rows}"));
        row["value"].as_str().unwrap().to_string()
    };
    let data = home.join("data").join("gpufleet");
    assert_eq!(
        ledger_of("fake"),
        data.join("fake-cloud.ledger.sqlite3").display().to_string()
    );
    assert_eq!(
        ledger_of("live"),
        data.join("ledger.sqlite3").display().to_string()
    );
}

/// Ctrl-C (or SIGHUP) on `run` detaches: the job keeps its instance, and the two ways
/// on that the message names both work. `jobs cancel` used to fail there
/// (the lease was given up, the cancel carried its token); `jobs resume
/// --down-on-exit` then Ctrl-C cancels and gives its lease up (`jobs ls`
/// named the gone process as the cancelled job's driver).
#[test]
fn after_ctrl_c_the_job_can_be_cancelled_or_resumed_and_brought_down() {
    use gpufleet::ledger::{JobState, Ledger};
    let env = FakeEnv::new("jobs", "ctrl-c");
    std::fs::write(env.dir.join("job.toml"), job_toml("long", 200, ("A10G", 1))).unwrap();
    let job = env.dir.join("job.toml");
    let ledger = env.ledger();
    // Starts `args`; once the job runs and the process drives it (holds
    // its lease, so its Ctrl-C handler is in place), sends Ctrl-C.
    let interrupt = |sig: &str, args: &[&str]| {
        support::signal_when(
            env.command(NOW, args),
            sig,
            &ledger,
            std::time::Duration::from_secs(30),
            std::time::Duration::from_millis(300),
            "the job never ran",
            |l| {
                let last = futures::executor::block_on(l.jobs()).ok()?.last()?.clone();
                let leases = futures::executor::block_on(l.leases()).ok()?;
                let now = time::OffsetDateTime::now_utc();
                Some(
                    last.state == JobState::Running
                        && leases
                            .iter()
                            .any(|l| l.job_id == last.job_id && l.is_live(now)),
                )
            },
        )
    };
    let o = interrupt(
        "INT",
        &["run", "--job", job.to_str().unwrap(), "--poll", "1s"],
    );
    assert!(err(&o).contains("detached: job"), "{}", err(&o));
    let id = env.json_at(NOW, &["jobs", "ls"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(env.json_at(NOW, &["ls"]).as_array().unwrap().len(), 1);
    let o = env.run_at(NOW, &["jobs", "cancel", &id], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(env.json_at(NOW, &["ls"]).as_array().unwrap().is_empty());
    assert_eq!(env.json_at(NOW, &["jobs", "ls"])[0]["state"], "cancelled");
    // Resuming an ended job says so (it printed the outcome as if it had
    // driven the job, "cancelled: cancelled").
    let o = env.run_at(NOW, &["jobs", "resume", &id], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains(&format!("job {id} already ended (cancelled at "))
            && err(&o).contains("nothing to resume")
            && !err(&o).contains("cancelled: cancelled"),
        "{}",
        err(&o)
    );

    // Again, under another id, closing its terminal (SIGHUP), then resumed
    // with --down-on-exit and stopped by a service manager (SIGTERM).
    let o = interrupt(
        "HUP",
        &[
            "run",
            "--job",
            job.to_str().unwrap(),
            "--id",
            "long-2",
            "--poll",
            "1s",
        ],
    );
    assert!(err(&o).contains("detached: job long-2"), "{}", err(&o));
    let o = interrupt(
        "TERM",
        &["jobs", "resume", "long-2", "--poll", "1s", "--down-on-exit"],
    );
    assert!(
        err(&o).contains("interrupted (SIGTERM): cancelling job long-2"),
        "{}",
        err(&o)
    );
    assert!(env.json_at(NOW, &["ls"]).as_array().unwrap().is_empty());
    let jobs = env.json_at(NOW, &["jobs", "ls"]);
    let row = support::row(&jobs, "id", "long-2");
    assert_eq!(row["state"], "cancelled");
    assert!(row["driven_by"].is_null(), "{row}");
}

/// One placer: for the same catalog, evidence and job, `place --live -o
/// json` chooses the pool that `run` then launches first. The ledger holds
/// an interruption from an earlier job, so the evidence counts.
#[test]
fn place_live_chooses_where_run_launches_first() {
    let env = env_named("agree");
    std::fs::write(env.dir.join("job.toml"), job()).unwrap();
    std::fs::write(env.dir.join("script"), "1h preempt\n").unwrap();
    let (done, _) = env.run_job(NOW);
    assert_eq!(done["preemptions"], 1, "{done}");
    std::fs::write(env.dir.join("script"), "").unwrap();
    let later = "2026-01-05T12:00:00Z";
    let job2 = job_toml("second", 4, ("A10G", 1)).replace(
        "clouds = [\"aws\"]\n",
        "clouds = [\"aws\"]\ndeadline = \"12h\"\n",
    );
    let file = env.dir.join("second.toml");
    std::fs::write(&file, job2).unwrap();
    let file = file.to_str().unwrap();
    let rows = env.json_at(later, &["place", "--job", file, "--live"]);
    let chosen: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["chosen"] == true)
        .collect();
    assert_eq!(chosen.len(), 1, "{rows}");
    let r = chosen[0];
    let pool = support::pool_of(r);
    let done = env.json_at(later, &["run", "--job", file]);
    assert_eq!(done["state"], "succeeded", "{done}");
    let id = done["id"].as_str().unwrap();
    let (show, states) = env.events(later, id, "state");
    let first = states.iter().position(|s| s == "launching").unwrap();
    assert_eq!(
        show["events"][first]["pool"].as_str().unwrap(),
        pool,
        "{show}"
    );
}

/// `[secrets]`: the ledger holds the references and never a value (there is
/// none to hold), `jobs show` names the secrets and their clouds only, a
/// node that could not read them fails the job saying so (not "run exited
/// with secrets"), and a bad reference is refused before anything is
/// recorded or launched.
#[test]
fn a_jobs_secrets_are_references_shown_by_name() {
    let env = env_named("secrets");
    let body = job();
    let secrets = "[secrets]\nHF_TOKEN = \"ssm:/ml/hf-token\"\nWANDB_API_KEY = { aws = \"arn:aws:secretsmanager:us-east-1:123456789012:secret:wandb-AbCdEf\", gcp = \"projects/ml/secrets/wandb\" }\n";
    std::fs::write(env.dir.join("job.toml"), format!("{body}{secrets}")).unwrap();
    std::fs::write(env.dir.join("script"), "1h exit secrets\n").unwrap();
    let job = env.dir.join("job.toml");
    let o = env.run_at(
        NOW,
        &["run", "--job", job.to_str().unwrap(), "-o", "json"],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let done: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(done["state"], "failed", "{done}");
    let id = done["id"].as_str().unwrap().to_string();
    let (_, details) = env.events(NOW, &id, "detail");
    assert!(
        details.iter().any(|d| d
            == &format!(
                "the node could not read the job's secrets (`gpufleet jobs logs {id}` names which)"
            )),
        "{details:?}"
    );
    let shown = env.json_at(NOW, &["jobs", "show", &id]);
    assert_eq!(
        shown["secrets"],
        serde_json::json!([
            {"name": "HF_TOKEN", "clouds": ["aws"]},
            {"name": "WANDB_API_KEY", "clouds": ["aws", "gcp"]}
        ]),
        "{shown}"
    );
    let o = env.run_at(NOW, &["jobs", "show", &id], None);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("secrets    HF_TOKEN (aws), WANDB_API_KEY (aws, gcp)\n"),
        "{table}"
    );
    assert!(
        !table.contains("ssm:") && !table.contains("arn:"),
        "{table}"
    );

    // A reference of the wrong form: exit 2, nothing recorded.
    let bad = env_named("secrets-bad");
    std::fs::write(
        bad.dir.join("job.toml"),
        format!("{body}[secrets]\nHF_TOKEN = \"vault:hf\"\n"),
    )
    .unwrap();
    let job = bad.dir.join("job.toml");
    let o = bad.run_at(NOW, &["run", "--job", job.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("invalid secret reference \"vault:hf\""),
        "{}",
        err(&o)
    );
    assert!(bad
        .json_at(NOW, &["jobs", "ls"])
        .as_array()
        .unwrap()
        .is_empty());
    assert!(bad.json_at(NOW, &["ls"]).as_array().unwrap().is_empty());
}

/// `costs` reads the fake cloud's clock, where a scripted run left it
/// (issue 79: it read the wall clock while the fake clock ran hours ahead,
/// so the bill and `jobs ls` agreed to the micro-dollar and `costs` showed
/// a fraction of it and one instance of three).
#[test]
fn costs_read_the_fake_clouds_clock_after_a_scripted_run() {
    let env = env_named("clock");
    std::fs::write(env.dir.join("job.toml"), job()).unwrap();
    std::fs::write(env.dir.join("script"), "1h preempt\n3h preempt\n").unwrap();
    let wall = |args: &[&str]| {
        let mut c = env.command(NOW, args);
        c.env_remove("GPUFLEET_FAKE_NOW");
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", err(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let job = env.dir.join("job.toml");
    let done = wall(&["run", "--job", job.to_str().unwrap(), "-o", "json"]);
    assert_eq!(done["state"], "succeeded", "{done}");
    let ls = wall(&["jobs", "ls", "-o", "json"]);
    let row = &ls.as_array().unwrap()[0];
    let costs = wall(&["costs", "--by", "job", "-o", "json"]);
    let total = costs["total"]["cost_usd"].as_f64().unwrap();
    let listed = row["cost_so_far_usd"].as_f64().unwrap();
    assert!(
        (total - listed).abs() < 0.01,
        "costs {total} vs jobs ls {listed}: {costs}"
    );
    assert_eq!(costs["total"]["instances"], 3, "{costs}");
    assert_eq!(costs["completed_jobs"], 1, "{costs}");
    assert!(
        (costs["cost_per_completed_job"].as_f64().unwrap() - listed).abs() < 0.01,
        "{costs}"
    );
}
