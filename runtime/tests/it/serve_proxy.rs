//! The service proxy against stand-in replicas on 127.0.0.1: routing by
//! fewest outstanding requests, retries, the cold-start queue, the load it
//! measures and its metrics. Bounded in count and time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use gpufleet_core::serve::ProxySettings;
use gpufleet_core::Capacity;
use gpufleet_runtime::serve::{Proxy, Route};
use gpufleet_testkit::replica::Replica;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use time::OffsetDateTime;
use tokio::sync::oneshot;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A proxy serving on a free port of 127.0.0.1, for the proxy's tests.
pub(super) struct Running {
    pub(super) proxy: Proxy,
    pub(super) addr: SocketAddr,
    client: HttpClient,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub(super) async fn start(settings: ProxySettings) -> Running {
        let proxy = Proxy::new(settings);
        let listener = Proxy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel();
        let p = proxy.clone();
        let task = tokio::spawn(async move {
            p.serve(
                listener,
                async { drop(stopped.await) },
                Duration::from_secs(5),
            )
            .await
        });
        Running {
            proxy,
            addr,
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            stop: Some(stop),
            task,
        }
    }

    pub(super) fn route(&self, replicas: &[&Replica]) {
        let routes: Vec<Route> = replicas
            .iter()
            .map(|r| Route {
                replica: r.name.clone(),
                address: r.addr,
                capacity: Capacity::Spot,
            })
            .collect();
        self.proxy.set_routes(&routes);
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: &str,
        key: Option<&str>,
    ) -> (StatusCode, String, Option<String>) {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let resp = self.client.request(req).await.expect("the proxy answers");
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            String::from_utf8_lossy(&body).into_owned(),
            retry_after,
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let (s, b, _) = self.send("GET", path, "", None).await;
        (s, b)
    }

    pub(super) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the proxy stops")
            .unwrap();
    }
}

fn settings(queue: u32, queue_timeout: Duration, retries: u32) -> ProxySettings {
    ProxySettings {
        queue,
        queue_timeout,
        retries,
        ..ProxySettings::default()
    }
}

#[tokio::test]
async fn each_request_goes_to_the_replica_with_the_fewest_outstanding() {
    let (a, b) = (Replica::start("a").await, Replica::start("b").await);
    let p = Running::start(ProxySettings::default()).await;
    p.route(&[&a, &b]);
    // One slow request holds one replica; the quick ones all go to the other.
    let slow = {
        let (client, addr) = (p.client.clone(), p.addr);
        tokio::spawn(async move {
            let req = Request::get(format!("http://{addr}/slow?ms=1500"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let resp = client.request(req).await.unwrap();
            String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes())
                .into_owned()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut quick = Vec::new();
    for _ in 0..10 {
        let (status, body) = p.get("/").await;
        assert_eq!(status, StatusCode::OK);
        quick.push(body);
    }
    let slow = slow.await.unwrap();
    assert!(
        quick.iter().all(|q| *q != slow),
        "quick {quick:?}, slow on {slow}"
    );
    // Idle again: the two share the load.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..10 {
        seen.insert(p.get("/").await.1);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    p.stop().await;
}

#[tokio::test]
async fn a_replica_preempted_under_load_loses_no_idempotent_request() {
    let (a, b) = (Replica::start("a").await, Replica::start("b").await);
    let p = Running::start(ProxySettings::default()).await;
    p.route(&[&a, &b]);
    let total = 2_000usize;
    let concurrency = 16usize;
    let started = Instant::now();
    let mut handles = Vec::new();
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for w in 0..concurrency {
        let (client, addr, counter) = (p.client.clone(), p.addr, counter.clone());
        handles.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            loop {
                let i = counter.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                if i >= total {
                    break;
                }
                // Mostly GETs (some slow, so that requests are mid-flight when
                // the replica goes), and POSTs marked idempotent.
                let req = if i % 4 == 3 {
                    Request::post(format!("http://{addr}/"))
                        .header("Idempotency-Key", format!("{w}-{i}"))
                        .body(Full::new(Bytes::from(format!("req {i}"))))
                } else {
                    Request::get(format!("http://{addr}/slow?ms={}", i % 3 * 5))
                        .body(Full::new(Bytes::new()))
                }
                .unwrap();
                match client.request(req).await {
                    Ok(r) if r.status() == StatusCode::OK => {
                        let _ = r.into_body().collect().await;
                    }
                    Ok(r) => failed.push(format!("{i}: {}", r.status())),
                    Err(e) => failed.push(format!("{i}: {e}")),
                }
            }
            failed
        }));
    }
    // A quarter of the way in, replica a is preempted: its listener and
    // connections go at once, and the proxy is told only later (as a
    // controller would after its next look).
    while counter.load(std::sync::atomic::Ordering::Acquire) < total / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.kill().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.route(&[&b]);
    let mut failed = Vec::new();
    for h in handles {
        failed.extend(h.await.unwrap());
    }
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    assert!(a.served() > 0 && b.served() > 0);
    assert!(started.elapsed() < Duration::from_secs(60));
    let metrics = p.proxy.metrics_text().unwrap();
    assert!(
        metrics.contains(&format!(
            "gpufleet_service_requests_total{{code=\"200\"}} {total}"
        )),
        "{metrics}"
    );
    p.stop().await;
}

#[tokio::test]
async fn a_request_that_failed_after_it_was_sent_is_retried_only_when_idempotent() {
    let (a, b) = (Replica::start("a").await, Replica::start("b").await);
    let p = Running::start(ProxySettings::default()).await;
    a.fail_requests(true);
    b.fail_requests(true);
    p.route(&[&a, &b]);
    // Both fail: a POST is not sent twice; with every retry failing, 502.
    let (status, body, _) = p.send("POST", "/", "x", None).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(body.contains("not idempotent"), "{body}");
    let (status, body, _) = p.send("GET", "/", "", None).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(body.contains("every other tried"), "{body}");
    // One fails: an idempotent request is answered by the other.
    b.fail_requests(false);
    for _ in 0..6 {
        let (status, body, _) = p.send("POST", "/", "once", Some("k-1")).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "b once"));
        assert_eq!(p.get("/").await, (StatusCode::OK, "b".to_string()));
    }
    // A refused connection was never sent: even a plain POST goes elsewhere.
    a.kill().await;
    for _ in 0..4 {
        let (status, body, _) = p.send("POST", "/", "y", None).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "b y"));
    }
    p.stop().await;
}

