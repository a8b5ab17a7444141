//! `gpufleet serve` as a user runs it: a bad service file is refused with
//! the key and the valid range, a provider that cannot serve is refused
//! with what to use, and `--provider local` serves examples/services/echo.toml
//! on 127.0.0.1 until Ctrl-C takes it down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{signal, stderr, FakeEnv};

const ECHO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/services/echo.toml"
);

#[test]
fn a_bad_service_file_is_refused_with_the_key_and_the_range() {
    let env = FakeEnv::new("serve", "bad");
    let file = env.dir.join("bad.toml");
    let text = std::fs::read_to_string(ECHO)
        .unwrap()
        .replace("max = 3", "max = 0");
    std::fs::write(&file, text).unwrap();
    let out = env
        .command(
            "2026-01-01T00:00:00Z",
            &["serve", "--service", file.to_str().unwrap()],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("replicas.max = 0: expected 1 to 1000"),
        "{}",
        stderr(&out)
    );

    let text = std::fs::read_to_string(ECHO)
        .unwrap()
        .replace("extra = 1", "extra = 1\nspare = 2");
    std::fs::write(&file, text).unwrap();
    let out = env
        .command(
            "2026-01-01T00:00:00Z",
            &["serve", "--service", file.to_str().unwrap()],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown field `spare`"),
        "{}",
        stderr(&out)
    );

    // The fake cloud runs nothing: serving there is refused, saying what to use.
    let out = env
        .command(
            "2026-01-01T00:00:00Z",
            &["serve", "--service", ECHO, "--listen", "127.0.0.1:0"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("use --provider local"),
        "{}",
        stderr(&out)
    );

    // Which address replicas are reached at: private or public.
    let out = env
        .command(
            "2026-01-01T00:00:00Z",
            &["serve", "--service", ECHO, "--reach", "internal"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown address 'internal': use private or public"),
        "{}",
        stderr(&out)
    );
}

/// A GET through the proxy, with std's socket (the test's own client).
fn get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn the_local_provider_serves_the_echo_example_until_ctrl_c() {
    let env = FakeEnv::new("serve", "local");
    let addr = free_addr();
    let metrics_addr = free_addr();
    let (child, lines) =
        serve_until_ready(&env, &addr, &["-o", "json", "--metrics", &metrics_addr]);
    let answer = get(&addr, "/hi?ms=10");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("echo "), "{answer}");
    // The metrics on their own address only; the service's /-/metrics is
    // the replica's.
    let metrics = get(&metrics_addr, "/metrics");
    assert!(
        metrics.contains("gpufleet_service_requests_total{code=\"200\"} 1"),
        "{metrics}"
    );
    let theirs = get(&addr, "/-/metrics");
    assert!(
        theirs.contains("echo ") && !theirs.contains("gpufleet_service"),
        "{theirs}"
    );
    signal(&child, "INT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{rest:#?}");
    assert!(
        rest.iter().any(|l| l.contains("taking the service down")),
        "{rest:#?}"
    );
    let last: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let replicas = last["replicas"].as_array().unwrap();
    assert!(!replicas.is_empty());
    assert!(replicas.iter().all(|r| r["state"] == "ended"), "{last:#}");
    assert!(replicas
        .iter()
        .any(|r| r["ended_because"] == "the service was taken down"));
    // What the replicas cost is in the (local) ledger of spend, by service.
    spent_on_replicas(&env, replicas.len());
}

/// Checks that `costs --by job` counts `n` instances for service `echo`,
/// none running.
fn spent_on_replicas(env: &FakeEnv, n: usize) {
    let costs = json_of(
        &env.local(&["costs", "--by", "job", "-o", "json"])
            .output()
            .unwrap(),
    );
    let row = costs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r.to_string().contains("service:echo"))
        .unwrap_or_else(|| panic!("{costs:#}"));
    assert_eq!(row["instances"].as_u64(), Some(n as u64), "{row:#}");
    assert_eq!(row["running"].as_u64(), Some(0), "{row:#}");
}

