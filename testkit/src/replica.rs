//! A tiny HTTP server standing in for an inference replica behind the
//! service proxy, in process, on 127.0.0.1.
//!
//! It answers `GET /health` with 200 (503 once [`Replica::set_ready`]
//! says not), `/slow?ms=N` after N milliseconds, `/headers` with the
//! request's headers (a `name: value` line each), and anything else at once,
//! always with its name as the body (a `POST` answers its name and the body
//! it was sent). [`Replica::fail_requests`] makes it read each request and
//! drop the connection without answering; [`Replica::kill`] stops it as a
//! preempted machine stops: the listener and every open connection at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::task::JoinSet;

#[derive(Debug, Default)]
struct Flags {
    unready: AtomicBool,
    failing: AtomicBool,
    served: AtomicU64,
}

/// A running stand-in replica.
#[derive(Debug)]
pub struct Replica {
    /// Its name, the body of its answers.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    flags: Arc<Flags>,
    task: tokio::task::JoinHandle<()>,
}

async fn answer(
    name: String,
    flags: Arc<Flags>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    if path == "/headers" {
        flags.served.fetch_add(1, Ordering::AcqRel);
        let lines: String = req
            .headers()
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())))
            .collect();
        return Ok(Response::new(Full::new(Bytes::from(lines))));
    }
    let post = req.method() == hyper::Method::POST;
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if flags.failing.load(Ordering::Acquire) {
        // An error from the service makes hyper drop the connection unanswered.
        return Err(std::io::Error::other("failing on purpose"));
    }
    if path == "/health" && flags.unready.load(Ordering::Acquire) {
        let mut r = Response::new(Full::new(Bytes::from_static(b"starting")));
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return Ok(r);
    }
    if path == "/slow" {
        let ms = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("ms="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(100);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    flags.served.fetch_add(1, Ordering::AcqRel);
    let text = if post {
        format!("{name} {}", String::from_utf8_lossy(&body))
    } else {
        name
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

impl Replica {
    /// Starts a replica named `name` on a free port of 127.0.0.1.
    pub async fn start(name: &str) -> Replica {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a replica on 127.0.0.1");
        let addr = listener.local_addr().expect("replica address");
        let flags = Arc::new(Flags::default());
        let (n, f) = (name.to_string(), flags.clone());
        let task = tokio::spawn(async move {
            // Dropped with the task: every connection ends with it.
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (n, f) = (n.clone(), f.clone());
                conns.spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req| answer(n.clone(), f.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Replica {
            name: name.to_string(),
            addr,
            flags,
            task,
        }
    }

    /// Whether `/health` answers 200.
    pub fn set_ready(&self, ready: bool) {
        self.flags.unready.store(!ready, Ordering::Release);
    }

    /// Whether every request is read and left unanswered (the connection
    /// dropped).
    pub fn fail_requests(&self, failing: bool) {
        self.flags.failing.store(failing, Ordering::Release);
    }

    /// Requests answered.
    pub fn served(&self) -> u64 {
        self.flags.served.load(Ordering::Acquire)
    }

    /// Stops it at once: the listener closes (new connections are refused)
    /// and every open connection is cut.
    pub async fn kill(&self) {
        self.task.abort();
        // Wait until the listener and the connections are gone.
        while !self.task.is_finished() {
            tokio::task::yield_now().await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}
