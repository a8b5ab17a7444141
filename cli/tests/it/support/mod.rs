//! What the CLI's end-to-end tests share: running the built `gpufleet`, its
//! output, and a scratch directory removed on drop.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `gpufleet ARGS` on the embedded catalog, logs off.
pub fn gpufleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .env_remove("GPUFLEET_LOG")
        .output()
        .expect("run gpufleet")
}

/// `gpufleet ARGS` with `envs` set and `stdin` written to it, logs off.
pub fn gpufleet_fed(args: &[&str], envs: &[(&str, &Path)], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("GPUFLEET_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gpufleet");
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(stdin.as_bytes())
        .expect("write its stdin");
    child.wait_with_output().expect("wait for gpufleet")
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Checks the command exited 0 (showing its standard error if not).
pub fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
}

/// Standard output as JSON, after checking the command succeeded.
pub fn json(o: &Output) -> serde_json::Value {
    ok(o);
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// A `place -o json` row's pool as `--pool` and `tf-external` write it
/// (`CLOUD:REGION/ZONE:TYPE:CAPACITY`).
pub fn pool_of(r: &serde_json::Value) -> String {
    format!(
        "{}:{}/{}:{}:{}",
        r["cloud"].as_str().unwrap(),
        r["region"].as_str().unwrap(),
        r["zone"].as_str().unwrap_or(""),
        r["instance_type"].as_str().unwrap(),
        r["capacity"].as_str().unwrap()
    )
}

/// Standard output as a JSON array's rows, after checking the command
/// succeeded.
pub fn json_rows(o: &Output) -> Vec<serde_json::Value> {
    ok(o);
    serde_json::from_slice(&o.stdout).expect("a JSON array on stdout")
}

/// Sends `signal` (`TERM`, `INT`, `KILL`) to a running child with kill(1).
pub fn signal(child: &std::process::Child, signal: &str) {
    let sent = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{signal} {} failed", child.id());
}

/// Starts `command` with no input and its output captured, waits (at most
/// `limit`) until the SQLite ledger at `ledger` satisfies `ready`, then a
/// moment (`settle`) more, and sends it signal `sig` (`INT` for Ctrl-C,
/// `TERM`, `HUP`); its output. Panics saying `never` when the ledger does
/// not get there in time.
pub fn signal_when(
    mut command: Command,
    sig: &str,
    ledger: &Path,
    limit: std::time::Duration,
    settle: std::time::Duration,
    never: &str,
    ready: impl Fn(&gpufleet::sqlite::SqliteLedger) -> Option<bool>,
) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpufleet");
    let started = std::time::Instant::now();
    loop {
        if started.elapsed() >= limit {
            // Not left running after the test.
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait for gpufleet");
            panic!("{never}: {}", stderr(&out));
        }
        let now = gpufleet::sqlite::SqliteLedger::open_read_only(ledger)
            .ok()
            .and_then(|l| ready(&l))
            .unwrap_or(false);
        if now {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(settle);
    signal(&child, sig);
    child.wait_with_output().expect("wait for gpufleet")
}

/// The element of a JSON array whose `field` is `value`.
pub fn row<'a>(rows: &'a serde_json::Value, field: &str, value: &str) -> &'a serde_json::Value {
    rows.as_array()
        .expect("a JSON array")
        .iter()
        .find(|r| r[field] == value)
        .unwrap_or_else(|| panic!("no row with {field} = {value} in {rows}"))
}

/// Checks `text` holds every one of `needles`.
pub fn contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

/// A scratch directory with an empty `gpufleet.toml`, removed on drop.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new `$TMP/gpufleet-PREFIX-NAME-XXXXXX`.
    pub fn new(prefix: &str, name: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpufleet-{prefix}-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("gpufleet.toml"), "").unwrap();
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// A scratch directory for `gpufleet --provider fake`: the fake cloud's
/// state, the ledger and an empty config, kept between commands.
pub struct FakeEnv {
    /// The directory.
    pub dir: TempDir,
    /// Whether commands read a fault script from `dir/script`.
    script: bool,
}

impl FakeEnv {
    /// A new `$TMP/gpufleet-PREFIX-NAME-XXXXXX`.
    pub fn new(prefix: &str, name: &str) -> FakeEnv {
        FakeEnv {
            dir: TempDir::new(prefix, name),
            script: false,
        }
    }

