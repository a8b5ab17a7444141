//! The service's proxy: one HTTP/1 listener in front of the replicas
//! (hyper server and client; no HTTP parsing of gpufleet's own).
//!
//! - Each request goes to the routable replica with the fewest requests
//!   outstanding (ties rotate).
//! - A request whose connection a replica refused is tried on another (it
//!   was never sent); one whose replica failed after it was sent is tried on
//!   another only when it is idempotent: `GET`, `HEAD`, `OPTIONS`, `TRACE`,
//!   `PUT`, `DELETE` (RFC 9110 §9.2.2), or any request carrying an
//!   `Idempotency-Key` header. At most [`ProxySettings::retries`] others;
//!   `502` when they fail too. A request only refused is held for a
//!   replica to come (the queue below); one a replica failed after it was
//!   sent is not (the request itself may be what breaks it).
//! - With no replica to take it (scaled to zero, a cold start, every replica
//!   gone), a request is held up to [`ProxySettings::queue_timeout`], at most
//!   [`ProxySettings::queue`] at once; beyond either, `503` with
//!   `Retry-After`.
//! - It measures what the autoscaler reads ([`Proxy::sample`]: requests in
//!   flight on average, those held included, and arrivals) and serves
//!   Prometheus metrics on a listener of their own, only where one is
//!   given ([`Proxy::serve_metrics`], `GET /metrics`): every path of the
//!   service's listener is the replicas'.
//! - It survives hostile clients: a request whose target is not a path
//!   (`OPTIONS *`, `GET *`) is answered 400 and `CONNECT` 405 by the proxy
//!   itself, never sent to a replica (so never counted against one); two
//!   `Host` headers are 400; a declared body over [`MAX_REQUEST_BODY`] is
//!   413 at once (no `100 Continue`); headers must arrive within
//!   [`ProxySettings::header_timeout`] (which also bounds an idle kept-alive
//!   connection) and a body within [`ProxySettings::body_timeout`] (408);
//!   the bodies held across all connections are bounded by
//!   [`ProxySettings::max_held_bytes`] (503 beyond it) and the connections
//!   kept by [`ProxySettings::max_connections`] and half the process's file
//!   descriptor limit (further ones wait in the listen backlog); a request
//!   whose client goes away while it is held gives its place in the queue
//!   back; `Proxy-Connection` is not forwarded.
//!
//! A request is in flight from its arrival until the last byte of its
//! answer has gone (a streamed answer, such as tokens as server-sent events,
//! counts as long as it streams).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use gpufleet_core::serve::{LoadSample, ProxySettings};
use gpufleet_core::{Capacity, Error, ErrorKind, Result};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use time::OffsetDateTime;
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

mod handle;
mod metrics;
use self::metrics::*;

/// The largest request body the proxy holds (it keeps each body so that a
/// request can be sent again): 16 MiB; a larger one is answered `413`.
pub const MAX_REQUEST_BODY: usize = 16 << 20;

/// The path of the metrics listener ([`Proxy::serve_metrics`]).
pub const METRICS_PATH: &str = "/metrics";

/// How long a replica that refused a connection is passed over.
const REFUSED_PAUSE: Duration = Duration::from_secs(2);

/// The header that marks a request as safe to send twice.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer the proxy gives.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A replica the proxy may send requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The replica's id.
    pub replica: String,
    /// Where it listens.
    pub address: SocketAddr,
    /// Its capacity type (for the metrics).
    pub capacity: Capacity,
}

#[derive(Debug)]
struct Backend {
    route: Route,
    outstanding: AtomicU32,
    refused_at: Mutex<Option<Instant>>,
}

impl Backend {
    fn paused(&self, now: Instant) -> bool {
        self.refused_at
            .lock()
            .map(|at| at.is_some_and(|at| now.duration_since(at) < REFUSED_PAUSE))
            .unwrap_or(false)
    }
}

