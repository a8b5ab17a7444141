//! Following zone and region operations to the end.

use google_cloud_compute_v1::model::operation::Status;
use google_cloud_compute_v1::model::Operation;
use gpufleet_model::{Cloud, Error, ErrorKind, Result};
use tokio::time::Instant;

use crate::error::from_operation;
use crate::GcpProvider;

/// Where an operation lives.
pub(crate) enum Scope<'a> {
    /// A zone operation.
    Zone(&'a str),
    /// A region operation.
    Region(&'a str),
}

fn finished(op: &Operation, what: &'static str) -> Option<Result<()>> {
    if op.status != Some(Status::Done) {
        return None;
    }
    match &op.error {
        Some(e) if !e.errors.is_empty() => {
            let codes: Vec<(String, String)> = e
                .errors
                .iter()
                .map(|x| {
                    (
                        x.code.clone().unwrap_or_default(),
                        x.message.clone().unwrap_or_default(),
                    )
                })
                .collect();
            Some(Err(from_operation(what, &codes, op.http_error_status_code)))
        }
        _ => Some(Ok(())),
    }
}

/// Polls `op` until it is `DONE` (its errors become gpufleet errors) or the
/// configured operation timeout passes.
pub(crate) async fn wait(
    p: &GcpProvider,
    scope: Scope<'_>,
    op: Operation,
    what: &'static str,
) -> Result<()> {
    if let Some(r) = finished(&op, what) {
        return r;
    }
    let name = op.name.clone().ok_or_else(|| {
        Error::new(ErrorKind::Unexpected, "an operation without a name")
            .with_provider(Cloud::Gcp)
            .with_operation(what)
    })?;
    let deadline = Instant::now() + p.inner.config.operation_timeout;
    loop {
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "operation {name} did not finish within {:?}",
                    p.inner.config.operation_timeout
                ),
            )
            .with_provider(Cloud::Gcp)
            .with_operation(what)
            .with_context("operation", name));
        }
        tokio::time::sleep(p.inner.config.operation_poll).await;
        let op = match scope {
            Scope::Zone(zone) => send_scoped!(
                p, zone_operations.get, set_zone(zone), set_operation(&name); "zoneOperations.get"
            )?,
            Scope::Region(region) => send_scoped!(
                p, region_operations.get, set_region(region), set_operation(&name);
                "regionOperations.get"
            )?,
        };
        if let Some(r) = finished(&op, what) {
            return r;
        }
    }
}
