//! One client request through the proxy: refused when it is malformed
//! or too large, its body read within bounds, routed to the replica with
//! the fewest requests in flight (retried on another when it is safe), or
//! answered with the metrics.

use super::*;

impl Proxy {
    pub(super) fn metrics_reply(&self) -> Response<ProxyBody> {
        match self.metrics_text() {
            Ok(text) => {
                let mut r = reply(StatusCode::OK, text);
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                );
                r
            }
            Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    }

    /// The replica with the fewest outstanding requests, other than `tried`.
    pub(super) fn pick(&self, tried: &[String]) -> Option<Arc<Backend>> {
        let now = Instant::now();
        if self
            .inner
            .routes_until
            .lock()
            .ok()
            .is_some_and(|u| u.is_some_and(|u| now >= u))
        {
            return None;
        }
        let backends = self.inner.backends.read().ok()?;
        let n = backends.len();
        if n == 0 {
            return None;
        }
        let start = self.inner.rotate.fetch_add(1, Ordering::Relaxed) % n;
        let chosen = (0..n)
            .map(|i| &backends[(start + i) % n])
            .filter(|b| !tried.contains(&b.route.replica) && !b.paused(now))
            .min_by_key(|b| b.outstanding.load(Ordering::Acquire))?
            .clone();
        chosen.outstanding.fetch_add(1, Ordering::AcqRel);
        Some(chosen)
    }

    /// A replica for a request, waiting (held in the queue) up to `until`
    /// when none can take it now.
    pub(super) async fn route(
        &self,
        tried: &[String],
        until: Instant,
    ) -> std::result::Result<Arc<Backend>, Response<ProxyBody>> {
        if let Some(b) = self.pick(tried) {
            return Ok(b);
        }
        let inner = &self.inner;
        let busy = || {
            let mut r = reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "no replica ready; try again later\n",
            );
            let after = inner.retry_after.load(Ordering::Relaxed);
            if let Ok(v) = HeaderValue::from_str(&after.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        };
        if inner.queued.fetch_add(1, Ordering::AcqRel) >= self.settings().queue {
            inner.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(busy());
        }
        inner.metrics.queued.inc();
        // Given back however this ends, the client gone included.
        let _place = Queued(inner);
        loop {
            let woken = inner.routable.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(b) = self.pick(tried) {
                return Ok(b);
            }
            // A replica passed over for a refusal comes back on its own.
            let wait = until
                .saturating_duration_since(Instant::now())
                .min(REFUSED_PAUSE);
            if wait.is_zero() {
                return Err(busy());
            }
            let _ = tokio::time::timeout(wait, woken).await;
        }
    }

