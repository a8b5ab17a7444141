//! The ledger of spend at work: recording each instance's start and end
//! whoever ends it, settling the ends the cloud caused from what a command
//! read, closing launch-only jobs whose instances are gone, reconciling the
//! ledger with the clouds, and the cost report (`gpufleet costs`,
//! `ls --cost-by`) priced from the ledger alone.
//!
//! The ledger counts instance-hours at the price recorded at launch (see
//! [`gpufleet_core::ledger::InstanceSpend`]): not disks, egress, support
//! plans, taxes or credits.

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

/// How `gpufleet costs` groups spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostBy {
    /// The team tag.
    Team,
    /// The owner tag.
    Owner,
    /// The job.
    Job,
    /// The cloud.
    Cloud,
    /// The GPU model.
    Gpu,
    /// Spot or on-demand.
    Capacity,
    /// The UTC day the hours fell on (an instance's hours are split at
    /// midnight).
    Day,
}

impl CostBy {
    /// Every grouping, in the order `costs --help` lists them.
    pub const ALL: [CostBy; 7] = [
        CostBy::Team,
        CostBy::Owner,
        CostBy::Job,
        CostBy::Cloud,
        CostBy::Gpu,
        CostBy::Capacity,
        CostBy::Day,
    ];

    /// The name of the group's field in a row (`team`, `day`, ...).
    pub fn field(self) -> &'static str {
        match self {
            CostBy::Team => "team",
            CostBy::Owner => "owner",
            CostBy::Job => "job",
            CostBy::Cloud => "cloud",
            CostBy::Gpu => "gpu",
            CostBy::Capacity => "capacity",
            CostBy::Day => "day",
        }
    }
}

impl std::str::FromStr for CostBy {
    type Err = gpufleet_core::Error;

    /// A grouping by its field's name (`team`, `day`, ...); another is
    /// refused, naming the valid ones.
    fn from_str(s: &str) -> Result<CostBy> {
        CostBy::ALL
            .into_iter()
            .find(|b| b.field() == s.trim())
            .ok_or_else(|| {
                let valid: Vec<&str> = CostBy::ALL.iter().map(|b| b.field()).collect();
                gpufleet_core::Error::invalid_input(format!(
                    "unknown grouping '{s}'; valid: {}",
                    valid.join(", ")
                ))
            })
    }
}

/// One group of spend.
#[derive(Debug, Clone)]
pub struct CostRow {
    /// What it groups by.
    pub by: CostBy,
    /// The group (`ml`, `2026-11-29`, `(none)` for an untagged instance).
    pub key: String,
    /// Instances with hours in it.
    pub instances: usize,
    /// Of those, running now.
    pub running: usize,
    /// Instance-hours.
    pub hours: f64,
    /// What they cost at their recorded prices.
    pub cost: Money,
    /// What the hours whose on-demand price is known would have cost
    /// on-demand.
    pub on_demand: Money,
    /// What those same hours cost as run (what `on_demand` is compared
    /// with).
    pub priced_cost: Money,
    /// Hours with no known on-demand price (left out of the saving).
    pub unpriced_hours: f64,
    /// What the running ones cost per hour now.
    pub per_hour_now: Price,
}

impl CostRow {
    fn new(by: CostBy, key: String) -> Self {
        CostRow {
            by,
            key,
            instances: 0,
            running: 0,
            hours: 0.0,
            cost: Money::ZERO,
            on_demand: Money::ZERO,
            priced_cost: Money::ZERO,
            unpriced_hours: 0.0,
            per_hour_now: Price::ZERO,
        }
    }

    /// What the same hours cost less than on-demand (negative when they cost
    /// more).
    pub fn saving(&self) -> Result<Money> {
        self.on_demand
            .checked_sub(self.priced_cost)
            .ok_or_else(|| overflow("a saving"))
    }

    /// Counts `s` among its instances (and among those running, at its
    /// price, while it runs).
    fn count(&mut self, s: &InstanceSpend) -> Result<()> {
        self.instances += 1;
        if s.is_alive() {
            self.running += 1;
            self.per_hour_now = self
                .per_hour_now
                .checked_add(s.price)
                .ok_or_else(|| overflow("a price per hour"))?;
        }
        Ok(())
    }

    fn add(&mut self, part: &Part) -> Result<()> {
        self.hours += part.secs as f64 / 3600.0;
        self.cost = add(self.cost, part.cost)?;
        match part.on_demand {
            Some(od) => {
                self.on_demand = add(self.on_demand, od)?;
                self.priced_cost = add(self.priced_cost, part.cost)?;
            }
            None => self.unpriced_hours += part.secs as f64 / 3600.0,
        }
        Ok(())
    }
}

