//! What gpufleet launched, what nothing holds any more, and what it costs:
//! the logic behind `ls`, `terminate` and `reap` (the listing itself is
//! the fleet's `managed`, above this; spend is [`crate::spend`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use futures::future::BoxFuture;
use gpufleet_core::placer::format_duration;
use gpufleet_core::usage::GpuSummary;
use gpufleet_core::{
    provider_for, tags, Cloud, Error, ErrorKind, Instance, InstanceId, PlacementGroup, Provider,
    Result, TagFilter,
};

/// The managed instances matching `filter` (gpufleet's managed marker is
/// always required) of each provider, all listed at once: each cloud's
/// instances, or why they could not be listed.
pub async fn list_managed(
    providers: &[Arc<dyn Provider>],
    filter: &TagFilter,
) -> Vec<(Cloud, Result<Vec<Instance>>)> {
    let mut all = TagFilter::managed();
    for (k, v) in &filter.0 {
        all = all.with(k.clone(), v.clone());
    }
    futures::future::join_all(providers.iter().map(|p| {
        let all = &all;
        async move {
            let got = p.list_instances(all).await.map(|mut v| {
                v.retain(|i| i.tags.get(tags::MANAGED).map(String::as_str) == Some("true"));
                v
            });
            (p.cloud(), got)
        }
    }))
    .await
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

/// What a node's published GPU summary says about idleness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UseVerdict {
    /// Its GPUs stayed under the level for at least the time asked; why.
    Idle(String),
    /// Its GPUs did work within the time asked.
    Busy,
    /// Nothing to judge by for longer than the grace period; why. Never
    /// reaped.
    Unknown(String),
    /// Launched less than the grace period ago with no summary yet.
    TooEarly,
}

/// Whether instance `i`'s GPUs stayed under `below` percent for `idle`, by
/// the summary its agent published (the `gpufleet:gpu` and
/// `gpufleet:gpu-quiet` tags; see [`gpufleet_core::usage`]). A summary older
/// than `grace`, or none on an instance older than `grace`, is
/// [`UseVerdict::Unknown`], never idle. `below` is judged at the highest
/// published level at or under it, so an instance is never called idle for
/// a level it has not been measured under.
pub fn idle_by_use(
    i: &Instance,
    now: OffsetDateTime,
    idle: Duration,
    below: u8,
    grace: Duration,
) -> UseVerdict {
    let age = Duration::from_secs((now - i.launched_at).whole_seconds().max(0) as u64);
    let Some(s) = GpuSummary::from_tags(&i.tags) else {
        if age <= grace {
            return UseVerdict::TooEarly;
        }
        let why = if i.tags.contains_key(tags::GPU) {
            "its GPU summary is unreadable".to_string()
        } else {
            format!(
                "no GPU summary in the {} since launch (grace {}): no agent on the node, or it cannot write tags",
                format_duration(age),
                format_duration(grace)
            )
        };
        return UseVerdict::Unknown(why);
    };
    // A summary stamped ahead of this clock (beyond a minute of skew) is
    // not evidence: a node whose clock is wrong, or a forged tag.
    if s.at > now + time::Duration::minutes(1) {
        return UseVerdict::Unknown(format!(
            "its GPU summary is stamped {} ahead of now (the node's clock is off, or the tag was not written by its agent)",
            format_duration(Duration::from_secs((s.at - now).whole_seconds().max(0) as u64))
        ));
    }
    let stale = Duration::from_secs((now - s.at).whole_seconds().max(0) as u64);
    if stale > grace {
        return UseVerdict::Unknown(format!(
            "last GPU summary {} ago (grace {}): the agent or the node stopped reporting",
            format_duration(stale),
            format_duration(grace)
        ));
    }
    if s.gpus == 0 {
        return UseVerdict::Unknown("its agent sees no GPU on the node".into());
    }
    let Some((level, quiet)) = s.quiet_under(below) else {
        return UseVerdict::Unknown(if s.quiet.is_empty() {
            "its GPU summary has no quiet times (an older agent)".to_string()
        } else {
            format!("no published level at or under {below}%")
        });
    };
    if quiet < idle {
        return UseVerdict::Busy;
    }
    let level_note = if level == below {
        String::new()
    } else {
        format!(" (the highest published level at or under {below}%)")
    };
    UseVerdict::Idle(format!(
        "GPUs under {level}%{level_note} for {}; {}% mean, {} MiB peak of {} in the last {}",
        format_duration(quiet),
        s.mean_util_pct,
        s.peak_memory_mib,
        s.memory_total_mib,
        format_duration(Duration::from_secs(u64::from(s.window_secs)))
    ))
}

