//! A service's replicas on a cloud rather than the `local` provider: each
//! replica is reached at its instance's address (the one `reach` names, as
//! the cloud reports it, which may come some time after the launch) and the
//! service file's `port`. The fake cloud stands in for the cloud; an
//! in-process server on 127.0.0.1 stands in for the server the instance
//! would run, and the fake gives the instance that address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::fake::FakeCloud;
use gpufleet_core::serve::ServiceSpec;
use gpufleet_core::{Addresses, Cloud, Provider};
use gpufleet_runtime::serve::{
    Proxy, Reach, ReplicaState, ServiceConfig, ServiceController, ServiceStatus,
};
use gpufleet_testkit::replica::Replica;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const LOOPBACK: Addresses = Addresses {
    private: Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
    public: None,
};

/// One on-demand replica of a service on AWS listening on `port`, with
/// `readiness` as its readiness table.
fn service(port: u16, readiness: &str) -> ServiceSpec {
    ServiceSpec::from_toml(&format!(
        r#"name = "llm"
run = "vllm serve --port $PORT"
port = {port}
image = "ami-0123456789abcdef0"
clouds = ["aws"]

[readiness]
{readiness}

[[gpu]]
model = "L4"

[replicas]
min = 1
max = 1

[spot]
share = 0.0
extra = 0
"#
    ))
    .unwrap()
}

fn controller(
    spec: ServiceSpec,
    fake: &Arc<FakeCloud>,
    reach: Reach,
) -> (ServiceController, Proxy) {
    let proxy = Proxy::new(spec.proxy);
    let mut config = ServiceConfig::default().with_tick(Duration::from_millis(100));
    config.reach = reach;
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    (
        ServiceController::new(spec, providers, proxy.clone(), config),
        proxy,
    )
}

