//! Preemption and maintenance notices from the Compute Engine metadata server.
//!
//! Polls `instance/preempted` (`TRUE` once the VM is being preempted; the VM
//! gets about 30 seconds) and `instance/maintenance-event` (`NONE`, or
//! `TERMINATE_ON_HOST_MAINTENANCE` / `MIGRATE_ON_HOST_MAINTENANCE` about 60
//! seconds ahead) with `Metadata-Flavor: Google`, at `GCE_METADATA_HOST` when
//! set (`host:port`, no scheme) or `metadata.google.internal`. Each notice is
//! sent once; failed polls are logged and polled again.

use crate::{metadata_notices, GcpProvider};
use async_trait::async_trait;
use gpufleet_model::InterruptionSource;

use std::time::Duration;

use gpufleet_model::poll::{spawn_poller, NoticePoller};
use gpufleet_model::{
    Error, ErrorKind, InstanceId, InterruptionNotice, NoticeKind, NoticeStream, Result,
};
use time::OffsetDateTime;

/// The metadata server's default host.
pub const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";

/// How long after the `preempted` flag turns `TRUE` a Spot VM is stopped.
pub const PREEMPTION_NOTICE: Duration = Duration::from_secs(30);

/// How long after a maintenance event is announced the host is maintained.
pub const MAINTENANCE_NOTICE: Duration = Duration::from_secs(60);

/// The base URL of the metadata server for `host` (`GCE_METADATA_HOST`).
pub fn metadata_base(host: Option<&str>) -> String {
    let h = host.unwrap_or(DEFAULT_METADATA_HOST).trim_end_matches('/');
    if h.starts_with("http://") || h.starts_with("https://") {
        h.to_string()
    } else {
        format!("http://{h}")
    }
}

/// A metadata value gpufleet does not know, named (its first 60
/// characters) with the values it does.
fn unexpected(key: &str, value: &str, valid: &str) -> Error {
    let shown: String = value.chars().take(60).collect();
    Error::new(
        ErrorKind::Unexpected,
        format!("{key} is '{shown}': expected {valid}"),
    )
}

/// Reads the `preempted` value: `Some(notice)` when it is `TRUE`.
pub fn parse_preempted(
    body: &str,
    instance: Option<InstanceId>,
    now: OffsetDateTime,
) -> Result<Option<InterruptionNotice>> {
    match body.trim() {
        "TRUE" => Ok(Some(InterruptionNotice {
            instance,
            kind: NoticeKind::Preemption,
            deadline: Some(now + PREEMPTION_NOTICE),
            source: "gce-metadata:instance/preempted".into(),
            received_at: now,
        })),
        "FALSE" => Ok(None),
        other => Err(unexpected("instance/preempted", other, "TRUE or FALSE")),
    }
}

/// Reads the `maintenance-event` value: `Some(notice)` for an event.
pub fn parse_maintenance(
    body: &str,
    instance: Option<InstanceId>,
    now: OffsetDateTime,
) -> Result<Option<InterruptionNotice>> {
    match body.trim() {
        "NONE" => Ok(None),
        "TERMINATE_ON_HOST_MAINTENANCE" | "MIGRATE_ON_HOST_MAINTENANCE" => {
            Ok(Some(InterruptionNotice {
                instance,
                kind: NoticeKind::Maintenance,
                deadline: Some(now + MAINTENANCE_NOTICE),
                source: format!("gce-metadata:instance/maintenance-event={}", body.trim()),
                received_at: now,
            }))
        }
        other => Err(unexpected(
            "instance/maintenance-event",
            other,
            "NONE, TERMINATE_ON_HOST_MAINTENANCE or MIGRATE_ON_HOST_MAINTENANCE",
        )),
    }
}