    /// Commands read the fake cloud's fault script from `dir/script` (and
    /// log errors only).
    pub fn with_script(self) -> FakeEnv {
        FakeEnv {
            script: true,
            ..self
        }
    }

    /// The fake cloud's state file.
    pub fn state(&self) -> PathBuf {
        self.dir.join("fake.json")
    }

    /// The ledger's file.
    pub fn ledger(&self) -> PathBuf {
        self.dir.join("ledger.sqlite3")
    }

    /// `gpufleet --provider fake ARGS` on this directory at `now`, as user
    /// `ana`, with team and owner unset from the caller's environment.
    pub fn command(&self, now: &str, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
        c.args(["--provider", "fake"])
            .args(args)
            .env_remove("GPUFLEET_TEAM")
            .env_remove("GPUFLEET_OWNER")
            .env("GPUFLEET_CONFIG", self.dir.join("gpufleet.toml"))
            .env("GPUFLEET_FAKE_STATE", self.state())
            .env("GPUFLEET_LEDGER", self.ledger())
            .env("GPUFLEET_FAKE_NOW", now)
            .env("USER", "ana");
        if self.script {
            c.env("GPUFLEET_FAKE_SCRIPT", self.dir.join("script"))
                .env("GPUFLEET_LOG", "error");
        } else {
            c.env_remove("GPUFLEET_FAKE_SCRIPT")
                .env_remove("GPUFLEET_LOG");
        }
        c
    }

    /// `gpufleet --provider local ARGS` on this directory (its ledger
    /// beside the local cloud's state), as user `ana`.
    pub fn local(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
        c.args(["--provider", "local"])
            .args(args)
            .env("GPUFLEET_CONFIG", self.dir.join("gpufleet.toml"))
            .env("GPUFLEET_FAKE_STATE", self.state())
            .env_remove("GPUFLEET_LEDGER")
            .env_remove("GPUFLEET_LOG")
            .env_remove("GPUFLEET_FAKE_SCRIPT")
            .env("USER", "ana")
            .stdin(Stdio::null());
        c
    }

    /// `gpufleet --provider fake ARGS` at `now`, with `stdin` written to it
    /// when given.
    pub fn run_at(&self, now: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = self.command(now, args);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        } else {
            drop(child.stdin.take());
        }
        child.wait_with_output().unwrap()
    }

    /// `gpufleet --provider fake ARGS -o json` at `now`: its output as JSON,
    /// after checking it succeeded.
    pub fn json_at(&self, now: &str, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let o = self.run_at(now, &all, None);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// `run --job dir/job.toml` at `now`, which must succeed: its JSON
    /// report and the job's id.
    pub fn run_job(&self, now: &str) -> (serde_json::Value, String) {
        let job = self.dir.join("job.toml");
        let done = self.json_at(now, &["run", "--job", job.to_str().unwrap()]);
        assert_eq!(done["state"], "succeeded", "{done}");
        let id = done["id"].as_str().unwrap().to_string();
        (done, id)
    }

    /// `jobs show ID` at `now` as JSON, and the `field` of each of its
    /// events in order.
    pub fn events(&self, now: &str, id: &str, field: &str) -> (serde_json::Value, Vec<String>) {
        let show = self.json_at(now, &["jobs", "show", id]);
        let out = show["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[field].as_str().unwrap().to_string())
            .collect();
        (show, out)
    }
}

/// A wiremock stand-in for a CLI run: the CLI is another process, so the
/// server keeps a runtime of its own. Dropping it stops the server.
pub struct StandIn {
    /// The server.
    pub server: wiremock::MockServer,
    rt: tokio::runtime::Runtime,
}

impl StandIn {
    /// A new server answering only the calls `gpufleet check` makes (and
    /// every operator command makes first, to leave out a cloud that does
    /// not answer): Compute Engine's `acceleratorTypes.aggregatedList` and
    /// Resource Manager's `subscriptions.get`, at the lowest priority so a
    /// test's own route for them wins.
    pub fn start() -> StandIn {
        use wiremock::matchers::{method, path_regex};
        let rt = tokio::runtime::Runtime::new().unwrap();
        let server = rt.block_on(wiremock::MockServer::start());
        let s = StandIn { server, rt };
        s.mount(
            wiremock::Mock::given(method("GET"))
                .and(path_regex(r"^/compute/v1/projects/[^/]+/aggregated/acceleratorTypes$"))
                .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(
                    serde_json::json!({"kind": "compute#acceleratorTypeAggregatedList", "items": {}}),
                ))
                .with_priority(255),
        );
        s.mount(
            wiremock::Mock::given(method("GET"))
                .and(path_regex(r"^/subscriptions/([^/]+)$"))
                .respond_with(|req: &wiremock::Request| {
                    let id = req
                        .url
                        .path()
                        .trim_start_matches("/subscriptions/")
                        .to_string();
                    wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
                        "id": format!("/subscriptions/{id}"),
                        "subscriptionId": id,
                        "displayName": "stand-in subscription",
                        "state": "Enabled",
                    }))
                })
                .with_priority(255),
        );
        s
    }

    /// `METHOD PATH` answers `status` with the JSON `body`.
    pub fn answer(&self, route: &str, status: u16, body: serde_json::Value) -> &StandIn {
        use wiremock::matchers::{method, path};
        let (verb, at) = route.split_once(' ').unwrap();
        let reply = wiremock::ResponseTemplate::new(status).set_body_json(body);
        self.mount(
            wiremock::Mock::given(method(verb))
                .and(path(at))
                .respond_with(reply),
        )
    }

    /// Mounts a route of the test's own making.
    pub fn mount(&self, mock: wiremock::Mock) -> &StandIn {
        self.rt.block_on(mock.mount(&self.server));
        self
    }

    /// The server's base URL.
    pub fn uri(&self) -> String {
        self.server.uri()
    }
}