/// What `reap` would end, and what it cannot judge.
#[derive(Debug, Default)]
pub struct Selection {
    /// Forgotten instances (past their TTL, silent, or idle by their GPUs'
    /// use), each with why.
    pub victims: Vec<(Instance, String)>,
    /// Instances whose GPU use is not known (no recent summary): never
    /// reaped, each with why.
    pub unknown: Vec<(Instance, String)>,
}

/// Sorts `all` for `reap`: past their expiry always; with `idle` alone,
/// silent that long (no heartbeat); with `idle` and `below`, GPUs under
/// `below` percent for that long (an instance without a summary newer than
/// `grace` is unknown).
pub fn select(
    all: Vec<Instance>,
    now: OffsetDateTime,
    idle: Option<Duration>,
    below: Option<u8>,
    grace: Duration,
    driven: &HashSet<String>,
) -> Selection {
    let mut out = Selection::default();
    // With `below`, idleness is judged by what the GPUs did, not by the
    // heartbeat; expiry counts either way, except for an instance whose job
    // a controller drives (it could not extend the expiry, but holds the
    // job's lease).
    let by_heartbeat = if below.is_some() { None } else { idle };
    for i in all {
        // A service's replica whose controller holds the service's lease:
        // the controller checks it (readiness) and ends it; it sends no
        // heartbeat and has no expiry to judge it by. Once the lease has
        // lapsed, nothing holds it and it is judged as any instance.
        let service = i.tags.get(tags::SERVICE);
        if service.is_some_and(|s| driven.contains(&gpufleet_core::ledger::service_lease(s))) {
            continue;
        }
        let is_driven = i.tags.get(tags::JOB).is_some_and(|j| driven.contains(j));
        let judged = if is_driven {
            std::borrow::Cow::Owned(Instance {
                expires_at: None,
                ..i.clone()
            })
        } else {
            std::borrow::Cow::Borrowed(&i)
        };
        if let Some(why) = forgotten(&judged, now, by_heartbeat) {
            out.victims.push((i, why));
            continue;
        }
        let (Some(idle), Some(below)) = (idle, below) else {
            continue;
        };
        match idle_by_use(&i, now, idle, below, grace) {
            UseVerdict::Idle(why) => out.victims.push((i, why)),
            UseVerdict::Unknown(why) => out.unknown.push((i, why)),
            UseVerdict::Busy | UseVerdict::TooEarly => {}
        }
    }
    out
}

/// Whether `i` carries `owner`'s owner tag (an instance with none is no
/// one's: never `owner`'s).
pub fn owned_by(i: &Instance, owner: &str) -> bool {
    i.tags.get(tags::OWNER).map(String::as_str) == Some(owner)
}

/// Splits `instances` into `owner`'s and the others (other owners', and
/// those with no owner tag), which a command acting on instances leaves
/// alone unless it is told `--any-owner` (then nothing is left out).
pub fn split_by_owner<T>(
    instances: Vec<T>,
    owner: &str,
    any_owner: bool,
    instance: impl Fn(&T) -> &Instance,
) -> (Vec<T>, Vec<T>) {
    if any_owner {
        return (instances, Vec::new());
    }
    instances
        .into_iter()
        .partition(|x| owned_by(instance(x), owner))
}

/// The jobs a controller drives now by `ledger` (a live lease): their
/// instances are not reaped for their expiry (and the services a controller
/// serves, as `service:NAME`: their replicas are not reaped at all). Empty
/// when there is no ledger or it cannot be read (then expiry alone decides,
/// as on another machine).
pub async fn driven_jobs(
    ledger: Option<&dyn gpufleet_core::ledger::Ledger>,
    now: OffsetDateTime,
) -> HashSet<String> {
    let Some(ledger) = ledger else {
        return HashSet::new();
    };
    match ledger.leases().await {
        Ok(leases) => leases
            .into_iter()
            .filter(|l| l.is_live(now))
            .map(|l| l.job_id)
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the ledger's leases; expiry alone decides");
            HashSet::new()
        }
    }
}

/// The jobs the ledger shows launching or moving now (their placement
/// groups may be about to get instances); `None` when it cannot say.
pub async fn launching_jobs(
    ledger: &dyn gpufleet_core::ledger::Ledger,
    now: OffsetDateTime,
) -> Option<Vec<String>> {
    use gpufleet_core::ledger::JobState;
    let jobs = match ledger.jobs().await {
        Ok(records) => crate::jobs::summarize_all(records, now),
        Err(e) => Err(e),
    };
    match jobs {
        Ok(jobs) => Some(
            jobs.into_iter()
                .filter(|j| matches!(j.state, JobState::Launching | JobState::Moving))
                .map(|j| j.id)
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the ledger; placement groups are kept this time");
            None
        }
    }
}

