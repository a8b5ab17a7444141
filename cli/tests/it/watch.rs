//! `gpufleet watch` against metadata stand-ins for AWS (IMDSv2), GCP
//! (metadata server) and Azure (Scheduled Events).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use time::format_description::well_known::{Rfc2822, Rfc3339};
use time::OffsetDateTime;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support;

fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

/// The environment that points the GCE metadata server at `host` (`host:port`)
/// and the AWS and Azure metadata services at ports nothing listens on.
fn only_gce_at(host: String) -> [(&'static str, String); 3] {
    [
        ("GCE_METADATA_HOST", host),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", dead_url()),
        ("GPUFLEET_AZURE_IMDS_ENDPOINT", dead_url()),
    ]
}

struct Run {
    child: Child,
    out: PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

fn watch(name: &str, args: &[&str], envs: &[(&str, String)], hook: &str) -> Run {
    let out =
        std::env::temp_dir().join(format!("gpufleet-watch-{}-{name}.txt", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
    c.arg("watch")
        .args(["--poll", "100ms", "--probe-timeout", "500ms"])
        .args(args)
        .arg("--on-notice")
        .arg(hook.replace("OUT", &out.display().to_string()))
        .env_remove("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .env_remove("GCE_METADATA_HOST")
        .env_remove("GPUFLEET_AZURE_IMDS_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    Run {
        child: c.spawn().unwrap(),
        out,
    }
}

/// Waits for the process to exit; its code and stderr.
async fn finish(run: &mut Run, within: Duration) -> (Option<i32>, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            run.child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if start.elapsed() >= within {
            let _ = run.child.kill();
            let mut err = String::new();
            use std::io::Read;
            let _ = run.child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("watch did not exit within {within:?}: {err}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn hook_lines(run: &Run) -> Vec<String> {
    std::fs::read_to_string(&run.out)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

const HOOK: &str =
    r#"echo "$GPUFLEET_NOTICE_KIND $GPUFLEET_DEADLINE $GPUFLEET_SECONDS_LEFT" >> OUT"#;

/// An IMDSv2 stand-in that issues the session token `tok` and nothing else.
async fn aws_token_server() -> MockServer {
    let s = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(path("/latest/api/token"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
                .set_body_string("tok"),
        )
        .mount(&s)
        .await;
    s
}

async fn aws_imds(deadline: OffsetDateTime) -> MockServer {
    let s = aws_token_server().await;
    for (p, body) in [
        ("/latest/meta-data/instance-id", "i-0abc".to_string()),
        (
            "/latest/meta-data/placement/region",
            "us-east-1".to_string(),
        ),
        (
            "/latest/meta-data/spot/instance-action",
            format!(
                r#"{{"action": "terminate", "time": "{}"}}"#,
                deadline.format(&Rfc3339).unwrap()
            ),
        ),
    ] {
        Mock::given(method("GET"))
            .and(path(p))
            .and(header("x-aws-ec2-metadata-token", "tok"))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&s)
            .await;
    }
    s
}

fn whole_seconds(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(0).unwrap()
}

/// An IMDS stand-in whose spot interruption is two minutes from now (in
/// whole seconds), and that deadline.
async fn aws_imds_soon() -> (MockServer, OffsetDateTime) {
    let deadline = whole_seconds(OffsetDateTime::now_utc() + time::Duration::minutes(2));
    (aws_imds(deadline).await, deadline)
}

/// `watch --cloud aws` against an IMDS stand-in with a notice due soon,
/// running `hook`: waits (up to 15 s) for the hook to write `started`, sends
/// the agent SIGTERM, and checks that it exits 1 saying so. Its stderr and the
/// hook's lines.
async fn sigterm_once_started(name: &str, hook: &str) -> (String, Vec<String>) {
    let (imds, _) = aws_imds_soon().await;
    let mut run = watch_aws(name, &[], &imds, hook);
    let start = Instant::now();
    while !hook_lines(&run).iter().any(|l| l == "started") {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the hook never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::signal(&run.child, "TERM");
    let (code, err) = finish(&mut run, Duration::from_secs(15)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("stopped (SIGTERM or Ctrl-C) while the hook ran"),
        "{err}"
    );
    (err, hook_lines(&run))
}

fn watch_aws(name: &str, args: &[&str], imds: &MockServer, hook: &str) -> Run {
    let all = [&["--cloud", "aws"], args].concat();
    let envs = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.uri())];
    watch(name, &all, &envs, hook)
}

#[tokio::test]
async fn aws_preemption_runs_the_hook_once_and_exits_0() {
    let (imds, deadline) = aws_imds_soon().await;
    let mut run = watch_aws("aws", &[], &imds, HOOK);
    let (code, err) = finish(&mut run, Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "{err}");
    let lines = hook_lines(&run);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let parts: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(parts[0], "preemption");
    assert_eq!(parts[1], deadline.format(&Rfc3339).unwrap());
    let left: i64 = parts[2].parse().unwrap();
    assert!((100..=120).contains(&left), "{left}");
    assert!(err.contains("preemption notice"), "{err}");
    assert!(err.contains("preemption handled"), "{err}");
    assert!(
        !err.contains("tok\""),
        "the token leaked into the log: {err}"
    );
}

#[tokio::test]
async fn gcp_is_detected_and_its_preemption_handled() {
    let gce = MockServer::start().await;
    for (p, body) in [
        ("/computeMetadata/v1/instance/id", "4520031799277581759"),
        ("/computeMetadata/v1/instance/name", "train-0"),
        (
            "/computeMetadata/v1/instance/zone",
            "projects/123456789/zones/us-central1-a",
        ),
        ("/computeMetadata/v1/instance/preempted", "TRUE"),
        ("/computeMetadata/v1/instance/maintenance-event", "NONE"),
    ] {
        Mock::given(method("GET"))
            .and(path(p))
            .and(header("Metadata-Flavor", "Google"))
            .respond_with(
                ResponseTemplate::new(200)
                    .insert_header("Metadata-Flavor", "Google")
                    .set_body_string(body),
            )
            .mount(&gce)
            .await;
    }
    let host = gce.uri().trim_start_matches("http://").to_string();
    let mut run = watch("gcp", &[], &only_gce_at(host), HOOK);
    let (code, err) = finish(&mut run, Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("detected gcp"), "{err}");
    let lines = hook_lines(&run);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("preemption "));
    let left: i64 = lines[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!((25..=30).contains(&left), "{left}");
}

#[tokio::test]
async fn azure_scheduled_events_for_this_vm_each_run_the_hook_and_preempt_ends_it() {
    let imds = MockServer::start().await;
    let not_before = (OffsetDateTime::now_utc() + time::Duration::seconds(30))
        .format(&Rfc2822)
        .unwrap()
        .replace("+0000", "GMT");
    let body = format!(
        r#"{{"DocumentIncarnation": 3, "Events": [
            {{"EventId": "C3", "EventType": "Reboot", "ResourceType": "VirtualMachine", "Resources": ["some-other-vm"], "EventStatus": "Scheduled", "NotBefore": "{not_before}", "Description": "", "EventSource": "Platform", "DurationInSeconds": 9}},
            {{"EventId": "A1", "EventType": "Freeze", "ResourceType": "VirtualMachine", "Resources": ["train-vm-0"], "EventStatus": "Scheduled", "NotBefore": "{not_before}", "Description": "", "EventSource": "Platform", "DurationInSeconds": 9}},
            {{"EventId": "B2", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["train-vm-0"], "EventStatus": "Scheduled", "NotBefore": "{not_before}", "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}}]}}"#
    );
    Mock::given(method("GET"))
        .and(path("/metadata/scheduledevents"))
        .and(header("Metadata", "true"))
        .respond_with(ResponseTemplate::new(200).set_body_string(body))
        .mount(&imds)
        .await;
    Mock::given(method("POST"))
        .and(path("/metadata/scheduledevents"))
        .and(header("Metadata", "true"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&imds)
        .await;
    // This VM's name: the Reboot for some-other-vm in the same availability
    // set is neither hooked nor acknowledged.
    Mock::given(method("GET"))
        .and(path("/metadata/instance/compute/name"))
        .and(header("Metadata", "true"))
        .respond_with(ResponseTemplate::new(200).set_body_string("train-vm-0"))
        .mount(&imds)
        .await;
    let mut run = watch(
        "azure",
        &["--cloud", "azure", "--ack"],
        &[("GPUFLEET_AZURE_IMDS_ENDPOINT", imds.uri())],
        HOOK,
    );
    let (code, err) = finish(&mut run, Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "{err}");
    let lines = hook_lines(&run);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("maintenance "));
    assert!(lines[1].starts_with("preemption "));
    // Each event acknowledged after its hook, by its EventId.
    let acks: Vec<String> = imds
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| String::from_utf8_lossy(&r.body).to_string())
        .collect();
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert!(!acks.iter().any(|a| a.contains("C3")), "{acks:?}");
    assert!(acks[0].contains(r#""EventId":"A1""#), "{acks:?}");
    assert!(acks[1].contains(r#""EventId":"B2""#), "{acks:?}");
}

#[tokio::test]
async fn a_hook_that_outlives_the_deadline_is_killed() {
    let deadline = OffsetDateTime::now_utc() + time::Duration::seconds(3);
    let imds = aws_imds(whole_seconds(deadline)).await;
    let mut run = watch_aws("kill", &[], &imds, "sleep 30; echo finished >> OUT");
    let start = Instant::now();
    let (code, err) = finish(&mut run, Duration::from_secs(15)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(err.contains("killed"), "{err}");
    assert!(hook_lines(&run).is_empty());
}

/// SIGTERM to the agent while its hook runs reaches the hook's whole
/// process group (a child the hook started included), and the agent exits
/// saying so. The grace after it is the group's: the child, still saving
/// when the hook itself has exited, is left to finish (it used to be killed
/// as soon as the hook ended).
#[tokio::test]
async fn sigterm_while_the_hook_runs_reaches_its_group_and_lets_a_child_finish() {
    // The child writes `started` once both its own trap and the hook's are
    // set (written by the hook, the line could come before the child's
    // trap, and a TERM then killed the child silently).
    let (err, lines) = sigterm_once_started(
        "term",
        "trap 'echo hook-got-term >> OUT; exit 0' TERM; (trap 'sleep 1; echo child-saved >> OUT; exit 0' TERM; echo started >> OUT; sleep 60 & wait) & wait",
    )
    .await;
    assert!(err.contains("forwarding SIGTERM"), "{err}");
    assert!(lines.iter().any(|l| l == "hook-got-term"), "{lines:?}");
    assert!(lines.iter().any(|l| l == "child-saved"), "{lines:?}");
}

#[tokio::test]
async fn keep_watching_handles_each_notice_once() {
    let (imds, _) = aws_imds_soon().await;
    let mut run = watch_aws("keep", &["--keep-watching"], &imds, HOOK);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(run.child.try_wait().unwrap().is_none(), "it exited");
    assert_eq!(hook_lines(&run).len(), 1);
}

#[tokio::test]
async fn no_metadata_service_is_a_clear_error() {
    let mut run = watch(
        "none",
        &[],
        &only_gce_at(dead_url().trim_start_matches("http://").to_string()),
        HOOK,
    );
    let (code, err) = finish(&mut run, Duration::from_secs(10)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no metadata service answered"), "{err}");
}

#[tokio::test]
async fn json_output_prints_each_notice_as_a_line() {
    let (imds, deadline) = aws_imds_soon().await;
    let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["watch", "--cloud", "aws", "--poll", "100ms", "-o", "json"])
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.uri())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["kind"], "preemption");
    assert_eq!(lines[0]["instance"], "us-east-1/i-0abc");
    assert_eq!(lines[0]["deadline"], deadline.format(&Rfc3339).unwrap());
}

#[tokio::test]
async fn a_failing_aws_metadata_service_is_reported_not_taken_for_quiet() {
    let s = aws_token_server().await;
    Mock::given(method("GET"))
        .and(path("/latest/meta-data/spot/instance-action"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&s)
        .await;
    let mut run = watch(
        "aws-down",
        &["--cloud", "aws"],
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", s.uri())],
        HOOK,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = run.child.kill();
    let (_, err) = finish(&mut run, Duration::from_secs(5)).await;
    assert!(
        err.contains("spot/instance-action") && err.contains("HTTP 500"),
        "nothing said about the failing metadata service: {err}"
    );
    assert!(hook_lines(&run).is_empty());
}

/// Issue 63: SIGTERM and Ctrl-C end `watch --keep-watching` at any time,
/// also after a hook has run (it used to stop answering both: only SIGKILL
/// ended it), and what the hook left running in its process group is gone
/// when the agent exits.
#[tokio::test]
async fn after_a_hook_ran_sigterm_and_ctrl_c_end_watch_and_the_hooks_group() {
    for sig in ["TERM", "INT"] {
        let (imds, _) = aws_imds_soon().await;
        let mut run = watch_aws(
            &format!("after-{sig}"),
            &["--keep-watching"],
            &imds,
            "sleep 300 & echo $$ >> OUT",
        );
        let start = Instant::now();
        let group = loop {
            if let Some(l) = hook_lines(&run).first() {
                break l.trim().to_string();
            }
            assert!(start.elapsed() < Duration::from_secs(15), "no hook ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // The hook has finished; its background child still runs.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            run.child.try_wait().unwrap().is_none(),
            "{sig}: it exited by itself"
        );
        support::signal(&run.child, sig);
        let (code, err) = finish(&mut run, Duration::from_secs(5)).await;
        assert_eq!(code, Some(0), "{sig}: {err}");
        assert!(err.contains("stopping"), "{sig}: {err}");
        let gone = (0..40).any(|_| {
            let alive = Command::new("kill")
                .args(["-0", "--", &format!("-{group}")])
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success();
            if alive {
                std::thread::sleep(Duration::from_millis(50));
            }
            !alive
        });
        assert!(gone, "{sig}: the hook's group {group} outlived the agent");
    }
}

/// A notice whose deadline has already passed gives the hook a minimum
/// grace (5 s), and says so (it used to give it 0 s).
#[tokio::test]
async fn a_notice_past_its_deadline_gives_the_hook_a_minimum_grace() {
    let deadline = whole_seconds(OffsetDateTime::now_utc() - time::Duration::seconds(30));
    let imds = aws_imds(deadline).await;
    let mut run = watch_aws("late", &[], &imds, HOOK);
    let (code, err) = finish(&mut run, Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("giving the hook 5 s anyway"), "{err}");
    let lines = hook_lines(&run);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with(" 5"), "{lines:?}");
}
