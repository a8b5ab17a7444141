//! The ledger of spend at work: recording each instance's start and end
//! whoever ends it, settling the ends the cloud caused from what a command
//! read, closing launch-only jobs whose instances are gone, reconciling the
//! ledger with the clouds, and the cost report (`gpufleet costs`,
//! `ls --cost-by`) priced from the ledger alone.
//!
//! The ledger counts instance-hours at the price recorded at launch (see
//! [`gpufleet_core::ledger::InstanceSpend`]): not disks, egress, support
//! plans, taxes or credits.
//!
//! Here: recording, settling and launch-only jobs; `costs.rs`: the cost
//! report and the catalog's on-demand prices it is set against;
//! `reconcile.rs`: the ledger made to agree with the clouds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::ledger::{EndedBy, InstanceEnd, InstanceSpend, JobRecord, JobState, Ledger};
use gpufleet_core::{
    provider_for, tags, Capacity, Cloud, Error, ErrorKind, Instance, InstanceId, Money, Offer,
    Price, Provider, Result, TagFilter,
};

mod costs;
mod reconcile;
#[cfg(test)]
mod tests;

pub use self::costs::*;
pub use self::reconcile::*;

/// Records that gpufleet started `instances` for `job_id` from `offer` (its
/// price per instance, its GPUs).
pub async fn record_started(
    ledger: &dyn Ledger,
    instances: &[Instance],
    job_id: &str,
    offer: &Offer,
) -> Result<()> {
    for i in instances {
        let mut s = InstanceSpend::started(i, job_id, offer.price);
        if let Some(g) = &offer.instance_type.gpu {
            s = s.with_gpu(g.model.to_string(), g.count);
        }
        ledger.record_instance_start(&s).await?;
    }
    Ok(())
}

/// Records the end of `id` (in `cloud`) by `by` at `at`. A failure to
/// record is logged, never returned: the instance has ended whatever the
/// ledger says, and `reconcile` (or the next listing) records it later.
pub async fn record_end(
    ledger: &dyn Ledger,
    cloud: Cloud,
    id: &InstanceId,
    at: OffsetDateTime,
    by: EndedBy,
    detail: impl Into<String>,
) -> bool {
    let end = InstanceEnd::new(at, by, detail);
    match ledger.record_instance_end(cloud, id, &end).await {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(instance = %id, error = %e, "could not record an instance's end; `gpufleet reconcile` records it");
            false
        }
    }
}

/// The end of an instance a command read as ended: when the cloud says it
/// ended (else `now`, when it was seen so), and the cloud's reason.
pub fn seen_ended(i: &Instance, now: OffsetDateTime) -> InstanceEnd {
    let detail = match &i.end_reason {
        Some(r) => format!("the cloud ended it: {}", r.code),
        None => "the cloud reports it ended; it gave no reason".to_string(),
    };
    let detail = if i.ended_at.is_some() {
        detail
    } else {
        format!("{detail} (end time not given by the cloud: when it was seen ended)")
    };
    InstanceEnd::new(i.ended_at.unwrap_or(now), EndedBy::Cloud, detail)
}

/// Why an instance its cloud no longer lists ended, as the ledger records
/// it: the cloud's code where it still gives one (GCE's zone operations
/// outlive a VM deleted on preemption), and that the end time is when it
/// was seen gone, the cloud giving none.
pub fn gone_detail(reason: Option<&gpufleet_core::EndReason>) -> String {
    format!(
        "the cloud no longer lists it{} (end time not given by the cloud: when it was seen gone)",
        reason.map(|r| format!(": {}", r.code)).unwrap_or_default()
    )
}

/// Whether a ledger record falls under a listing's tag filter (the tags the
/// ledger keeps: job, owner, team; a filter on any other tag matches no
/// record, so nothing outside the listing is settled).
fn in_scope(s: &InstanceSpend, filter: &TagFilter) -> bool {
    filter.0.iter().all(|(k, v)| match k.as_str() {
        tags::MANAGED => v == "true",
        tags::JOB => &s.job_id == v,
        tags::OWNER => s.owner.as_ref() == Some(v),
        tags::TEAM => s.team.as_ref() == Some(v),
        _ => false,
    })
}

/// What [`settle`] recorded.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Settled {
    /// Instances the ledger held as alive that the cloud had ended, with
    /// their end.
    pub ended: Vec<EndedInstance>,
    /// Launch-only jobs closed because their last instance ended.
    pub jobs_closed: Vec<String>,
}

/// One instance whose end was recorded.
#[derive(Debug, Clone, Serialize)]
pub struct EndedInstance {
    /// Cloud.
    pub cloud: Cloud,
    /// Its id.
    pub id: String,
    /// The job it served.
    pub job: String,
    /// When it ended (RFC 3339).
    pub ended_at: String,
    /// Why.
    pub reason: String,
}

/// Records the ends the clouds caused, from what a command read: every
/// instance the ledger holds as alive, in a cloud of `read` and under
/// `filter`, that `listed` shows ended, or that `listed` does not show and
/// its cloud (asked once, by id) says is ended or gone. An instance its
/// cloud cannot be asked about now is left as it is. Then closes the
/// launch-only jobs whose last instance ended.
pub async fn settle(
    ledger: &dyn Ledger,
    providers: &[Arc<dyn Provider>],
    read: &[Cloud],
    listed: &[Instance],
    filter: &TagFilter,
    now: OffsetDateTime,
) -> Result<Settled> {
    settle_or_report(ledger, providers, read, listed, filter, now, true).await
}