impl Serialize for CostRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let saving = self.saving().map_err(serde::ser::Error::custom)?;
        let mut m = s.serialize_map(Some(10))?;
        m.serialize_entry(self.by.field(), &self.key)?;
        m.serialize_entry("instances", &self.instances)?;
        m.serialize_entry("running", &self.running)?;
        m.serialize_entry("hours", &round(self.hours, 3))?;
        m.serialize_entry("cost_usd", &self.cost.as_usd_f64())?;
        m.serialize_entry("on_demand_usd", &self.on_demand.as_usd_f64())?;
        m.serialize_entry("saving_usd", &saving.as_usd_f64())?;
        m.serialize_entry("unpriced_hours", &round(self.unpriced_hours, 3))?;
        m.serialize_entry("per_hour_now_usd", &self.per_hour_now.usd_per_hour_f64())?;
        m.end()
    }
}

fn round(x: f64, places: i32) -> f64 {
    gpufleet_core::report::round(x, places)
}

fn overflow(what: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} overflows the money type (past $9.2 trillion)"),
    )
}

fn add(a: Money, b: Money) -> Result<Money> {
    a.checked_add(b).ok_or_else(|| overflow("a sum of spend"))
}

/// Part of one instance's time in one group.
struct Part {
    secs: u64,
    cost: Money,
    on_demand: Option<Money>,
}

/// Spend over a window, grouped: what `gpufleet costs` prints.
#[derive(Debug, Clone, Serialize)]
pub struct CostReport {
    /// What it groups by.
    #[serde(serialize_with = "by_field")]
    pub by: CostBy,
    /// The window's start (RFC 3339).
    pub since: String,
    /// Its end: now (RFC 3339).
    pub until: String,
    /// One row per group, dearest first.
    pub rows: Vec<CostRow>,
    /// All of it.
    pub total: CostRow,
    /// Managed jobs that succeeded in the window.
    pub completed_jobs: usize,
    /// The cost per completed job ([`crate::jobs::per_completed_job`], as
    /// `jobs ls` says it): every job's spend in the window (those that
    /// succeeded, failed, were cancelled or still run, and launch-only
    /// ones; services' spend is not a job's) over the number that
    /// succeeded in it.
    #[serde(serialize_with = "usd")]
    pub cost_per_completed_job: Option<Money>,
    /// Another figure, not the cost per completed job: the mean spend of
    /// the jobs that succeeded in the window, every placement of theirs
    /// included (hours before the window too), what a success cost without
    /// the jobs that did not succeed.
    #[serde(serialize_with = "usd")]
    pub mean_cost_of_a_succeeded_job: Option<Money>,
}

fn by_field<S: serde::Serializer>(by: &CostBy, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(by.field())
}

fn usd<S: serde::Serializer>(m: &Option<Money>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_some(&m.as_usd_f64()),
        None => s.serialize_none(),
    }
}

/// The UTC midnight after `t`.
fn next_midnight(t: OffsetDateTime) -> OffsetDateTime {
    let day = t.to_offset(time::UtcOffset::UTC).date();
    day.next_day()
        .map(|d| d.midnight().assume_utc())
        .unwrap_or(t)
}

/// The prefix of the job id a service's spend is recorded under
/// (`service:NAME`): a service's, not a job's.
const SERVICE_SPEND: &str = "service:";