/// The words of `line` (split at whitespace), for command lines written as
/// one string.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Asserts that `csv` (a command's `-o csv` output) holds `rows` (the same
/// command's `-o json` rows): a header of the JSON's keys, then one record a
/// row whose cells are the JSON's values (text as it is, numbers and booleans
/// as JSON writes them, null empty, a list of strings joined with `; `).
pub fn csv_holds_json_rows(csv: &[u8], rows: &[serde_json::Value]) {
    let mut r = csv::Reader::from_reader(csv);
    let headers: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    let records: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), rows.len(), "{headers:?}");
    for (record, row) in records.iter().zip(rows) {
        let object = row.as_object().expect("a JSON object per row");
        let mut keys: Vec<&String> = object.keys().collect();
        let mut named: Vec<&String> = headers.iter().collect();
        keys.sort();
        named.sort();
        assert_eq!(named, keys, "CSV header against JSON keys");
        for (name, cell) in headers.iter().zip(record.iter()) {
            let want = match &object[name] {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(items) if items.iter().all(|i| i.is_string()) => items
                    .iter()
                    .filter_map(|i| i.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
                other => other.to_string(),
            };
            assert_eq!(cell, want, "column {name}");
        }
    }
}

/// The Compute Engine `instances.aggregatedList` answer for project
/// `ops-test` holding one managed instance,
/// `us-central1-a/gf-0011223344556677-0` (an A2 in `provisioning`, `SPOT`
/// or `STANDARD`), of job `job`.
pub fn gce_one_instance(provisioning: &str, job: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "compute#instanceAggregatedList",
        "items": {"zones/us-central1-a": {"instances": [{
            "kind": "compute#instance", "id": "9000000000000000001", "name": "gf-0011223344556677-0",
            "creationTimestamp": "2026-11-22T01:00:00.000-08:00",
            "machineType": "https://www.googleapis.com/compute/v1/projects/ops-test/zones/us-central1-a/machineTypes/a2-highgpu-1g",
            "zone": "https://www.googleapis.com/compute/v1/projects/ops-test/zones/us-central1-a",
            "status": "RUNNING",
            "labels": {"gpufleet-managed": "true", "gpufleet-job": job},
            "scheduling": if provisioning == "SPOT" {
                serde_json::json!({"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"})
            } else {
                serde_json::json!({"provisioningModel": provisioning})
            }
        }]}}
    })
}