/// What a terminate did.
#[derive(Debug, Default)]
pub struct TerminateOutcome {
    /// Terminated (or already gone).
    pub terminated: Vec<String>,
    /// Not terminated, with why.
    pub failed: Vec<(String, Error)>,
}

impl TerminateOutcome {
    /// Records what became of `id`: done (already gone counts), or why not.
    fn record(&mut self, id: String, result: Result<()>) {
        match result {
            Ok(()) => self.terminated.push(id),
            Err(e) if e.kind() == ErrorKind::NotFound => self.terminated.push(id),
            Err(e) => self.failed.push((id, e)),
        }
    }
}

/// Terminates each instance with its cloud's provider; already-gone counts
/// as terminated, and one failure does not stop the rest.
pub async fn terminate_each(
    providers: &[Arc<dyn Provider>],
    victims: &[Instance],
) -> TerminateOutcome {
    each(
        providers,
        victims,
        |i| (i.pool.cloud, i.id.to_string()),
        |p, i| p.terminate(&i.id),
    )
    .await
}

/// [`terminate_each`], recording each end in `ledger` (who ended it and
/// why, from `why`) at `now`, then closing the launch-only jobs whose last
/// instance that was. Without a ledger, only the terminations.
pub async fn terminate_recorded(
    providers: &[Arc<dyn Provider>],
    victims: &[Instance],
    ledger: Option<&dyn gpufleet_core::ledger::Ledger>,
    why: &(dyn Fn(&Instance) -> (gpufleet_core::ledger::EndedBy, String) + Sync),
    now: OffsetDateTime,
) -> TerminateOutcome {
    let out = terminate_each(providers, victims).await;
    let Some(ledger) = ledger else {
        return out;
    };
    let mut jobs = Vec::new();
    for i in victims {
        if !out.terminated.iter().any(|t| t == i.id.as_str()) {
            continue;
        }
        let (by, detail) = why(i);
        crate::spend::record_end(ledger, i.pool.cloud, &i.id, now, by, detail).await;
        if let Some(j) = i.tags.get(tags::JOB) {
            jobs.push(j.clone());
        }
    }
    if let Err(e) = crate::spend::close_launch_only_jobs(ledger, &jobs, now).await {
        tracing::warn!(error = %e, "could not close the jobs whose instances ended");
    }
    out
}

/// Runs `op` on each item with the provider of its cloud (`key` gives the
/// cloud and the id reported), recording every outcome: a cloud no provider
/// serves is that item's failure, and no failure stops the rest.
async fn each<'a, T, F>(
    providers: &'a [Arc<dyn Provider>],
    items: &'a [T],
    key: impl Fn(&T) -> (Cloud, String),
    op: F,
) -> TerminateOutcome
where
    F: Fn(&'a Arc<dyn Provider>, &'a T) -> BoxFuture<'a, Result<()>>,
{
    let mut out = TerminateOutcome::default();
    for item in items {
        let (cloud, id) = key(item);
        let result = match provider_for(providers, cloud) {
            Ok(p) => op(p, item).await,
            Err(e) => Err(e),
        };
        out.record(id, result);
    }
    out
}

