//! The interruption queue: EC2's instance events, routed by EventBridge
//! rules to an SQS queue that a controller long-polls (as Karpenter does).
//! Three rules feed it, with `source: aws.ec2`: `EC2 Spot Instance
//! Interruption Warning` (two minutes before a spot instance is taken back),
//! `EC2 Instance Rebalance Recommendation` and `EC2 Instance State-change
//! Notification`. Each message's body is the EventBridge event as AWS
//! documents it (`detail-type`, `time`, `region`, `detail.instance-id`,
//! `detail.instance-action` or `detail.state`). Several controllers may read
//! one queue: a message about an instance the reader drives is deleted once
//! read; one about another instance is left for the others (its visibility
//! set back to [`LEFT_FOR`], and the reader steps back a little longer than
//! that so the others get it first), until no reader has claimed it for
//! [`UNCLAIMED_AFTER`] since it was sent, when it is deleted (its instance
//! is no reader's; a two-minute warning is stale by then anyway). A message
//! gpufleet cannot read is deleted at once, so that it is not received
//! forever. An event about another account than the credentials' (learnt
//! with STS when the queue is opened) is never returned.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use gpufleet_model::{
    Cloud, CloudEvent, CloudEventKind, CloudEvents, Error, ErrorKind, InstanceId, InstanceState,
    Region, Result,
};

use crate::error::from_sdk;
use crate::AwsProvider;

/// How long one receive waits for a message (SQS's longest long poll).
const WAIT: Duration = Duration::from_secs(20);

/// How long a message about another reader's instance stays hidden before
/// the readers receive it again.
pub const LEFT_FOR: Duration = Duration::from_secs(5);

/// A message no reader has claimed this long after it was sent is deleted.
pub const UNCLAIMED_AFTER: Duration = Duration::from_secs(10 * 60);

/// An EventBridge event, the fields gpufleet reads.
#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    #[serde(default)]
    account: Option<String>,
    time: String,
    region: String,
    detail: Detail,
}

#[derive(Debug, Deserialize)]
struct Detail {
    #[serde(rename = "instance-id")]
    instance_id: Option<String>,
    #[serde(rename = "instance-action")]
    instance_action: Option<String>,
    state: Option<String>,
}

/// Reads one message body: the event about one instance it carries, `None`
/// for an event gpufleet does not act on (another source or type), an error
/// naming what is wrong for a body that is not such an event.
pub fn parse_event(body: &str) -> Result<Option<CloudEvent>> {
    let bad = |why: String| Error::invalid_input(format!("an interruption queue message {why}"));
    let e: Event = serde_json::from_str(body)
        .map_err(|err| bad(format!("is not an EventBridge event: {err}")))?;
    if e.source != "aws.ec2" {
        return Ok(None);
    }
    let at = OffsetDateTime::parse(&e.time, &Rfc3339)
        .map_err(|err| bad(format!("has a bad time '{}': {err}", e.time)))?;
    let kind = match e.detail_type.as_str() {
        "EC2 Spot Instance Interruption Warning" => {
            // `terminate`, `stop` or `hibernate`, two minutes on (hibernation
            // begins at once).
            let soon = match e.detail.instance_action.as_deref() {
                Some("hibernate") => at,
                _ => at + time::Duration::minutes(2),
            };
            CloudEventKind::Interruption {
                deadline: Some(soon),
            }
        }
        "EC2 Instance Rebalance Recommendation" => CloudEventKind::Rebalance,
        "EC2 Instance State-change Notification" => {
            let state = match e.detail.state.as_deref() {
                Some("pending") => InstanceState::Pending,
                Some("running") => InstanceState::Running,
                Some("stopping") => InstanceState::Stopping,
                Some("stopped") => InstanceState::Stopped,
                Some("shutting-down") => InstanceState::ShuttingDown,
                Some("terminated") => InstanceState::Terminated,
                other => return Err(bad(format!("has an unknown instance state {other:?}"))),
            };
            CloudEventKind::StateChange { state }
        }
        _ => return Ok(None),
    };
    let id = e
        .detail
        .instance_id
        .ok_or_else(|| bad(format!("'{}' names no instance", e.detail_type)))?;
    Ok(Some(CloudEvent {
        instance: InstanceId::new(crate::join_id(&Region::new(e.region), &id)),
        kind,
        at,
        source: e.detail_type,
        account: e.account,
    }))
}