fn only(s: &ServiceStatus) -> &gpufleet_runtime::serve::ReplicaStatus {
    assert_eq!(s.replicas.len(), 1, "{s:#?}");
    &s.replicas[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_reached_at_its_instances_address_once_the_cloud_gives_it() {
    let server = Replica::start("on-the-instance").await;
    let spec = service(server.addr.port(), "path = \"/health\"");
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
    let (mut ctl, proxy) = controller(spec, &fake, Reach::Private);
    ctl.step().await.unwrap();
    let s = ctl.status();
    let r = only(&s);
    assert_eq!(r.state, ReplicaState::Starting);
    // Launched without an address (as a Compute Engine instance being
    // inserted is): not probed, not routed.
    assert_eq!(r.endpoint, None);
    let instance = r.instance.clone().unwrap();
    let launched = fake.live_instances();
    assert_eq!(launched.len(), 1);
    assert_eq!(
        launched[0].tags.get(gpufleet_runtime::serve::PORT_TAG),
        Some(&server.addr.port().to_string()),
        "the port the replica listens on is the service file's"
    );
    for _ in 0..3 {
        ctl.step().await.unwrap();
    }
    assert_eq!(only(&ctl.status()).state, ReplicaState::Starting);
    assert_eq!(server.served(), 0, "nothing was probed without an address");
    // The cloud names the address: probed there, ready, routed to.
    fake.set_addresses(&instance, LOOPBACK).unwrap();
    ctl.step().await.unwrap();
    let s = ctl.status();
    let r = only(&s);
    assert_eq!(r.endpoint, Some(server.addr), "{r:#?}");
    assert_eq!(r.state, ReplicaState::Ready, "{r:#?}");
    let listener = Proxy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move {
        proxy
            .serve(
                listener,
                std::future::pending::<()>(),
                Duration::from_secs(1),
            )
            .await
    });
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let answer = client
        .get(format!("http://{addr}/generate").parse().unwrap())
        .await
        .unwrap();
    assert!(answer.status().is_success());
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"on-the-instance");
    serving.abort();
    ctl.down("test over").await;
    assert!(fake.live_instances().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_the_address_asked_for_ends_at_its_start_timeout() {
    let server = Replica::start("never-reached").await;
    let spec = service(
        server.addr.port(),
        "path = \"/health\"\nstart_timeout = \"1s\"",
    );
    // The instances have a private address only; the proxy asks for the
    // public one (an EC2 subnet that maps none).
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_addresses(LOOPBACK));
    let (mut ctl, _proxy) = controller(spec, &fake, Reach::Public);
    ctl.step().await.unwrap();
    let first = only(&ctl.status()).clone();
    assert_eq!(first.endpoint, None);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    ctl.step().await.unwrap();
    let s = ctl.status();
    let ended = s.replicas.iter().find(|r| r.id == first.id).unwrap();
    assert_eq!(ended.state, ReplicaState::Ended, "{s:#?}");
    assert_eq!(
        ended.ended_because.as_deref(),
        Some("its instance had no public address within readiness.start_timeout")
    );
    assert!(
        fake.live_instances()
            .iter()
            .all(|i| i.id != *first.instance.as_ref().unwrap()),
        "its instance was ended"
    );
    assert_eq!(server.served(), 0);
    ctl.down("test over").await;
}

/// On a cloud the controller hears of a replica's interruption from its
/// node (the `gpufleet:notice` tag its boot script writes from the
/// metadata service's notice), in the listing it makes every step: the
/// replica drains and a replacement starts elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_reported_by_the_replicas_node_drains_and_replaces_it() {
    let server = Replica::start("on-the-instance").await;
    let spec = service(server.addr.port(), "path = \"/health\"");
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_addresses(LOOPBACK));
    let (mut ctl, _proxy) = controller(spec, &fake, Reach::Private);
    ctl.step().await.unwrap();
    ctl.step().await.unwrap();
    let first = only(&ctl.status()).clone();
    assert_eq!(first.state, ReplicaState::Ready, "{first:#?}");
    let script = fake
        .live_with_boot_scripts()
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    assert!(
        script.contains("report gpufleet:notice") && script.contains("169.254.169.254"),
        "the replica's node watches EC2's metadata for its notice:\n{script}"
    );
    fake.set_tag(
        first.instance.as_ref().unwrap(),
        gpufleet_core::tags::NOTICE,
        &time::OffsetDateTime::now_utc().unix_timestamp().to_string(),
    )
    .unwrap();
    ctl.step().await.unwrap();
    let s = ctl.status();
    let noticed = s.replicas.iter().find(|r| r.id == first.id).unwrap();
    assert_ne!(noticed.state, ReplicaState::Ready, "{s:#?}");
    assert_eq!(
        noticed.ended_because.as_deref(),
        Some("interruption notice (reported by its node)")
    );
    assert!(
        s.replicas
            .iter()
            .any(|r| r.id != first.id && r.state != ReplicaState::Ended),
        "a replacement started: {s:#?}"
    );
    ctl.down("test over").await;
}

/// The replica's boot script on the local provider: `PORT` set, `run` in
/// its place, and the notice file (which the provider creates when the
/// fake cloud gives notice) reported as `gpufleet:notice` in the report
/// file the provider writes on the instance.
#[cfg(unix)]
#[test]
fn a_local_replicas_script_serves_on_port_and_reports_its_notice() {
    let mut spec = service(8080, "path = \"/health\"");
    spec.replica.workload.run = Some("echo \"$PORT\" > \"$HOME/port\"; sleep 5".into());
    let script = gpufleet_runtime::serve::replica_script(
        &spec,
        41234,
        gpufleet_runtime::workload::Node::Local,
        Cloud::Aws,
    )
    .unwrap();
    assert!(
        !script.contains("169.254") && !script.contains("curl"),
        "{script}"
    );
    let home = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("HOME", home.path())
        .spawn()
        .unwrap();
    let node = home.path().join("node");
    let mut report = String::new();
    for n in 0..40 {
        if n == 5 {
            std::fs::write(node.join("notice"), "preemption\n").unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        report = std::fs::read_to_string(node.join("report")).unwrap_or_default();
        if report.contains("gpufleet:notice ") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(report.starts_with("gpufleet:notice "), "{report:?}");
    assert_eq!(
        std::fs::read_to_string(home.path().join("port"))
            .unwrap()
            .trim(),
        "41234"
    );
}
