//! `gpufleet serve` end to end on one machine: the `local` provider runs each
//! replica of examples/services/echo.toml as a Python process on 127.0.0.1,
//! the service controller keeps them and the proxy routes to them. Bounded
//! in count and time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_core::ledger::{Ledger, MemoryLedger, ServiceEntryKind};
use gpufleet_core::serve::ServiceSpec;
use gpufleet_core::ErrorKind;
use gpufleet_core::{Cloud, InstanceId};
use gpufleet_runtime::local::LocalCloud;
use gpufleet_runtime::serve::book::{self, ServiceRequest, ServiceState};
use gpufleet_runtime::serve::{
    Proxy, ReplicaState, ServiceConfig, ServiceController, ServiceStatus,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{oneshot, watch};

/// The example service's file with `tables` in place of its own scaling
/// tables, on AWS only.
pub(super) fn echo_text(tables: &str) -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/services/echo.toml"
    ))
    .unwrap();
    let head = text.split("\n[replicas]").next().unwrap();
    // `clouds` must come before the first table.
    let (top, gpu) = head.split_once("\n[[gpu]]").unwrap();
    format!("{top}\nclouds = [\"aws\"]\n[[gpu]]{gpu}\n{tables}")
}

/// The example service with `tables` in place of its own scaling tables.
fn echo(tables: &str) -> ServiceSpec {
    ServiceSpec::from_toml(&echo_text(tables)).unwrap()
}

struct Service {
    local: LocalCloud,
    updates: tokio::sync::mpsc::UnboundedSender<ServiceSpec>,
    status: watch::Receiver<ServiceStatus>,
    stop: Option<oneshot::Sender<()>>,
    controller: tokio::task::JoinHandle<ServiceStatus>,
    proxy_task: tokio::task::JoinHandle<()>,
    addr: std::net::SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    _dir: tempfile::TempDir,
}

impl Service {
    async fn start(spec: ServiceSpec) -> Service {
        Self::start_with(spec, Vec::new()).await
    }

    /// With the clouds' event feeds `feeds`.
    async fn start_with(
        spec: ServiceSpec,
        feeds: Vec<Arc<dyn gpufleet_core::CloudEvents>>,
    ) -> Service {
        Self::start_in(spec, feeds, None).await
    }