/// Groups the spend of `spend` in `[since, now)` by `by`, each instance's
/// hours at its recorded price and, for the saving, at `on_demand`'s price
/// for its pool (its own price when it ran on-demand); `jobs` are every job
/// record, for the cost per completed job.
pub fn cost_report(
    spend: &[InstanceSpend],
    jobs: &[JobRecord],
    by: CostBy,
    since: OffsetDateTime,
    now: OffsetDateTime,
    on_demand: &dyn Fn(&InstanceSpend) -> Option<Price>,
) -> Result<CostReport> {
    let mut groups: BTreeMap<String, CostRow> = BTreeMap::new();
    let mut total = CostRow::new(by, "total".into());
    let mut job_spend: HashMap<&str, Money> = HashMap::new();
    for s in spend {
        let od_price = match s.capacity() {
            Capacity::OnDemand => Some(s.price),
            Capacity::Spot => on_demand(s),
        };
        // The parts of its time: one, or one per UTC day.
        let mut spans = Vec::new();
        let (mut from, to) = (s.started_at.max(since), s.ended_at.unwrap_or(now).min(now));
        while from < to {
            let cut = if by == CostBy::Day {
                next_midnight(from).min(to)
            } else {
                to
            };
            spans.push((from, cut));
            from = cut;
        }
        let mut counted: HashSet<String> = HashSet::new();
        for (a, b) in spans {
            let secs = (b - a).whole_seconds().max(0) as u64;
            let part = Part {
                secs,
                cost: s.price.cost_for_seconds(secs)?,
                on_demand: od_price.map(|p| p.cost_for_seconds(secs)).transpose()?,
            };
            let key = match by {
                CostBy::Team => s.team.clone().unwrap_or_else(|| "(none)".into()),
                CostBy::Owner => s.owner.clone().unwrap_or_else(|| "(none)".into()),
                CostBy::Job => s.job_id.clone(),
                CostBy::Cloud => s.pool.cloud.to_string(),
                CostBy::Gpu => s.gpu.clone().unwrap_or_else(|| "(unknown)".into()),
                CostBy::Capacity => s.capacity().as_str().to_string(),
                CostBy::Day => a.date().to_string(),
            };
            let row = groups
                .entry(key.clone())
                .or_insert_with(|| CostRow::new(by, key.clone()));
            row.add(&part)?;
            total.add(&part)?;
            if counted.insert(key) {
                row.count(s)?;
            }
            if !s.job_id.starts_with(SERVICE_SPEND) {
                let j = job_spend.entry(s.job_id.as_str()).or_insert(Money::ZERO);
                *j = add(*j, part.cost)?;
            }
        }
        if s.seconds_within(since, now) > 0 || s.is_alive() {
            total.count(s)?;
        }
    }
    // Jobs: the newest record of each, and which succeeded in the window.
    let mut latest: HashMap<&str, &JobRecord> = HashMap::new();
    for r in jobs {
        latest.insert(r.job_id.as_str(), r);
    }
    let succeeded: Vec<&str> = latest
        .values()
        .filter(|r| r.state == JobState::Succeeded && r.at >= since)
        .map(|r| r.job_id.as_str())
        .collect();
    let completed_jobs = succeeded.len();
    // Every job's spend in the window, and the jobs that succeeded in it
    // (one with no spend in the window still counts as done).
    let mut per_job: Vec<(Money, bool)> = job_spend
        .iter()
        .map(|(job, m)| (*m, succeeded.contains(job)))
        .collect();
    per_job.extend(
        succeeded
            .iter()
            .filter(|j| !job_spend.contains_key(*j))
            .map(|_| (Money::ZERO, true)),
    );
    let cost_per = crate::jobs::per_completed_job(per_job)?;
    let mean_succeeded = if completed_jobs == 0 {
        None
    } else {
        let mut done = Money::ZERO;
        for s in spend
            .iter()
            .filter(|s| succeeded.contains(&s.job_id.as_str()))
        {
            done = add(done, s.cost(now)?)?;
        }
        Some(Money::from_micros(done.micros() / completed_jobs as i64))
    };
    let mut rows: Vec<CostRow> = groups.into_values().collect();
    if by == CostBy::Day {
        rows.sort_by(|a, b| a.key.cmp(&b.key));
    } else {
        rows.sort_by(|a, b| b.cost.cmp(&a.cost).then(a.key.cmp(&b.key)));
    }
    Ok(CostReport {
        by,
        since: gpufleet_core::report::rfc3339(since),
        until: gpufleet_core::report::rfc3339(now),
        rows,
        total,
        completed_jobs,
        cost_per_completed_job: cost_per,
        mean_cost_of_a_succeeded_job: mean_succeeded,
    })
}

/// A managed instance of this ledger's owner that the ledger does not know
/// (launched by a process whose record was lost, or before the ledger of
/// spend existed).
#[derive(Debug, Clone, Serialize)]
pub struct UnknownInstance {
    /// Cloud.
    pub cloud: Cloud,
    /// Its id.
    pub id: String,
    /// Its pool.
    pub pool: String,
    /// Its job tag.
    pub job: Option<String>,
    /// Hours since its launch.
    pub age_hours: f64,
    /// Its pool's price now, USD per hour (what it is recorded at when
    /// adopted), if known.
    pub price_per_hour_usd: Option<f64>,
}

/// A launch-only job left placing or launching with nothing alive.
#[derive(Debug, Clone, Serialize)]
pub struct StuckJob {
    /// The job.
    pub job: String,
    /// Its state.
    pub state: JobState,
    /// Since when (RFC 3339).
    pub since: String,
}

