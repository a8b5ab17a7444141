//! `gpufleet --provider local run`: a managed job whose `run` is a process
//! on this machine, preempted by the fake cloud's script (in real time) and
//! resumed from its own checkpoint on another instance, its records in the
//! local ledger. Bounded: the job is eight half-second steps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use support::{stderr, FakeEnv};

/// A job of eight steps, each written to the checkpoint file `ckpt` and
/// reported as progress; a run starts after the last step recorded.
fn job(env: &FakeEnv) -> std::path::PathBuf {
    let ckpt = env.dir.join("ckpt");
    let file = env.dir.join("steps.toml");
    std::fs::write(
        &file,
        format!(
            r#"name = "steps"
hours = 0.01
deadline = "2h"
checkpoint_interval = "5m"
clouds = ["aws"]
run = """
i=$(cat "$CKPT" 2>/dev/null || echo 0)
while [ "$i" -lt 8 ]; do
  i=$((i + 1)); echo "step $i"; echo "$i" > "$CKPT"
  echo "0.$i" > "$GPUFLEET_PROGRESS_FILE"
  sleep 0.5
done
"""

[env]
CKPT = "{}"

[[gpu]]
model = "L4"
"#,
            ckpt.display()
        ),
    )
    .unwrap();
    file
}

#[test]
fn a_local_job_is_preempted_and_resumes_from_its_checkpoint_on_another_instance() {
    let env = FakeEnv::new("local", "run");
    let file = job(&env);
    std::fs::write(env.dir.join("script"), "2s preempt\n").unwrap();
    let out = env
        .local(&["run", "--job", file.to_str().unwrap(), "-o", "json"])
        .env("GPUFLEET_FAKE_SCRIPT", env.dir.join("script"))
        .env("GPUFLEET_LOG", "error")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["preemptions"], 1, "{done:#}");
    assert_eq!(done["attempts"], 2, "{done:#}");
    assert_eq!(done["detail"], "run exited with 0", "{done:#}");
    assert_eq!(
        std::fs::read_to_string(env.dir.join("ckpt"))
            .unwrap()
            .trim(),
        "8"
    );
    // Each instance's output is in its log: the second started after the
    // first's last step, not again from the first.
    let dir = env.dir.join("local").join("jobs");
    let mut logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    logs.sort_by_key(|l| !l.contains("step 1\n"));
    assert_eq!(logs.len(), 2, "{logs:?}");
    let first_steps = logs[0].matches("step ").count();
    assert!((1..8).contains(&first_steps), "{logs:?}");
    assert!(!logs[1].contains("step 1\n"), "{logs:?}");
    assert!(
        logs[1].contains("step 8\n") && logs[1].contains("gpufleet: run exited with 0"),
        "{logs:?}"
    );
    // The local ledger holds the job's story and its spend.
    let id = done["id"].as_str().unwrap();
    let show = env
        .local(&["jobs", "show", id, "-o", "json"])
        .output()
        .unwrap();
    assert_eq!(show.status.code(), Some(0), "{}", stderr(&show));
    let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    let states: Vec<&str> = show["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert!(states.contains(&"interrupted"), "{states:?}");
    assert_eq!(states.last(), Some(&"succeeded"), "{states:?}");
    // Other commands cannot see a local cloud that lives inside another
    // process: refused, saying which do.
    let ls = env.local(&["ls"]).output().unwrap();
    assert_eq!(ls.status.code(), Some(2), "{}", stderr(&ls));
    assert!(
        stderr(&ls).contains("only those two open it"),
        "{}",
        stderr(&ls)
    );
    // A script line the local provider cannot play is named.
    std::fs::write(env.dir.join("script"), "1s exit 0\n").unwrap();
    let bad = env
        .local(&["run", "--job", file.to_str().unwrap(), "--id", "steps-2"])
        .env("GPUFLEET_FAKE_SCRIPT", env.dir.join("script"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("'exit' cannot be played on the local provider"),
        "{}",
        stderr(&bad)
    );
}