    /// With `feeds`, keeping the service in `ledger` when given.
    async fn start_in(
        spec: ServiceSpec,
        feeds: Vec<Arc<dyn gpufleet_core::CloudEvents>>,
        ledger: Option<Arc<dyn Ledger>>,
    ) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCloud::start(LocalCloud::fakes(), dir.path()).unwrap();
        let proxy = Proxy::new(spec.proxy);
        let listener = Proxy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let p = proxy.clone();
        let (proxy_stop, proxy_stopped) = oneshot::channel::<()>();
        std::mem::forget(proxy_stop);
        let proxy_task = tokio::spawn(async move {
            p.serve(
                listener,
                async { drop(proxy_stopped.await) },
                Duration::from_secs(2),
            )
            .await
        });
        let config = ServiceConfig::local().with_tick(Duration::from_millis(200));
        let mut controller =
            ServiceController::new(spec, local.providers(), proxy, config).with_events(feeds);
        if let Some(l) = ledger {
            controller = controller.with_ledger(l).listening_on(addr);
            controller.claim("first-controller").await.unwrap();
        }
        controller.listen_for_notices().await;
        let status = controller.watch();
        let updates = controller.updates();
        let (stop, stopped) = oneshot::channel::<()>();
        let controller = tokio::spawn(controller.run(async { drop(stopped.await) }));
        Service {
            local,
            updates,
            status,
            stop: Some(stop),
            controller,
            proxy_task,
            addr,
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            _dir: dir,
        }
    }

    /// Waits (up to `within`) until `what` holds of the status.
    async fn until(
        &mut self,
        within: Duration,
        what: impl Fn(&ServiceStatus) -> bool,
    ) -> ServiceStatus {
        let deadline = Instant::now() + within;
        loop {
            {
                let s = self.status.borrow_and_update();
                if what(&s) {
                    return s.clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out; last status: {:#?}",
                *self.status.borrow()
            );
            let _ = tokio::time::timeout(left, self.status.changed()).await;
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let req = Request::get(format!("http://{}{path}", self.addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let r = self.client.request(req).await.unwrap();
        let status = r.status();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    async fn stop(mut self) -> ServiceStatus {
        let _ = self.stop.take().unwrap().send(());
        let last = tokio::time::timeout(Duration::from_secs(20), self.controller)
            .await
            .expect("the controller stops")
            .unwrap();
        // Taken down: nothing is left running in the cloud or on this machine.
        for cloud in Cloud::REAL {
            assert!(self.local.cloud(cloud).unwrap().live_instances().is_empty());
        }
        tokio::time::sleep(LocalCloud::TICK * 3).await;
        assert!(
            self.local.running().is_empty(),
            "{:?}",
            self.local.running()
        );
        self.proxy_task.abort();
        last
    }
}

/// `n` spot replicas ready and nothing else live: the on-demand replicas
/// that stood in while they started have drained and ended (waiting for
/// `n` ready alone could see a stand-in among them, drained a moment later).
fn settled_on_spot(s: &ServiceStatus, n: usize) -> bool {
    let live: Vec<_> = s
        .replicas
        .iter()
        .filter(|r| r.state != ReplicaState::Ended)
        .collect();
    live.len() == n
        && live
            .iter()
            .all(|r| r.state == ReplicaState::Ready && r.capacity == gpufleet_core::Capacity::Spot)
}

fn ready(s: &ServiceStatus) -> usize {
    s.replicas
        .iter()
        .filter(|r| r.state == ReplicaState::Ready)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_preempted_under_load_is_replaced_and_no_request_is_lost() {
    let mut svc = Service::start(echo(
        "[replicas]\nmin = 2\nmax = 2\n[spot]\nshare = 1.0\nextra = 0\n",
    ))
    .await;
    let up = svc
        .until(Duration::from_secs(60), |s| settled_on_spot(s, 2))
        .await;
    // Two spot replicas, in two zones (on-demand stood in while they
    // started, and drained once they were ready).
    let spot: Vec<_> = up
        .replicas
        .iter()
        .filter(|r| r.capacity == gpufleet_core::Capacity::Spot && r.state == ReplicaState::Ready)
        .cloned()
        .collect();
    let zones: std::collections::BTreeSet<_> = spot.iter().map(|r| r.pool.zone.clone()).collect();
    assert_eq!(zones.len(), 2, "{up:#?}");

    let total = 2_000usize;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (client, addr, next) = (svc.client.clone(), svc.addr, next.clone());
        workers.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::AcqRel);
                if i >= total {
                    return failed;
                }
                let req = Request::get(format!("http://{addr}/r{i}?ms={}", i % 4))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                match client.request(req).await {
                    Ok(r) if r.status() == StatusCode::OK => {
                        let _ = r.into_body().collect().await;
                    }
                    Ok(r) => failed.push(format!("{i}: {}", r.status())),
                    Err(e) => failed.push(format!("{i}: {e}")),
                }
            }
        }));
    }
    while next.load(Ordering::Acquire) < total / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The cloud takes one replica back, without notice.
    let victim = spot[0].clone();
    let fake = svc.local.cloud(victim.pool.cloud).unwrap().clone();
    let id: InstanceId = victim.instance.clone().unwrap();
    fake.preempt(&id).unwrap();
    let mut failed = Vec::new();
    for w in workers {
        failed.extend(w.await.unwrap());
    }
    assert!(
        failed.is_empty(),
        "{} of {total} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    // It is replaced: two ready again, the lost one ended by the cloud.
    let after = svc
        .until(Duration::from_secs(60), |s| {
            ready(s) == 2
                && s.replicas
                    .iter()
                    .any(|r| r.id == victim.id && r.state == ReplicaState::Ended)
        })
        .await;
    let lost = after.replicas.iter().find(|r| r.id == victim.id).unwrap();
    assert!(
        lost.ended_because
            .as_deref()
            .unwrap()
            .contains("ended by the cloud"),
        "{lost:#?}"
    );
    assert!(after
        .replicas
        .iter()
        .any(|r| r.state == ReplicaState::Ready && r.id != spot[1].id));
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_scales_one_to_three_and_back() {
    let mut svc = Service::start(echo(
        "[replicas]\nmin = 1\nmax = 3\n[autoscale]\ntarget_in_flight = 2\nup_after = \"1s\"\ndown_after = \"2s\"\n[spot]\nshare = 1.0\nextra = 0\n",
    ))
    .await;
    svc.until(Duration::from_secs(60), |s| ready(s) == 1).await;
    // Six requests of 300 ms at a time: six in flight, three replicas wanted.
    let load = {
        let (client, addr) = (svc.client.clone(), svc.addr);
        tokio::spawn(async move {
            let started = Instant::now();
            let mut n = 0;
            while started.elapsed() < Duration::from_secs(8) {
                let mut batch = Vec::new();
                for _ in 0..6 {
                    let req = Request::get(format!("http://{addr}/?ms=300"))
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    batch.push(client.request(req));
                }
                for r in futures::future::join_all(batch).await {
                    assert_eq!(r.unwrap().status(), StatusCode::OK);
                    n += 1;
                }
            }
            n
        })
    };
    let up = svc.until(Duration::from_secs(30), |s| ready(s) == 3).await;
    let d = up
        .decisions
        .iter()
        .find(|d| d.to == 3)
        .expect("a decision to 3");
    assert!(d.to_string().contains("over the target 2"), "{d}");
    let served = load.await.unwrap();
    assert!(served > 0);
    // Quiet again: back to one after down_after, the others drained.
    let down = svc
        .until(Duration::from_secs(30), |s| s.target == 1 && ready(s) == 1)
        .await;
    assert!(
        down.decisions.iter().any(|d| d.from == 3 && d.to < 3),
        "{:#?}",
        down.decisions
    );
    assert!(down.replicas.iter().any(|r| r.state == ReplicaState::Ended
        && r.ended_because
            .as_deref()
            .unwrap_or("")
            .starts_with("drained")));
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_scales_to_zero_and_the_next_request_is_answered_after_a_cold_start() {
    let mut svc = Service::start(echo(
        "[replicas]\nmin = 0\nmax = 1\n[autoscale]\nidle = \"2s\"\n[spot]\nshare = 1.0\nextra = 0\n",
    ))
    .await;
    svc.until(Duration::from_secs(60), |s| ready(s) == 1).await;
    let zero = svc
        .until(Duration::from_secs(30), |s| {
            s.target == 0 && s.replicas.iter().all(|r| r.state == ReplicaState::Ended)
        })
        .await;
    assert!(zero
        .decisions
        .iter()
        .any(|d| d.to == 0 && d.to_string().contains("scaled to zero")));
    // The next request waits for a replica to start, then is answered.
    let started = Instant::now();
    let (status, body) = svc.get("/wake").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with("echo "), "{body}");
    let woke = svc.until(Duration::from_secs(5), |s| ready(s) == 1).await;
    assert!(woke.decisions.iter().any(|d| d.from == 0 && d.to == 1));
    assert!(started.elapsed() > Duration::from_millis(100));
    svc.stop().await;
}

/// Requests from `clients` clients until `stop` says so; the failures.
fn load(
    svc: &Service,
    clients: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<(usize, Vec<String>)>> {
    (0..clients)
        .map(|c| {
            let (client, addr, stop) = (svc.client.clone(), svc.addr, stop.clone());
            tokio::spawn(async move {
                let (mut n, mut failed) = (0, Vec::new());
                while !stop.load(Ordering::Acquire) {
                    let req = Request::get(format!("http://{addr}/c{c}/{n}?ms=5"))
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    match client.request(req).await {
                        Ok(r) if r.status() == StatusCode::OK => {
                            let _ = r.into_body().collect().await;
                        }
                        Ok(r) => failed.push(format!("{n}: {}", r.status())),
                        Err(e) => failed.push(format!("{n}: {e}")),
                    }
                    n += 1;
                }
                (n, failed)
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_version_is_rolled_back_and_a_good_one_replaces_the_old_with_no_failed_request() {
    let tables = "[replicas]\nmin = 2\nmax = 2\n[spot]\nshare = 1.0\nextra = 0\n";
    let mut svc = Service::start(echo(tables)).await;
    let up = svc
        .until(Duration::from_secs(60), |s| settled_on_spot(s, 2))
        .await;
    let old: Vec<String> = up
        .replicas
        .iter()
        .filter(|r| r.state == ReplicaState::Ready)
        .map(|r| r.id.clone())
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients = load(&svc, 4, stop.clone());

    // Version 2 never answers its readiness check (its server exits at once).
    let mut broken = echo(tables);
    broken.replica.workload.run = Some("echo broken >&2; exit 1".into());
    broken.readiness.start_timeout = Duration::from_secs(3);
    svc.updates.send(broken).unwrap();
    let back = svc
        .until(Duration::from_secs(60), |s| {
            s.rollouts.iter().any(|r| r.outcome == "rolled-back")
        })
        .await;
    assert_eq!(back.version, 1);
    let r = back.rollouts.iter().find(|r| r.version == 2).unwrap();
    assert!(
        r.why.contains("not ready within readiness.start_timeout"),
        "{r:?}"
    );
    // The old replicas were never stopped.
    for id in &old {
        let o = back.replicas.iter().find(|r| r.id == *id).unwrap();
        assert_eq!(o.state, ReplicaState::Ready, "{o:?}");
    }
    assert!(back
        .replicas
        .iter()
        .filter(|r| r.version == 2)
        .all(|r| r.state == ReplicaState::Ended));

    // Version 3 works: its replicas take the traffic once ready, the old drain.
    let mut good = echo(tables);
    good.replica
        .workload
        .env
        .insert("GREETING".into(), "v3".into());
    svc.updates.send(good).unwrap();
    let done = svc
        .until(Duration::from_secs(60), |s| {
            s.version == 3
                && ready(s) == 2
                && old.iter().all(|id| {
                    s.replicas
                        .iter()
                        .any(|r| r.id == *id && r.state == ReplicaState::Ended)
                })
        })
        .await;
    assert!(done
        .rollouts
        .iter()
        .any(|r| r.version == 3 && r.outcome == "promoted"));
    assert!(done
        .replicas
        .iter()
        .filter(|r| r.state == ReplicaState::Ready)
        .all(|r| r.version == 3));
    stop.store(true, Ordering::Release);
    let (mut sent, mut failed) = (0, Vec::new());
    for c in clients {
        let (n, f) = c.await.unwrap();
        sent += n;
        failed.extend(f);
    }
    assert!(sent > 100, "only {sent} requests sent");
    assert!(
        failed.is_empty(),
        "{} of {sent} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_started_again_adopts_the_running_replicas() {
    let spec = echo("[replicas]\nmin = 1\nmax = 1\n[spot]\nshare = 1.0\nextra = 0\n");
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCloud::start(LocalCloud::fakes(), dir.path()).unwrap();
    let config = || ServiceConfig::local().with_tick(Duration::from_millis(200));
    let until = |mut rx: watch::Receiver<ServiceStatus>, what: fn(&ServiceStatus) -> bool| async move {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if what(&rx.borrow_and_update()) {
                    return rx.borrow().clone();
                }
                rx.changed().await.unwrap();
            }
        })
        .await
        .expect("in time")
    };
    // The first controller gets its replica ready, then dies without
    // taking anything down.
    let mut first = ServiceController::new(
        spec.clone(),
        local.providers(),
        Proxy::new(spec.proxy),
        config(),
    );
    let rx = first.watch();
    let (_keep, never) = oneshot::channel::<()>();
    let task = tokio::spawn(first.run(async { drop(never.await) }));
    // (Once the on-demand replica that stood in for it has ended.)
    let up = until(rx, |s| {
        ready(s) == 1
            && s.replicas
                .iter()
                .all(|r| matches!(r.state, ReplicaState::Ready | ReplicaState::Ended))
    })
    .await;
    task.abort();
    let _ = task.await;
    let kept = up
        .replicas
        .iter()
        .find(|r| r.state == ReplicaState::Ready)
        .unwrap()
        .clone();

    // The next one finds it, checks it is ready and routes to it: no launch.
    let mut second = ServiceController::new(
        spec.clone(),
        local.providers(),
        Proxy::new(spec.proxy),
        config(),
    );
    let rx = second.watch();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(second.run(async { drop(stopped.await) }));
    let again = until(rx, |s| ready(s) == 1).await;
    let live: Vec<_> = again
        .replicas
        .iter()
        .filter(|r| r.state != ReplicaState::Ended)
        .collect();
    assert_eq!(live.len(), 1, "{again:#?}");
    assert_eq!(
        (live[0].id.as_str(), live[0].instance.as_ref()),
        (kept.id.as_str(), kept.instance.as_ref())
    );
    assert!(
        live[0].started_because.starts_with("adopted"),
        "{:?}",
        live[0]
    );
    let _ = stop.send(());
    task.await.unwrap();
    for cloud in Cloud::REAL {
        assert!(local.cloud(cloud).unwrap().live_instances().is_empty());
    }
}

/// A cloud's event feed fed by the test (the interruption queue's shape: a
/// long poll that returns what arrived, possibly nothing).
#[derive(Debug)]
struct TestFeed {
    cloud: Cloud,
    events: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<gpufleet_core::CloudEvent>>,
}

#[async_trait::async_trait]
impl gpufleet_core::CloudEvents for TestFeed {
    fn cloud(&self) -> Cloud {
        self.cloud
    }

    fn describe(&self) -> String {
        "test feed".into()
    }

    async fn receive(
        &self,
        mine: &(dyn for<'e> Fn(&'e gpufleet_core::CloudEvent) -> bool + Send + Sync),
    ) -> gpufleet_core::Result<Vec<gpufleet_core::CloudEvent>> {
        let mut rx = self.events.lock().await;
        match tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
            Ok(Some(e)) if mine(&e) => Ok(vec![e]),
            _ => Ok(Vec::new()),
        }
    }

    async fn check(&self) -> gpufleet_core::Result<()> {
        Ok(())
    }
}

/// An interruption warning heard on a cloud's event feed (the AWS
/// interruption queue) drains the replica at once and starts its
/// replacement, two minutes before the cloud would take it; a rebalance
/// recommendation does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruption_heard_on_the_event_feed_drains_and_replaces_the_replica() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let feed = Arc::new(TestFeed {
        cloud: Cloud::Aws,
        events: tokio::sync::Mutex::new(rx),
    });
    let mut svc = Service::start_with(
        echo("[replicas]\nmin = 1\nmax = 1\n[spot]\nshare = 1.0\nextra = 0\n"),
        vec![feed],
    )
    .await;
    let up = svc
        .until(Duration::from_secs(60), |s| {
            ready(s) == 1
                && s.replicas.iter().all(|r| {
                    r.state != ReplicaState::Ready || r.capacity == gpufleet_core::Capacity::Spot
                })
        })
        .await;
    let victim = up
        .replicas
        .iter()
        .find(|r| r.state == ReplicaState::Ready)
        .unwrap()
        .clone();
    assert_eq!(victim.pool.cloud, Cloud::Aws, "{up:#?}");
    let id: InstanceId = victim.instance.clone().unwrap();
    let now = time::OffsetDateTime::now_utc();
    tx.send(gpufleet_core::CloudEvent {
        instance: id.clone(),
        kind: gpufleet_core::CloudEventKind::Rebalance,
        at: now,
        source: "EC2 Instance Rebalance Recommendation".into(),
        account: None,
    })
    .unwrap();
    tx.send(gpufleet_core::CloudEvent {
        instance: id.clone(),
        kind: gpufleet_core::CloudEventKind::Interruption {
            deadline: Some(now + time::Duration::minutes(2)),
        },
        at: now,
        source: "EC2 Spot Instance Interruption Warning".into(),
        account: None,
    })
    .unwrap();
    let after = svc
        .until(Duration::from_secs(60), |s| {
            ready(s) == 1
                && s.replicas
                    .iter()
                    .any(|r| r.id == victim.id && r.state != ReplicaState::Ready)
        })
        .await;
    let gone = after.replicas.iter().find(|r| r.id == victim.id).unwrap();
    assert_eq!(
        gone.ended_because.as_deref(),
        Some("interruption notice"),
        "{gone:#?}"
    );
    svc.stop().await;
}

/// Checks that service `echo` is down in `ledger`, for a reason saying
/// `why`.
async fn down_because(ledger: &dyn Ledger, why: &str) {
    let view = book::service(ledger, "echo").await.unwrap();
    assert_eq!(view.state, ServiceState::Down);
    assert!(
        view.doc
            .down_because
            .as_deref()
            .is_some_and(|w| w.contains(why)),
        "{:?}",
        view.doc.down_because
    );
}

/// The service in the ledger: a second controller of it is refused, naming
/// the first; an update and a take-down made as requests in the ledger (as
/// `serve update` and `serve down` make them, from any process) reach the
/// controller, which rolls out, then ends every replica and stops by
/// itself; the log holds each replica's start, readiness and end with why,
/// and the rollout; the row says down, and the lease is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_holds_the_service_and_carries_requests_to_its_controller() {
    let ledger: Arc<dyn Ledger> = Arc::new(MemoryLedger::new());
    let tables = "[replicas]\nmin = 1\nmax = 1\n[spot]\nshare = 1.0\nextra = 0\n";
    let spec = echo(tables);
    let mut svc = Service::start_in(spec.clone(), Vec::new(), Some(ledger.clone())).await;
    svc.until(Duration::from_secs(60), |s| settled_on_spot(s, 1))
        .await;
    let view = book::service(ledger.as_ref(), "echo").await.unwrap();
    assert_eq!(view.state, ServiceState::Serving);
    assert_eq!(view.doc.holder, "first-controller");
    assert_eq!(view.doc.listen, Some(svc.addr.to_string()));

    // A second controller of the same service is refused, naming the first.
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCloud::start(LocalCloud::fakes(), dir.path()).unwrap();
    let mut second = ServiceController::new(
        spec.clone(),
        local.providers(),
        Proxy::new(spec.proxy),
        ServiceConfig::local(),
    )
    .with_ledger(ledger.clone());
    let e = second.claim("second-controller").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains("first-controller"), "{e}");

    // An update, as `serve update` asks for it.
    let v2 = echo_text(tables).replace(
        "readiness = \"/health\"",
        "readiness = \"/health\"\nenv = { VERSION = \"2\" }",
    );
    assert_ne!(ServiceSpec::from_toml(&v2).unwrap(), spec);
    let update = ServiceRequest::Update {
        service_file: v2,
        by: "ana@laptop".into(),
    };
    let seq = book::request(ledger.as_ref(), "echo", &update, None)
        .await
        .unwrap();
    svc.until(Duration::from_secs(90), |s| {
        s.version == 2 && s.rollouts.iter().any(|r| r.outcome == "promoted")
    })
    .await;
    let (view, handled) = book::wait_for(ledger.as_ref(), "echo", Duration::from_secs(10), |v| {
        v.doc.requests_handled >= seq && v.doc.status.version == 2
    })
    .await
    .unwrap();
    assert!(handled, "{:#?}", view.doc);

    // Taken down, as `serve down` asks: the controller stops by itself.
    let down = ServiceRequest::Down {
        by: "ana@laptop".into(),
    };
    // Not by another owner (issue 78): refused naming whose it is, and the
    // service goes on.
    let owner = ServiceConfig::local().owner;
    let e = book::request(ledger.as_ref(), "echo", &down, Some("mallory"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains(&format!("service echo is {owner}'s, not mallory's"))
            && e.to_string().contains("--any-owner"),
        "{e}"
    );
    let view = book::service(ledger.as_ref(), "echo").await.unwrap();
    assert_eq!(view.state, book::ServiceState::Serving);
    assert_eq!(view.doc.owner.as_deref(), Some(owner.as_str()));
    book::request(ledger.as_ref(), "echo", &down, Some(&owner))
        .await
        .unwrap();
    let last = tokio::time::timeout(Duration::from_secs(30), &mut svc.controller)
        .await
        .expect("the controller stops on the request")
        .unwrap();
    assert!(last.replicas.iter().all(|r| r.state == ReplicaState::Ended));
    for cloud in Cloud::REAL {
        assert!(svc.local.cloud(cloud).unwrap().live_instances().is_empty());
    }
    down_because(ledger.as_ref(), "taken down by ana@laptop").await;
    // Another request of a service that is down is refused.
    let e = book::request(ledger.as_ref(), "echo", &down, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is down"), "{e}");

    // The log: every replica's start, readiness and end, each with why.
    let log = book::history(ledger.as_ref(), "echo").await.unwrap();
    let replicas: Vec<serde_json::Value> = log
        .iter()
        .filter(|e| e.kind == ServiceEntryKind::Replica)
        .map(|e| serde_json::from_str(&e.doc).unwrap())
        .collect();
    for r in &last.replicas {
        let states: Vec<&str> = replicas
            .iter()
            .filter(|x| x["id"] == r.id.as_str())
            .filter_map(|x| x["state"].as_str())
            .collect();
        assert_eq!(states.first(), Some(&"starting"), "{}: {states:?}", r.id);
        assert_eq!(states.last(), Some(&"ended"), "{}: {states:?}", r.id);
        let end = replicas.iter().rfind(|x| x["id"] == r.id.as_str()).unwrap();
        assert!(end["started_because"]
            .as_str()
            .is_some_and(|w| !w.is_empty()));
        assert!(end["ended_because"].as_str().is_some_and(|w| !w.is_empty()));
    }
    assert!(
        replicas
            .iter()
            .any(|x| x["state"] == "ready" && x["version"] == 2),
        "{replicas:#?}"
    );
    let rollouts: Vec<&str> = log
        .iter()
        .filter(|e| e.kind == ServiceEntryKind::Rollout)
        .map(|e| e.doc.as_str())
        .collect();
    assert!(
        rollouts
            .iter()
            .any(|d| d.contains("rolling-out") && d.contains("requested by ana@laptop")),
        "{rollouts:?}"
    );
    assert!(
        rollouts.iter().any(|d| d.contains("promoted")),
        "{rollouts:?}"
    );

    // The lease is free: the service can be served again.
    second.claim("second-controller").await.unwrap();
    drop(second);
    local.shutdown();
    svc.proxy_task.abort();
}

/// A controller that loses its service's lease (here: it lapsed, and
/// another holder took it) stops at its next renewal instead of serving
/// beside the new holder, and leaves the replicas running: they are the new
/// holder's now (a standby that takes over adopts them; the old controller
/// used to end them under it). Its last writes are refused by the ledger.
/// Once nobody holds the lease the service shows as stopped: an update is
/// refused, a take-down marks it down at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_loses_the_services_lease_stops_and_leaves_its_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    let sqlite = gpufleet_runtime::sqlite::SqliteLedger::open(&path).unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(sqlite);
    let tables = "[replicas]\nmin = 1\nmax = 1\n[spot]\nshare = 1.0\nextra = 0\n[proxy]\nqueue_timeout = \"1s\"\n";
    let mut svc = Service::start_in(echo(tables), Vec::new(), Some(ledger.clone())).await;
    svc.until(Duration::from_secs(60), |s| settled_on_spot(s, 1))
        .await;
    // The lease lapses (as if the controller had been paused past it) and
    // another controller takes it.
    let c = rusqlite::Connection::open(&path).unwrap();
    let lapsed = c
        .execute(
            "UPDATE job_leases SET expires_at = 0 WHERE job_id = 'service:echo'",
            [],
        )
        .unwrap();
    assert_eq!(lapsed, 1);
    drop(c);
    let taken = ledger
        .acquire_lease(
            &gpufleet_core::ledger::service_lease("echo"),
            "thief",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let gpufleet_core::ledger::Claim::Acquired(thief) = taken else {
        panic!("the lapsed lease was not taken: {taken:?}")
    };
    // It stops within a renewal period (5 s) and its take-down.
    let last = tokio::time::timeout(Duration::from_secs(30), &mut svc.controller)
        .await
        .expect("the controller stops once its lease is lost")
        .unwrap();
    assert!(
        last.replicas.iter().any(|r| r.state == ReplicaState::Ready),
        "{:#?}",
        last.replicas
    );
    let live: usize = Cloud::REAL
        .iter()
        .map(|c| svc.local.cloud(*c).unwrap().live_instances().len())
        .sum();
    assert_eq!(live, 1, "the replica is left to the lease's holder");
    // It routes nothing any more.
    let (status, _) = svc.get("/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // The new holder's lease stands: the old controller wrote nothing under it.
    let view = book::service(ledger.as_ref(), "echo").await.unwrap();
    assert_eq!(
        view.state,
        ServiceState::Serving,
        "the thief holds the lease"
    );
    assert!(view.doc.up, "the old controller's 'down' was refused");
    // The thief goes away too: nobody serves it, its row still says up.
    ledger.release_lease(&thief).await.unwrap();
    let view = book::service(ledger.as_ref(), "echo").await.unwrap();
    assert_eq!(view.state, ServiceState::Stopped);
    // An update is refused; `serve down` marks it down at once.
    let update = ServiceRequest::Update {
        service_file: echo_text(tables),
        by: "ana@laptop".into(),
    };
    let e = book::request(ledger.as_ref(), "echo", &update, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("service echo is stopped"), "{e}");
    let down = ServiceRequest::Down {
        by: "ana@laptop".into(),
    };
    assert_eq!(
        book::request(ledger.as_ref(), "echo", &down, None)
            .await
            .unwrap(),
        0
    );
    down_because(
        ledger.as_ref(),
        "after its controller (first-controller) had stopped",
    )
    .await;
    svc.local.shutdown();
    svc.proxy_task.abort();
}

/// An update applies every table of the new file (issue 79: `[replicas]`,
/// `[autoscale]` and `[spot]` of an update were ignored, the service still
/// at the old target minutes after the promotion), and a standby that
/// takes the service over serves on where the ledger says it stood: the
/// promoted version (its file, not the standby's older one), its target,
/// and replica numbers after every one used (it used to restart at the
/// floor, say version 1 and reuse replica ids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_applies_every_table_and_a_takeover_resumes_where_it_stood() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    let ledger: Arc<dyn Ledger> =
        Arc::new(gpufleet_runtime::sqlite::SqliteLedger::open(&path).unwrap());
    let v1 = "[replicas]\nmin = 1\nmax = 3\n[spot]\nshare = 0.0\nextra = 0\n";
    let mut svc = Service::start_in(echo(v1), Vec::new(), Some(ledger.clone())).await;
    svc.until(Duration::from_secs(60), |s| ready(s) == 1).await;
    let v2 = "[replicas]\nmin = 2\nmax = 3\n[spot]\nshare = 0.0\nextra = 0\n[autoscale]\ntarget_in_flight = 8\n";
    let update = ServiceRequest::Update {
        service_file: echo_text(v2),
        by: "ana@laptop".into(),
    };
    book::request(ledger.as_ref(), "echo", &update, None)
        .await
        .unwrap();
    let promoted = svc
        .until(Duration::from_secs(120), |s| {
            s.version == 2
                && s.target == 2
                && s.replicas
                    .iter()
                    .filter(|r| r.state == ReplicaState::Ready && r.version == 2)
                    .count()
                    == 2
        })
        .await;
    let used: u32 = promoted
        .replicas
        .iter()
        .filter_map(|r| r.id.rsplit_once("-r").and_then(|(_, n)| n.parse().ok()))
        .max()
        .unwrap();
    // Wait for the row to say so, then the controller dies (its lease is
    // left to lapse).
    book::wait_for(ledger.as_ref(), "echo", Duration::from_secs(10), |v| {
        v.doc.status.version == 2 && v.doc.status.target == 2
    })
    .await
    .unwrap();
    svc.controller.abort();
    let _ = (&mut svc.controller).await;

    // A standby with the first version's file, on the same machines.
    let spec = echo(v1);
    let proxy = Proxy::new(spec.proxy);
    let mut standby = ServiceController::new(
        spec,
        svc.local.providers(),
        proxy,
        ServiceConfig::local().with_tick(Duration::from_millis(200)),
    )
    .with_ledger(ledger.clone());
    let since = ledger.now().await.unwrap();
    let started = Instant::now();
    loop {
        match standby.take_over("standby", since).await {
            Ok(true) => break,
            Ok(false) => panic!("taken down"),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Conflict, "{e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never took over"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let now = standby.status();
    assert_eq!((now.version, now.target), (2, 2), "{now:#?}");
    // It serves version 2's file (min 2) with the replicas it adopts, and
    // numbers any new one after those used.
    let mut watch = standby.watch();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(standby.run(async { drop(stopped.await) }));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        {
            let s = watch.borrow_and_update();
            if ready(&s) == 2 {
                assert!(
                    s.replicas
                        .iter()
                        .filter(|r| r.state == ReplicaState::Ready)
                        .all(|r| r.version == 2),
                    "{s:#?}"
                );
                for r in s
                    .replicas
                    .iter()
                    .filter(|r| r.started_because != "adopted: found running")
                {
                    let n: u32 = r.id.rsplit_once("-r").unwrap().1.parse().unwrap();
                    assert!(n > used, "replica id {} reused (used up to r{used})", r.id);
                }
                break;
            }
        }
        assert!(Instant::now() < deadline, "{:#?}", *watch.borrow());
        let _ = tokio::time::timeout(Duration::from_secs(1), watch.changed()).await;
    }
    let _ = stop.send(());
    let last = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert!(last.replicas.iter().all(|r| r.state == ReplicaState::Ended));
    svc.local.shutdown();
    svc.proxy_task.abort();
}

/// A process that leaves its instance's process group (`setsid`) still ends
/// with the instance (issue 79: a replica that setsid'd out survived its
/// `serve`): found by the variable naming the instance, which it inherits.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_left_its_group_ends_with_its_instance() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCloud::start(LocalCloud::fakes(), dir.path()).unwrap();
    let aws = local
        .providers()
        .into_iter()
        .find(|p| p.cloud() == Cloud::Aws)
        .unwrap();
    let offer = aws
        .offers(&gpufleet_core::OfferQuery::new())
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.pool.capacity == gpufleet_core::Capacity::OnDemand)
        .unwrap();
    let pidfile = dir.path().join("escaped.pid");
    let mut req = gpufleet_core::LaunchRequest::new(
        offer.pool.clone(),
        "local",
        gpufleet_core::IdempotencyKey::new("escape-1").unwrap(),
    );
    req.boot_script = Some(format!(
        "setsid bash -c 'echo $$ > {}; exec sleep 600' < /dev/null > /dev/null 2>&1 &\nsleep 600\n",
        pidfile.display()
    ));
    let made = aws.launch(&req).await.unwrap();
    let started = Instant::now();
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break p;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let alive = |pid: i32| {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    };
    assert!(alive(pid));
    aws.terminate(&made[0].id).await.unwrap();
    let ended = Instant::now();
    while alive(pid) {
        assert!(
            ended.elapsed() < Duration::from_secs(5),
            "the escaped process {pid} outlived its instance"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    local.shutdown();
}