/// What `gpufleet reconcile` found, and did with `--yes`.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// Whether it was carried out (`--yes`) or only reported.
    pub applied: bool,
    /// Instances the ledger held as alive that the cloud has ended.
    pub ended: Vec<EndedInstance>,
    /// Launch-only jobs closed because their last instance ended.
    pub jobs_closed: Vec<String>,
    /// Managed instances of this owner unknown to the ledger (adopted when
    /// applied).
    pub unknown: Vec<UnknownInstance>,
    /// Launch-only jobs left placing or launching with no instance and no
    /// live lease (failed when applied).
    pub stuck: Vec<StuckJob>,
    /// Instances left running with nothing to drive them: those of a job
    /// that was cancelled (a launch that answered after the cancel, its
    /// controller gone), because a cancel is final; and this owner's of
    /// managed jobs past their expiry whose job no controller holds (a
    /// controller extends the expiry of what it drives; a `launch`'s time to
    /// live is `reap`'s). Terminated when applied.
    pub leftovers: Vec<Leftover>,
}

/// An instance a reconciliation terminates (see
/// [`Reconciliation::leftovers`]).
#[derive(Debug, Clone, Serialize)]
pub struct Leftover {
    /// `cloud:id`.
    pub instance: String,
    /// Its job (empty when untagged).
    pub job: String,
    /// Why it is terminated.
    pub why: String,
}

impl Reconciliation {
    /// Whether the ledger and the clouds already agreed.
    pub fn is_clean(&self) -> bool {
        self.ended.is_empty()
            && self.unknown.is_empty()
            && self.stuck.is_empty()
            && self.leftovers.is_empty()
    }
}

/// What the clouds showed a reconciliation: the providers of the clouds
/// read, those clouds, every managed instance they listed, and when.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The providers (to ask after an instance the listing did not show).
    pub providers: &'a [Arc<dyn Provider>],
    /// The clouds read: ledger records of other clouds are left as they are.
    pub read: Vec<Cloud>,
    /// Every managed instance listed there.
    pub listed: &'a [Instance],
    /// Now.
    pub now: OffsetDateTime,
}

/// What a reconciliation carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apply {
    /// Record the ends the clouds caused (and close launch-only jobs).
    pub ends: bool,
    /// Record the unknown managed instances of the owner as started.
    pub adopt: bool,
    /// Fail the launch-only jobs left placing or launching.
    pub fail_stuck: bool,
}

impl Apply {
    /// Only report.
    pub const NOTHING: Apply = Apply {
        ends: false,
        adopt: false,
        fail_stuck: false,
    };
    /// Everything (`reconcile --yes`).
    pub const ALL: Apply = Apply {
        ends: true,
        adopt: true,
        fail_stuck: true,
    };
    /// What `jobs serve` does on its own: the ends and the stuck launches,
    /// no adoption (unknown instances are reported for a person to adopt).
    pub const SERVE: Apply = Apply {
        ends: true,
        adopt: false,
        fail_stuck: true,
    };
}

/// A launch-only job older than this in placing or launching is left over
/// (a `launch` that died), not in flight.
pub const STUCK_AFTER: time::Duration = time::Duration::minutes(30);

