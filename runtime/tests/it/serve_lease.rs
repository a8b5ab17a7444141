//! A service controller cut off from its PostgreSQL ledger (issue 78),
//! through a TCP forwarder the test cuts: it stops routing before its lease
//! could pass to another controller (never serving beside a standby that
//! takes over and adopts its replica), stops in bounded time on a stop
//! whatever the ledger does, leaves the replica to the standby, and, when
//! alone and the ledger comes back, serves on with its replica instead of
//! ending it. Bounded: about a minute each, one replica.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_core::ledger::Ledger;
use gpufleet_core::serve::ServiceSpec;
use gpufleet_core::Cloud;
use gpufleet_runtime::local::LocalCloud;
use gpufleet_runtime::postgres::PgLedger;
use gpufleet_runtime::serve::book::{self, ServiceState, SERVICE_LEASE};
use gpufleet_runtime::serve::{Proxy, ServiceConfig, ServiceController, ServiceStatus};
use gpufleet_testkit::forwarder::Forwarder;
use gpufleet_testkit::postgres as pg;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

fn echo() -> ServiceSpec {
    ServiceSpec::from_toml(&super::serve_local::echo_text(
        "[replicas]\nmin = 1\nmax = 1\n[spot]\nshare = 0.0\nextra = 0\n[proxy]\nqueue_timeout = \"1s\"\n",
    ))
    .unwrap()
}

/// The status of a GET of `/` through the proxy at `addr` (0 when it does
/// not answer in 5 s).
async fn get(addr: SocketAddr) -> u16 {
    let go = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET / HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        String::from_utf8_lossy(&out)
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
    };
    tokio::time::timeout(Duration::from_secs(5), go)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// A controller of the echo service on `providers`, its proxy serving.
struct Ctl {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    run: Option<tokio::task::JoinHandle<ServiceStatus>>,
    controller: Option<ServiceController>,
}

impl Ctl {
    async fn new(providers: Vec<Arc<dyn gpufleet_core::Provider>>, ledger: Arc<dyn Ledger>) -> Ctl {
        let spec = echo();
        let proxy = Proxy::new(spec.proxy);
        let listener = Proxy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let p = proxy.clone();
        tokio::spawn(async move {
            p.serve(listener, std::future::pending(), Duration::from_secs(1))
                .await
        });
        let config = ServiceConfig::local().with_tick(Duration::from_millis(200));
        let controller = ServiceController::new(spec, providers, proxy, config)
            .with_ledger(ledger)
            .listening_on(addr);
        Ctl {
            addr,
            stop: None,
            run: None,
            controller: Some(controller),
        }
    }

    fn start(&mut self) {
        let c = self.controller.take().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        self.stop = Some(stop);
        self.run = Some(tokio::spawn(c.run(async { drop(stopped.await) })));
    }

    /// Stops it (as SIGTERM does): its last status, within `within`.
    async fn stop(&mut self, within: Duration) -> ServiceStatus {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(within, self.run.take().unwrap())
            .await
            .expect("the controller stops in bounded time")
            .unwrap()
    }