/// Holds one request outstanding on a backend.
struct Outstanding(Arc<Backend>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
struct FlightState {
    now: u64,
    area: f64,
    changed: Option<Instant>,
    sampled_area: f64,
    sampled_at: Option<Instant>,
    sampled_arrived: u64,
}

impl FlightState {
    fn advance(&mut self, at: Instant) {
        if let Some(since) = self.changed {
            self.area += self.now as f64 * at.duration_since(since).as_secs_f64();
        }
        self.changed = Some(at);
    }
}

struct Inner {
    /// The queue, retries and timeouts (an update sets them anew; the
    /// connection and held-bytes bounds are the first version's).
    settings: RwLock<ProxySettings>,
    /// Request body bytes held now, across every connection.
    held: Arc<Semaphore>,
    /// Client connections open now.
    connections: Arc<Semaphore>,
    /// After this, no request is routed (the controller could not renew
    /// the service's lease: another may serve it soon); `None`: no bound.
    routes_until: Mutex<Option<Instant>>,
    backends: RwLock<Vec<Arc<Backend>>>,
    routable: Notify,
    rotate: AtomicUsize,
    queued: AtomicU32,
    arrived: AtomicU64,
    retry_after: AtomicU64,
    flight: Mutex<FlightState>,
    client: Client<HttpConnector, Full<Bytes>>,
    metrics: Metrics,
}

/// The proxy of one service; cheap to clone (one shared state).
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// The in-flight count of one request: entered at its arrival, left when
/// its answer's last byte has gone.
struct InFlight {
    inner: Arc<Inner>,
    started: Instant,
    code: Option<StatusCode>,
}

impl InFlight {
    fn enter(inner: &Arc<Inner>) -> Self {
        let started = Instant::now();
        if let Ok(mut f) = inner.flight.lock() {
            f.advance(started);
            f.now += 1;
        }
        inner.metrics.in_flight.inc();
        InFlight {
            inner: inner.clone(),
            started,
            code: None,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = Instant::now();
        if let Ok(mut f) = self.inner.flight.lock() {
            f.advance(now);
            f.now = f.now.saturating_sub(1);
        }
        let m = &self.inner.metrics;
        m.in_flight.dec();
        m.latency
            .observe(now.duration_since(self.started).as_secs_f64());
        let code = self
            .code
            .map_or_else(|| "aborted".to_string(), |c| c.as_u16().to_string());
        m.requests.get_or_create(&CodeLabel { code }).inc();
    }
}

/// A replica's answer, streamed, holding the request in flight and
/// outstanding on its replica until it ends.
struct Tracked {
    body: Incoming,
    _outstanding: Outstanding,
    _flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(|e| Box::new(e) as BoxError)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A short answer of the proxy's own.
fn reply(status: StatusCode, text: impl Into<String>) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(text.into()))
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Whether a request may be sent twice.
fn idempotent(method: &Method, headers: &HeaderMap) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    ) || headers.contains_key(IDEMPOTENCY_KEY)
}

/// The headers of one hop (RFC 9110 §7.6.1), and those `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

/// How many client connections the proxy keeps at most: the setting, and
/// no more than half the process's file descriptor limit (the rest are the
/// replicas' connections, the readiness checks', the ledger's and the
/// clouds'), so that a flood of clients never leaves the process unable to
/// open a socket.
fn connection_limit(settings: &ProxySettings) -> usize {
    let wanted = settings.max_connections as usize;
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrlimit, Resource};
        if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE) {
            let half = usize::try_from(soft / 2).unwrap_or(usize::MAX).max(1);
            return wanted.min(half);
        }
    }
    wanted
}

/// One request's place in the cold-start queue, given back when it is
/// dropped: when the request is routed, times out, or its client goes away
/// (hyper drops the request's future then).
struct Queued<'a>(&'a Inner);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.queued.dec();
    }
}

