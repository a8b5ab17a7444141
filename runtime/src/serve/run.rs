//! A service in the foreground: what `gpufleet serve` runs.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use gpufleet_core::serve::ServiceSpec;
use gpufleet_core::{Error, ErrorKind, Result};

use super::controller::{ServiceConfig, ServiceController, ServiceStatus};
use super::proxy::Proxy;
use crate::config::{Config, ProviderKind};
use crate::local::LocalCloud;

/// How long requests in flight may take to finish once the service is
/// taken down.
const GRACE: Duration = Duration::from_secs(30);

/// Where the `local` provider keeps a service's replicas' working
/// directories and output (`INSTANCE.log`): beside the fake cloud's state.
pub fn local_dir(cfg: &Config, service: &str) -> std::path::PathBuf {
    cfg.fake_state
        .parent()
        .map_or_else(std::env::temp_dir, |p| p.to_path_buf())
        .join("local")
        .join(service)
}

/// Runs `spec` until `stop` resolves, or someone runs `serve down` on it:
/// the proxy on `listen`, the controller keeping the replicas under the
/// service's lease in `cfg`'s ledger (their spend recorded there under
/// `service:NAME`, the service's row and log beside it: `serve ls`, `serve
/// status`), `on_status` told of every step's status; then takes the
/// service down (no replica left) and returns the last status. Another
/// controller serving the same service is [`ErrorKind::Conflict`], before
/// anything starts.
///
/// Only the `local` provider runs services so far: on the clouds a replica
/// is reached at its instance's address, which the providers do not report
/// yet, and the fake cloud runs nothing.
pub async fn run_service(
    cfg: &Config,
    spec: ServiceSpec,
    listen: SocketAddr,
    stop: impl Future<Output = ()>,
    mut on_status: impl FnMut(&ServiceStatus),
) -> Result<ServiceStatus> {
    if cfg.provider != ProviderKind::Local {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "`serve` runs replicas on the local provider only so far (provider {} cannot route to its instances yet); use --provider local",
                cfg.provider
            ),
        ));
    }
    let listener = Proxy::bind(listen).await?;
    let ledger = crate::ledgers::open(&cfg.ledger).await?;
    let local = LocalCloud::start(LocalCloud::fakes(), &local_dir(cfg, &spec.name))?;
    let proxy = Proxy::new(spec.proxy);
    let mut controller = ServiceController::new(
        spec,
        local.providers(),
        proxy.clone(),
        ServiceConfig::local(),
    )
    .with_ledger(ledger)
    .listening_on(listen);
    // Another controller serving this service: refused before anything
    // is started.
    if let Err(e) = controller.claim(&crate::controller::default_holder()).await {
        drop(controller);
        local.shutdown();
        return Err(e);
    }
    let (proxy_stop, proxy_stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        proxy
            .serve(listener, async { drop(proxy_stopped.await) }, GRACE)
            .await
    });
    controller.listen_for_notices().await;
    let mut status = controller.watch();
    let (ctrl_stop, ctrl_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut running = tokio::spawn(controller.run(async { drop(ctrl_stopped.await) }));
    tokio::pin!(stop);
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
    let _ = serving.await;
    local.shutdown();
    Ok(last)
}
