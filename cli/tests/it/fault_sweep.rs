//! The operator commands with one cloud down: AWS on moto_server, GCP and
//! Azure on their REST stand-ins, each in turn unreachable, slower than its
//! check budget, or refusing (HTTP 403 in the cloud's own error shape)
//! while the other two answer. Every command shows the others' rows, names
//! the cloud it could not read in one warning line and exits 4 (`ls`,
//! `reap`, `reconcile`, `check`, `offers --live`, `catalog refresh`,
//! `launch`, `terminate --job`, `jobs cancel`; `run --detach` warns and
//! records the job; `jobs ls` and `costs` read the ledger alone); `reap --yes`
//! terminates the forgotten instances of the clouds it read and never one
//! of a cloud it could not; nothing is lost from the ledger.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpufleet_testkit::aws::moto;
use serde_json::{json, Value};
use support::words;

const SUB: &str = "00000000-0000-0000-0000-0000000000aa";
const GCE_ID: &str = "us-central1-a/gf-0011223344556677-0";
const AZURE_ID: &str = "gpufleet/gf-8899aabbccddeeff-0";

/// A GCE stand-in listing one managed on-demand instance (not forgotten),
/// and an ARM stand-in listing one managed VM.
fn stand_in() -> support::StandIn {
    let s = support::StandIn::start();
    s.answer(
        "GET /compute/v1/projects/ops-test/aggregated/instances",
        200,
        support::gce_one_instance("STANDARD", "gce-job"),
    );
    s.answer(
        &format!("GET /subscriptions/{SUB}/resourceGroups/gpufleet/providers/Microsoft.Compute/virtualMachines"),
        200,
        json!({"value": [{
            "id": format!("/subscriptions/{SUB}/resourceGroups/gpufleet/providers/Microsoft.Compute/virtualMachines/gf-8899aabbccddeeff-0"),
            "name": "gf-8899aabbccddeeff-0",
            "type": "Microsoft.Compute/virtualMachines",
            "location": "eastus",
            "zones": ["1"],
            "tags": {"gpufleet:managed": "true", "gpufleet:job": "azure-job"},
            "properties": {
                "hardwareProfile": {"vmSize": "Standard_NC24ads_A100_v4"},
                "provisioningState": "Succeeded",
                "priority": "Regular",
                "timeCreated": "2026-11-22T09:00:00Z"
            }
        }]}),
    );
    // Their live catalogs, empty: `offers --live` and `catalog refresh`
    // read them (and never reach the real APIs).
    for list in ["machineTypes", "acceleratorTypes"] {
        s.answer(
            &format!("GET /compute/v1/projects/ops-test/aggregated/{list}"),
            200,
            json!({"kind": format!("compute#{}AggregatedList", list.trim_end_matches('s')), "items": {}}),
        );
    }
    s.answer(
        "GET /v1/services/6F81-5844-456A/skus",
        200,
        json!({"skus": [], "nextPageToken": ""}),
    );
    s.answer(
        &format!("GET /subscriptions/{SUB}/providers/Microsoft.Compute/skus"),
        200,
        json!({"value": []}),
    );
    s.answer(
        "POST /providers/Microsoft.ResourceGraph/resources",
        200,
        json!({"data": []}),
    );
    s.answer(
        "GET /api/retail/prices",
        200,
        json!({"Items": [], "NextPageLink": null}),
    );
    s
}

/// What a faulted cloud's endpoint is: nothing listening, a server slower
/// than the check budget, or one refusing everything with 403.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Unreachable,
    Slow,
    Refusing,
}

fn fault_server(fault: Fault) -> (String, Option<support::StandIn>) {
    use wiremock::matchers::any;
    use wiremock::{Mock, ResponseTemplate};
    match fault {
        Fault::Unreachable => (format!("http://127.0.0.1:{}", moto::free_port()), None),
        Fault::Slow | Fault::Refusing => {
            let s = support::StandIn::start();
            let reply = match fault {
                Fault::Slow => ResponseTemplate::new(200)
                    .set_body_json(json!({}))
                    .set_delay(Duration::from_secs(6)),
                _ => ResponseTemplate::new(403).set_body_raw(
                    // Each cloud's own shape, chosen by what asks.
                    "",
                    "application/json",
                ),
            };
            if let Fault::Refusing = fault {
                s.mount(
                    Mock::given(wiremock::matchers::header_exists("x-amz-date"))
                        .respond_with(ResponseTemplate::new(403).set_body_raw(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation.</Message></Error></Errors><RequestID>r-1</RequestID></Response>",
                            "text/xml",
                        ))
                        .with_priority(1),
                );
                s.mount(
                    Mock::given(wiremock::matchers::path_regex("^/compute/"))
                        .respond_with(ResponseTemplate::new(403).set_body_json(json!({
                            "error": {"code": 403, "message": "Required 'compute.instances.list' permission for 'projects/ops-test'", "status": "PERMISSION_DENIED",
                                      "errors": [{"reason": "forbidden", "message": "Required 'compute.instances.list' permission"}]}
                        })))
                        .with_priority(1),
                );
                s.mount(
                    Mock::given(any())
                        .respond_with(ResponseTemplate::new(403).set_body_json(json!({
                            "error": {"code": "AuthorizationFailed", "message": "The client does not have authorization to perform action 'Microsoft.Compute/virtualMachines/read'."}
                        })))
                        .with_priority(2),
                );
            } else {
                s.mount(Mock::given(any()).respond_with(reply).with_priority(1));
            }
            let uri = s.uri();
            (uri, Some(s))
        }
    }
}

