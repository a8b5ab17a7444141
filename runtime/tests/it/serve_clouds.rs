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