/// Reconciles the ledger with what the clouds `fleet` read show (`listed`:
/// every managed instance there): ends the instances they ended, finds the
/// managed instances of `owner` the ledger does not know (priced by
/// `price_of`) and the launch-only jobs left placing or launching; with
/// `apply`, records the ends, adopts the unknown instances and fails the
/// stuck jobs. Instances without gpufleet's managed tag are never touched;
/// with `owner`, neither are another owner's instances, nor a stuck job
/// whose instances the ledger records as another owner's (`None`: every
/// owner's, `reconcile --any-owner` and a shared `jobs serve`).
pub async fn reconcile(
    ledger: &dyn Ledger,
    seen: &Observed<'_>,
    owner: Option<&str>,
    price_of: &HashMap<gpufleet_core::Pool, Option<Price>>,
    apply: Apply,
) -> Result<Reconciliation> {
    let ours_tag =
        |i: &Instance| owner.is_none_or(|o| i.tags.get(tags::OWNER).map(String::as_str) == Some(o));
    let now = seen.now;
    let settled = settle_or_report(
        ledger,
        seen.providers,
        &seen.read,
        seen.listed,
        &TagFilter::managed(),
        now,
        apply.ends,
    )
    .await?;
    // One read of the ledger's instances (after the ends above): which it
    // knows, and the jobs with one alive.
    let spend = ledger.spend(None).await?;
    let known: HashSet<(Cloud, &str)> = spend
        .iter()
        .map(|s| (s.pool.cloud, s.id.as_str()))
        .collect();
    let mut alive: HashSet<String> = spend
        .iter()
        .filter(|s| s.is_alive())
        .map(|s| s.job_id.clone())
        .collect();
    let mut unknown = Vec::new();
    for i in seen.listed {
        let ours = i.tags.get(tags::MANAGED).map(String::as_str) == Some("true") && ours_tag(i);
        if !ours || !i.state.is_live() || known.contains(&(i.pool.cloud, i.id.as_str())) {
            continue;
        }
        let price = price_of.get(&i.pool).copied().flatten();
        if apply.adopt {
            let job = i.tags.get(tags::JOB).cloned().unwrap_or_default();
            let s = InstanceSpend::started(i, &job, price.unwrap_or(Price::ZERO));
            ledger.record_instance_start(&s).await?;
            alive.insert(job);
        }
        unknown.push(UnknownInstance {
            cloud: i.pool.cloud,
            id: i.id.to_string(),
            pool: i.pool.to_string(),
            job: i.tags.get(tags::JOB).cloned(),
            age_hours: round((now - i.launched_at).as_seconds_f64().max(0.0) / 3600.0, 2),
            price_per_hour_usd: price.map(Price::usd_per_hour_f64),
        });
    }
    // Launch-only jobs a dead `launch` left placing or launching.
    let leases = ledger.leases().await?;
    let mut latest: BTreeMap<String, JobRecord> = BTreeMap::new();
    for r in ledger.jobs().await? {
        latest.insert(r.job_id.clone(), r);
    }
    let mut stuck = Vec::new();
    for (job, r) in &latest {
        // Another owner's launch (its instances, when any was recorded, are
        // all theirs) is theirs to reconcile.
        let theirs = owner.is_some_and(|o| {
            let mut owners = spend
                .iter()
                .filter(|s| &s.job_id == job)
                .map(|s| s.owner.as_deref());
            let mut any = false;
            let none_mine = owners.all(|w| {
                any = true;
                w != Some(o)
            });
            any && none_mine
        });
        if theirs
            || !matches!(r.state, JobState::Placing | JobState::Launching)
            || now - r.at < STUCK_AFTER
            || alive.contains(job)
            || leases.iter().any(|l| &l.job_id == job && l.is_live(now))
            || ledger.job_spec(job).await?.is_some()
        {
            continue;
        }
        if apply.fail_stuck {
            let mut failed = r.clone();
            failed.state = JobState::Failed;
            failed.at = now;
            failed.instances.clear();
            failed.fence = None;
            failed.detail = format!(
                "left {} since {} with no instance and no controller (the launch did not finish); failed by reconcile",
                r.state,
                gpufleet_core::report::rfc3339(r.at)
            );
            match ledger.record_job(&failed).await {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
            }
        }
        stuck.push(StuckJob {
            job: job.clone(),
            state: r.state,
            since: gpufleet_core::report::rfc3339(r.at),
        });
    }
    // Instances of cancelled jobs still running (a cancel is final), and
    // instances of this owner past their expiry whose job no controller
    // drives here (their controller died: it extends the expiry while it
    // drives them).
    let mut leftovers = Vec::new();
    // Managed jobs (a saved job file: a controller's) by id; a launch-only
    // job's expiry is its own time to live, `reap`'s to honour.
    let mut managed: HashMap<String, bool> = HashMap::new();
    for i in seen.listed.iter().filter(|i| i.state.is_live()) {
        let job = i.tags.get(tags::JOB).cloned().unwrap_or_default();
        // Only this owner's: another owner's launch under the same job name
        // is not this ledger's job.
        let ours = ours_tag(i);
        let cancelled = ours
            && latest
                .get(&job)
                .is_some_and(|r| r.state == JobState::Cancelled);
        let driven = leases.iter().any(|l| l.job_id == job && l.is_live(now));
        let expired = ours && !driven && i.expires_at.is_some_and(|at| at <= now);
        let controllers = match managed.get(&job) {
            Some(m) => *m,
            None if expired => {
                let m = ledger.job_spec(&job).await?.is_some();
                managed.insert(job.clone(), m);
                m
            }
            None => false,
        };
        let why = match i.expires_at {
            _ if cancelled => format!("job {job} was cancelled: a cancel is final"),
            Some(at) if expired && controllers => format!(
                "expired at {} and no controller drives job {job}",
                gpufleet_core::report::rfc3339(at)
            ),
            _ => continue,
        };
        if apply.ends {
            let Ok(p) = provider_for(seen.providers, i.pool.cloud) else {
                continue;
            };
            let by = if cancelled {
                EndedBy::Controller
            } else {
                EndedBy::Ttl
            };
            match p.terminate(&i.id).await {
                Ok(()) => {
                    record_end(
                        ledger,
                        i.pool.cloud,
                        &i.id,
                        now,
                        by,
                        format!("{why}; terminated by reconcile"),
                    )
                    .await;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(instance = %i.id, error = %e, "could not terminate a leftover instance");
                    continue;
                }
            }
        }
        leftovers.push(Leftover {
            instance: format!("{}:{}", i.pool.cloud, i.id),
            job,
            why,
        });
    }
    Ok(Reconciliation {
        leftovers,
        applied: apply.ends,
        ended: settled.ended,
        jobs_closed: settled.jobs_closed,
        unknown,
        stuck,
    })
}

