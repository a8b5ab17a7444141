//! Interruption notices from the instance metadata service, IMDSv2 only.
//!
//! `aws-config`'s IMDS client does the IMDSv2 session: `PUT /latest/api/token`
//! with a TTL, the token on every `GET`, and a new token before the old one
//! expires; it never falls back to IMDSv1. A background task polls
//! `spot/instance-action` (404: no notice; `{"action","time"}`: the instance
//! will be stopped or terminated at `time`) and
//! `events/recommendations/rebalance` (`{"noticeTime"}`), and sends each
//! notice once (through `gpufleet_model::poll`, the loop every cloud shares:
//! failed polls are logged and polled again and never end the stream; the
//! task stops when the stream is dropped).

use crate::AwsProvider;
use async_trait::async_trait;
use gpufleet_model::InterruptionSource;

use std::time::Duration;

use aws_config::imds::client::error::ImdsError;
use aws_config::imds::Client as Imds;
use gpufleet_model::poll::{spawn_poller, NoticePoller};
use gpufleet_model::{
    Cloud, Error, ErrorKind, InstanceId, InterruptionNotice, NoticeKind, NoticeStream, Result,
};
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::AwsConfig;

/// The spot instance-action document.
#[derive(Debug, Deserialize)]
pub(crate) struct InstanceAction {
    /// `terminate`, `stop` or `hibernate`.
    pub(crate) action: String,
    /// When it happens (RFC 3339).
    pub(crate) time: String,
}

/// The rebalance recommendation document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rebalance {
    pub(crate) notice_time: String,
}

const ACTION: &str = "/latest/meta-data/spot/instance-action";
const REBALANCE: &str = "/latest/meta-data/events/recommendations/rebalance";

/// Parses an instance-action body into a preemption notice.
pub(crate) fn parse_action(body: &str, instance: Option<InstanceId>) -> Result<InterruptionNotice> {
    let a: InstanceAction = serde_json::from_str(body).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("unreadable spot/instance-action document: {e}"),
        )
    })?;
    let deadline = OffsetDateTime::parse(&a.time, &Rfc3339).map_err(|_| {
        Error::new(
            ErrorKind::Unexpected,
            format!(
                "spot/instance-action time '{}' is not RFC 3339",
                gpufleet_model::text::clipped(&a.time, 60)
            ),
        )
    })?;
    if !matches!(a.action.as_str(), "terminate" | "stop" | "hibernate") {
        tracing::warn!(action = %gpufleet_model::text::clipped(&a.action, 60), "unknown spot instance action; treating it as a preemption");
    }
    Ok(InterruptionNotice {
        instance,
        kind: NoticeKind::Preemption,
        deadline: Some(deadline),
        source: "aws-imds:spot/instance-action".into(),
        received_at: OffsetDateTime::now_utc(),
    })
}

/// Parses a rebalance recommendation body.
pub(crate) fn parse_rebalance(
    body: &str,
    instance: Option<InstanceId>,
) -> Result<InterruptionNotice> {
    let r: Rebalance = serde_json::from_str(body).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("unreadable rebalance recommendation: {e}"),
        )
    })?;
    OffsetDateTime::parse(&r.notice_time, &Rfc3339).map_err(|_| {
        Error::new(
            ErrorKind::Unexpected,
            format!("rebalance noticeTime '{}' is not RFC 3339", r.notice_time),
        )
    })?;
    Ok(InterruptionNotice {
        instance,
        kind: NoticeKind::Rebalance,
        deadline: None,
        source: "aws-imds:events/recommendations/rebalance".into(),
        received_at: OffsetDateTime::now_utc(),
    })
}

/// The notice stream for this instance.
pub(crate) fn stream(config: &AwsConfig) -> Result<NoticeStream> {
    if config.metadata_disabled {
        return Err(Error::new(
            gpufleet_model::ErrorKind::Unsupported,
            "the instance metadata service is turned off (AWS_EC2_METADATA_DISABLED=true): no interruption notices are read from it",
        )
        .with_provider(Cloud::Aws));
    }
    let mut b = Imds::builder()
        .token_ttl(config.imds_token_ttl)
        .max_attempts(2)
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(2));
    if let Some(url) = &config.metadata_endpoint {
        b = b.endpoint(url).map_err(|e| {
            Error::invalid_input(format!(
                "invalid AWS_EC2_METADATA_SERVICE_ENDPOINT '{url}': {e}"
            ))
        })?;
    }
    Ok(spawn_poller(
        ImdsPoller {
            client: b.build(),
            instance: None,
            seen_action: None,
            seen_rebalance: None,
        },
        config.notice_poll,
    ))
}