    /// Waits until a GET through it answers `status`: when.
    async fn until_answers(&self, status: u16, within: Duration) -> Instant {
        let deadline = Instant::now() + within;
        loop {
            if get(self.addr).await == status {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "{} never answered {status}",
                self.addr
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn behind(url: &str, f: &Forwarder, port: u16) -> String {
    url.replace(&format!(":{port}/"), &format!(":{}/", f.addr.port()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_cut_off_from_its_ledger_never_serves_beside_its_standby() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let forwarder = Forwarder::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).await;
    let cut_off: Arc<dyn Ledger> = Arc::new(
        PgLedger::connect(&behind(&url, &forwarder, server.port()))
            .await
            .unwrap(),
    );
    let direct: Arc<dyn Ledger> = Arc::new(PgLedger::connect(&url).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCloud::start(LocalCloud::fakes(), dir.path()).unwrap();

    let mut a = Ctl::new(local.providers(), cut_off).await;
    a.controller.as_mut().unwrap().claim("ctl-a").await.unwrap();
    a.start();
    a.until_answers(200, Duration::from_secs(60)).await;

    // The ledger goes away for A only.
    let cut = Instant::now();
    forwarder.cut();
    let stopped_routing = a
        .until_answers(503, SERVICE_LEASE + Duration::from_secs(5))
        .await;
    let stopped_after = stopped_routing - cut;

    // B stands by on the same ledger (reached directly) and takes the
    // service over once A's lease lapses, adopting A's replica.
    let mut b = Ctl::new(local.providers(), direct.clone()).await;
    let since = direct.now().await.unwrap();
    let took = loop {
        match b
            .controller
            .as_mut()
            .unwrap()
            .take_over("ctl-b", since)
            .await
        {
            Ok(true) => break Instant::now(),
            Ok(false) => panic!("the service was taken down"),
            Err(e) => assert_eq!(e.kind(), gpufleet_core::ErrorKind::Conflict, "{e}"),
        }
        assert!(cut.elapsed() < Duration::from_secs(60), "B never took over");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "ledger cut: A stopped routing after {stopped_after:?}, B took over after {:?} (lease {SERVICE_LEASE:?})",
        took - cut
    );
    assert!(
        stopped_after < SERVICE_LEASE,
        "A routed for {stopped_after:?} of a {SERVICE_LEASE:?} lease"
    );
    assert!(
        stopped_routing < took,
        "A was still routing when B took over"
    );
    b.start();
    b.until_answers(200, Duration::from_secs(30)).await;
    // Never both: A answers 503 while B serves.
    for _ in 0..5 {
        assert_eq!(get(a.addr).await, 503);
        assert_eq!(get(b.addr).await, 200);
    }
    // Stopped while it cannot reach the ledger: A ends in bounded time and
    // leaves the replica to B, which goes on serving through it.
    let stopping = Instant::now();
    a.stop(Duration::from_secs(20)).await;
    eprintln!("A stopped {:?} after it was told to", stopping.elapsed());
    assert_eq!(get(b.addr).await, 200);
    let live: usize = Cloud::REAL
        .iter()
        .map(|c| local.cloud(*c).unwrap().live_instances().len())
        .sum();
    assert_eq!(live, 1);
    let view = book::service(direct.as_ref(), "echo").await.unwrap();
    assert_eq!(view.state, ServiceState::Serving);
    assert_eq!(view.doc.holder, "ctl-b");
    b.stop(Duration::from_secs(30)).await;
    local.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_and_cut_off_for_25_s_a_controller_serves_on_with_its_replica() {
    let Some(server) = pg::shared() else { return };
    let url = server.fresh_db();
    let forwarder = Forwarder::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).await;
    let ledger: Arc<dyn Ledger> = Arc::new(
        PgLedger::connect(&behind(&url, &forwarder, server.port()))
            .await
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCloud::start(LocalCloud::fakes(), dir.path()).unwrap();
    let mut a = Ctl::new(local.providers(), ledger.clone()).await;
    a.controller.as_mut().unwrap().claim("ctl-a").await.unwrap();
    a.start();
    a.until_answers(200, Duration::from_secs(60)).await;
    let before: Vec<_> = local.cloud(Cloud::Aws).unwrap().live_instances();
    forwarder.cut();
    a.until_answers(503, SERVICE_LEASE).await;
    tokio::time::sleep(Duration::from_secs(25).saturating_sub(SERVICE_LEASE)).await;
    forwarder.restore();
    // Back: it takes its lease again and serves with the same replica.
    let back = Instant::now();
    a.until_answers(200, Duration::from_secs(30)).await;
    eprintln!("ledger back: serving again after {:?}", back.elapsed());
    let after: Vec<_> = local.cloud(Cloud::Aws).unwrap().live_instances();
    assert_eq!(
        before.iter().map(|i| i.id.clone()).collect::<Vec<_>>(),
        after.iter().map(|i| i.id.clone()).collect::<Vec<_>>(),
        "the replica was ended and replaced"
    );
    let view = book::service(ledger.as_ref(), "echo").await.unwrap();
    assert_eq!(view.state, ServiceState::Serving);
    // And a stop with the ledger there takes the service down.
    let last = a.stop(Duration::from_secs(30)).await;
    assert!(last
        .replicas
        .iter()
        .all(|r| r.state == gpufleet_runtime::serve::ReplicaState::Ended));
    local.shutdown();
}