/// `gpufleet --provider local serve` of the example on `addr` (with
/// `extra` arguments), once it says two replicas are ready (within 60 s);
/// the rest of what it prints is left in the lines returned.
fn serve_until_ready(
    env: &FakeEnv,
    addr: &str,
    extra: &[&str],
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStderr>>,
) {
    let mut args = vec!["serve", "--service", ECHO, "--listen", addr];
    args.extend_from_slice(extra);
    let mut child = env
        .local(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let started = Instant::now();
    let mut seen = Vec::new();
    let failed = loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("ready 2") => return (child, lines),
            Some(Ok(line)) => seen.push(line),
            _ => break "serve stopped before two replicas were ready",
        }
        if started.elapsed() > Duration::from_secs(60) {
            break "no two replicas ready within 60 s";
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    panic!("{failed}: {seen:#?}");
}

/// A free address of 127.0.0.1 for a proxy.
fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `serve status echo -o json`.
fn status_of(env: &FakeEnv) -> serde_json::Value {
    json_of(
        &env.local(&["serve", "status", "echo", "-o", "json"])
            .output()
            .unwrap(),
    )
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A service served in one process is seen and steered from others through
/// the ledger: `serve ls` and `serve status -o json` show it and its
/// replicas' states; a second `serve` of it is refused naming the first;
/// `serve update` rolls a new version out and says so; `serve down` takes
/// it down (the serving process exits 0 with every replica ended); then
/// `ls` says down, and asking again, or about a service that does not
/// exist, is refused saying why. Served again, its new replicas are new
/// instances in the ledger of spend, which counts both runs.
#[test]
fn serve_ls_status_update_and_down_work_from_another_process() {
    let env = FakeEnv::new("serve", "ops");
    let addr = free_addr();
    let (mut child, lines) = serve_until_ready(&env, &addr, &[]);
    // The rest of what it prints is kept for the end.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let ls = json_of(&env.local(&["serve", "ls", "-o", "json"]).output().unwrap());
    let row = &ls[0];
    assert_eq!(row["name"], "echo", "{ls:#}");
    assert_eq!(row["state"], "serving", "{ls:#}");
    assert_eq!(row["listen"], addr.as_str(), "{ls:#}");
    let table = env.local(&["serve", "ls"]).output().unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).contains("serving"));
    let status = status_of(&env);
    let replicas = status["replicas"].as_array().unwrap();
    assert!(
        replicas.iter().filter(|r| r["state"] == "ready").count() >= 2,
        "{status:#}"
    );
    assert!(status["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "replica" && e["what"]["state"] == "ready"));

    // A second controller of the same service is refused, naming the first.
    let twice = env
        .local(&["serve", "--service", ECHO, "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(twice.status.code(), Some(1), "{}", stderr(&twice));
    assert!(
        stderr(&twice).contains("served by another controller"),
        "{}",
        stderr(&twice)
    );

    // A new version, rolled out from another process.
    let v2 = env.dir.join("echo-v2.toml");
    let text = std::fs::read_to_string(ECHO).unwrap().replace(
        "readiness = \"/health\"",
        "readiness = \"/health\"\nenv = { VERSION = \"2\" }",
    );
    std::fs::write(&v2, text).unwrap();
    let update = env
        .local(&[
            "serve",
            "update",
            "--service",
            v2.to_str().unwrap(),
            "--wait",
            "3m",
        ])
        .output()
        .unwrap();
    assert_eq!(update.status.code(), Some(0), "{}", stderr(&update));
    let said = String::from_utf8_lossy(&update.stdout).into_owned();
    assert!(said.contains("echo version 2: promoted"), "{said}");

    // Taken down from another process: the serving one exits 0.
    let down = env.local(&["serve", "down", "echo"]).output().unwrap();
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert!(
        String::from_utf8_lossy(&down.stdout).contains("echo is down"),
        "{}",
        String::from_utf8_lossy(&down.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            Instant::now() < deadline,
            "serve did not exit after `serve down`"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let rest = rest.join().unwrap();
    assert_eq!(code, Some(0), "{rest:#?}");
    let ls = json_of(&env.local(&["serve", "ls", "-o", "json"]).output().unwrap());
    assert_eq!(ls[0]["state"], "down", "{ls:#}");
    let status = status_of(&env);
    assert!(status["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["state"] == "ended"));
    assert_eq!(status["version"], 2, "{status:#}");

    // Asking again, or about a service there is not, is refused saying why.
    let again = env.local(&["serve", "down", "echo"]).output().unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("service echo is down"),
        "{}",
        stderr(&again)
    );
    // Without --provider local, another ledger is read: the local one is
    // named for what is not found there.
    let elsewhere = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(args)
            .env("GPUFLEET_CONFIG", env.dir.join("gpufleet.toml"))
            .env("GPUFLEET_FAKE_STATE", env.state())
            // The clouds' ledger in its default place, under a data
            // directory of the test's own.
            .env_remove("GPUFLEET_LEDGER")
            .env("XDG_DATA_HOME", env.dir.join("data"))
            .env_remove("GPUFLEET_PROVIDER")
            .env_remove("GPUFLEET_LOG")
            .output()
            .unwrap()
    };
    let missed = elsewhere(&["serve", "status", "echo"]);
    assert_eq!(missed.status.code(), Some(1), "{}", stderr(&missed));
    assert!(
        stderr(&missed).contains("no service named 'echo'")
            && stderr(&missed).contains("add --provider local"),
        "{}",
        stderr(&missed)
    );
    let none = elsewhere(&["serve", "ls"]);
    assert_eq!(none.status.code(), Some(0), "{}", stderr(&none));
    assert!(
        stderr(&none).contains("add --provider local"),
        "{}",
        stderr(&none)
    );
    let nope = env.local(&["serve", "status", "nope"]).output().unwrap();
    assert_ne!(nope.status.code(), Some(0));
    assert!(
        stderr(&nope).contains("no service named 'nope'") && stderr(&nope).contains("echo"),
        "{}",
        stderr(&nope)
    );
    let first_run = status["replicas"].as_array().unwrap().len();

    // Served again (its lease was given up): the new run's replicas are
    // new instances, and the ledger of spend counts both runs' replicas.
    let (mut again, _lines) = serve_until_ready(&env, &addr, &[]);
    let ls = json_of(&env.local(&["serve", "ls", "-o", "json"]).output().unwrap());
    assert_eq!(ls[0]["state"], "serving", "{ls:#}");
    assert_eq!(ls[0]["version"], 1, "{ls:#}");
    let down = env.local(&["serve", "down", "echo"]).output().unwrap();
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert_eq!(again.wait().unwrap().code(), Some(0));
    let status = status_of(&env);
    let second_run = status["replicas"].as_array().unwrap().len();
    spent_on_replicas(&env, first_run + second_run);

    // CSV is for rows: `serve ls` gives it, `serve status` refuses it.
    let csv = env.local(&["serve", "ls", "-o", "csv"]).output().unwrap();
    assert_eq!(csv.status.code(), Some(0), "{}", stderr(&csv));
    assert!(String::from_utf8_lossy(&csv.stdout).starts_with("name,state"));
    let bad = env
        .local(&["serve", "status", "echo", "-o", "csv"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

/// A `serve` killed with SIGKILL (no drop, no Ctrl-C handler runs) leaves
/// no replica serving on this machine: each ends within seconds. Its
/// service is `stopped` once the lease lapses: an update waiting on it is
/// told so, and `serve down` marks it down.
#[test]
fn a_killed_serve_leaves_no_replica_serving() {
    let env = FakeEnv::new("serve", "killed");
    let addr = free_addr();
    let (mut child, _lines) = serve_until_ready(&env, &addr, &[]);
    let status = status_of(&env);
    let endpoints: Vec<String> = status["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "ready")
        .filter_map(|r| r["endpoint"].as_str().map(str::to_string))
        .collect();
    assert!(endpoints.len() >= 2, "{status:#}");
    for e in &endpoints {
        assert!(std::net::TcpStream::connect(e).is_ok(), "{e} answers");
    }
    signal(&child, "KILL");
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    for e in &endpoints {
        while std::net::TcpStream::connect(e).is_ok() {
            assert!(
                Instant::now() < deadline,
                "replica {e} still serving 15 s after its controller was killed"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // An update asked of it now is accepted while the dead controller's
    // lease lives, then answered once the lease lapses (15 s): no outcome,
    // the service is stopped. A take-down marks it down at once.
    let update = env
        .local(&["serve", "update", "--service", ECHO, "--wait", "2m"])
        .output()
        .unwrap();
    assert_eq!(update.status.code(), Some(1), "{}", stderr(&update));
    assert!(
        stderr(&update).contains("has no outcome: the service is stopped now"),
        "{}",
        stderr(&update)
    );
    assert_eq!(status_of(&env)["state"], "stopped");
    let down = env.local(&["serve", "down", "echo"]).output().unwrap();
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert_eq!(status_of(&env)["state"], "down");
    // The ledger of spend still holds the killed run's replicas as running
    // (issue 79: for ever, at $0.444/h): `reconcile --provider local` ends
    // them at the last second their run said it lived, once asked to.
    let json = |args: &[&str]| {
        let o = env.local(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let running = |c: &serde_json::Value| c["total"]["running"].as_u64().unwrap();
    assert!(running(&json(&["costs", "-o", "json"])) >= 2);
    let dry = json(&["reconcile", "-o", "json"]);
    assert_eq!(dry["applied"], false);
    assert!(dry["ended"].as_array().unwrap().len() >= 2, "{dry:#}");
    let done = json(&["reconcile", "--yes", "-o", "json"]);
    assert_eq!(
        done["ended"].as_array().unwrap().len(),
        dry["ended"].as_array().unwrap().len()
    );
    for e in done["ended"].as_array().unwrap() {
        assert!(
            e["reason"].as_str().unwrap().contains("gpufleet process"),
            "{e}"
        );
    }
    assert_eq!(running(&json(&["costs", "-o", "json"])), 0);
}

/// Reads `lines` until one contains `what` (within `within`), panicking
/// with what was read otherwise.
fn wait_line(
    lines: &mut std::io::Lines<BufReader<std::process::ChildStderr>>,
    what: &str,
    within: Duration,
) {
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < within {
        match lines.next() {
            Some(Ok(line)) if line.contains(what) => return,
            Some(Ok(line)) => seen.push(line),
            _ => break,
        }
    }
    panic!("no line with '{what}' within {within:?}: {seen:#?}");
}

/// `serve --standby` of the example on a free address, once it says it
/// stands by.
fn standby(
    env: &FakeEnv,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStderr>>,
    String,
) {
    let addr = free_addr();
    let mut child = env
        .local(&["serve", "--service", ECHO, "--listen", &addr, "--standby"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    wait_line(
        &mut lines,
        "standing by: service echo is served by another controller",
        Duration::from_secs(30),
    );
    (child, lines, addr)
}

/// A second `serve --standby` waits while the first serves, takes the
/// service over once the first is killed and its lease lapses, and serves
/// it; a third standing by when the service is taken down (`serve down`)
/// does not bring it back.
#[test]
fn a_standby_controller_takes_the_service_over_and_down_stays_down() {
    let env = FakeEnv::new("serve", "standby");
    let first = free_addr();
    let (mut a, _a_lines) = serve_until_ready(&env, &first, &[]);
    let (mut b, mut b_lines, second) = standby(&env);
    signal(&a, "KILL");
    a.wait().unwrap();
    // The lease lapses (15 s), then the standby serves.
    wait_line(
        &mut b_lines,
        "took service echo over: serving it",
        Duration::from_secs(45),
    );
    wait_line(&mut b_lines, "ready 2", Duration::from_secs(60));
    let answer = get(&second, "/hi?ms=10");
    assert!(
        answer.contains("200 OK") && answer.contains("echo "),
        "{answer}"
    );
    assert_eq!(status_of(&env)["state"], "serving");
    let (mut c, mut c_lines, _) = standby(&env);
    let down = env.local(&["serve", "down", "echo"]).output().unwrap();
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert_eq!(b.wait().unwrap().code(), Some(0));
    wait_line(
        &mut c_lines,
        "service echo was taken down while this controller stood by: not serving it",
        Duration::from_secs(30),
    );
    assert_eq!(c.wait().unwrap().code(), Some(0));
    assert_eq!(status_of(&env)["state"], "down");
}
