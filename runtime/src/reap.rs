//! What gpufleet launched, what nothing holds any more, and what it costs:
//! the logic behind `ls`, `terminate`, `reap` and the showback in `ls
//! --cost-by`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::placer::format_duration;
use gpufleet_core::{
    tags, Error, ErrorKind, Instance, InstanceId, PlacementGroup, Price, Provider, Result,
    TagFilter,
};

/// Managed instances across `providers` that match `filter` (the managed
/// marker is always required), sorted by id.
pub async fn managed(providers: &[Arc<dyn Provider>], filter: &TagFilter) -> Result<Vec<Instance>> {
    let mut all = TagFilter::managed();
    for (k, v) in &filter.0 {
        all = all.with(k.clone(), v.clone());
    }
    let mut out = Vec::new();
    for p in providers {
        out.extend(p.list_instances(&all).await?);
    }
    out.retain(|i| i.tags.get(tags::MANAGED).map(String::as_str) == Some("true"));
    out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    Ok(out)
}

/// Why an instance is forgotten, if it is: past its TTL, or (with `idle`)
/// without a heartbeat for that long.
pub fn forgotten(i: &Instance, now: OffsetDateTime, idle: Option<Duration>) -> Option<String> {
    if let Some(exp) = i.expires_at {
        if exp <= now {
            return Some(format!(
                "expired {} ago",
                format_duration(Duration::from_secs(
                    (now - exp).whole_seconds().max(0) as u64
                ))
            ));
        }
    }
    let idle = idle?;
    let beat = i
        .tags
        .get(tags::HEARTBEAT)
        .and_then(|t| tags::parse_time(t));
    let since = beat.unwrap_or(i.launched_at);
    let quiet = Duration::from_secs((now - since).whole_seconds().max(0) as u64);
    (quiet >= idle).then(|| {
        if beat.is_some() {
            format!("no heartbeat for {}", format_duration(quiet))
        } else {
            format!("no heartbeat since launch {} ago", format_duration(quiet))
        }
    })
}

/// What a terminate did.
#[derive(Debug, Default)]
pub struct TerminateOutcome {
    /// Terminated (or already gone).
    pub terminated: Vec<String>,
    /// Not terminated, with why.
    pub failed: Vec<(String, Error)>,
}

/// Terminates each instance with its cloud's provider; already-gone counts
/// as terminated, and one failure does not stop the rest.
pub async fn terminate_each(
    providers: &[Arc<dyn Provider>],
    victims: &[Instance],
) -> TerminateOutcome {
    let mut out = TerminateOutcome::default();
    for i in victims {
        let Some(p) = providers.iter().find(|p| p.cloud() == i.pool.cloud) else {
            out.failed.push((
                i.id.to_string(),
                Error::invalid_input(format!("{} is not enabled", i.pool.cloud)),
            ));
            continue;
        };
        match p.terminate(&i.id).await {
            Ok(()) => out.terminated.push(i.id.to_string()),
            Err(e) if e.kind() == ErrorKind::NotFound => out.terminated.push(i.id.to_string()),
            Err(e) => out.failed.push((i.id.to_string(), e)),
        }
    }
    out
}