/// The on-demand price of each (cloud, region, instance type) in `offers`
/// (the cheapest, zones aside): what a spot instance's hours would have
/// cost on-demand, for the saving [`cost_report`] shows.
pub fn on_demand_prices(offers: &[Offer]) -> HashMap<(Cloud, String, String), Price> {
    let mut out: HashMap<(Cloud, String, String), Price> = HashMap::new();
    for o in offers
        .iter()
        .filter(|o| o.pool.capacity == Capacity::OnDemand)
    {
        let key = (
            o.pool.cloud,
            o.pool.region.to_string(),
            o.pool.instance_type.clone(),
        );
        let p = out.entry(key).or_insert(o.price);
        if o.price < *p {
            *p = o.price;
        }
    }
    out
}

/// The on-demand price of `s`'s pool in `prices` ([`on_demand_prices`]).
pub fn on_demand_of(
    prices: &HashMap<(Cloud, String, String), Price>,
    s: &InstanceSpend,
) -> Option<Price> {
    prices
        .get(&(
            s.pool.cloud,
            s.pool.region.to_string(),
            s.pool.instance_type.clone(),
        ))
        .copied()
}

/// The cost report of `cfg`'s ledger over `[since, now)` grouped `by`: read
/// only (no ledger yet is no spend), the saving priced at the current
/// catalog's on-demand prices (the cache `catalog refresh` keeps, else the
/// embedded snapshot).
pub async fn ledger_costs(
    cfg: &crate::config::Config,
    by: CostBy,
    since: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<CostReport> {
    let (spend, jobs) = match crate::ledgers::open_read_only(&cfg.ledger).await? {
        Some(l) => (l.spend(Some(since)).await?, l.jobs().await?),
        None => (Vec::new(), Vec::new()),
    };
    let (catalog, _) = crate::live::cache::current(cfg);
    let prices = on_demand_prices(catalog.offers());
    cost_report(&spend, &jobs, by, since, now, &|s| on_demand_of(&prices, s))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use gpufleet_core::fake::FAKE_EPOCH;
    use gpufleet_core::ledger::MemoryLedger;

    /// One cost per completed job (issue 79): `costs` and `jobs ls` say the
    /// same figure for the same ledger, every job's spend (the failed one's
    /// too) over the jobs that succeeded, a service's spend no job's; the
    /// mean cost of a succeeded job is a figure of its own.
    #[test]
    fn one_cost_per_completed_job() {
        let pool = gpufleet_core::Pool {
            cloud: Cloud::Aws,
            region: gpufleet_core::Region::new("us-east-1"),
            zone: None,
            instance_type: "g5.xlarge".into(),
            capacity: Capacity::OnDemand,
        };
        let h = |n: i64| FAKE_EPOCH + time::Duration::hours(n);
        let spent = |id: &str, job: &str, usd_per_hour: f64, hours: i64| InstanceSpend {
            id: InstanceId::new(id),
            pool: pool.clone(),
            job_id: job.into(),
            owner: None,
            team: None,
            gpu: None,
            gpus: 0,
            price: Price::from_usd_per_hour_f64(usd_per_hour),
            started_at: h(0),
            ended_at: Some(h(hours)),
            ended_by: None,
            end_detail: String::new(),
        };
        // ok: $1, broken: $2 (failed), svc: $5 (a service).
        let spend = vec![
            spent("i-1", "ok", 1.0, 1),
            spent("i-2", "broken", 1.0, 2),
            spent("i-3", "service:svc", 5.0, 1),
        ];
        let jobs = vec![
            JobRecord::new("ok", "ok", JobState::Succeeded, h(1)),
            JobRecord::new("broken", "broken", JobState::Failed, h(2)),
        ];
        let r = cost_report(&spend, &jobs, CostBy::Job, FAKE_EPOCH, h(3), &|_| None).unwrap();
        assert_eq!(r.completed_jobs, 1);
        assert_eq!(
            r.cost_per_completed_job,
            Some(Money::from_usd_f64(3.0).unwrap())
        );
        assert_eq!(
            r.mean_cost_of_a_succeeded_job,
            Some(Money::from_usd_f64(1.0).unwrap())
        );
        assert_eq!(r.total.cost, Money::from_usd_f64(8.0).unwrap());
        let per = crate::jobs::per_completed_job([
            (Money::from_usd_f64(1.0).unwrap(), true),
            (Money::from_usd_f64(2.0).unwrap(), false),
        ])
        .unwrap();
        assert_eq!(per, r.cost_per_completed_job);
    }

    /// A launch-only job a dead `launch` left launching half an hour ago is
    /// failed; a fresh one (in flight) and a managed job waiting for a
    /// controller are left alone; a dry run only reports.
    #[tokio::test]
    async fn launches_left_unfinished_are_failed_and_nothing_else() {
        let l = MemoryLedger::new();
        let at = |mins: i64| FAKE_EPOCH + time::Duration::minutes(mins);
        l.record_job(&JobRecord::new("left", "left", JobState::Launching, at(0)))
            .await
            .unwrap();
        l.record_job(&JobRecord::new(
            "fresh",
            "fresh",
            JobState::Launching,
            at(50),
        ))
        .await
        .unwrap();
        l.save_job_spec("managed", "{}").await.unwrap();
        l.record_job(&JobRecord::new("managed", "m", JobState::Placing, at(0)))
            .await
            .unwrap();
        let seen = Observed {
            providers: &[],
            read: Vec::new(),
            listed: &[],
            now: at(60),
        };
        let none = Default::default();
        let dry = reconcile(&l, &seen, Some("alice"), &none, Apply::NOTHING)
            .await
            .unwrap();
        let stuck: Vec<&str> = dry.stuck.iter().map(|s| s.job.as_str()).collect();
        assert_eq!(stuck, ["left"]);
        assert_eq!(
            l.job_latest("left").await.unwrap().unwrap().state,
            JobState::Launching
        );
        let done = reconcile(&l, &seen, Some("alice"), &none, Apply::ALL)
            .await
            .unwrap();
        assert_eq!(done.stuck.len(), 1);
        let last = l.job_latest("left").await.unwrap().unwrap();
        assert_eq!(last.state, JobState::Failed);
        assert!(
            last.detail.contains("failed by reconcile"),
            "{}",
            last.detail
        );
        for job in ["fresh", "managed"] {
            assert!(
                !l.job_latest(job)
                    .await
                    .unwrap()
                    .unwrap()
                    .state
                    .is_terminal(),
                "{job}"
            );
        }
    }

    /// A launch-only job whose launch failed ends failed, saying why; a
    /// managed job, or one with an instance alive, is left as it is.
    #[tokio::test]
    async fn an_unfinished_launch_ends_the_launch_only_job() {
        let l = MemoryLedger::new();
        let now = FAKE_EPOCH;
        l.record_job(&JobRecord::new("a", "a", JobState::Placing, now))
            .await
            .unwrap();
        assert!(end_unfinished_launch(
            &l,
            "a",
            JobState::Failed,
            "launch failed: no capacity",
            now
        )
        .await
        .unwrap());
        let last = l.job_latest("a").await.unwrap().unwrap();
        assert_eq!(
            (last.state, last.detail.as_str()),
            (JobState::Failed, "launch failed: no capacity")
        );
        l.save_job_spec("m", "{}").await.unwrap();
        l.record_job(&JobRecord::new("m", "m", JobState::Placing, now))
            .await
            .unwrap();
        assert!(!end_unfinished_launch(&l, "m", JobState::Failed, "x", now)
            .await
            .unwrap());
        assert!(
            !end_unfinished_launch(&l, "none", JobState::Failed, "x", now)
                .await
                .unwrap()
        );
    }

    /// The provider of one fake AWS and what it lists.
    fn fake_seen(
        fake: &Arc<gpufleet_core::fake::FakeCloud>,
    ) -> (Vec<Arc<dyn Provider>>, Vec<Instance>) {
        (vec![fake.clone()], fake.live_instances())
    }

    /// What a reconciliation at `now` saw: AWS read, `listed` on it.
    fn observed<'a>(
        providers: &'a [Arc<dyn Provider>],
        listed: &'a [Instance],
        now: OffsetDateTime,
    ) -> Observed<'a> {
        Observed {
            providers,
            read: vec![Cloud::Aws],
            listed,
            now,
        }
    }

    /// An instance still running for a cancelled job (its launch answered
    /// after the cancel, its controller gone) is terminated by the next
    /// reconciliation (as `jobs serve` runs it), and only when applied;
    /// another owner's launch under the same job name is left alone.
    #[tokio::test]
    async fn a_cancelled_jobs_leftover_is_terminated() {
        use gpufleet_core::fake::FakeCloud;
        use gpufleet_core::{Cloud, Compute, IdempotencyKey, LaunchRequest, Pool};
        let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
        let pool: Pool = "aws:us-east-1/use1-az1:g5.xlarge:on-demand"
            .parse()
            .unwrap();
        let req = |key: &str, owner: &str| {
            LaunchRequest::new(pool.clone(), "ami-1", IdempotencyKey::new(key).unwrap())
                .with_tag(tags::MANAGED, "true")
                .with_tag(tags::JOB, "late")
                .with_tag(tags::OWNER, owner)
        };
        let made = fake.launch(&req("late-a1", "alice")).await.unwrap();
        // Bob's launch under the same name is not Alice's job.
        fake.launch(&req("late-b1", "bob")).await.unwrap();
        let l = MemoryLedger::new();
        l.record_job(&JobRecord::new(
            "late",
            "late",
            JobState::Cancelled,
            FAKE_EPOCH,
        ))
        .await
        .unwrap();
        let (providers, listed) = fake_seen(&fake);
        let seen = observed(&providers, &listed, FAKE_EPOCH);
        let none = Default::default();
        let dry = reconcile(&l, &seen, Some("alice"), &none, Apply::NOTHING)
            .await
            .unwrap();
        assert_eq!(
            dry.leftovers
                .iter()
                .map(|l| &l.instance)
                .collect::<Vec<_>>(),
            vec![&format!("aws:{}", made[0].id)]
        );
        assert_eq!(fake.live_instances().len(), 2, "a dry run touches nothing");
        let done = reconcile(&l, &seen, Some("alice"), &none, Apply::SERVE)
            .await
            .unwrap();
        assert_eq!(done.leftovers.len(), 1);
        let left = fake.live_instances();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].tags[tags::OWNER], "bob");
    }

    /// An instance of this owner past its expiry whose managed job no
    /// controller drives (its controller died, so nobody extends it) is
    /// terminated by reconcile; one whose job holds a live lease, another
    /// owner's, one not yet expired, and a `launch`'s past its time to live
    /// (`reap`'s to honour) are left alone.
    #[tokio::test]
    async fn an_expired_instance_nobody_drives_is_terminated() {
        use gpufleet_core::fake::FakeCloud;
        use gpufleet_core::{clock::Clock, Cloud, Compute, IdempotencyKey, LaunchRequest, Pool};
        use std::time::Duration;
        let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
        let pool: Pool = "aws:us-east-1/use1-az1:g5.xlarge:on-demand"
            .parse()
            .unwrap();
        let now = fake.clock().now();
        let mut ids = Vec::new();
        for (job, owner, ttl) in [
            ("orphan", "alice", 60),
            ("launched", "alice", 60),
            ("driven", "alice", 60),
            ("bobs", "bob", 60),
            ("fresh", "alice", 3600),
        ] {
            let mut req = LaunchRequest::new(
                pool.clone(),
                "ami-1",
                IdempotencyKey::new(format!("{job}-a1")).unwrap(),
            )
            .with_tag(tags::JOB, job)
            .with_tag(tags::OWNER, owner);
            req.ttl = Some(Duration::from_secs(ttl));
            ids.push(fake.launch(&req).await.unwrap()[0].id.clone());
        }
        fake.clock().advance(Duration::from_secs(120));
        let now2 = fake.clock().now();
        assert!(now2 > now);
        let l = MemoryLedger::new();
        // Managed jobs (a controller's, with a saved job file) but one
        // launched by `launch`, whose expiry is its time to live: reap's.
        for job in ["orphan", "driven", "bobs", "fresh"] {
            l.save_job_spec(job, "{}").await.unwrap();
        }
        l.acquire_lease("driven", "ctl", Duration::from_secs(3600))
            .await
            .unwrap();
        let (providers, listed) = fake_seen(&fake);
        let seen = observed(&providers, &listed, now2);
        let none = Default::default();
        let done = reconcile(&l, &seen, Some("alice"), &none, Apply::SERVE)
            .await
            .unwrap();
        assert_eq!(
            done.leftovers
                .iter()
                .map(|l| l.job.as_str())
                .collect::<Vec<_>>(),
            vec!["orphan"],
            "{:?}",
            done.leftovers
        );
        assert!(done.leftovers[0].why.contains("no controller drives"));
        let live: Vec<_> = fake.live_instances().into_iter().map(|i| i.id).collect();
        assert!(!live.contains(&ids[0]));
        assert_eq!(live.len(), 4);
    }
}