/// [`settle`], or with `apply` false only what it would record.
async fn settle_or_report(
    ledger: &dyn Ledger,
    providers: &[Arc<dyn Provider>],
    read: &[Cloud],
    listed: &[Instance],
    filter: &TagFilter,
    now: OffsetDateTime,
    apply: bool,
) -> Result<Settled> {
    let alive: Vec<InstanceSpend> = ledger
        .spend(Some(now))
        .await?
        .into_iter()
        .filter(|s| s.is_alive() && read.contains(&s.pool.cloud) && in_scope(s, filter))
        .collect();
    let by_id: HashMap<(Cloud, &str), &Instance> = listed
        .iter()
        .map(|i| ((i.pool.cloud, i.id.as_str()), i))
        .collect();
    let mut out = Settled::default();
    for s in &alive {
        let end = match by_id.get(&(s.pool.cloud, s.id.as_str())) {
            Some(i) if i.state.is_live() => continue,
            Some(i) => seen_ended(i, now),
            None => {
                let Ok(p) = provider_for(providers, s.pool.cloud) else {
                    continue;
                };
                match p.instance(&s.id).await {
                    Ok(i) if i.state.is_live() => continue,
                    Ok(i) => seen_ended(&i, now),
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        let reason = p.end_reason(&s.id).await.ok().flatten();
                        InstanceEnd::new(now, EndedBy::Cloud, gone_detail(reason.as_ref()))
                    }
                    Err(e) => {
                        tracing::debug!(instance = %s.id, error = %e, "cannot tell whether it ended");
                        continue;
                    }
                }
            }
        };
        if !apply
            || ledger
                .record_instance_end(s.pool.cloud, &s.id, &end)
                .await?
        {
            out.ended.push(EndedInstance {
                cloud: s.pool.cloud,
                id: s.id.to_string(),
                job: s.job_id.clone(),
                ended_at: gpufleet_core::report::rfc3339(end.at.max(s.started_at)),
                reason: end.detail.clone(),
            });
        }
    }
    if apply {
        let jobs: Vec<String> = out.ended.iter().map(|e| e.job.clone()).collect();
        out.jobs_closed = close_launch_only_jobs(ledger, &jobs, now).await?;
    }
    Ok(out)
}

/// Closes each of `jobs` that is launch-only (no saved definition: made by
/// `gpufleet launch`, which no controller drives), still recorded as
/// running or launching, and has no instance left alive in the ledger: its
/// last instance ended, so the job has. `cancelled` when gpufleet ended them
/// (terminate, reap, a roll-back), `failed` when the cloud did. Returns the
/// jobs closed.
pub async fn close_launch_only_jobs(
    ledger: &dyn Ledger,
    jobs: &[String],
    now: OffsetDateTime,
) -> Result<Vec<String>> {
    let wanted: HashSet<&str> = jobs.iter().map(String::as_str).collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let spend = ledger.spend(None).await?;
    let mut closed = Vec::new();
    for job in wanted {
        let mine: Vec<&InstanceSpend> = spend.iter().filter(|s| s.job_id == job).collect();
        if mine.is_empty() || mine.iter().any(|s| s.is_alive()) {
            continue;
        }
        if ledger.job_spec(job).await?.is_some() {
            continue; // a managed job: its controller records its end
        }
        let Some(last) = ledger.job_latest(job).await? else {
            continue;
        };
        if !matches!(last.state, JobState::Running | JobState::Launching) {
            continue;
        }
        let by_cloud = mine.iter().any(|s| s.ended_by == Some(EndedBy::Cloud));
        let (state, why) = if by_cloud {
            (
                JobState::Failed,
                "its last instance ended: the cloud ended it",
            )
        } else {
            (
                JobState::Cancelled,
                "its last instance ended: gpufleet terminated it",
            )
        };
        let mut rec = JobRecord {
            state,
            at: now,
            detail: format!(
                "{why} ({})",
                mine.iter()
                    .filter_map(|s| (!s.end_detail.is_empty()).then_some(s.end_detail.as_str()))
                    .next()
                    .unwrap_or("no detail")
            ),
            fence: None,
            ..last
        };
        rec.instances.clear();
        match ledger.record_job(&rec).await {
            Ok(()) => closed.push(job.to_string()),
            // A controller holds it after all: its controller records it.
            Err(e) if e.kind() == ErrorKind::Conflict => {}
            Err(e) => return Err(e),
        }
    }
    closed.sort();
    Ok(closed)
}

/// Ends a launch-only job whose launch did not finish (it failed, or was
/// interrupted and rolled back) and left it placing or launching with
/// nothing alive: `state` (failed, or cancelled for a roll-back asked for)
/// saying `why`. A managed job (one with a saved definition) is its
/// controller's, and a job with instances alive is not ended: nothing is
/// written then. Returns whether it was ended.
pub async fn end_unfinished_launch(
    ledger: &dyn Ledger,
    job_id: &str,
    state: JobState,
    why: &str,
    now: OffsetDateTime,
) -> Result<bool> {
    if ledger.job_spec(job_id).await?.is_some() {
        return Ok(false);
    }
    let Some(last) = ledger.job_latest(job_id).await? else {
        return Ok(false);
    };
    if !matches!(last.state, JobState::Placing | JobState::Launching) {
        return Ok(false);
    }
    let alive = ledger
        .spend(Some(now))
        .await?
        .iter()
        .any(|s| s.job_id == job_id && s.is_alive());
    if alive {
        return Ok(false);
    }
    let rec = JobRecord {
        state,
        at: now,
        detail: why.to_string(),
        fence: None,
        instances: Vec::new(),
        ..last
    };
    ledger.record_job(&rec).await?;
    Ok(true)
}
