//! `serve` and its subcommands: a service file read and checked, the
//! service run in the foreground, and `serve ls`, `status`, `down` and
//! `update`, which work through the ledger its controller keeps (the
//! controller acts on a request at its next step; these wait for it).

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use gpufleet_core::placer::format_duration;
use gpufleet_core::serve::ServiceSpec;
use gpufleet_core::{Error, ErrorKind, Snapshot};

use super::Site;
use crate::report::{ServiceRow, ServiceStatusDoc};
use crate::serve::book::{self, ServiceRequest, ServiceState, ServiceView};
use crate::serve::{RolloutStatus, ServeOptions, ServiceStatus};

/// Reads the service file at `path` (bounded, as every file a command
/// reads) and checks it: its TOML, its regions and zones against `catalog`.
/// Returns its text (kept in the ledger) and the spec. An error names the
/// file.
pub fn load_service(path: &Path, catalog: &Snapshot) -> Result<(String, ServiceSpec), Error> {
    let text = crate::input::read_text(path, "service file")?;
    let in_file = |e: Error| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{}: {}", path.display(), e.message()),
        )
    };
    let spec = ServiceSpec::from_toml(&text).map_err(in_file)?;
    spec.replica.check_locations(catalog).map_err(in_file)?;
    Ok((text, spec))
}

/// Who asks (`user@host`), as a request to a service's controller records
/// it.
pub fn requester() -> String {
    let user = whoami::username().unwrap_or_else(|_| "someone".into());
    match whoami::hostname() {
        Ok(host) => format!("{user}@{host}"),
        Err(_) => user,
    }
}

/// `serve --service FILE`: the service in `path` (checked against the live
/// catalog cache) served until `stop`, with `opts` (the file's text is kept
/// in the ledger); `serving` hears the service's name and the address bound
/// once it serves, and
/// `on_status` each status the controller publishes. Returns the last.
pub async fn run(
    site: &Site,
    path: &Path,
    opts: ServeOptions,
    stop: impl Future<Output = ()>,
    serving: impl FnOnce(&str, SocketAddr),
    on_status: impl FnMut(&ServiceStatus),
) -> Result<ServiceStatus, Error> {
    let cfg = site.config();
    let (catalog, _) = crate::live::cache::current(cfg);
    let (text, spec) = load_service(path, &catalog)?;
    let name = spec.name.clone();
    let serving = move |at| serving(&name, at);
    crate::serve::run_service(
        cfg,
        spec,
        opts.with_service_file(text),
        stop,
        serving,
        on_status,
    )
    .await
}

/// `serve ls`: every service the site's ledger holds, as rows.
pub async fn ls(site: &Site) -> Result<Vec<ServiceRow>, Error> {
    let l = site.ledger().await?;
    let all = book::services(l.as_ref()).await?;
    Ok(all.iter().map(ServiceRow::new).collect())
}

/// `serve status NAME`: the service's view (as `serve ls` reads it) and its
/// document with its log.
pub async fn status(site: &Site, name: &str) -> Result<(ServiceView, ServiceStatusDoc), Error> {
    let l = site.ledger().await?;
    let view = book::service(l.as_ref(), name).await?;
    let history = book::history(l.as_ref(), name).await?;
    let doc = ServiceStatusDoc::new(&view, &history);
    Ok((view, doc))
}