/// An SQS queue that EventBridge rules fill with EC2's instance events.
#[derive(Debug, Clone)]
pub struct InterruptionQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    wait: Duration,
    /// The account of the credentials reading it (STS), when it could be
    /// learnt: an event about another account is not returned.
    account: Option<String>,
}

impl AwsProvider {
    /// The interruption queue `queue` (its URL, or its name in the first
    /// region), read with this provider's credentials and SDK settings, at
    /// `AWS_ENDPOINT_URL_SQS` when set. A name is looked up (`GetQueueUrl`):
    /// a queue that does not exist is an error of kind `NotFound`.
    pub async fn interruption_queue(&self, queue: &str) -> Result<InterruptionQueue> {
        let queue = queue.trim();
        if queue.is_empty() {
            return Err(Error::invalid_input(
                "an empty interruption queue: expected an SQS queue URL or name",
            ));
        }
        let config = &self.inner.config;
        // A URL says its region (sqs.<region>.amazonaws.com); else the
        // provider's first.
        let region = queue
            .strip_prefix("https://sqs.")
            .and_then(|rest| rest.split('.').next())
            .map(str::to_string)
            .unwrap_or_else(|| config.regions[0].to_string());
        let mut b = aws_sdk_sqs::config::Builder::from(&self.inner.sdk)
            .region(aws_sdk_sqs::config::Region::new(region));
        if let Some(url) = &config.sqs_endpoint_url {
            b = b.endpoint_url(url.clone());
        }
        let client = aws_sdk_sqs::Client::from_conf(b.build());
        let url = if queue.starts_with("https://") || queue.starts_with("http://") {
            queue.to_string()
        } else {
            let out = client
                .get_queue_url()
                .queue_name(queue)
                .send()
                .await
                .map_err(|e| from_sdk("GetQueueUrl", e))?;
            out.queue_url.ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("SQS gave no URL for the queue '{queue}'"),
                )
                .with_provider(Cloud::Aws)
            })?
        };
        // Whose instances the events may be about: the credentials' own
        // account. Unknown when STS does not answer (then an event's
        // instance must still be one a reader drives to be obeyed).
        // STS at `AWS_ENDPOINT_URL_STS` (read by the SDK), else at the EC2
        // override, as `gpufleet check` asks it.
        let mut sts = aws_sdk_sts::config::Builder::from(&self.inner.sdk);
        if let (Some(u), None) = (
            &config.endpoint_url,
            std::env::var_os("AWS_ENDPOINT_URL_STS"),
        ) {
            sts = sts.endpoint_url(u.clone());
        }
        let asked = tokio::time::timeout(
            Duration::from_secs(5),
            aws_sdk_sts::Client::from_conf(sts.build())
                .get_caller_identity()
                .send(),
        )
        .await;
        let account = match asked {
            Ok(Ok(out)) => out.account,
            Ok(Err(e)) => {
                tracing::warn!(error = %from_sdk("GetCallerIdentity", e), "cannot tell which account the interruption queue's events may be about; they are checked against the instances driven only");
                None
            }
            Err(_) => {
                tracing::warn!("STS did not answer within 5 s: the interruption queue's events are checked against the instances driven only");
                None
            }
        };
        Ok(InterruptionQueue {
            client,
            url,
            wait: WAIT,
            account,
        })
    }
}

impl InterruptionQueue {
    /// Waits at most `wait` per receive (default and longest 20 s; whole
    /// seconds).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait.min(WAIT);
        self
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[async_trait]
impl CloudEvents for InterruptionQueue {
    fn cloud(&self) -> Cloud {
        Cloud::Aws
    }

    fn describe(&self) -> String {
        format!("SQS queue {}", self.url)
    }