/// Managed placement groups matching `filter` that no live instance is in,
/// counting the instances in `ending` (being terminated now) as gone, and
/// each cloud whose groups or instances could not be listed, with why (its
/// groups are not among them; the other clouds still answer). A group
/// whose job `busy` says is launching right now is left alone: its
/// instances may be on their way.
pub async fn empty_groups(
    providers: &[Arc<dyn Provider>],
    filter: &TagFilter,
    ending: &[InstanceId],
    busy: &(dyn Fn(&str) -> bool + Sync),
) -> (Vec<PlacementGroup>, Vec<(Cloud, Error)>) {
    let mut groups = TagFilter::managed();
    for (k, v) in &filter.0 {
        groups = groups.with(k.clone(), v.clone());
    }
    let mut out = Vec::new();
    let mut unlisted = Vec::new();
    for p in providers {
        let found = match p.list_placement_groups(&groups).await {
            Ok(found) => found,
            Err(e) => {
                unlisted.push((p.cloud(), e));
                continue;
            }
        };
        if found.is_empty() {
            continue;
        }
        let live = match p.list_instances(&TagFilter::default()).await {
            Ok(live) => live,
            Err(e) => {
                unlisted.push((p.cloud(), e));
                continue;
            }
        };
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
    (out, unlisted)
}

/// Deletes each group with its cloud's provider; already-gone counts as
/// deleted, and one failure does not stop the rest (a group whose last
/// instances are still shutting down is refused by the cloud: `reap`
/// deletes it on a later run). A group of a cloud no provider serves is a
/// failure, as an instance's is.
pub async fn delete_groups(
    providers: &[Arc<dyn Provider>],
    groups: &[PlacementGroup],
) -> TerminateOutcome {
    each(
        providers,
        groups,
        |g| (g.cloud, g.id.to_string()),
        |p, g| p.delete_placement_group(&g.id),
    )
    .await
}

/// Deletes the managed placement groups matching `filter` that no live
/// instance is in once `victims` are gone (with `theirs`, only groups one of
/// the victims was in); `busy` names jobs launching now, whose groups stay.
/// Never fails: the instances are already terminated by then, and what
/// became of them must still be reported. A cloud whose groups cannot be
/// listed is in `unchecked`, for a later `reap --yes`.
pub async fn drop_empty_groups(
    providers: &[Arc<dyn Provider>],
    filter: &TagFilter,
    victims: &[Instance],
    theirs: bool,
    busy: &(dyn Fn(&str) -> bool + Sync),
) -> GroupCleanup {
    let ending: Vec<InstanceId> = victims.iter().map(|i| i.id.clone()).collect();
    // Only the victims' own groups, and none of them was in one: none to list.
    let none_to_drop = theirs && victims.iter().all(|i| i.placement_group.is_none());
    let (mut groups, unchecked) = if none_to_drop {
        (Vec::new(), Vec::new())
    } else {
        empty_groups(providers, filter, &ending, busy).await
    };
    if theirs {
        groups.retain(|g| {
            victims
                .iter()
                .any(|i| i.placement_group.as_ref() == Some(&g.id))
        });
    }
    GroupCleanup {
        outcome: delete_groups(providers, &groups).await,
        unchecked,
    }
}

/// What became of the placement groups after a terminate.
#[derive(Debug)]
pub struct GroupCleanup {
    /// Deleted, or left with why.
    pub outcome: TerminateOutcome,
    /// Clouds whose placement groups could not be listed, with why.
    pub unchecked: Vec<(Cloud, Error)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_core::usage::{uniform, UsageWindow};
    use gpufleet_core::{Capacity, Cloud, InstanceState, Pool, Region, Zone};

    fn instance(launched: OffsetDateTime) -> Instance {
        Instance {
            id: InstanceId::new("i-1"),
            pool: Pool {
                cloud: Cloud::Aws,
                region: Region::new("us-east-1"),
                zone: Some(Zone::new("use1-az4")),
                instance_type: "g5.xlarge".into(),
                capacity: Capacity::OnDemand,
            },
            state: InstanceState::Running,
            launched_at: launched,
            tags: Default::default(),
            placement_group: None,
            expires_at: None,
            end_reason: None,
            ended_at: None,
            addresses: Default::default(),
        }
    }

    /// A service's replica sends no heartbeat: while its controller holds
    /// the service's lease it is never reaped (not for silence, not for
    /// expiry); once the lease has lapsed it is forgotten as any silent
    /// instance is.
    #[test]
    fn a_served_replica_is_kept_and_an_orphaned_one_is_reaped() {
        let now = OffsetDateTime::now_utc();
        let mut replica = instance(now - time::Duration::hours(2));
        replica.tags.insert(tags::SERVICE.into(), "echo".into());
        replica.expires_at = Some(now - time::Duration::minutes(1));
        let idle = Some(Duration::from_secs(1800));
        let grace = Duration::from_secs(600);
        let served: HashSet<String> = [gpufleet_core::ledger::service_lease("echo")].into();
        let kept = select(vec![replica.clone()], now, idle, None, grace, &served);
        assert!(kept.victims.is_empty() && kept.unknown.is_empty());
        // Another service's lease does not hold it.
        let other: HashSet<String> = [gpufleet_core::ledger::service_lease("chat")].into();
        let picked = select(vec![replica.clone()], now, idle, None, grace, &other);
        assert_eq!(picked.victims.len(), 1, "{:?}", picked.victims);
        replica.expires_at = None;
        let picked = select(vec![replica], now, idle, None, grace, &HashSet::new());
        assert_eq!(picked.victims.len(), 1);
        assert!(
            picked.victims[0].1.contains("no heartbeat since launch"),
            "{}",
            picked.victims[0].1
        );
    }

    /// An instance or group of a cloud no provider serves is a failure that
    /// names the cloud; one already gone counts as done.
    #[tokio::test]
    async fn a_cloud_no_provider_serves_is_a_failure_and_gone_is_done() {
        let gcp: Arc<dyn Provider> =
            Arc::new(gpufleet_core::fake::FakeCloud::from_snapshot(Cloud::Gcp));
        let providers = [gcp];
        let aws = instance(OffsetDateTime::UNIX_EPOCH);
        let mut gone = aws.clone();
        gone.pool.cloud = Cloud::Gcp;
        gone.id = InstanceId::new("gcp-gone");
        let out = terminate_each(&providers, &[aws, gone]).await;
        assert_eq!(out.terminated, vec!["gcp-gone".to_string()]);
        assert_eq!(out.failed.len(), 1);
        assert_eq!(out.failed[0].0, "i-1");
        let why = out.failed[0].1.to_string();
        assert!(why.contains("enabled: gcp"), "{why}");
        assert!(
            out.failed[0].1.to_string().contains("aws is not enabled"),
            "{:?}",
            out.failed
        );
        let group = PlacementGroup {
            id: gpufleet_core::PlacementGroupId::new("pg-aws"),
            name: "pg-aws".into(),
            cloud: Cloud::Aws,
            strategy: gpufleet_core::PlacementStrategy::Cluster,
            region: Region::new("us-east-1"),
            zone: None,
            tags: Default::default(),
        };
        let out = delete_groups(&providers, &[group]).await;
        assert!(out.terminated.is_empty());
        assert_eq!(out.failed.len(), 1);
        assert!(
            out.failed[0].1.to_string().contains("aws is not enabled"),
            "{:?}",
            out.failed
        );
    }

    #[test]
    fn quiet_gpus_are_idle_busy_ones_are_not_and_silence_is_unknown() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_767_950_040).unwrap();
        let h = Duration::from_secs(3600);
        let grace = Duration::from_secs(15 * 60);
        let at = |s: i64| t0 + time::Duration::seconds(s);
        let mut quiet = instance(t0);
        let mut w = UsageWindow::default();
        let mut busy = instance(t0);
        let mut wb = UsageWindow::default();
        for s in (0..3 * 3600).step_by(10) {
            w.add(at(s), &uniform(1, 2, 100, 24_000)).unwrap();
            wb.add(at(s), &uniform(1, 60, 100, 24_000)).unwrap();
        }
        for (i, w) in [(&mut quiet, &w), (&mut busy, &wb)] {
            let s = w.summary().unwrap();
            i.tags.insert(tags::GPU.into(), s.tag_value());
            i.tags.insert(tags::GPU_QUIET.into(), s.quiet_tag_value());
        }
        let now = at(3 * 3600);
        match idle_by_use(&quiet, now, 2 * h, 5, grace) {
            UseVerdict::Idle(why) => assert!(why.starts_with("GPUs under 5% for 2h5"), "{why}"),
            v => panic!("{v:?}"),
        }
        match idle_by_use(&quiet, now, 2 * h, 7, grace) {
            UseVerdict::Idle(why) => assert!(
                why.contains("highest published level at or under 7%"),
                "{why}"
            ),
            v => panic!("{v:?}"),
        }
        // Under 5 % for ~3 h, but not for 4 h; not under 2 % at all.
        assert_eq!(idle_by_use(&quiet, now, 4 * h, 5, grace), UseVerdict::Busy);
        assert_eq!(idle_by_use(&quiet, now, 2 * h, 2, grace), UseVerdict::Busy);
        assert_eq!(idle_by_use(&busy, now, 2 * h, 5, grace), UseVerdict::Busy);
        // The same summary an hour later is stale: unknown, not idle.
        match idle_by_use(&quiet, now + time::Duration::hours(1), 2 * h, 5, grace) {
            UseVerdict::Unknown(why) => assert!(why.starts_with("last GPU summary 1h"), "{why}"),
            v => panic!("{v:?}"),
        }
        // Stamped in the future (a node's clock ahead, a forged tag): not
        // evidence of idleness.
        match idle_by_use(&quiet, now - time::Duration::hours(1), 2 * h, 5, grace) {
            UseVerdict::Unknown(why) => assert!(why.contains("ahead of now"), "{why}"),
            v => panic!("{v:?}"),
        }
        // No summary: too early at first, unknown after the grace period.
        let bare = instance(t0);
        assert_eq!(
            idle_by_use(&bare, at(600), 2 * h, 5, grace),
            UseVerdict::TooEarly
        );
        assert!(matches!(
            idle_by_use(&bare, now, 2 * h, 5, grace),
            UseVerdict::Unknown(_)
        ));
    }
}