/// `serve down NAME`: asks the service's controller to take it down (the
/// caller's own service unless `any_owner`) and waits up to `wait` for it;
/// `asked` hears that the request is with a controller. A service with no
/// controller is marked down in the ledger at once. A controller that
/// stops first is a [`ErrorKind::Conflict`], one that has not acted by
/// then a [`ErrorKind::Timeout`].
pub async fn down(
    site: &Site,
    name: &str,
    wait: Duration,
    any_owner: bool,
    asked: impl FnOnce(&str),
) -> Result<ServiceView, Error> {
    let who = (!any_owner).then_some(site.config().owner.as_str());
    let l = site.ledger().await?;
    let by = requester();
    let seq = book::request(l.as_ref(), name, &ServiceRequest::Down { by }, who).await?;
    if seq == 0 {
        // No controller: marked down in the ledger only.
        return book::service(l.as_ref(), name).await;
    }
    asked(&format!(
        "asked the controller of {name} to take it down; waiting up to {}",
        format_duration(wait)
    ));
    let (view, done) = book::wait_for(l.as_ref(), name, wait, |s| !s.doc.up).await?;
    if done {
        return Ok(view);
    }
    if view.state == ServiceState::Stopped {
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "service {name}'s controller ({}) stopped before taking it down; `gpufleet serve down {name}` again marks it down",
                view.doc.holder
            ),
        ));
    }
    Err(Error::new(
        ErrorKind::Timeout,
        format!(
            "service {name} is still {} after {}: its controller ({}) has the request and acts on it at its next step",
            view.state,
            format_duration(wait),
            view.doc.holder
        ),
    ))
}

/// `serve update --service FILE`: the file read and checked (its TOML,
/// locations, replica script), handed to the service's controller (the
/// caller's own unless `any_owner`), and its rollout's outcome waited for
/// up to `wait`; `asked` hears that the request is with the controller.
/// The rollout is returned whatever its outcome (the caller says a rolled
/// back one failed); a service that went away first is a
/// [`ErrorKind::Conflict`], no outcome by then a [`ErrorKind::Timeout`].
pub async fn update(
    site: &Site,
    path: &Path,
    wait: Duration,
    any_owner: bool,
    asked: impl FnOnce(&str),
) -> Result<Updated, Error> {
    let cfg = site.config();
    let who = (!any_owner).then_some(cfg.owner.as_str());
    let (catalog, _) = crate::live::cache::current(cfg);
    let (text, spec) = load_service(path, &catalog)?;
    crate::serve::check_replica_script(&spec)
        .map_err(|e| Error::invalid_input(format!("{}: {}", path.display(), e.message())))?;
    let name = spec.name.clone();
    let l = site.ledger().await?;
    let before = book::service(l.as_ref(), &name).await?;
    let newest = before
        .doc
        .status
        .rollouts
        .iter()
        .map(|r| r.version)
        .max()
        .unwrap_or(0)
        .max(before.doc.status.version);
    let request = ServiceRequest::Update {
        service_file: text,
        by: requester(),
    };
    let seq = book::request(l.as_ref(), &name, &request, who).await?;
    asked(&format!(
        "asked the controller of {name} to roll out the new version; waiting up to {} for its outcome",
        format_duration(wait)
    ));
    let (view, done) = book::wait_for(l.as_ref(), &name, wait, |s| {
        s.doc.requests_handled >= seq
            && s.doc
                .status
                .rollouts
                .iter()
                .any(|r| r.version > newest && r.outcome != "rolling-out")
    })
    .await?;
    if !done && view.state != ServiceState::Serving {
        // Its controller went away (or it was taken down) first.
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "the rollout of {name} (request {seq}) has no outcome: the service is {} now{}",
                view.state,
                view.doc
                    .down_because
                    .as_ref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ),
        ));
    }
    if !done {
        return Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "the rollout of {name} (request {seq}) had no outcome after {}: `gpufleet serve status {name}` follows it",
                format_duration(wait)
            ),
        ));
    }
    let rollout = view
        .doc
        .status
        .rollouts
        .iter()
        .rev()
        .find(|r| r.outcome != "rolling-out")
        .cloned();
    Ok(Updated {
        service: name,
        rollout,
    })
}

/// What [`update`] came to.
#[derive(Debug, Clone)]
pub struct Updated {
    /// The service's name (from its file).
    pub service: String,
    /// Its rollout's outcome: promoted, or rolled back with why.
    pub rollout: Option<RolloutStatus>,
}
