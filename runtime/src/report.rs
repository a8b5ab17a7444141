//! The runtime's documents: instances as the operator commands report them
//! (`ls`, `launch`, `terminate`, `reap`), with their price and cost, and
//! managed jobs as `jobs ls` and `jobs show` do. Like
//! [`gpufleet_core::report`], library values so every front end prints the
//! same fields.

use gpufleet_core::ledger::JobRecord;
use gpufleet_core::report::rfc3339;
use gpufleet_core::usage::JobUsage;
use gpufleet_core::{tags, Error, Instance, Money, Price};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::jobs::{cost_per_completed_job, JobSummary};

/// One instance as the operator commands print it (`--output json`: a stable schema).
#[derive(Debug, Clone, Serialize)]
pub struct InstanceRow {
    /// The cloud's id.
    pub id: String,
    /// Cloud.
    pub cloud: String,
    /// Region.
    pub region: String,
    /// Zone, if zonal.
    pub zone: Option<String>,
    /// Instance type.
    pub instance_type: String,
    /// `on-demand` or `spot`.
    pub capacity: &'static str,
    /// Its state, lower case.
    pub state: String,
    /// When it was launched (RFC 3339).
    pub launched_at: String,
    /// Hours since then.
    pub age_hours: f64,
    /// Its price, USD per hour, if known.
    pub price_per_hour_usd: Option<f64>,
    /// What it has cost since launch, USD.
    pub cost_so_far_usd: Option<f64>,
    /// What a day of it costs, USD.
    pub cost_per_day_usd: Option<f64>,
    /// The job it serves (tag).
    pub job: Option<String>,
    /// Its owner (tag).
    pub owner: Option<String>,
    /// Its team (tag).
    pub team: Option<String>,
    /// When its TTL ends (RFC 3339).
    pub expires_at: Option<String>,
    /// Its placement group.
    pub placement_group: Option<String>,
    /// Its private address, where the cloud reports it.
    pub private_ip: Option<String>,
    /// Its public address, where it has one.
    pub public_ip: Option<String>,
    /// Mean GPU utilisation over the node's last summary window, percent.
    pub gpu_util_pct: Option<u8>,
    /// The most memory one GPU held in that window, MiB.
    pub gpu_memory_peak_mib: Option<u64>,
    /// Memory of one GPU, MiB.
    pub gpu_memory_total_mib: Option<u64>,
    /// When the node's agent last summarised its GPUs.
    pub gpu_summary_at: Option<String>,
    /// Why a command acted on it (reap, terminate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl InstanceRow {
    /// The row of `i`, priced at `price` (if known), its age and cost at `now`.
    pub fn new(i: &Instance, price: Option<Price>, now: OffsetDateTime) -> InstanceRow {
        let age = ((now - i.launched_at).whole_seconds().max(0)) as f64 / 3600.0;
        // A cost money cannot hold shows as unknown, with a warning.
        let known = |r: Result<Money, Error>| {
            r.map_err(|e| tracing::warn!(instance = %i.id, error = %e, "cost not shown"))
                .ok()
        };
        let secs = (now - i.launched_at).whole_seconds().max(0) as u64;
        let cost = price.and_then(|p| known(p.cost_for_seconds(secs)));
        let gpu = gpufleet_core::usage::GpuSummary::from_tags(&i.tags);
        InstanceRow {
            id: i.id.to_string(),
            cloud: i.pool.cloud.to_string(),
            region: i.pool.region.to_string(),
            zone: i.pool.zone.as_ref().map(ToString::to_string),
            instance_type: i.pool.instance_type.clone(),
            capacity: i.pool.capacity.as_str(),
            state: format!("{:?}", i.state).to_lowercase(),
            launched_at: i.launched_at.format(&Rfc3339).unwrap_or_default(),
            age_hours: (age * 100.0).round() / 100.0,
            price_per_hour_usd: price.map(Price::usd_per_hour_f64),
            cost_so_far_usd: cost.map(Money::as_usd_f64),
            cost_per_day_usd: price
                .and_then(|p| known(p.cost_for_seconds(86_400)))
                .map(Money::as_usd_f64),
            job: i.tags.get(tags::JOB).cloned(),
            owner: i.tags.get(tags::OWNER).cloned(),
            team: i.tags.get(tags::TEAM).cloned(),
            expires_at: i.expires_at.and_then(|t| t.format(&Rfc3339).ok()),
            placement_group: i.placement_group.as_ref().map(ToString::to_string),
            private_ip: i.addresses.private.map(|a| a.to_string()),
            public_ip: i.addresses.public.map(|a| a.to_string()),
            gpu_util_pct: gpu.as_ref().filter(|g| g.gpus > 0).map(|g| g.mean_util_pct),
            gpu_memory_peak_mib: gpu
                .as_ref()
                .filter(|g| g.gpus > 0)
                .map(|g| g.peak_memory_mib),
            gpu_memory_total_mib: gpu
                .as_ref()
                .filter(|g| g.gpus > 0)
                .map(|g| g.memory_total_mib),
            gpu_summary_at: gpu.as_ref().and_then(|g| g.at.format(&Rfc3339).ok()),
            reason: None,
        }
    }
}