    async fn receive(
        &self,
        mine: &(dyn for<'e> Fn(&'e CloudEvent) -> bool + Send + Sync),
    ) -> Result<Vec<CloudEvent>> {
        use aws_sdk_sqs::types::{
            ChangeMessageVisibilityBatchRequestEntry as Leave,
            DeleteMessageBatchRequestEntry as Delete, MessageSystemAttributeName,
        };
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(10)
            .wait_time_seconds(self.wait.as_secs() as i32)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| from_sdk("ReceiveMessage", e))?;
        let messages = out.messages.unwrap_or_default();
        let now_ms = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
        let mut events = Vec::new();
        let (mut done, mut left) = (Vec::new(), Vec::new());
        for (n, m) in messages.into_iter().enumerate() {
            let Some(handle) = m.receipt_handle.clone() else {
                continue;
            };
            let sent_ms = m
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                .and_then(|t| t.parse::<i128>().ok());
            let stale = sent_ms.is_some_and(|t| now_ms - t > UNCLAIMED_AFTER.as_millis() as i128);
            let take = match m.body.as_deref().map(parse_event) {
                Some(Ok(Some(e))) => {
                    let other_account = matches!(
                        (&self.account, &e.account),
                        (Some(ours), Some(theirs)) if ours != theirs
                    );
                    if !other_account && mine(&e) {
                        events.push(e);
                        true
                    } else if stale {
                        tracing::debug!(queue = %self.url, instance = %e.instance, "an event no reader claimed; deleted");
                        true
                    } else {
                        false
                    }
                }
                Some(Ok(None)) => true,
                Some(Err(e)) => {
                    tracing::warn!(queue = %self.url, error = %e, "an interruption queue message gpufleet cannot read; deleted");
                    true
                }
                None => {
                    tracing::warn!(queue = %self.url, "an interruption queue message with no body; deleted");
                    true
                }
            };
            let id = n.to_string();
            let built = if take {
                Delete::builder()
                    .id(id)
                    .receipt_handle(handle)
                    .build()
                    .map(|d| done.push(d))
            } else {
                Leave::builder()
                    .id(id)
                    .receipt_handle(handle)
                    .visibility_timeout(LEFT_FOR.as_secs() as i32)
                    .build()
                    .map(|l| left.push(l))
            };
            built
                .map_err(|e| Error::new(ErrorKind::Unexpected, format!("SQS batch entry: {e}")))?;
        }
        if !done.is_empty() {
            // A message not deleted comes back after its visibility
            // timeout, and is acted on again: harmless (a job acts on an
            // instance's end once).
            if let Err(e) = self
                .client
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(done))
                .send()
                .await
            {
                tracing::warn!(queue = %self.url, error = %from_sdk("DeleteMessageBatch", e), "could not delete read messages; they will be read again");
            }
        }
        if !left.is_empty() {
            // Another reader's: back on the queue for it soon (not after
            // the queue's whole visibility timeout).
            if let Err(e) = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(left))
                .send()
                .await
            {
                tracing::warn!(queue = %self.url, error = %from_sdk("ChangeMessageVisibilityBatch", e), "could not hand messages back; the other readers get them after the queue's visibility timeout");
            } else {
                // Step back while they come back, so that the readers they
                // are for get them first (a reader that polled again at
                // once could win them back every time), for a random span
                // beyond LEFT_FOR so that readers do not fall in step. What
                // it claimed is returned after the pause: at most twice
                // LEFT_FOR late.
                let jitter = gpufleet_model::fnv1a64(
                    format!("{}:{:?}", std::process::id(), std::time::SystemTime::now()).as_bytes(),
                ) % 1000;
                let pause = LEFT_FOR + LEFT_FOR.mul_f64(jitter as f64 / 1000.0);
                tokio::time::sleep(pause).await;
            }
        }
        Ok(events)
    }

    async fn check(&self) -> Result<()> {
        self.client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| from_sdk("GetQueueAttributes", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_aws_documents_them() {
        let warning = r#"{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-12-05T10:00:00Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","instance-action":"terminate"}}"#;
        let e = parse_event(warning).unwrap().unwrap();
        assert_eq!(e.instance.to_string(), "us-east-2/i-1234567890abcdef0");
        assert!(e.ends_instance());
        assert_eq!(
            e.kind,
            CloudEventKind::Interruption {
                deadline: Some(time::macros::datetime!(2026-12-05 10:02 UTC))
            }
        );
        let rebalance = r#"{"version":"0","id":"1","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2026-12-05T10:00:00Z","region":"us-east-2","resources":[],"detail":{"instance-id":"i-1"}}"#;
        let e = parse_event(rebalance).unwrap().unwrap();
        assert!(!e.ends_instance());
        let state = r#"{"id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2021-11-11T21:29:54Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],"detail":{"instance-id":"i-abcd1111","state":"stopping"}}"#;
        let e = parse_event(state).unwrap().unwrap();
        assert_eq!(
            e.kind,
            CloudEventKind::StateChange {
                state: InstanceState::Stopping
            }
        );
        assert!(e.ends_instance());
        // Another source or type: not acted on. Not an event: said so.
        let other = warning.replace("aws.ec2", "aws.health");
        assert_eq!(parse_event(&other).unwrap(), None);
        let e = parse_event("{}").unwrap_err().to_string();
        assert!(e.contains("is not an EventBridge event"), "{e}");
        let e = parse_event(&state.replace("stopping", "melting"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown instance state"), "{e}");
    }
}