struct World {
    moto: moto::Moto,
    dir: support::TempDir,
    rest: support::StandIn,
}

impl World {
    /// `gpufleet` with all three clouds, `down` pointed at `endpoint`.
    fn run(&self, args: &str, down: Option<(&str, &str)>) -> Output {
        let aws = match down {
            Some(("aws", e)) => e.to_string(),
            _ => self.moto.url.clone(),
        };
        let gcp = match down {
            Some(("gcp", e)) => e.to_string(),
            _ => self.rest.uri(),
        };
        let azure = match down {
            Some(("azure", e)) => e.to_string(),
            _ => self.rest.uri(),
        };
        Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(words(args))
            .env_remove("GPUFLEET_LOG")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_CONFIG_FILE")
            .env_remove("AWS_ENDPOINT_URL_EC2")
            .env_remove("CLOUDSDK_CONFIG")
            .env_remove("AZURE_CONFIG_DIR")
            .env("HOME", &*self.dir)
            .env("XDG_CONFIG_HOME", &*self.dir)
            .env("GPUFLEET_CONFIG", &*self.dir.join("gpufleet.toml"))
            .env("GPUFLEET_LEDGER", &*self.dir.join("ledger.sqlite3"))
            .env("GPUFLEET_CLOUDS", "aws,gcp,azure")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "AKIAGPUFLEETCLITEST1")
            .env("AWS_SECRET_ACCESS_KEY", "gpufleet-cli-test-secret")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("GPUFLEET_AWS_PRICE_LIST", "0")
            .env("AWS_ENDPOINT_URL", aws)
            .env("GOOGLE_CLOUD_PROJECT", "ops-test")
            .env("GPUFLEET_GCP_COMPUTE_ENDPOINT", &gcp)
            .env("GPUFLEET_GCP_BILLING_ENDPOINT", &gcp)
            .env("GPUFLEET_GCP_ANONYMOUS", "1")
            .env("AZURE_SUBSCRIPTION_ID", SUB)
            .env("GPUFLEET_AZURE_ARM_ENDPOINT", &azure)
            .env("GPUFLEET_AZURE_PRICES_ENDPOINT", &azure)
            .env("GPUFLEET_AWS_REGIONS", "us-east-1")
            .env("GPUFLEET_GCP_REGIONS", "us-central1")
            .env("GPUFLEET_AZURE_REGIONS", "eastus")
            .env(
                "GPUFLEET_CATALOG_CACHE",
                &*self.dir.join("catalog-cache.txt"),
            )
            .env("GPUFLEET_AZURE_TOKEN", "stand-in-token")
            .output()
            .expect("run gpufleet")
    }
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The JSON document on stdout, whatever the exit status.
fn doc(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", err(o)))
}