/// One job as `jobs ls -o json` prints it (a stable schema).
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    /// The job's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its state now.
    pub state: String,
    /// The pool it is in (or was last in).
    pub pool: Option<String>,
    /// When it was submitted (RFC 3339).
    pub started_at: String,
    /// When it was last recorded (RFC 3339).
    pub updated_at: String,
    /// Launch attempts.
    pub attempts: u32,
    /// Times the cloud reclaimed its capacity.
    pub preemptions: usize,
    /// Times someone ended its instance by hand (not preemptions).
    pub ended_on_request: usize,
    /// Restarts after an error.
    pub restarts: usize,
    /// Moves to another pool.
    pub moves: usize,
    /// Hours of work saved.
    pub progress_hours: f64,
    /// What it has cost so far, USD.
    pub cost_so_far_usd: f64,
    /// The last record's detail.
    pub detail: String,
    /// The controller holding the job's lease now, if any.
    pub driven_by: Option<String>,
}

impl JobRow {
    /// The row of a job's summary (no driver: `jobs ls` sets it from the
    /// leases).
    pub fn new(s: &JobSummary) -> Self {
        JobRow {
            id: s.id.clone(),
            name: s.name.clone(),
            state: s.state.to_string(),
            pool: s.pool.as_ref().map(ToString::to_string),
            started_at: rfc3339(s.started_at),
            updated_at: rfc3339(s.updated_at),
            attempts: s.attempts,
            preemptions: s.preemptions,
            ended_on_request: s.ended_on_request,
            restarts: s.restarts,
            moves: s.moves,
            progress_hours: s.progress_hours,
            cost_so_far_usd: s.cost_so_far_usd(),
            detail: s.detail.clone(),
            driven_by: None,
        }
    }
}

/// One event of a job's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct JobEvent {
    /// When (RFC 3339).
    pub at: String,
    /// The state entered.
    pub state: String,
    /// The pool, if placed.
    pub pool: Option<String>,
    /// The launch attempt.
    pub attempt: u32,
    /// Its instances.
    pub instances: Vec<String>,
    /// Hours of work saved by then.
    pub progress_hours: f64,
    /// Why.
    pub detail: String,
}

impl From<&JobRecord> for JobEvent {
    fn from(r: &JobRecord) -> Self {
        JobEvent {
            at: rfc3339(r.at),
            state: r.state.to_string(),
            pool: r.pool.as_ref().map(ToString::to_string),
            attempt: r.attempt,
            instances: r.instances.iter().map(ToString::to_string).collect(),
            progress_hours: r.progress_hours,
            detail: r.detail.clone(),
        }
    }
}

