//! The service proxy under hostile clients (issue 78), spoken to over raw
//! TCP on 127.0.0.1 so each test can send what no well-behaved client
//! would: targets that are not paths, two Host headers, a huge declared
//! body behind `Expect: 100-continue`, headers and bodies that drip or
//! stall, more connections than it keeps, clients that give up while
//! their request is held. Each is bounded (a few connections, a few
//! seconds).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::serve_proxy::Running;
use gpufleet_core::serve::ProxySettings;
use gpufleet_testkit::replica::Replica;
use time::OffsetDateTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn quick() -> ProxySettings {
    ProxySettings {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..ProxySettings::default()
    }
}

/// Sends `raw` on a fresh connection and reads until the peer closes or
/// `within` passes: what came back.
async fn exchange(addr: SocketAddr, raw: &[u8], within: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    read_for(&mut s, within).await
}

async fn read_for(s: &mut TcpStream, within: Duration) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A GET of `path` with `Connection: close`: its status.
async fn get(addr: SocketAddr, path: &str) -> u16 {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n");
    status_of(&exchange(addr, raw.as_bytes(), Duration::from_secs(5)).await)
}

/// Asterisk-form and CONNECT are answered by the proxy (400, 405) and never
/// reach a replica, so a flood of them costs legitimate clients nothing
/// (one `OPTIONS *` every 1.5 s used to fail every client); two Host
/// headers are refused; `Proxy-Connection` is not forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_that_are_not_paths_are_answered_by_the_proxy() {
    let (a, b) = (Replica::start("a").await, Replica::start("b").await);
    let p = Running::start(quick()).await;
    p.route(&[&a, &b]);
    for _ in 0..5 {
        for (raw, want) in [
            (
                "OPTIONS * HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n",
                400,
            ),
            (
                "GET * HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n",
                400,
            ),
            (
                "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
                405,
            ),
            (
                "GET / HTTP/1.1\r\nHost: svc\r\nHost: other\r\nConnection: close\r\n\r\n",
                400,
            ),
        ] {
            let got = exchange(p.addr, raw.as_bytes(), Duration::from_secs(3)).await;
            assert_eq!(status_of(&got), want, "{raw:?}: {got}");
        }
    }
    assert_eq!(
        a.served() + b.served(),
        0,
        "a hostile request reached a replica"
    );
    // Every legitimate request goes through at once, on both replicas.
    let started = Instant::now();
    for _ in 0..10 {
        assert_eq!(get(p.addr, "/").await, 200);
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(a.served() > 0 && b.served() > 0);
    // Hop-by-hop headers stay on their hop.
    let raw = "GET /headers HTTP/1.1\r\nHost: svc\r\nProxy-Connection: keep-alive\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\n\r\n";
    let got = exchange(p.addr, raw.as_bytes(), Duration::from_secs(3))
        .await
        .to_lowercase();
    assert_eq!(status_of(&got), 200, "{got}");
    assert!(got.contains("x-kept: 2"), "{got}");
    assert!(
        !got.contains("proxy-connection") && !got.contains("x-hop"),
        "{got}"
    );
    p.stop().await;
}

/// A declared body over the limit is 413 at once: no `100 Continue`, no
/// byte of it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_declared_body_is_refused_before_100_continue() {
    let a = Replica::start("a").await;
    let p = Running::start(quick()).await;
    p.route(&[&a]);
    let raw = "POST /up HTTP/1.1\r\nHost: svc\r\nExpect: 100-continue\r\nContent-Length: 999999999\r\n\r\n";
    let got = exchange(p.addr, raw.as_bytes(), Duration::from_secs(3)).await;
    assert!(!got.contains("100 Continue"), "{got}");
    assert_eq!(status_of(&got), 413, "{got}");
    assert_eq!(a.served(), 0);
    p.stop().await;
}

