//! Owners stay apart (issue 78): on one fake cloud and one ledger, Bob's
//! commands that act by id (`terminate ID`, `jobs cancel`, `jobs resume`,
//! `run` of the same job, `reap`, `reconcile`) leave Alice's instances and
//! jobs alone, say so, and act on them only with `--any-owner`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use support::{stderr as err, words, FakeEnv};

use crate::support;

const FRIDAY: &str = "2026-01-09T18:00:00Z";
const LATER: &str = "2026-01-09T21:00:00Z";

fn as_user(env: &FakeEnv, user: &str, now: &str, args: &str) -> std::process::Output {
    let mut c = env.command(now, &words(args));
    c.env("USER", user).stdin(std::process::Stdio::null());
    c.output().unwrap()
}

fn json(o: &std::process::Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}", err(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn live_ids(env: &FakeEnv) -> Vec<String> {
    let ls = env.json_at(LATER, &["ls"]);
    ls.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn another_owners_instance_by_id_is_refused_until_any_owner() {
    let env = FakeEnv::new("own", "terminate");
    let a = json(&as_user(
        &env,
        "alice",
        FRIDAY,
        "launch --gpu A10G:1 --hours 1 --name hers --image img --cloud aws -o json",
    ));
    let id = a["instances"][0]["id"].as_str().unwrap().to_string();
    let o = as_user(&env, "bob", FRIDAY, &format!("terminate {id} --yes"));
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("not yours (bob)") && err(&o).contains("alice's"),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("nothing was terminated"), "{}", err(&o));
    assert_eq!(live_ids(&env), std::slice::from_ref(&id));
    // Its console id too, where it has a region prefix.
    if let Some((_, native)) = id.split_once('/') {
        let o = as_user(&env, "bob", FRIDAY, &format!("terminate {native} --yes"));
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    }
    // Told to: it goes.
    let done = json(&as_user(
        &env,
        "bob",
        FRIDAY,
        &format!("terminate {id} --yes --any-owner -o json"),
    ));
    assert_eq!(done["terminated"], serde_json::json!([id]), "{done}");
}

#[test]
fn another_owners_job_is_not_cancelled_resumed_or_rerun() {
    let env = FakeEnv::new("own", "jobs");
    let file = env.dir.join("job.toml");
    std::fs::write(
        &file,
        "name = \"ft\"\nhours = 6\nclouds = [\"aws\"]\nregions = [\"us-east-1\"]\n[[gpu]]\nmodel = \"A10G\"\n",
    )
    .unwrap();
    let job = file.display().to_string();
    let o = as_user(
        &env,
        "alice",
        FRIDAY,
        &format!("run --job {job} --detach --id ft-alice"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    for cmd in ["jobs cancel ft-alice", "jobs resume ft-alice --poll 1s"] {
        let o = as_user(&env, "bob", FRIDAY, cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", err(&o));
        assert!(
            err(&o).contains("job ft-alice is alice's, not bob's")
                && err(&o).contains("--any-owner"),
            "{cmd}: {}",
            err(&o)
        );
    }
    // Bob running the same id is refused, nothing recorded for him.
    let o = as_user(
        &env,
        "bob",
        FRIDAY,
        &format!("run --job {job} --detach --id ft-alice"),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("is alice's, not bob's"), "{}", err(&o));
    let ls = json(&as_user(&env, "alice", FRIDAY, "jobs ls -o json"));
    let rows = ls["jobs"].as_array().or(ls.as_array()).unwrap().clone();
    let row = rows
        .iter()
        .find(|r| r["id"] == "ft-alice" || r["job_id"] == "ft-alice")
        .unwrap();
    assert_ne!(row["state"], "cancelled", "{row}");
    // Alice's own cancel goes through; Bob's with --any-owner would have.
    let o = as_user(&env, "alice", FRIDAY, "jobs cancel ft-alice");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = as_user(
        &env,
        "bob",
        FRIDAY,
        &format!("run --job {job} --detach --id ft-bob"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = as_user(&env, "alice", FRIDAY, "jobs cancel ft-bob --any-owner");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn reap_leaves_other_owners_expired_instances_alone_and_says_so() {
    let env = FakeEnv::new("own", "reap");
    let b = json(&as_user(
        &env,
        "bob",
        FRIDAY,
        "launch --gpu A10G:1 --hours 1 --name his --image img --cloud aws --ttl 1h -o json",
    ));
    let bobs = b["instances"][0]["id"].as_str().unwrap().to_string();
    let a = json(&as_user(
        &env,
        "alice",
        FRIDAY,
        "launch --gpu A10G:1 --hours 1 --name hers --image img --cloud aws --ttl 1h -o json",
    ));
    let alices = a["instances"][0]["id"].as_str().unwrap().to_string();
    // Both expired by now; Alice's reap ends hers only.
    let done = json(&as_user(
        &env,
        "alice",
        LATER,
        "reap --idle 5m --yes -o json",
    ));
    assert_eq!(done["terminated"], serde_json::json!([alices]), "{done}");
    let left: Vec<&str> = done["left_alone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(left, [bobs.as_str()], "{done}");
    assert!(
        done["left_alone"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("bob's, not alice's"),
        "{done}"
    );
    assert_eq!(live_ids(&env), std::slice::from_ref(&bobs));
    // The table says it too.
    let o = as_user(&env, "alice", LATER, "reap --idle 5m");
    assert!(
        err(&o).contains("1 matching instance(s) of other owners left alone"),
        "{}",
        err(&o)
    );
    // Reconcile as Alice: Bob's expired instance is not hers to end.
    let r = json(&as_user(&env, "alice", LATER, "reconcile --yes -o json"));
    assert!(r["leftovers"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!(live_ids(&env), std::slice::from_ref(&bobs));
    let done = json(&as_user(
        &env,
        "alice",
        LATER,
        "reap --idle 5m --yes --any-owner -o json",
    ));
    assert_eq!(done["terminated"], serde_json::json!([bobs]), "{done}");
}
