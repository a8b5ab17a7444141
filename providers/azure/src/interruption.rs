//! Eviction and maintenance notices from Azure Scheduled Events.
//!
//! Polls `GET {imds}/metadata/scheduledevents?api-version=2020-07-01` with
//! `Metadata: true`. A `Preempt` event (a Spot VM being evicted, about 30
//! seconds ahead) is a preemption; `Reboot`, `Redeploy`, `Freeze` and
//! `Terminate` are maintenance. `NotBefore` (RFC 1123) is the deadline. Each
//! `EventId` is sent once; failed polls are logged and polled again.
//!
//! The document lists the events of every VM in the availability set or
//! scale set: only those whose `Resources` name this VM (its
//! `compute/name`, read once from IMDS) become notices. The name is retried
//! at every poll; after [`NAME_TRIES`] polls without it, every listed event
//! is acted on, with a warning, rather than none.

use crate::{scheduled_event_notices, AzureProvider};
use async_trait::async_trait;
use gpufleet_model::InterruptionSource;

use std::collections::HashSet;
use std::time::Duration;

use gpufleet_model::poll::{spawn_poller, NoticePoller};
use gpufleet_model::{
    Error, ErrorKind, InstanceId, InterruptionNotice, NoticeKind, NoticeStream, Result,
};
use serde::Deserialize;
use time::format_description::well_known::Rfc2822;
use time::OffsetDateTime;

/// The Scheduled Events document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScheduledEvents {
    /// Changes whenever the events change.
    pub document_incarnation: i64,
    /// The events.
    #[serde(default)]
    pub events: Vec<ScheduledEvent>,
}

/// One scheduled event.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScheduledEvent {
    /// Unique id.
    pub event_id: String,
    /// `Freeze`, `Reboot`, `Redeploy`, `Preempt` or `Terminate`.
    pub event_type: String,
    /// `Scheduled` or `Started`.
    #[serde(default)]
    pub event_status: String,
    /// The VMs it affects.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Not before this time (RFC 1123), empty once started.
    #[serde(default)]
    pub not_before: String,
}

/// The start of every notice's `source`: `azure-scheduled-events:TYPE:EVENTID`.
pub const SOURCE_PREFIX: &str = "azure-scheduled-events:";

/// Parses a Scheduled Events body into notices (one per event).
pub fn parse_events(body: &str, now: OffsetDateTime) -> Result<Vec<(String, InterruptionNotice)>> {
    let doc: ScheduledEvents = serde_json::from_str(body).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("unreadable Scheduled Events document: {e}"),
        )
    })?;
    let mut out = Vec::new();
    for e in doc.events {
        let kind = match e.event_type.as_str() {
            "Preempt" => NoticeKind::Preemption,
            "Reboot" | "Redeploy" | "Freeze" | "Terminate" => NoticeKind::Maintenance,
            other => {
                tracing::warn!(
                    event_type = other,
                    "unknown scheduled event type; treating it as maintenance"
                );
                NoticeKind::Maintenance
            }
        };
        // RFC 1123 dates are RFC 2822 with a "GMT" zone.
        let deadline = OffsetDateTime::parse(&e.not_before.replace("GMT", "+0000"), &Rfc2822)
            .ok()
            .or_else(|| (e.event_status == "Started").then_some(now));
        out.push((
            e.event_id.clone(),
            InterruptionNotice {
                instance: e.resources.first().map(|r| InstanceId::new(r.clone())),
                kind,
                deadline,
                source: format!(
                    "{SOURCE_PREFIX}{}:{}",
                    gpufleet_model::text::clipped(&e.event_type, 60),
                    gpufleet_model::text::clipped(&e.event_id, 80)
                ),
                received_at: now,
            },
        ));
    }
    Ok(out)
}

async fn get(client: &reqwest::Client, url: &str) -> std::result::Result<String, String> {
    Ok(gpufleet_metadata::AZURE_IMDS.get(client, url).await?.body)
}

