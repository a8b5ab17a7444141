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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args([
            "--provider",
            "local",
            "serve",
            "--service",
            ECHO,
            "--listen",
            &addr,
            "-o",
            "json",
        ])
        .env("GPUFLEET_CONFIG", env.dir.join("gpufleet.toml"))
        .env("GPUFLEET_FAKE_STATE", env.state())
        .env_remove("GPUFLEET_LEDGER")
        .env_remove("GPUFLEET_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for a ready replica in what it prints.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let line = lines.next().expect("serve printed until ready").unwrap();
        seen.push(line.clone());
        if line.contains("ready 2") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{seen:#?}");
    }
    let answer = get(&addr, "/hi?ms=10");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("echo "), "{answer}");
    let metrics = get(&addr, "/-/metrics");
    assert!(
        metrics.contains("gpufleet_service_requests_total{code=\"200\"} 1"),
        "{metrics}"
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
    let costs = std::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["--provider", "local", "costs", "--by", "job", "-o", "json"])
        .env("GPUFLEET_CONFIG", env.dir.join("gpufleet.toml"))
        .env("GPUFLEET_FAKE_STATE", env.state())
        .env_remove("GPUFLEET_LEDGER")
        .output()
        .unwrap();
    assert_eq!(costs.status.code(), Some(0), "{}", stderr(&costs));
    let report: serde_json::Value = serde_json::from_slice(&costs.stdout).unwrap();
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r.to_string().contains("service:echo"))
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(
        row["instances"].as_u64(),
        Some(replicas.len() as u64),
        "{row:#}"
    );
    assert_eq!(row["running"].as_u64(), Some(0), "{row:#}");
}
