//! The node agent's GPU side (`gpufleet watch --no-notices`): readings from
//! an `nvidia-smi` stand-in on `PATH`, the summary file the boot script
//! publishes, and the Prometheus endpoint scraped over 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Agent {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// Waits for a log line containing `what`; the line.
    fn wait_for(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("the agent never said '{what}'");
    }
}

/// A directory with an `nvidia-smi` that prints `readings` (the file
/// `smi-out`, re-read at each call) when asked exactly the agent's query.
fn stand_in(name: &str, readings: &str, exit_code: i32) -> support::TempDir {
    let dir = support::TempDir::new("agent", name);
    std::fs::write(dir.join("smi-out"), readings).unwrap();
    let script = format!(
        "#!/bin/sh\n\
         [ \"$1\" = --query-gpu=index,utilization.gpu,memory.used,memory.total ] || {{ echo \"unexpected query: $*\" >&2; exit 9; }}\n\
         [ \"$2\" = --format=csv,noheader,nounits ] || {{ echo \"unexpected format: $*\" >&2; exit 9; }}\n\
         cat '{}'\n\
         exit {exit_code}\n",
        dir.join("smi-out").display()
    );
    let smi = dir.join("nvidia-smi");
    std::fs::write(&smi, script).unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn start(dir: &Path, args: &[&str]) -> Agent {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["watch", "--no-notices", "--sample", "1s"])
        .arg("--gpu-summary")
        .arg(dir.join("gpu"))
        .args(args)
        // Only the stand-in directory and the shell it needs.
        .env("PATH", format!("{}:/bin:/usr/bin", dir.display()))
        .env_remove("GPUFLEET_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Agent { child, lines: rx }
}

fn scrape(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

/// Waits until the summary file holds a line starting with `prefix`.
fn summary_line(dir: &Path, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("gpu")) {
            if let Some(l) = text.lines().find(|l| l.starts_with(prefix)) {
                return l.to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no '{prefix}' line in the summary file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn readings_from_nvidia_smi_reach_the_summary_and_the_metrics_endpoint() {
    let dir = stand_in("smi", "0, 97, 71234, 81559\n1, 3, 1024, 81559\n", 0);
    let mut agent = start(&dir, &["--gpu", "nvidia-smi", "--metrics", "127.0.0.1:0"]);
    let line = agent.wait_for("metrics at http://");
    let addr = line
        .split("http://")
        .nth(1)
        .unwrap()
        .trim_end_matches("/metrics")
        .to_string();
    agent.wait_for("sampling GPUs through nvidia-smi every 1s");
    let main = summary_line(&dir, "gpufleet:gpu t");
    assert!(main.contains("-n2-u50-x50-m71234-c81559"), "{main}");
    let quiet = summary_line(&dir, "gpufleet:gpu-quiet o");
    assert!(quiet.contains("-5p0-"), "{quiet}");

    let (head, body) = scrape(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_lowercase().contains("application/openmetrics-text"),
        "{head}"
    );
    assert!(
        body.contains(r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="",device="nvidia0",modelName="","#),
        "{body}"
    );
    let util0 = body
        .lines()
        .find(|l| l.starts_with(r#"DCGM_FI_DEV_GPU_UTIL{gpu="0""#))
        .unwrap();
    assert!(util0.ends_with(" 97"), "{util0}");
    assert!(body.contains("# TYPE DCGM_FI_DEV_FB_USED gauge"), "{body}");
    let free1 = body
        .lines()
        .find(|l| l.starts_with(r#"DCGM_FI_DEV_FB_FREE{gpu="1""#))
        .unwrap();
    assert!(free1.ends_with(&format!(" {}", 81559 - 1024)), "{free1}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");

    // New readings show up at the next scrape.
    std::fs::write(dir.join("smi-out"), "0, 1, 500, 81559\n1, 1, 500, 81559\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = scrape(&addr, "/metrics");
        if body
            .lines()
            .any(|l| l.starts_with(r#"DCGM_FI_DEV_GPU_UTIL{gpu="0""#) && l.ends_with(" 1"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new reading never showed: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (head, _) = scrape(&addr, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    // A reading it cannot use is logged, and sampling goes on.
    std::fs::write(dir.join("smi-out"), "0, [N/A], 1, 2\n").unwrap();
    agent.wait_for("utilization.gpu is '[N/A]'");

    // SIGTERM stops it cleanly.
    support::signal(&agent.child, "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = agent.child.try_wait().unwrap() {
            assert_eq!(st.code(), Some(0));
            break;
        }
        assert!(Instant::now() < deadline, "the agent ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_without_a_gpu_says_so_and_publishes_none() {
    // nvidia-smi is there but the driver sees no device (its exit 6).
    let dir = stand_in("none", "No devices were found\n", 6);
    let agent = start(&dir, &["--gpu", "auto"]);
    let said = agent.wait_for("no GPU");
    assert!(said.contains("nvidia-smi found no devices"), "{said}");
    let main = summary_line(&dir, "gpufleet:gpu t");
    assert!(main.contains("-n0-"), "{main}");

    // No nvidia-smi at all.
    let dir = stand_in("absent", "", 0);
    std::fs::remove_file(dir.join("nvidia-smi")).unwrap();
    let agent = start(&dir, &["--gpu", "auto"]);
    let said = agent.wait_for("no GPU");
    assert!(said.contains("nvidia-smi is not on PATH"), "{said}");
    assert!(said.contains("NVML did not load"), "{said}");
    // And what it samples is said as such, not as a reader's name (it said
    // "sampling GPUs through scripted").
    let said = agent.wait_for("no GPU to sample: publishing 'no GPU' every");
    assert!(!said.contains("scripted"), "{said}");
}

#[test]
fn bad_agent_arguments_are_refused_naming_the_value() {
    for (args, says) in [
        (
            vec!["--gpu", "off", "--metrics", "localhost"],
            "invalid address 'localhost'",
        ),
        (vec!["--sample", "0s"], "invalid --sample"),
        (vec!["--gpu-window", "2d"], "invalid --gpu-window"),
        (vec!["--gpu", "cuda"], "invalid value 'cuda'"),
        // With the GPUs off these did nothing, silently (and `--no-notices`
        // then watched nothing for ever).
        (
            vec!["--gpu", "off", "--metrics", "127.0.0.1:0"],
            "--gpu off samples no GPU, so --metrics and --no-notices would do nothing",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["watch", "--no-notices"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