/// Whether Azure IMDS answers at `base` (for cloud detection).
pub async fn probe(base: &str, timeout: Duration) -> bool {
    let Ok(client) = reqwest::Client::builder().timeout(timeout).build() else {
        return false;
    };
    let url = format!(
        "{}/metadata/instance/compute/vmId?api-version=2021-02-01&format=text",
        base.trim_end_matches('/')
    );
    get(&client, &url)
        .await
        .is_ok_and(|b| !b.trim().is_empty() && !b.contains('<'))
}

/// Keeps the events whose `Resources` name `vm` (Azure compares VM names
/// case-insensitively), each notice naming that VM.
pub fn for_vm(
    events: Vec<(String, InterruptionNotice)>,
    resources: &[Vec<String>],
    vm: &str,
) -> Vec<(String, InterruptionNotice)> {
    events
        .into_iter()
        .zip(resources)
        .filter(|(_, names)| names.iter().any(|n| n.eq_ignore_ascii_case(vm)))
        .map(|((id, mut n), _)| {
            n.instance = Some(InstanceId::new(vm.to_string()));
            (id, n)
        })
        .collect()
}

/// The `Resources` of each event in a Scheduled Events body, in order.
pub fn event_resources(body: &str) -> Result<Vec<Vec<String>>> {
    let doc: ScheduledEvents = serde_json::from_str(body).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("unreadable Scheduled Events document: {e}"),
        )
    })?;
    Ok(doc.events.into_iter().map(|e| e.resources).collect())
}

struct EventsPoller {
    client: reqwest::Client,
    base: String,
    url: String,
    seen: HashSet<String>,
    resource_group: Option<String>,
    /// This VM's name, once IMDS said it.
    vm: Option<String>,
    /// Polls in a row that could not read it.
    name_failures: u32,
}

/// Polls in a row without this VM's name after which events are acted on
/// unfiltered, with a warning: a VM whose IMDS name endpoint keeps failing
/// used to ignore its own eviction for ever (a Preempt gives 30 s).
pub const NAME_TRIES: u32 = 3;

impl EventsPoller {
    async fn vm_name(&mut self) -> std::result::Result<String, String> {
        if let Some(vm) = &self.vm {
            return Ok(vm.clone());
        }
        let url = format!(
            "{}/metadata/instance/compute/name?api-version=2021-02-01&format=text",
            self.base.trim_end_matches('/')
        );
        let name = get(&self.client, &url).await.map_err(|e| {
            format!("cannot read this VM's name from IMDS ({e}); no event is acted on until it can")
        })?;
        let name = name.trim().to_string();
        if name.is_empty() || name.contains(['<', '/', ' ']) {
            return Err(format!(
                "IMDS gave '{}' as this VM's name; no event is acted on",
                name.chars().take(64).collect::<String>()
            ));
        }
        self.vm = Some(name.clone());
        Ok(name)
    }
}

#[async_trait::async_trait]
impl NoticePoller for EventsPoller {
    fn what(&self) -> &'static str {
        "Scheduled Events"
    }

    async fn poll(&mut self) -> std::result::Result<Vec<Result<InterruptionNotice>>, String> {
        // The name is retried at every poll; after NAME_TRIES failures the
        // events are acted on without it (every event the document lists:
        // on a VM outside a scale or availability set, only its own).
        let vm = match self.vm_name().await {
            Ok(vm) => {
                self.name_failures = 0;
                Some(vm)
            }
            Err(e) => {
                self.name_failures += 1;
                if self.name_failures < NAME_TRIES {
                    return Err(e);
                }
                if self.name_failures == NAME_TRIES {
                    tracing::warn!(
                        "{e}; after {NAME_TRIES} tries, every scheduled event listed is acted on as this VM's (a neighbour's in a scale set too) rather than none"
                    );
                }
                None
            }
        };
        let body = get(&self.client, &self.url).await?;
        let events = parse_events(&body, OffsetDateTime::now_utc()).map_err(|e| e.to_string())?;
        let resources = event_resources(&body).map_err(|e| e.to_string())?;
        let events = match &vm {
            Some(vm) => for_vm(events, &resources, vm),
            None => events,
        };
        Ok(events
            .into_iter()
            .filter(|(id, _)| self.seen.insert(id.clone()))
            .map(|(_, mut n)| {
                // Scheduled Events name the VM; gpufleet's ids carry the
                // resource group.
                if let (Some(rg), Some(vm)) = (&self.resource_group, &n.instance) {
                    if !vm.as_str().contains('/') {
                        n.instance = Some(InstanceId::new(format!("{rg}/{vm}")));
                    }
                }
                Ok(n)
            })
            .collect())
    }
}