/// A metadata path's body; `None` when the service answers 404 (nothing there).
async fn fetch(client: &Imds, path: &str) -> std::result::Result<Option<String>, String> {
    match client.get(path).await {
        Ok(body) => Ok(Some(String::from(body))),
        Err(ImdsError::ErrorResponse(r)) if r.response().status().as_u16() == 404 => Ok(None),
        Err(ImdsError::ErrorResponse(r)) => Err(format!("HTTP {}", r.response().status().as_u16())),
        Err(ImdsError::FailedToLoadToken(_)) => Err("could not get an IMDSv2 token".into()),
        Err(ImdsError::IoError(_)) => Err("could not reach the metadata service".into()),
        Err(e) => Err(e.to_string()),
    }
}

async fn identity(client: &Imds) -> Option<InstanceId> {
    let id = fetch(client, "/latest/meta-data/instance-id")
        .await
        .ok()??;
    let region = fetch(client, "/latest/meta-data/placement/region")
        .await
        .ok()??;
    Some(InstanceId::new(format!("{}/{}", region.trim(), id.trim())))
}

struct ImdsPoller {
    client: Imds,
    instance: Option<InstanceId>,
    seen_action: Option<(String, String)>,
    seen_rebalance: Option<String>,
}

#[async_trait::async_trait]
impl NoticePoller for ImdsPoller {
    fn what(&self) -> &'static str {
        "spot/instance-action"
    }

    async fn poll(&mut self) -> std::result::Result<Vec<Result<InterruptionNotice>>, String> {
        if self.instance.is_none() {
            self.instance = identity(&self.client).await;
        }
        let mut out = Vec::new();
        // A failing metadata service is said (the poller warns and polls
        // again), never taken for "no notice".
        let action = fetch(&self.client, ACTION)
            .await
            .map_err(|e| format!("reading {ACTION}: {e}"))?;
        if let Some(body) = &action {
            let key = serde_json::from_str::<InstanceAction>(body)
                .map(|a| (a.action, a.time))
                .unwrap_or_else(|_| (body.clone(), String::new()));
            if self.seen_action.as_ref() != Some(&key) {
                self.seen_action = Some(key);
                out.push(
                    parse_action(body, self.instance.clone())
                        .map_err(|e| e.with_provider(Cloud::Aws)),
                );
            }
        }
        let rebalance = match fetch(&self.client, REBALANCE).await {
            Ok(r) => r,
            // The instance-action notice found above is not lost to it.
            Err(e) if out.is_empty() => return Err(format!("reading {REBALANCE}: {e}")),
            Err(e) => {
                tracing::warn!(error = %e, "reading {REBALANCE} failed");
                None
            }
        };
        if let Some(body) = rebalance {
            let key = serde_json::from_str::<Rebalance>(&body)
                .map(|r| r.notice_time)
                .unwrap_or_else(|_| body.clone());
            if self.seen_rebalance.as_ref() != Some(&key) {
                self.seen_rebalance = Some(key);
                out.push(
                    parse_rebalance(&body, self.instance.clone())
                        .map_err(|e| e.with_provider(Cloud::Aws)),
                );
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl InterruptionSource for AwsProvider {
    async fn interruptions(&self) -> Result<NoticeStream> {
        stream(&self.inner.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `AWS_EC2_METADATA_DISABLED=true` (as the builder reads it) turns the
    /// notice stream off, saying why, instead of polling 169.254.169.254
    /// (`serve --provider live` used to, every 5 s).
    #[tokio::test]
    async fn a_disabled_metadata_service_is_not_polled() {
        let cfg = crate::AwsBuilder::new()
            .with_metadata_disabled(true)
            .build()
            .expect("settings");
        let e = stream(&cfg).err().expect("no stream");
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("AWS_EC2_METADATA_DISABLED"), "{e}");
    }

    #[test]
    fn documents() {
        let n = parse_action(
            r#"{"action": "terminate", "time": "2017-09-18T08:22:00Z"}"#,
            None,
        )
        .unwrap();
        assert_eq!(n.kind, NoticeKind::Preemption);
        assert_eq!(
            n.deadline.unwrap(),
            OffsetDateTime::parse("2017-09-18T08:22:00Z", &Rfc3339).unwrap()
        );
        assert!(parse_action("{}", None).is_err());
        assert!(parse_action(r#"{"action":"stop","time":"soon"}"#, None).is_err());
        let r = parse_rebalance(r#"{"noticeTime": "2020-10-27T08:22:00Z"}"#, None).unwrap();
        assert_eq!(r.kind, NoticeKind::Rebalance);
        assert!(parse_rebalance("<html>", None).is_err());
    }
}