/// Managed placement groups matching `filter` that no live instance is in,
/// counting the instances in `ending` (being terminated now) as gone. A group
/// whose job `busy` says is launching right now is left alone: its
/// instances may be on their way.
pub async fn empty_groups(
    providers: &[Arc<dyn Provider>],
    filter: &TagFilter,
    ending: &[InstanceId],
    busy: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Vec<PlacementGroup>> {
    let mut groups = TagFilter::managed();
    for (k, v) in &filter.0 {
        groups = groups.with(k.clone(), v.clone());
    }
    let mut out = Vec::new();
    for p in providers {
        let found = p.list_placement_groups(&groups).await?;
        if found.is_empty() {
            continue;
        }
        let live = p.list_instances(&TagFilter::default()).await?;
        for g in found {
            if g.tags.get(tags::MANAGED).map(String::as_str) != Some("true") {
                continue;
            }
            if g.tags.get(tags::JOB).is_some_and(|j| busy(j)) {
                continue;
            }
            let used = live.iter().any(|i| {
                i.state.is_live()
                    && !ending.contains(&i.id)
                    && i.placement_group.as_ref() == Some(&g.id)
            });
            if !used {
                out.push(g);
            }
        }
    }
    out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    Ok(out)
}

/// Deletes each group with its cloud's provider; already-gone counts as
/// deleted, and one failure does not stop the rest (a group whose last
/// instances are still shutting down is refused by the cloud: `reap`
/// deletes it on a later run).
pub async fn delete_groups(
    providers: &[Arc<dyn Provider>],
    groups: &[PlacementGroup],
) -> TerminateOutcome {
    let mut out = TerminateOutcome::default();
    for g in groups {
        let Some(p) = providers.iter().find(|p| p.cloud() == g.cloud) else {
            continue;
        };
        match p.delete_placement_group(&g.id).await {
            Ok(()) => out.terminated.push(g.id.to_string()),
            Err(e) if e.kind() == ErrorKind::NotFound => out.terminated.push(g.id.to_string()),
            Err(e) => out.failed.push((g.id.to_string(), e)),
        }
    }
    out
}

/// How the showback groups instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostBy {
    /// By `gpufleet:job`.
    Job,
    /// By `gpufleet:team`.
    Team,
    /// By `gpufleet:owner`.
    Owner,
}

impl CostBy {
    /// The tag grouped on.
    pub fn tag(self) -> &'static str {
        match self {
            CostBy::Job => tags::JOB,
            CostBy::Team => tags::TEAM,
            CostBy::Owner => tags::OWNER,
        }
    }
}

/// One group of the showback.
#[derive(Debug, Clone, Serialize)]
pub struct CostGroup {
    /// The tag's value (`(untagged)` when absent).
    pub key: String,
    /// Instances in it.
    pub instances: usize,
    /// Instances whose price is unknown (left out of the sums).
    #[serde(skip_serializing_if = "is_zero")]
    pub unpriced: usize,
    /// What it costs an hour, USD.
    pub per_hour_usd: f64,
    /// What it has cost since launch, USD.
    pub cost_so_far_usd: f64,
    /// What it costs a day, USD.
    pub per_day_usd: f64,
}

/// Groups instances by a tag and sums their cost at `price` (fixed point;
/// USD figures are rounded only for output).
pub fn showback(
    instances: &[(Instance, Option<Price>)],
    by: CostBy,
    now: OffsetDateTime,
) -> Result<Vec<CostGroup>> {
    let mut groups: BTreeMap<String, (usize, usize, Price, gpufleet_core::Money)> = BTreeMap::new();
    for (i, price) in instances {
        let key = i
            .tags
            .get(by.tag())
            .cloned()
            .unwrap_or_else(|| "(untagged)".into());
        let g = groups
            .entry(key)
            .or_insert((0, 0, Price::ZERO, gpufleet_core::Money::ZERO));
        g.0 += 1;
        match price {
            Some(p) => {
                let secs = (now - i.launched_at).whole_seconds().max(0) as u64;
                g.2 =
                    g.2.checked_add(*p)
                        .ok_or_else(|| overflow("hourly price"))?;
                g.3 =
                    g.3.checked_add(p.cost_for_seconds(secs)?)
                        .ok_or_else(|| overflow("cost"))?;
            }
            None => g.1 += 1,
        }
    }
    Ok(groups
        .into_iter()
        .map(|(key, (n, unpriced, hourly, so_far))| CostGroup {
            key,
            instances: n,
            unpriced,
            per_hour_usd: hourly.usd_per_hour_f64(),
            cost_so_far_usd: so_far.as_usd_f64(),
            per_day_usd: hourly.usd_per_hour_f64() * 24.0,
        })
        .collect())
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn overflow(what: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} overflows the money type"),
    )
}
