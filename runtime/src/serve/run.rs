//! A service in the foreground: what `gpufleet serve` runs.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use gpufleet_core::serve::ServiceSpec;
use gpufleet_core::{Error, ErrorKind, Result};

use super::book;
use super::controller::{
    check_replica_script, Reach, ServiceConfig, ServiceController, ServiceStatus,
};
use super::proxy::Proxy;
use crate::config::{Config, ProviderKind};
use crate::local::LocalCloud;
use time::OffsetDateTime;

/// How long requests in flight may take to finish once the service is
/// taken down.
const GRACE: Duration = Duration::from_secs(30);

/// Where the `local` provider keeps a service's replicas' working
/// directories and output (`INSTANCE.log`): beside the fake cloud's state.
pub fn local_dir(cfg: &Config, service: &str) -> std::path::PathBuf {
    crate::local::root(cfg).join(service)
}

/// How `gpufleet serve` serves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// Which address of a replica's instance the proxy reaches.
    pub reach: Reach,
    /// When another controller serves the service: wait, and take it over
    /// once that controller's lease lapses (its replicas are adopted),
    /// instead of being refused.
    pub standby: bool,
    /// Where the proxy's metrics are served (`GET /metrics`): nowhere
    /// unless given (they show what the service costs an hour; keep them
    /// off a public address).
    pub metrics: Option<SocketAddr>,
    /// The service file `spec` was read from, kept in the service's row so
    /// that a controller that takes over serves the same version.
    pub service_file: Option<String>,
}

impl ServeOptions {
    /// Listening on `listen`, reaching private addresses, no standby.
    pub fn new(listen: SocketAddr) -> Self {
        ServeOptions {
            listen,
            reach: Reach::Private,
            standby: false,
            metrics: None,
            service_file: None,
        }
    }

    /// With the service file the spec was read from.
    pub fn with_service_file(mut self, text: impl Into<String>) -> Self {
        self.service_file = Some(text.into());
        self
    }

    /// Serving the proxy's metrics on `addr`.
    pub fn with_metrics(mut self, addr: Option<SocketAddr>) -> Self {
        self.metrics = addr;
        self
    }

    /// Reaching replicas at `reach`.
    pub fn with_reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// Standing by while another controller serves the service.
    pub fn with_standby(mut self, standby: bool) -> Self {
        self.standby = standby;
        self
    }
}

