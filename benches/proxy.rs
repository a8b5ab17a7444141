//! What the service proxy adds to a request: requests a second and latency
//! percentiles straight to a replica and through the proxy (two replicas
//! behind it, fewest outstanding first), at 1 and 16 concurrent clients,
//! on 127.0.0.1 with the stand-in replica of the tests (an in-process hyper
//! server answering at once).
//!
//! `cargo bench --bench proxy --features serve` (figures in docs/performance.md).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet::runtime::serve::{Proxy, Route};
use gpufleet::serve::ProxySettings;
use gpufleet::Capacity;
use gpufleet_testkit::replica::Replica;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const REQUESTS: usize = 20_000;

async fn measure(addr: SocketAddr, clients: usize) -> (f64, Vec<Duration>) {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (client, next) = (client.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::new();
            while next.fetch_add(1, Ordering::AcqRel) < REQUESTS {
                let t = Instant::now();
                let req = hyper::Request::get(format!("http://{addr}/"))
                    .body(Empty::new())
                    .unwrap();
                let r = client.request(req).await.unwrap();
                assert!(r.status().is_success());
                let _ = r.into_body().collect().await.unwrap();
                took.push(t.elapsed());
            }
            took
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let rate = all.len() as f64 / start.elapsed().as_secs_f64();
    all.sort();
    (rate, all)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = Replica::start("a").await;
        let b = Replica::start("b").await;
        let proxy = Proxy::new(ProxySettings::default());
        proxy.set_routes(&[
            Route {
                replica: "a".into(),
                address: a.addr,
                capacity: Capacity::Spot,
            },
            Route {
                replica: "b".into(),
                address: b.addr,
                capacity: Capacity::Spot,
            },
        ]);
        let listener = Proxy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let via = listener.local_addr().unwrap();
        let p = proxy.clone();
        tokio::spawn(async move {
            p.serve(listener, std::future::pending(), Duration::from_secs(1))
                .await
        });
        println!("| path | clients | requests/s | p50 µs | p99 µs |");
        println!("|---|---:|---:|---:|---:|");
        for clients in [1, 16] {
            for (name, addr) in [
                ("straight to a replica", a.addr),
                ("through the proxy", via),
            ] {
                // Warm the connection pools first.
                let _ = measure(addr, clients).await;
                let (rate, took) = measure(addr, clients).await;
                println!(
                    "| {name} | {clients} | {rate:.0} | {:.0} | {:.0} |",
                    pct(&took, 0.5),
                    pct(&took, 0.99)
                );
            }
        }
    });
}