/// The notice stream for this VM, polling every `every`.
pub fn notices(base: String, every: Duration) -> Result<NoticeStream> {
    notices_in(base, every, None)
}

/// The event id of a notice this module made.
pub fn event_id(notice: &InterruptionNotice) -> Option<&str> {
    notice
        .source
        .strip_prefix(SOURCE_PREFIX)?
        .split_once(':')
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

/// Tells Azure the VM is ready for the event (after the checkpoint hook
/// ran), so it may start before `NotBefore`: `POST` `StartRequests` to
/// Scheduled Events.
pub async fn acknowledge(base: &str, notice: &InterruptionNotice) -> Result<()> {
    let id = event_id(notice).ok_or_else(|| {
        Error::invalid_input(format!(
            "notice from '{}' is not an Azure scheduled event",
            notice.source
        ))
    })?;
    let fail = |why: String| {
        Error::new(
            ErrorKind::Unavailable,
            format!("acknowledging scheduled event {id}: {why}"),
        )
        .with_provider(gpufleet_model::Cloud::Azure)
        .with_operation("scheduledevents.StartRequests")
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let url = format!(
        "{}/metadata/scheduledevents?api-version=2020-07-01",
        base.trim_end_matches('/')
    );
    let body = serde_json::json!({"StartRequests": [{"EventId": id}]});
    let resp = client
        .post(url)
        .header("Metadata", "true")
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| {
            fail(if e.is_timeout() {
                "timed out".into()
            } else {
                "unreachable".into()
            })
        })?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status().as_u16())));
    }
    Ok(())
}

/// The notice stream, with VM names turned into `resource_group/name` ids.
pub fn notices_in(
    base: String,
    every: Duration,
    resource_group: Option<String>,
) -> Result<NoticeStream> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("HTTP client: {e}")))?;
    let url = format!(
        "{}/metadata/scheduledevents?api-version=2020-07-01",
        base.trim_end_matches('/')
    );
    Ok(spawn_poller(
        EventsPoller {
            client,
            base,
            url,
            seen: HashSet::new(),
            resource_group,
            vm: None,
            name_failures: 0,
        },
        every,
    ))
}

#[async_trait]
impl InterruptionSource for AzureProvider {
    async fn interruptions(&self) -> Result<NoticeStream> {
        scheduled_event_notices(&self.inner.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let body = r#"{"DocumentIncarnation": 2, "Events": [{"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["train-vm-0"], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}]}"#;
        let events = parse_events(body, now).unwrap();
        assert_eq!(events.len(), 1);
        let n = &events[0].1;
        assert_eq!(n.kind, NoticeKind::Preemption);
        assert_eq!(n.instance.as_ref().unwrap().as_str(), "train-vm-0");
        assert_eq!(n.deadline.unwrap().unix_timestamp(), 1_474_309_787);
        assert!(
            parse_events(r#"{"DocumentIncarnation": 1, "Events": []}"#, now)
                .unwrap()
                .is_empty()
        );
        assert!(parse_events("{}", now).is_err());
        assert!(parse_events("<html>", now).is_err());
    }
}