/// Runs `spec` until `stop` resolves, or someone runs `serve down` on it:
/// the proxy on `listen`, the controller keeping the replicas under the
/// service's lease in `cfg`'s ledger (their spend recorded there under
/// `service:NAME`, the service's row and log beside it: `serve ls`, `serve
/// status`), `on_status` told of every step's status; then takes the
/// service down (no replica left) and returns the last status. Another
/// controller serving the same service is [`ErrorKind::Conflict`], before
/// anything starts; with [`ServeOptions::standby`] this one waits instead
/// (saying so on stderr) and takes the service over once the other's lease
/// lapses, or returns serving nothing when `stop` resolves or the service
/// is taken down meanwhile.
///
/// On the `local` provider the replicas are processes on this machine; on
/// the clouds (`--provider live`) they are instances reached at their
/// `reach` address (the interruption queue, where configured, tells of
/// interruptions within seconds). The fake cloud runs nothing: refused.
///
/// `on_serving` is told, once the service is claimed and its proxy listens,
/// where it listens (the bound address: `127.0.0.1:0` asked for is the port
/// the system gave); a controller that is refused or stands by and serves
/// nothing is never told.
pub async fn run_service(
    cfg: &Config,
    spec: ServiceSpec,
    opts: ServeOptions,
    stop: impl Future<Output = ()>,
    on_serving: impl FnOnce(SocketAddr),
    mut on_status: impl FnMut(&ServiceStatus),
) -> Result<ServiceStatus> {
    if cfg.provider == ProviderKind::Fake {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "the fake cloud runs no workload, so it cannot serve: use --provider local (replicas as processes on this machine) or --provider live",
        ));
    }
    check_replica_script(&spec)?;
    let reach = opts.reach;
    let listener = Proxy::bind(opts.listen).await?;
    let listen = listener.local_addr().map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("the proxy's address on {}: {e}", opts.listen),
        )
    })?;
    let metrics_listener = match opts.metrics {
        Some(addr) => Some(Proxy::bind(addr).await?),
        None => None,
    };
    let ledger = crate::ledgers::open(&cfg.ledger).await?;
    let mut local = None;
    let mut events = Vec::new();
    let (providers, config) = match cfg.provider {
        ProviderKind::Local => {
            let l = LocalCloud::start(LocalCloud::fakes(), &local_dir(cfg, &spec.name))?;
            // This run says it lives; what a killed `serve` or `run` left
            // alive in the ledger is ended now (a standby taking over used
            // to show the dead one's replicas running beside its own).
            let runs = crate::local::runs_dir(cfg);
            l.keep_alive(&runs)?;
            if let Err(e) =
                crate::local::settle_ended_runs(ledger.as_ref(), &runs, l.run_id().as_deref(), true)
                    .await
            {
                tracing::warn!(error = %e, "could not record the ends of earlier local runs");
            }
            let providers = l.providers();
            local = Some(l);
            let config = ServiceConfig {
                owner: cfg.owner.clone(),
                ..ServiceConfig::local()
            };
            (providers, config)
        }
        _ => {
            let fleet = crate::fleet::Fleet::open(cfg).await?;
            for w in &fleet.warnings {
                tracing::warn!(warning = %w, "a cloud left out");
                eprintln!("warning: {w}");
            }
            // A service file with no image for any cloud opened here could
            // never start a replica: refused before anything starts.
            let clouds: Vec<gpufleet_core::Cloud> =
                fleet.providers.iter().map(|p| p.cloud()).collect();
            if !clouds
                .iter()
                .any(|c| spec.replica.workload.images.contains_key(c))
            {
                return Err(Error::invalid_input(format!(
                    "service {} has no image for {}: add image = \"…\" (one for all) or an [image] table with aws, gcp, azure to the service file",
                    spec.name,
                    clouds.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
            events = crate::fleet::event_feeds(cfg).await;
            let config = ServiceConfig {
                owner: cfg.owner.clone(),
                tags: cfg.resource_tags(),
                ..ServiceConfig::default()
            };
            (fleet.providers.clone(), config)
        }
    };
    let config = ServiceConfig { reach, ..config };
    let shut = |local: &Option<LocalCloud>| {
        if let Some(l) = local {
            l.shutdown();
        }
    };
    let proxy = Proxy::new(spec.proxy);
    let name = spec.name.clone();
    let mut controller = ServiceController::new(spec, providers, proxy.clone(), config)
        .with_ledger(ledger.clone())
        .with_events(events)
        .listening_on(listen);
    if let Some(text) = opts.service_file.clone() {
        controller = controller.with_service_file(text);
    }
    // Another controller serving this service: refused before anything
    // is started, or waited out on standby.
    let holder = crate::controller::default_holder();
    // On the ledger's clock, which stamps the service's row.
    let since = ledger
        .now()
        .await
        .unwrap_or_else(|_| OffsetDateTime::now_utc());
    tokio::pin!(stop);
    let mut said = false;
    loop {
        // Once it has stood by, a take-over (a service taken down
        // meanwhile stays down); at first, a plain claim.
        let claimed = if said {
            controller.take_over(&holder, since).await
        } else {
            controller.claim(&holder).await.map(|()| true)
        };
        match claimed {
            Ok(true) => break,
            Ok(false) => {
                eprintln!(
                    "service {name} was taken down while this controller stood by: not serving it"
                );
                shut(&local);
                return Ok(controller.status());
            }
            Err(e) if opts.standby && e.kind() == ErrorKind::Conflict => {
                if !said {
                    eprintln!("standing by: {}; this controller takes the service over when that lease lapses", e.message());
                    said = true;
                }
                tokio::select! {
                    () = &mut stop => {
                        shut(&local);
                        return Ok(controller.status());
                    }
                    () = tokio::time::sleep(book::SERVICE_LEASE / 5) => {}
                }
            }
            Err(e) => {
                drop(controller);
                shut(&local);
                return Err(e);
            }
        }
    }
    if said {
        eprintln!("took service {name} over: serving it");
    }
    on_serving(listen);
    let (proxy_stop, proxy_stopped) = tokio::sync::oneshot::channel::<()>();
    let (metrics_stop, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(l) = metrics_listener {
        let p = proxy.clone();
        tokio::spawn(async move {
            p.serve_metrics(l, async { drop(metrics_stopped.await) })
                .await
        });
    }
    let serving = tokio::spawn(async move {
        proxy
            .serve(listener, async { drop(proxy_stopped.await) }, GRACE)
            .await
    });
    controller.listen_for_notices().await;
    let mut status = controller.watch();
    let (ctrl_stop, ctrl_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut running = tokio::spawn(controller.run(async { drop(ctrl_stopped.await) }));
    let mut stop_sent = Some(ctrl_stop);
    let last = loop {
        tokio::select! {
            changed = status.changed() => {
                if changed.is_ok() {
                    on_status(&status.borrow_and_update());
                }
            }
            () = &mut stop, if stop_sent.is_some() => {
                if let Some(s) = stop_sent.take() {
                    let _ = s.send(());
                }
            }
            done = &mut running => {
                break done.map_err(|e| Error::new(ErrorKind::Unexpected, format!("the service controller failed: {e}")))?;
            }
        }
    };
    on_status(&last);
    let _ = proxy_stop.send(());
    let _ = metrics_stop.send(());
    let _ = serving.await;
    shut(&local);
    Ok(last)
}