impl Proxy {
    /// A proxy with no replica yet.
    pub fn new(settings: ProxySettings) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Proxy {
            inner: Arc::new(Inner {
                held: Arc::new(Semaphore::new(
                    usize::try_from(settings.max_held_bytes)
                        .unwrap_or(usize::MAX)
                        .min(Semaphore::MAX_PERMITS),
                )),
                connections: Arc::new(Semaphore::new(connection_limit(&settings))),
                routes_until: Mutex::new(None),
                settings: RwLock::new(settings),
                backends: RwLock::new(Vec::new()),
                routable: Notify::new(),
                rotate: AtomicUsize::new(0),
                queued: AtomicU32::new(0),
                arrived: AtomicU64::new(0),
                retry_after: AtomicU64::new(10),
                flight: Mutex::new(FlightState::default()),
                client,
                metrics: Metrics::new(),
            }),
        }
    }

    /// Sets the replicas requests go to: ready and not draining. A replica
    /// left out takes no new request; those it has finish.
    pub fn set_routes(&self, routes: &[Route]) {
        let Ok(mut backends) = self.inner.backends.write() else {
            return;
        };
        let old: HashMap<String, Arc<Backend>> = backends
            .drain(..)
            .map(|b| (b.route.replica.clone(), b))
            .collect();
        for route in routes {
            match old.get(&route.replica) {
                Some(b) if b.route == *route => backends.push(b.clone()),
                _ => backends.push(Arc::new(Backend {
                    route: route.clone(),
                    outstanding: AtomicU32::new(0),
                    refused_at: Mutex::new(None),
                })),
            }
        }
        drop(backends);
        self.inner.routable.notify_waiters();
    }

    /// The settings in force (a copy).
    fn settings(&self) -> ProxySettings {
        self.inner
            .settings
            .read()
            .map(|s| *s)
            .unwrap_or_else(|p| *p.into_inner())
    }

    /// Takes a new version's settings: its queue, its retries and its
    /// header and body timeouts from now on (new connections get the new
    /// header timeout). The connection and held-bytes bounds stay those the
    /// proxy started with (a `serve` started again takes new ones).
    pub fn set_settings(&self, settings: ProxySettings) {
        if let Ok(mut s) = self.inner.settings.write() {
            *s = settings;
        }
    }

    /// Routes no request after `until` (until it is moved on again): the
    /// service controller keeps it at the deadline of its lease, so that a
    /// controller cut off from the ledger stops serving before another can
    /// take the service over, even while its own loop waits on the ledger.
    pub fn route_until(&self, until: Option<Instant>) {
        if let Ok(mut u) = self.inner.routes_until.lock() {
            *u = until;
        }
        self.inner.routable.notify_waiters();
    }

    /// The requests outstanding on a replica (a draining replica is stopped
    /// when it has none).
    pub fn outstanding(&self, replica: &str) -> u32 {
        self.inner
            .backends
            .read()
            .map(|b| {
                b.iter()
                    .find(|b| b.route.replica == replica)
                    .map_or(0, |b| b.outstanding.load(Ordering::Acquire))
            })
            .unwrap_or(0)
    }

    /// What `Retry-After` says when the proxy turns a request away (the
    /// controller sets it to its replicas' cold start).
    pub fn set_retry_after(&self, after: Duration) {
        self.inner
            .retry_after
            .store(after.as_secs().max(1), Ordering::Relaxed);
    }

    /// Sets the replica and cost gauges: replicas by (state, capacity).
    pub fn set_gauges(&self, replicas: &[(&str, Capacity, u32)], cost_per_hour_usd: f64) {
        let m = &self.inner.metrics;
        m.replicas.clear();
        for (state, capacity, n) in replicas {
            m.replicas
                .get_or_create(&ReplicaLabel {
                    state: (*state).to_string(),
                    capacity: capacity.to_string(),
                })
                .set(i64::from(*n));
        }
        m.cost.set(cost_per_hour_usd);
    }

    /// The load since the previous sample: requests in flight on average
    /// (held ones included), held now, and arrived.
    pub fn sample(&self, at: OffsetDateTime) -> LoadSample {
        let now = Instant::now();
        let queued = self.inner.queued.load(Ordering::Acquire);
        let arrived_total = self.inner.arrived.load(Ordering::Acquire);
        let Ok(mut f) = self.inner.flight.lock() else {
            return LoadSample {
                at,
                in_flight: 0.0,
                queued,
                arrived: 0,
            };
        };
        f.advance(now);
        let in_flight = match f.sampled_at {
            Some(since) if now > since => {
                (f.area - f.sampled_area) / now.duration_since(since).as_secs_f64()
            }
            _ => f.now as f64,
        };
        let arrived = arrived_total - f.sampled_arrived;
        f.sampled_at = Some(now);
        f.sampled_area = f.area;
        f.sampled_arrived = arrived_total;
        LoadSample {
            at,
            in_flight,
            queued,
            arrived,
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn metrics_text(&self) -> Result<String> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.metrics.registry)
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("encoding metrics: {e}")))?;
        Ok(out)
    }

    /// Binds `addr` (an error naming it when it cannot).
    pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
        TcpListener::bind(addr).await.map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("cannot listen on {addr}: {e}"),
            )
        })
    }

    /// Serves on `listener` until `shutdown` resolves, then lets the
    /// requests in flight finish (up to `grace`). At most the connection
    /// limit is open at once: a connection beyond it waits in the listen
    /// backlog until one closes.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                p = self.inner.connections.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = &mut shutdown => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was taken: pause, go on.
                    tracing::warn!(error = %e, "proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let me = self.clone();
            let svc = hyper::service::service_fn(move |req| {
                let me = me.clone();
                async move { Ok::<_, Infallible>(me.handle(req, peer).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(self.settings().header_timeout)
                .serve_connection(TokioIo::new(stream), svc);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                let _open = permit;
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "proxy connection ended");
                }
            });
        }
        drop(listener);
        if tokio::time::timeout(grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("proxy: requests still in flight after the grace period");
        }
    }

    /// Serves the metrics on `listener` (`GET /metrics`, Prometheus' text
    /// format; any other path is 404) until `shutdown` resolves: only where
    /// a metrics address is configured, apart from the service's own
    /// listener, whose paths are all the replicas'.
    pub async fn serve_metrics(&self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let open = Arc::new(Semaphore::new(64));
        loop {
            let permit = tokio::select! {
                p = open.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            };
            let (stream, _) = tokio::select! {
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let me = self.clone();
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let me = me.clone();
                async move {
                    let r = if req.method() != Method::GET {
                        reply(StatusCode::METHOD_NOT_ALLOWED, "GET only\n")
                    } else if req.uri().path() != METRICS_PATH {
                        reply(StatusCode::NOT_FOUND, "metrics are on /metrics\n")
                    } else {
                        me.metrics_reply()
                    };
                    Ok::<_, Infallible>(r)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            tokio::spawn(async move {
                let _open = permit;
                let _ = conn.await;
            });
        }
    }
}