async fn get(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> std::result::Result<String, String> {
    get_tagged(client, base, path).await.map(|(body, _)| body)
}

/// A metadata value and its `ETag`.
async fn get_tagged(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> std::result::Result<(String, Option<String>), String> {
    let a = gpufleet_metadata::GCE
        .get(client, &format!("{base}/computeMetadata/v1/{path}"))
        .await?;
    Ok((a.body, a.etag))
}

/// How long one `wait_for_change` long poll of `preempted` may hang.
const LONG_POLL_SECS: u64 = 20;

/// Whether a metadata server answers at `base` within `timeout`.
pub async fn probe(base: &str, timeout: Duration) -> bool {
    gpufleet_metadata::GCE
        .probe(&format!("{base}/computeMetadata/v1/instance/id"), timeout)
        .await
}

struct GcePoller {
    client: reqwest::Client,
    base: String,
    instance: Option<InstanceId>,
    preempted: bool,
    maintenance: String,
    etag: Option<String>,
}

#[async_trait::async_trait]
impl NoticePoller for GcePoller {
    fn what(&self) -> &'static str {
        "instance/preempted"
    }

    async fn poll(&mut self) -> std::result::Result<Vec<Result<InterruptionNotice>>, String> {
        let (client, base) = (&self.client, &self.base);
        if self.instance.is_none() {
            if let (Ok(zone), Ok(name)) = (
                get(client, base, "instance/zone").await,
                get(client, base, "instance/name").await,
            ) {
                let zone = zone.rsplit('/').next().unwrap_or("").trim().to_string();
                self.instance = Some(InstanceId::new(format!("{zone}/{}", name.trim())));
            }
        }
        let mut out = Vec::new();
        // The first read is plain; later ones long-poll from its ETag
        // (`wait_for_change`), so a change is seen the moment it happens and
        // none is missed between two polls.
        let path = match &self.etag {
            Some(tag) => format!(
                "instance/preempted?wait_for_change=true&last_etag={tag}&timeout_sec={LONG_POLL_SECS}"
            ),
            None => "instance/preempted".to_string(),
        };
        let (body, etag) = match get_tagged(client, base, &path).await {
            Ok(r) => r,
            Err(e) => {
                self.etag = None;
                return Err(e);
            }
        };
        self.etag = etag;
        // The clock is read when the answer came, not before a long poll
        // that may have waited up to its timeout: the 30 s window counts
        // from the change.
        let now = OffsetDateTime::now_utc();
        let notice = parse_preempted(&body, self.instance.clone(), now);
        let now_preempted = matches!(notice, Ok(Some(_)));
        if (now_preempted && !self.preempted) || notice.is_err() {
            out.extend(notice.transpose());
        }
        self.preempted = now_preempted;
        if let Ok(body) = get(client, base, "instance/maintenance-event").await {
            let body = body.trim().to_string();
            if body != self.maintenance {
                self.maintenance = body.clone();
                let now = OffsetDateTime::now_utc();
                if let Ok(Some(n)) = parse_maintenance(&body, self.instance.clone(), now) {
                    out.push(Ok(n));
                }
            }
        }
        Ok(out)
    }
}

/// The notice stream for this VM, polling every `every`.
pub fn notices(base: String, every: Duration) -> Result<NoticeStream> {
    let client = reqwest::Client::builder()
        // Long enough for a long poll.
        .timeout(Duration::from_secs(LONG_POLL_SECS + 5))
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("HTTP client: {e}")))?;
    Ok(spawn_poller(
        GcePoller {
            client,
            base,
            instance: None,
            preempted: false,
            maintenance: "NONE".into(),
            etag: None,
        },
        every,
    ))
}

#[async_trait]
impl InterruptionSource for GcpProvider {
    async fn interruptions(&self) -> Result<NoticeStream> {
        metadata_notices(&self.inner.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let n = parse_preempted("TRUE\n", None, now).unwrap().unwrap();
        assert_eq!(n.kind, NoticeKind::Preemption);
        assert_eq!(n.deadline, Some(now + PREEMPTION_NOTICE));
        assert!(parse_preempted("FALSE", None, now).unwrap().is_none());
        assert!(parse_preempted("<html>", None, now).is_err());
        let m = parse_maintenance("TERMINATE_ON_HOST_MAINTENANCE", None, now)
            .unwrap()
            .unwrap();
        assert_eq!(m.kind, NoticeKind::Maintenance);
        assert!(parse_maintenance("NONE", None, now).unwrap().is_none());
        // An unknown value is named, cut short, with the values known.
        let e = parse_maintenance(&"X".repeat(100), None, now).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "instance/maintenance-event is '{}': expected NONE,",
                "X".repeat(60)
            )),
            "{e}"
        );
        assert_eq!(
            metadata_base(Some("127.0.0.1:8080")),
            "http://127.0.0.1:8080"
        );
        assert_eq!(metadata_base(None), "http://metadata.google.internal");
    }
}