/// The warning lines naming `cloud` as not read.
fn warned(o: &Output, cloud: &str) -> usize {
    err(o)
        .lines()
        .filter(|l| l.starts_with(&format!("warning: {cloud} not read")))
        .count()
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] != "terminated" && r["state"] != "shutting-down")
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_cloud_down_slow_or_refusing_leaves_the_others_answering() {
    let Some(m) = moto::Moto::start() else { return };
    let w = World {
        moto: m,
        dir: support::TempDir::new("sweep", "clouds"),
        rest: stand_in(),
    };
    // One managed instance on moto, past its time to live (so `reap`
    // finds it), recorded in the ledger of spend.
    let o = w.run(
        "launch --gpu A10G:1 --hours 2 --region us-east-1 --image ami-12c6146b --name aws-job --cloud aws -o json",
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let aws_id = support::json(&o)["instances"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(gpufleet_testkit::aws::node_tags(
        &w.moto.url,
        &gpufleet::InstanceId::new(aws_id.clone()),
        &[("gpufleet:expires-at", "2026-01-01T00:00:00Z")],
    ));
    // All three answer: every row, exit 0.
    let o = w.run("ls -o json", None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let all = ids(&support::json(&o));
    for id in [&aws_id, GCE_ID, AZURE_ID] {
        assert!(all.contains(&id.to_string()), "{id} not in {all:?}");
    }
    let spend_before =
        support::json(&w.run("costs --by cloud -o json", None))["total"]["instances"].clone();

    let mut reaped = false;
    let mut launched = 0;
    for cloud in ["aws", "gcp", "azure"] {
        for fault in [Fault::Unreachable, Fault::Slow, Fault::Refusing] {
            let (endpoint, _server) = fault_server(fault);
            let what = format!("{cloud} {fault:?}");
            let started = Instant::now();
            let o = w.run("ls -o json", Some((cloud, &endpoint)));
            let took = started.elapsed();
            assert_eq!(o.status.code(), Some(4), "{what}: {}", err(&o));
            let e = err(&o);
            let lines: Vec<&str> = e
                .lines()
                .filter(|l| l.starts_with(&format!("warning: {cloud} not read")))
                .collect();
            assert_eq!(lines.len(), 1, "{what}: one warning line: {e}");
            // At most the check budget (3 s) and its margin, once.
            assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
            let shown = ids(&doc(&o));
            let expect: Vec<&str> = [
                ("aws", aws_id.as_str()),
                ("gcp", GCE_ID),
                ("azure", AZURE_ID),
            ]
            .iter()
            .filter(|(c, id)| *c != cloud && !(*c == "aws" && reaped && *id == aws_id))
            .map(|(_, id)| *id)
            .collect();
            for id in &expect {
                assert!(
                    shown.contains(&id.to_string()),
                    "{what}: {id} missing from {shown:?}"
                );
            }
            assert!(
                shown.iter().all(|id| expect.contains(&id.as_str())),
                "{what}: {shown:?} holds a row of the cloud not read"
            );
            // The reaper acts on what it read, and only on that.
            let o = w.run("reap --yes -o json", Some((cloud, &endpoint)));
            assert_eq!(o.status.code(), Some(4), "{what}: {}", err(&o));
            let v = doc(&o);
            let terminated: Vec<&str> = v["terminated"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            if cloud == "aws" || reaped {
                assert!(terminated.is_empty(), "{what}: {v}");
            } else {
                assert_eq!(terminated, vec![aws_id.as_str()], "{what}: {v}");
                reaped = true;
            }
            // Reconciling with a cloud unread: a partial answer, nothing
            // about the cloud not read (its instances are not called ended).
            let o = w.run("reconcile -o json", Some((cloud, &endpoint)));
            assert_eq!(o.status.code(), Some(4), "{what}: reconcile: {}", err(&o));
            let v = doc(&o);
            assert_eq!(v["applied"], false, "{what}: {v}");
            assert!(
                v["ended"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|e| e["cloud"] != cloud),
                "{what}: reconcile ended instances of the cloud it could not read: {v}"
            );
            assert_eq!(
                err(&o)
                    .lines()
                    .filter(|l| l.starts_with(&format!("warning: {cloud} not read")))
                    .count(),
                1,
                "{what}: {}",
                err(&o)
            );
            // `check`: the cloud down is the one unusable, the others are.
            let o = w.run("check -o json", Some((cloud, &endpoint)));
            assert_eq!(o.status.code(), Some(4), "{what}: check: {}", err(&o));
            let rows = doc(&o);
            for r in rows.as_array().unwrap() {
                assert_eq!(r["usable"], r["cloud"] != cloud, "{what}: check row {r}");
            }
            // `launch` gathers its candidates from the clouds that answer.
            // A10G is AWS's alone: with AWS read the job starts there (a
            // partial answer, the cloud not read named once); with AWS down
            // nothing can run it, said with AWS named.
            let name = format!("sweep-{cloud}-{}", format!("{fault:?}").to_lowercase());
            let started = Instant::now();
            let o = w.run(
                &format!("launch --gpu A10G:1 --hours 2 --region us-east-1 --image ami-12c6146b --name {name} -o json"),
                Some((cloud, &endpoint)),
            );
            let took = started.elapsed();
            assert!(
                took < Duration::from_secs(10),
                "{what}: launch took {took:?}"
            );
            assert_eq!(warned(&o, cloud), 1, "{what}: launch: {}", err(&o));
            if cloud == "aws" {
                assert_eq!(o.status.code(), Some(3), "{what}: launch: {}", err(&o));
            } else {
                assert_eq!(o.status.code(), Some(4), "{what}: launch: {}", err(&o));
                let id = doc(&o)["instances"][0]["id"].as_str().unwrap().to_string();
                launched += 1;
                // `terminate --job` ends it, the cloud down named.
                let o = w.run(
                    &format!("terminate --job {name} --yes -o json"),
                    Some((cloud, &endpoint)),
                );
                assert_eq!(o.status.code(), Some(4), "{what}: terminate: {}", err(&o));
                assert_eq!(warned(&o, cloud), 1, "{what}: terminate: {}", err(&o));
                assert_eq!(doc(&o)["terminated"], json!([id]), "{what}: terminate");
            }
            // `run --detach` records the job (whether a pool can run it is
            // told from the clouds that answer), and `jobs cancel` ends it,
            // each within the budget; `jobs ls` reads the ledger alone.
            let job = w.dir.join(format!("{name}.toml"));
            std::fs::write(
                &job,
                format!("name = \"{name}-run\"\nhours = 2\nimage = \"ami-12c6146b\"\n[[gpu]]\nmodel = \"A10G\"\ncount = 1\n"),
            )
            .unwrap();
            let started = Instant::now();
            let o = w.run(
                &format!(
                    "run --job {} --detach --id {name}-run -o json",
                    job.display()
                ),
                Some((cloud, &endpoint)),
            );
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what}: run took {:?}",
                started.elapsed()
            );
            assert_eq!(
                o.status.code(),
                Some(0),
                "{what}: run --detach: {}",
                err(&o)
            );
            assert_eq!(warned(&o, cloud), 1, "{what}: run: {}", err(&o));
            let started = Instant::now();
            let o = w.run(
                &format!("jobs cancel {name}-run -o json"),
                Some((cloud, &endpoint)),
            );
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what}: cancel took {:?}",
                started.elapsed()
            );
            assert_eq!(o.status.code(), Some(4), "{what}: jobs cancel: {}", err(&o));
            assert_eq!(warned(&o, cloud), 1, "{what}: jobs cancel: {}", err(&o));
            assert_eq!(doc(&o)["state"], "cancelled", "{what}: jobs cancel");
            let o = w.run("jobs ls -o json", Some((cloud, &endpoint)));
            assert_eq!(o.status.code(), Some(0), "{what}: jobs ls: {}", err(&o));
            let rows = doc(&o);
            let row = rows
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == format!("{name}-run"))
                .unwrap_or_else(|| panic!("{what}: {rows}"));
            assert_eq!(row["state"], "cancelled", "{what}: {row}");
            // The live catalogs: the others' (moto's A10G in us-east-1 when
            // AWS answers), the snapshot for the one not read, said once.
            let o = w.run(
                "offers --live --gpu A10G:1 --limit 0 -o json",
                Some((cloud, &endpoint)),
            );
            assert_eq!(o.status.code(), Some(4), "{what}: offers: {}", err(&o));
            let title = match cloud {
                "aws" => "AWS",
                "gcp" => "GCP",
                _ => "Azure",
            };
            let said = format!("live {title} catalog is unavailable");
            assert_eq!(
                err(&o).matches(&said).count(),
                1,
                "{what}: offers: {}",
                err(&o)
            );
            assert!(!doc(&o).as_array().unwrap().is_empty(), "{what}: offers");
            // `catalog refresh`: the others refreshed, the one down named.
            let o = w.run("catalog refresh -o json", Some((cloud, &endpoint)));
            assert_eq!(o.status.code(), Some(4), "{what}: refresh: {}", err(&o));
            let v = doc(&o);
            let refreshed: Vec<&str> = v["refreshed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            for other in ["aws", "gcp", "azure"].iter().filter(|c| **c != cloud) {
                assert!(
                    refreshed
                        .iter()
                        .any(|r| r.starts_with(&format!("{other}:"))),
                    "{what}: refresh: {other} not refreshed: {v}"
                );
            }
            assert!(
                !refreshed
                    .iter()
                    .any(|r| r.starts_with(&format!("{cloud}:"))),
                "{what}: refresh: {v}"
            );
            assert!(err(&o).contains(cloud), "{what}: refresh: {}", err(&o));
            // The ledger keeps every instance it knew.
            let o = w.run("costs --by cloud -o json", Some((cloud, &endpoint)));
            assert_eq!(
                o.status.code(),
                Some(0),
                "{what}: costs reads the ledger: {}",
                err(&o)
            );
            // (An instance launched and terminated within the second has no
            // hours to count.)
            let now = support::json(&o)["total"]["instances"].as_u64().unwrap();
            assert!(
                now >= spend_before.as_u64().unwrap()
                    && now <= spend_before.as_u64().unwrap() + launched,
                "{what}: {now} instances in the ledger's spend"
            );
        }
    }
    assert!(
        reaped,
        "the forgotten AWS instance was reaped once AWS answered"
    );
    // While AWS was down its instance stayed alive in the ledger; reaped, it
    // ended there, by the reaper, at its TTL.
    let v = support::json(&w.run("costs --by job -o json", None));
    let aws_row = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job"] == "aws-job")
        .unwrap()
        .clone();
    assert_eq!(aws_row["running"], 0, "{v}");
}