/// A job's measured GPU use (from its nodes' agents).
#[derive(Debug, Clone, Serialize)]
pub struct UsageView {
    /// The instance type measured.
    pub instance_type: String,
    /// Instances.
    pub instances: u32,
    /// GPUs per instance.
    pub gpus_per_instance: u32,
    /// Hours measured.
    pub measured_hours: f64,
    /// Mean utilisation, percent.
    pub mean_util_pct: Option<f64>,
    /// The busiest minute's utilisation, percent.
    pub max_util_pct: u8,
    /// The most memory one GPU held, MiB.
    pub peak_memory_mib: u64,
    /// Memory of one GPU, MiB.
    pub memory_total_mib: u64,
    /// When it was last updated (RFC 3339).
    pub updated_at: String,
}

impl UsageView {
    /// The use in one line, for people.
    pub fn line(&self) -> String {
        format!(
            "{:.0}% mean, {}% busiest minute; peak {:.1} of {:.0} GiB per GPU; {:.1} h measured on {} x {} ({} GPU(s) each)",
            self.mean_util_pct.unwrap_or(0.0),
            self.max_util_pct,
            self.peak_memory_mib as f64 / 1024.0,
            self.memory_total_mib as f64 / 1024.0,
            self.measured_hours,
            self.instances,
            self.instance_type,
            self.gpus_per_instance
        )
    }
}

impl From<&JobUsage> for UsageView {
    fn from(u: &JobUsage) -> Self {
        UsageView {
            instance_type: u.instance_type.clone(),
            instances: u.instances,
            gpus_per_instance: u.gpus,
            measured_hours: (u.observed_secs as f64 / 36.0).round() / 100.0,
            mean_util_pct: u.mean_util_pct().map(|m| (m * 10.0).round() / 10.0),
            max_util_pct: u.max_util_pct,
            peak_memory_mib: u.peak_memory_mib,
            memory_total_mib: u.memory_total_mib,
            updated_at: rfc3339(u.updated_at),
        }
    }
}

/// What `jobs show ID -o json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct JobShowDoc {
    /// The job as `jobs ls` lists it.
    pub job: JobRow,
    /// The pools it ran in, in order.
    pub pools: Vec<String>,
    /// Its cost if it succeeded, USD.
    pub cost_per_completed_job_usd: Option<f64>,
    /// Its measured GPU use.
    pub gpu_usage: Option<UsageView>,
    /// Its records, oldest first.
    pub events: Vec<JobEvent>,
    /// The secrets its node reads at boot: names and clouds only (gpufleet
    /// holds references, never values).
    pub secrets: Vec<SecretName>,
}

/// One secret of a job, as `jobs show` names it.
#[derive(Debug, Clone, Serialize)]
pub struct SecretName {
    /// The environment variable it is read into.
    pub name: String,
    /// The clouds it has a reference in.
    pub clouds: Vec<String>,
}