/// Headers that drip or stall, an idle kept-alive connection and a body
/// that stalls are all cut off within their time (1 s here): the
/// connection closed, a stalled body answered 408, nothing sent on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_idle_connections_and_stalled_bodies_are_cut_off() {
    let a = Replica::start("a").await;
    let p = Running::start(quick()).await;
    p.route(&[&a]);
    // Partial headers, then nothing: closed.
    let started = Instant::now();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: svc\r\n")
        .await
        .unwrap();
    let got = read_for(&mut s, Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4) && !got.contains("200"),
        "partial headers: {took:?} {got:?}"
    );
    // Dripping a header byte every 300 ms: cut off at the deadline, not
    // kept alive by each byte.
    let started = Instant::now();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let drip = b"GET / HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed_after = None;
    let mut probe = [0u8; 64];
    for byte in drip {
        if s.write_all(&[*byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        match tokio::time::timeout(Duration::from_millis(300), s.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    let closed_after = closed_after.expect("a dripping client kept its connection");
    assert!(closed_after < Duration::from_secs(3), "{closed_after:?}");
    // A kept-alive connection left idle after an answer: closed.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let got = read_for(&mut s, Duration::from_secs(5)).await;
    assert_eq!(status_of(&got), 200, "{got}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "idle for {:?}",
        started.elapsed()
    );
    // A body that stops halfway: 408.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nHost: svc\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let got = read_for(&mut s, Duration::from_secs(5)).await;
    assert_eq!(status_of(&got), 408, "{got}");
    assert_eq!(
        a.served(),
        1,
        "only the complete request reached the replica"
    );
    p.stop().await;
}

/// The bodies held across connections are bounded: with room for 1 MiB,
/// two uploads stalled at 400 KiB each leave a third refused (503) as soon
/// as it would go beyond, and once they are cut off a request goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_held_across_connections_are_bounded() {
    let a = Replica::start("a").await;
    let p = Running::start(ProxySettings {
        max_held_bytes: 1 << 20,
        body_timeout: Duration::from_secs(3),
        ..quick()
    })
    .await;
    p.route(&[&a]);
    let chunk = vec![b'x'; 400 << 10];
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: svc\r\nContent-Length: {}\r\n\r\n",
        600 << 10
    );
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&chunk).await.unwrap();
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut third = TcpStream::connect(p.addr).await.unwrap();
    third.write_all(head.as_bytes()).await.unwrap();
    let _ = third.write_all(&chunk).await;
    let got = read_for(&mut third, Duration::from_secs(2)).await;
    assert_eq!(status_of(&got), 503, "{got}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The stalled ones time out (408) and give their bytes back.
    for mut s in stalled {
        let got = read_for(&mut s, Duration::from_secs(6)).await;
        assert_eq!(status_of(&got), 408, "{got}");
    }
    assert_eq!(get(p.addr, "/").await, 200);
    p.stop().await;
}

/// With room for 4 connections, 4 idle ones keep a fifth waiting in the
/// backlog (not refused, not accepted) until the header timeout closes
/// them; then it is answered. The process never runs out of descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connections_kept_are_bounded() {
    let a = Replica::start("a").await;
    let p = Running::start(ProxySettings {
        max_connections: 4,
        ..quick()
    })
    .await;
    p.route(&[&a]);
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(p.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    assert_eq!(get(p.addr, "/").await, 200);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(5),
        "the fifth connection was answered after {waited:?}"
    );
    drop(idle);
    p.stop().await;
}

/// A client that gives up while its request is held (a cold start) gives
/// its place in the queue back: five give-ups on a queue of five used to
/// leave `queued` at 5 for ever (the autoscaler read it as load) and every
/// later request an instant 503 while a replica was ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_while_held_gives_its_place_back() {
    let p = Running::start(ProxySettings {
        queue: 5,
        queue_timeout: Duration::from_secs(60),
        ..quick()
    })
    .await;
    for _ in 0..5 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
            .await
            .unwrap();
        // `curl -m 1`: gone before any replica is ready.
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(s);
    }
    let mut queued = u32::MAX;
    for _ in 0..50 {
        queued = p.proxy.sample(OffsetDateTime::now_utc()).queued;
        if queued == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(queued, 0, "places kept by clients that left");
    let a = Replica::start("a").await;
    p.route(&[&a]);
    assert_eq!(get(p.addr, "/").await, 200);
    p.stop().await;
}