    /// The proxy's own answer to a request it does not forward: a target
    /// that is not a path (asterisk-form, `CONNECT`'s authority), two
    /// `Host` headers, a declared body over the limit. None when it may go
    /// to a replica.
    pub(super) fn refusal(req: &Request<Incoming>) -> Option<Response<ProxyBody>> {
        if req.method() == Method::CONNECT {
            let mut r = reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "CONNECT is not forwarded: this is a service's proxy, not a tunnel\n",
            );
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
            );
            return Some(r);
        }
        if !req.uri().path().starts_with('/') {
            return Some(reply(
                StatusCode::BAD_REQUEST,
                "the request target must be a path such as /v1/completions (asterisk-form requests such as OPTIONS * are not forwarded)\n",
            ));
        }
        if req.headers().get_all(header::HOST).iter().count() > 1 {
            return Some(reply(
                StatusCode::BAD_REQUEST,
                "more than one Host header\n",
            ));
        }
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_REQUEST_BODY as u64) {
            // Answered before the body is read: hyper sends no `100
            // Continue` for a body nobody polled.
            return Some(reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body over the proxy's {MAX_REQUEST_BODY} bytes\n"),
            ));
        }
        None
    }

    /// Reads a request's body within [`ProxySettings::body_timeout`],
    /// holding its bytes against [`ProxySettings::max_held_bytes`]: the
    /// body and what it holds (given back when dropped), or the answer
    /// that refuses it (408, 413, 503, 400).
    pub(super) async fn read_body(
        &self,
        mut body: Incoming,
    ) -> std::result::Result<(Bytes, Option<OwnedSemaphorePermit>), Response<ProxyBody>> {
        let inner = &self.inner;
        let body_timeout = self.settings().body_timeout;
        let deadline = tokio::time::Instant::now() + body_timeout;
        let mut buf: Vec<u8> = Vec::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => {
                    return Err(reply(
                        StatusCode::REQUEST_TIMEOUT,
                        format!(
                            "the request body did not arrive within {:?}\n",
                            body_timeout
                        ),
                    ))
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(reply(
                        StatusCode::BAD_REQUEST,
                        format!("reading the request body: {e}\n"),
                    ))
                }
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if buf.len() + data.len() > MAX_REQUEST_BODY {
                return Err(reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body over the proxy's {MAX_REQUEST_BODY} bytes\n"),
                ));
            }
            let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
            match inner.held.clone().try_acquire_many_owned(n) {
                Ok(p) => match held.as_mut() {
                    Some(h) => h.merge(p),
                    None => held = Some(p),
                },
                Err(_) => {
                    let mut r = reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the proxy holds as many request bytes as it may; try again shortly\n",
                    );
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    return Err(r);
                }
            }
            buf.extend_from_slice(&data);
        }
        Ok((Bytes::from(buf), held))
    }

    pub(super) async fn handle(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<ProxyBody> {
        let inner = &self.inner;
        if let Some(r) = Self::refusal(&req) {
            inner
                .metrics
                .requests
                .get_or_create(&CodeLabel {
                    code: r.status().as_u16().to_string(),
                })
                .inc();
            return r;
        }
        inner.arrived.fetch_add(1, Ordering::AcqRel);
        let mut flight = InFlight::enter(inner);
        let settings = self.settings();
        let until = flight.started + settings.queue_timeout;
        let retry_allowed = idempotent(req.method(), req.headers());
        let (mut parts, body) = req.into_parts();
        let (body, _held) = match self.read_body(body).await {
            Ok(b) => b,
            Err(r) => {
                flight.code = Some(r.status());
                return r;
            }
        };
        strip_hop_by_hop(&mut parts.headers);
        let forwarded = match parts
            .headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
        {
            Some(earlier) => format!("{earlier}, {}", peer.ip()),
            None => peer.ip().to_string(),
        };
        if let Ok(v) = HeaderValue::from_str(&forwarded) {
            parts.headers.insert("x-forwarded-for", v);
        }
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let mut tried: Vec<String> = Vec::new();
        // Whether a replica failed the request after it was sent: then it is
        // not held for another replica to come, only tried on those there are.
        let mut failed_sent = false;
        loop {
            let next = if failed_sent {
                self.pick(&tried).ok_or_else(|| {
                    reply(
                        StatusCode::BAD_GATEWAY,
                        format!(
                            "replica {} failed the request, and so did every other tried\n",
                            tried.last().map_or("", String::as_str)
                        ),
                    )
                })
            } else {
                self.route(&tried, until).await
            };
            let backend = match next {
                Ok(b) => b,
                Err(r) => {
                    flight.code = Some(r.status());
                    return r;
                }
            };
            let outstanding = Outstanding(backend.clone());
            let uri: Uri = match format!("http://{}{path}", backend.route.address).parse() {
                Ok(u) => u,
                Err(e) => {
                    flight.code = Some(StatusCode::BAD_REQUEST);
                    return reply(StatusCode::BAD_REQUEST, format!("invalid path: {e}\n"));
                }
            };
            let mut out = Request::new(Full::new(body.clone()));
            *out.method_mut() = parts.method.clone();
            *out.uri_mut() = uri;
            *out.headers_mut() = parts.headers.clone();
            match inner.client.request(out).await {
                Ok(resp) => {
                    let (mut rparts, rbody) = resp.into_parts();
                    strip_hop_by_hop(&mut rparts.headers);
                    flight.code = Some(rparts.status);
                    let tracked = Tracked {
                        body: rbody,
                        _outstanding: outstanding,
                        _flight: flight,
                    };
                    return Response::from_parts(rparts, tracked.boxed_unsync());
                }
                Err(e) => {
                    drop(outstanding);
                    // Refused (or not reached): never sent, so any request may
                    // go elsewhere; the replica is passed over for a moment.
                    let sent = !e.is_connect();
                    if !sent {
                        if let Ok(mut at) = backend.refused_at.lock() {
                            *at = Some(Instant::now());
                        }
                    }
                    tracing::debug!(replica = %backend.route.replica, error = %e, sent, "replica failed a request");
                    tried.push(backend.route.replica.clone());
                    failed_sent |= sent;
                    if (sent && !retry_allowed) || tried.len() > settings.retries as usize {
                        flight.code = Some(StatusCode::BAD_GATEWAY);
                        return reply(
                            StatusCode::BAD_GATEWAY,
                            format!(
                                "replica {} failed the request{}\n",
                                backend.route.replica,
                                if sent && !retry_allowed {
                                    " after it was sent, and it is not idempotent (send an Idempotency-Key header to allow a retry)"
                                } else {
                                    ", and so did every retry allowed"
                                }
                            ),
                        );
                    }
                    inner.metrics.retries.inc();
                }
            }
        }
    }
}