#[tokio::test]
async fn requests_wait_for_a_cold_start_within_the_queue_bounds() {
    let p = Running::start(settings(2, Duration::from_secs(20), 2)).await;
    p.proxy.set_retry_after(Duration::from_secs(45));
    // At zero: the request is held until a replica is routed.
    let held = {
        let (client, addr) = (p.client.clone(), p.addr);
        tokio::spawn(async move {
            let req = Request::get(format!("http://{addr}/"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let r = client.request(req).await.unwrap();
            (
                r.status(),
                String::from_utf8_lossy(&r.into_body().collect().await.unwrap().to_bytes())
                    .into_owned(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let load = p.proxy.sample(OffsetDateTime::now_utc());
    assert_eq!((load.queued, load.arrived), (1, 1), "{load:?}");
    let a = Replica::start("a").await;
    p.route(&[&a]);
    assert_eq!(held.await.unwrap(), (StatusCode::OK, "a".to_string()));
    p.stop().await;

    // Past the timeout: 503 with Retry-After.
    let p = Running::start(settings(1, Duration::from_millis(300), 2)).await;
    p.proxy.set_retry_after(Duration::from_secs(45));
    let started = Instant::now();
    let (status, _, after) = p.send("GET", "/", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(after.as_deref(), Some("45"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Past the queue's length: 503 at once.
    let first = {
        let (client, addr) = (p.client.clone(), p.addr);
        tokio::spawn(async move {
            let req = Request::get(format!("http://{addr}/"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            client.request(req).await.unwrap().status()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let (status, _, _) = p.send("GET", "/", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_millis(250));
    assert_eq!(first.await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    p.stop().await;
}

#[tokio::test]
async fn the_load_sample_is_the_mean_in_flight_and_metrics_are_served() {
    let a = Replica::start("a").await;
    let p = Running::start(ProxySettings::default()).await;
    p.route(&[&a]);
    let _ = p.proxy.sample(OffsetDateTime::now_utc());
    // Four requests of 400 ms at once, sampled over about 800 ms: about 2 in
    // flight on average.
    let mut hs = Vec::new();
    for _ in 0..4 {
        let (client, addr) = (p.client.clone(), p.addr);
        hs.push(tokio::spawn(async move {
            let req = Request::get(format!("http://{addr}/slow?ms=400"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let r = client.request(req).await.unwrap();
            let _ = r.into_body().collect().await;
        }));
    }
    for h in hs {
        h.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let load = p.proxy.sample(OffsetDateTime::now_utc());
    assert_eq!(load.arrived, 4);
    assert!(load.in_flight > 1.0 && load.in_flight < 3.5, "{load:?}");
    p.proxy.set_gauges(
        &[
            ("ready", Capacity::Spot, 1),
            ("starting", Capacity::OnDemand, 2),
        ],
        1.25,
    );
    // The metrics on a listener of their own; the service's `/-/metrics`
    // is the replica's path like any other (it used to be shadowed).
    let (status, text) = p.get("/-/metrics").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "a"));
    let _ = p.proxy.sample(OffsetDateTime::now_utc());
    let metrics = Proxy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let maddr = metrics.local_addr().unwrap();
    let mp = p.proxy.clone();
    let (mstop, mstopped) = oneshot::channel::<()>();
    let mtask = tokio::spawn(async move {
        mp.serve_metrics(metrics, async { drop(mstopped.await) })
            .await
    });
    let req = Request::get(format!("http://{maddr}/metrics"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = p.client.request(req).await.unwrap();
    let status = resp.status();
    let text =
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
    assert_eq!(status, StatusCode::OK);
    for line in [
        "gpufleet_service_requests_total{code=\"200\"} 5",
        "gpufleet_service_replicas{state=\"ready\",capacity=\"spot\"} 1",
        "gpufleet_service_replicas{state=\"starting\",capacity=\"on-demand\"} 2",
        "gpufleet_service_cost_per_hour_usd 1.25",
        "gpufleet_service_request_duration_seconds_count 5",
        "gpufleet_service_in_flight 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    // The metrics request is not a request of the service.
    assert_eq!(p.proxy.sample(OffsetDateTime::now_utc()).arrived, 0);
    let _ = mstop.send(());
    mtask.await.unwrap();
    p.stop().await;
}