impl JobShowDoc {
    /// The document of a job from its summary, history, usage and job file
    /// as the ledger holds it (JSON).
    pub fn new(
        s: &JobSummary,
        history: &[JobRecord],
        usage: Option<&JobUsage>,
        spec: Option<&str>,
    ) -> Result<Self, Error> {
        let file = spec.and_then(|d| {
            gpufleet_core::ledger::JobDefinition::from_doc(&s.id, d)
                .ok()
                .map(|def| def.file)
        });
        let secrets = file
            .and_then(|f| f.into_spec().ok())
            .map(|spec| {
                spec.workload
                    .secrets
                    .into_iter()
                    .map(|(name, refs)| SecretName {
                        name,
                        clouds: refs.keys().map(|c| c.as_str().to_string()).collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(JobShowDoc {
            secrets,
            job: JobRow::new(s),
            pools: s.pools.iter().map(ToString::to_string).collect(),
            cost_per_completed_job_usd: cost_per_completed_job(std::slice::from_ref(s))?
                .map(Money::as_usd_f64),
            gpu_usage: usage.map(UsageView::from),
            events: history.iter().map(JobEvent::from).collect(),
        })
    }

    /// The lines above the events in `jobs show`'s table, of `s` (the
    /// summary the document was made from).
    pub fn header_lines(&self, s: &JobSummary) -> Vec<String> {
        let pools: Vec<String> = s.pools.iter().map(ToString::to_string).collect();
        let mut lines = vec![
            format!("job        {} ({})", s.id, s.name),
            if s.detail.is_empty() {
                format!("state      {}", s.state)
            } else {
                format!("state      {}: {}", s.state, s.detail)
            },
            format!("progress   {:.2} hours of work saved", s.progress_hours),
            format!("pools      {}", pools.join(" -> ")),
            format!(
                "preempted  {} time(s); moved {} time(s); {} launch attempt(s)",
                s.preemptions, s.moves, s.attempts
            ),
            format!("cost       ${:.2} so far", s.cost_so_far_usd()),
            match self.cost_per_completed_job_usd {
                Some(m) => format!("per job    ${m:.2} per completed job"),
                None => "per job    (not completed yet)".to_string(),
            },
            match &self.gpu_usage {
                Some(u) => format!("gpu use    {}", u.line()),
                None => {
                    "gpu use    not measured (no GPU summary from the node agent yet)".to_string()
                }
            },
        ];
        let named: Vec<String> = self
            .secrets
            .iter()
            .map(|s| format!("{} ({})", s.name, s.clouds.join(", ")))
            .collect();
        if !named.is_empty() {
            lines.push(format!("secrets    {}", named.join(", ")));
        }
        lines
    }
}

/// What `launch` did (`--output json`).
#[derive(Debug, Clone, Serialize)]
pub struct LaunchDoc {
    /// Whether the key found an earlier launch (nothing new was made).
    pub already_launched: bool,
    /// The launch's idempotency key.
    pub idempotency_key: String,
    /// The pool launched into.
    pub pool: String,
    /// The placement group, when one was made.
    pub placement_group: Option<String>,
    /// The instances.
    pub instances: Vec<InstanceRow>,
}

/// What `fit --from-job` found (`--output json`).
#[derive(Debug, Clone, Serialize)]
pub struct FitFromJobDoc {
    /// The job.
    pub job: String,
    /// What its nodes measured.
    pub measured: UsageView,
    /// The capacity the options are priced at (the job's last).
    pub capacity: String,
    /// GPUs left out as ones the job cannot move to.
    pub left_out: Vec<String>,
    /// The options, cheapest first, and the finding.
    pub report: gpufleet_core::advisor::rightsize::RightsizeReport,
}

/// What `catalog refresh` did (`--output json`).
#[derive(Debug, Clone, Serialize)]
pub struct RefreshDoc {
    /// The cache file written.
    pub path: String,
    /// Offers the cache holds.
    pub offers: usize,
    /// When the regions were fetched (RFC 3339).
    pub fetched_at: String,
    /// The `cloud:region`s fetched now.
    pub refreshed: Vec<String>,
    /// Live prices dropped as implausible.
    pub implausible_prices_dropped: usize,
    /// The regions that failed, with why.
    pub failed: Vec<RefreshFailure>,
}

/// One region a refresh could not fetch.
#[derive(Debug, Clone, Serialize)]
pub struct RefreshFailure {
    /// The cloud.
    pub cloud: gpufleet_core::Cloud,
    /// The region.
    pub region: String,
    /// What went wrong.
    pub error: String,
}

impl RefreshDoc {
    /// The document of a refresh.
    pub fn new(done: &crate::live::cache::Refreshed) -> RefreshDoc {
        RefreshDoc {
            path: done.path.display().to_string(),
            offers: done.offers,
            fetched_at: done.fetched_at.format(&Rfc3339).unwrap_or_default(),
            refreshed: done
                .refreshed
                .iter()
                .map(|(c, r)| format!("{c}:{r}"))
                .collect(),
            implausible_prices_dropped: done.dropped.len(),
            failed: done
                .failed
                .iter()
                .map(|(c, r, e)| RefreshFailure {
                    cloud: *c,
                    region: r.clone(),
                    error: e.clone(),
                })
                .collect(),
        }
    }
}

/// One setting of `config show` (`--output json` prints an array).
#[derive(Debug, Clone, Serialize)]
pub struct SettingRow {
    /// Its key.
    pub key: String,
    /// Its value (secrets masked).
    pub value: String,
    /// Where it came from.
    pub from: String,
}

/// One row of `serve ls` (`--output json` prints an array of these;
/// `serve status -o json` one).
#[cfg(feature = "serve")]
#[derive(Debug, Clone, Serialize)]
pub struct ServiceRow {
    /// The service's name.
    pub name: String,
    /// Where it stands.
    pub state: crate::serve::book::ServiceState,
    /// The version it serves.
    pub version: u32,
    /// The replicas it wants.
    pub target: u32,
    /// The replicas ready.
    pub ready: u32,
    /// Live spot replicas.
    pub spot: usize,
    /// Live on-demand replicas.
    pub on_demand: usize,
    /// What its replicas cost an hour, while it is up.
    pub cost_per_hour: Option<Price>,
    /// The address its proxy listens on.
    pub listen: Option<String>,
    /// Who serves it now.
    pub controller: String,
    /// Its row's last write.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

#[cfg(feature = "serve")]
impl ServiceRow {
    /// The row of a service as the ledger holds it.
    pub fn new(s: &crate::serve::book::ServiceView) -> ServiceRow {
        use crate::serve::book::ServiceState;
        let st = &s.doc.status;
        let live = |spot: bool| {
            st.replicas
                .iter()
                .filter(|r| r.state != crate::serve::ReplicaState::Ended)
                .filter(|r| (r.capacity == gpufleet_core::Capacity::Spot) == spot)
                .count()
        };
        ServiceRow {
            name: s.name.clone(),
            state: s.state,
            version: st.version,
            target: st.target,
            ready: st.ready,
            spot: live(true),
            on_demand: live(false),
            cost_per_hour: if s.doc.up { st.cost_per_hour } else { None },
            listen: s.doc.listen.clone(),
            // The live lease says who serves it now (its row may still be
            // the previous controller's, until the new one writes).
            controller: match (&s.lease, s.state) {
                (Some(l), ServiceState::Serving) => l.holder.clone(),
                _ => s.doc.holder.clone(),
            },
            updated_at: s.updated_at,
        }
    }
}

#[cfg(feature = "serve")]
/// `serve status NAME --output json`: the service's status as its
/// controller last wrote it, where it stands, and its log, oldest first.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceStatusDoc {
    /// The status its controller published.
    #[serde(flatten)]
    pub status: crate::serve::ServiceStatus,
    /// Where it stands (serving, down, stopped).
    pub state: String,
    /// Why it was taken down, when it was.
    pub down_because: Option<String>,
    /// The controller serving it (the live lease's holder), or the last one.
    pub controller: String,
    /// The address its proxy listens on.
    pub listen: Option<String>,
    /// Its log: replicas' transitions with why, scale decisions, rollouts,
    /// requests.
    pub history: Vec<ServiceHistoryEntry>,
}

#[cfg(feature = "serve")]
/// One entry of a service's log.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceHistoryEntry {
    /// Its place in the ledger's order.
    pub seq: u64,
    /// When (RFC 3339).
    pub at: String,
    /// What it is about.
    pub kind: String,
    /// What happened: the document its writer wrote (as text when it is not
    /// JSON).
    pub what: serde_json::Value,
}

#[cfg(feature = "serve")]
impl ServiceStatusDoc {
    /// The document of `view` and its log.
    pub fn new(
        view: &crate::serve::book::ServiceView,
        history: &[gpufleet_core::ledger::ServiceEntry],
    ) -> ServiceStatusDoc {
        ServiceStatusDoc {
            status: view.doc.status.clone(),
            state: view.state.as_str().to_string(),
            down_because: view.doc.down_because.clone(),
            controller: ServiceRow::new(view).controller,
            listen: view.doc.listen.clone(),
            history: history
                .iter()
                .map(|e| ServiceHistoryEntry {
                    seq: e.seq,
                    at: gpufleet_core::report::rfc3339(e.at),
                    kind: e.kind.as_str().to_string(),
                    what: serde_json::from_str(&e.doc)
                        .unwrap_or_else(|_| serde_json::Value::String(e.doc.clone())),
                })
                .collect(),
        }
    }
}

/// What `run --detach` did (`--output json`): the job recorded for a
/// `jobs serve` to drive.
#[derive(Debug, Clone, Serialize)]
pub struct DetachedDoc {
    /// The job's id.
    pub id: String,
    /// Where it stands.
    pub state: gpufleet_core::ledger::JobState,
    /// Always true: no one drives it from this command.
    pub detached: bool,
}

/// One instance's console output (`jobs logs --output json` prints an
/// array of these).
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleOutput {
    /// The instance.
    pub instance: String,
    /// What its console says.
    pub output: String,
}

/// What `terminate` and `reap` did (`--output json`).
#[derive(Debug, Clone, Serialize)]
pub struct TerminateDoc {
    /// Instances terminated (or already gone).
    pub terminated: Vec<String>,
    /// Instances not terminated, with why.
    pub failed: Vec<(String, String)>,
    /// Placement groups deleted because their last instance went.
    pub groups_deleted: Vec<String>,
    /// Placement groups left (the cloud refused, e.g. while their instances
    /// shut down; `reap --yes` deletes them later).
    pub groups_left: Vec<(String, String)>,
    /// Clouds whose placement groups could not be listed, with why (their
    /// empty groups are left for `reap --yes`).
    pub groups_unchecked: Vec<(String, String)>,
    /// Whether nothing was done (`reap` without `--yes`).
    pub dry_run: bool,
    /// The instances acted on (or that would be), with why.
    pub candidates: Vec<InstanceRow>,
    /// `reap --below`: instances with no recent GPU summary, never reaped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<InstanceRow>,
    /// Instances that matched but are another owner's (or no one's), left
    /// alone without `--any-owner`, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_alone: Vec<InstanceRow>,
}

impl TerminateDoc {
    /// The document of a terminate: what was terminated and not, and what
    /// became of the placement groups.
    pub fn new(
        done: &[String],
        failed: &[(String, Error)],
        groups: &crate::reap::TerminateOutcome,
        unchecked: &[(gpufleet_core::Cloud, Error)],
        candidates: Vec<InstanceRow>,
        unknown: Vec<InstanceRow>,
    ) -> Self {
        let said = |v: &[(String, Error)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(id, e)| (id.clone(), e.to_string()))
                .collect()
        };
        TerminateDoc {
            terminated: done.to_vec(),
            failed: said(failed),
            groups_deleted: groups.terminated.clone(),
            groups_left: said(&groups.failed),
            groups_unchecked: unchecked
                .iter()
                .map(|(c, e)| (c.to_string(), e.to_string()))
                .collect(),
            dry_run: false,
            candidates,
            unknown,
            left_alone: Vec::new(),
        }
    }

    /// The document of a dry run: what would be terminated.
    pub fn dry_run(candidates: Vec<InstanceRow>, unknown: Vec<InstanceRow>) -> Self {
        TerminateDoc {
            terminated: Vec::new(),
            failed: Vec::new(),
            groups_deleted: Vec::new(),
            groups_left: Vec::new(),
            groups_unchecked: Vec::new(),
            dry_run: true,
            candidates,
            unknown,
            left_alone: Vec::new(),
        }
    }

    /// With `left`: what matched but was another owner's, left alone.
    pub fn with_left_alone(mut self, left: Vec<InstanceRow>) -> Self {
        self.left_alone = left;
        self
    }
}

/// One line for each cloud `exec` placed without because it did not
/// answer for offers (see [`crate::Executor::skipped_clouds`]): what `run`
/// says after a job, whose exit status stays the job's outcome.
pub fn skipped_lines(exec: &crate::Executor) -> Vec<String> {
    exec.skipped_clouds()
        .into_iter()
        .map(|(cloud, why)| {
            format!("{cloud} not read while placing ({why}); the job was placed without it (`gpufleet check` says whether it answers)")
        })
        .collect()
}
