//! What the ledger says about managed jobs: state, pools, preemptions,
//! moves and cost, for `gpufleet jobs ls` and `jobs show`.

use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::ledger::{JobRecord, JobState};
use gpufleet_core::{Error, ErrorKind, Money, Pool, Result};

/// One job, summed up from its records.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    /// The job's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub state: JobState,
    /// The pool of its current (or last) placement.
    pub pool: Option<Pool>,
    /// When it was submitted.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Its last transition.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// Launch attempts (each its own idempotency key).
    pub attempts: u32,
    /// Interruptions the cloud caused (notices, reclaims seen from the
    /// controller, silent nodes). An instance someone ended by hand is not
    /// one: see `ended_on_request`.
    pub preemptions: usize,
    /// Interruptions someone asked for: the job's instance was stopped or
    /// terminated by an API caller or a person (EC2 `Client.*`, a GCE
    /// `stop`/`delete`), not reclaimed.
    pub ended_on_request: usize,
    /// Restarts after the job's own `run` exited non-zero
    /// (`max_restarts_on_errors`).
    pub restarts: usize,
    /// Moves to a cheaper pool.
    pub moves: usize,
    /// Every pool it ran in, in order.
    pub pools: Vec<Pool>,
    /// Reference hours of work done (saved).
    pub progress_hours: f64,
    /// What its instances have cost: price x instances x time in each
    /// placement, from `running` to the record that ended it (or now).
    pub cost_so_far: Money,
    /// The last record's detail.
    pub detail: String,
}

impl JobSummary {
    /// The cost in USD, for output.
    pub fn cost_so_far_usd(&self) -> f64 {
        self.cost_so_far.as_usd_f64()
    }
}

fn overflow() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "a job's cost overflows the money type",
    )
}

/// The start of an `interrupted` record's detail when the job's own `run`
/// exited non-zero and was started again.
pub const RESTART_ON_ERROR: &str = "node: run exited with";

/// The start of an `interrupted` record's detail when a node never sent its
/// first heartbeat and the job was started again: a failure to start is the
/// job's (its image, its identity), counted with its own errors.
pub const RESTART_NEVER_STARTED: &str = "node: never started:";

/// The words an `interrupted` record's detail holds when its instance was
/// ended on someone's request (see the controller's `describe_end`).
pub const REQUESTED_END: &str = "ended on request:";

/// Whether `r` records an instance someone ended by hand (not a preemption).
pub fn is_requested_end(r: &JobRecord) -> bool {
    r.state == JobState::Interrupted && r.detail.contains(REQUESTED_END)
}

/// Whether `r` is a restart after the job's own error (its `run` exited
/// non-zero, or its node never started it), not an interruption.
pub fn is_restart_on_error(r: &JobRecord) -> bool {
    r.state == JobState::Interrupted
        && (r.detail.starts_with(RESTART_ON_ERROR) || r.detail.starts_with(RESTART_NEVER_STARTED))
}

/// Sums up one job's records (oldest first; at least one).
pub fn summarize(history: &[JobRecord], now: OffsetDateTime) -> Result<JobSummary> {
    let (Some(first), Some(last)) = (history.first(), history.last()) else {
        return Err(Error::invalid_input("a job with no records"));
    };
    // Open placements by attempt: (since, price of all its instances).
    let mut open: Vec<(u32, OffsetDateTime, gpufleet_core::Price)> = Vec::new();
    let mut cost = Money::ZERO;
    let mut pools: Vec<Pool> = Vec::new();
    let (mut preemptions, mut moves, mut restarts, mut requested) = (0, 0, 0, 0);
    let mut close = |open: &mut Vec<(u32, OffsetDateTime, gpufleet_core::Price)>,
                     attempt: Option<u32>,
                     at: OffsetDateTime|
     -> Result<()> {
        let mut i = 0;
        while i < open.len() {
            if attempt.is_none_or(|a| open[i].0 == a) {
                let (_, since, price) = open.remove(i);
                let secs = (at - since).whole_seconds().max(0) as u64;
                cost = cost
                    .checked_add(price.cost_for_seconds(secs)?)
                    .ok_or_else(overflow)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    };
    for r in history {
        match r.state {
            JobState::Running if !open.iter().any(|o| o.0 == r.attempt) => {
                if let Some(price) = r.price {
                    let n = u32::try_from(r.instances.len()).unwrap_or(u32::MAX).max(1);
                    open.push((r.attempt, r.at, price.checked_mul(n).ok_or_else(overflow)?));
                }
                if let Some(p) = &r.pool {
                    if pools.last() != Some(p) {
                        pools.push(p.clone());
                    }
                }
            }
            JobState::Interrupted => {
                if is_restart_on_error(r) {
                    restarts += 1;
                } else if is_requested_end(r) {
                    requested += 1;
                } else {
                    preemptions += 1;
                }
                close(&mut open, Some(r.attempt), r.at)?;
            }
            JobState::Moved => {
                moves += 1;
                close(&mut open, Some(r.attempt), r.at)?;
            }
            s if s.is_terminal() => close(&mut open, None, r.at)?,
            _ => {}
        }
    }
    close(&mut open, None, now)?;
    let pool = history.iter().rev().find_map(|r| r.pool.clone());
    Ok(JobSummary {
        id: first.job_id.clone(),
        name: first.name.clone(),
        state: last.state,
        pool,
        started_at: first.at,
        updated_at: last.at,
        attempts: history.iter().map(|r| r.attempt).max().unwrap_or(0),
        preemptions,
        restarts,
        ended_on_request: requested,
        moves,
        pools,
        progress_hours: last.progress_hours,
        cost_so_far: cost,
        detail: last.detail.clone(),
    })
}

/// Every job in the ledger's records, summed up, oldest first.
pub fn summarize_all(records: Vec<JobRecord>, now: OffsetDateTime) -> Result<Vec<JobSummary>> {
    let mut by_job: Vec<Vec<JobRecord>> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for r in records {
        match index.get(&r.job_id) {
            Some(&i) => by_job[i].push(r),
            None => {
                index.insert(r.job_id.clone(), by_job.len());
                by_job.push(vec![r]);
            }
        }
    }
    by_job.iter().map(|h| summarize(h, now)).collect()
}

/// The newest record of job `id`; an id the ledger does not hold is an
/// error saying so.
pub async fn known(ledger: &dyn gpufleet_core::ledger::Ledger, id: &str) -> Result<JobRecord> {
    ledger.job_latest(id).await?.ok_or_else(|| unknown_job(id))
}

/// Refuses `who` acting on job `id` (the command `verb`, for the message)
/// when another owner submitted it, unless `any_owner`: what every command
/// that acts on a job by id checks first (`jobs cancel`, `jobs resume`).
/// A job the ledger kept before owners were recorded is anyone's.
pub async fn check_owner(
    ledger: &dyn gpufleet_core::ledger::Ledger,
    id: &str,
    who: &str,
    any_owner: bool,
    verb: &str,
) -> Result<()> {
    if any_owner {
        return Ok(());
    }
    let Some(doc) = ledger.job_spec(id).await? else {
        return Ok(());
    };
    let definition = gpufleet_core::ledger::JobDefinition::from_doc(id, &doc)?;
    match definition.owner {
        Some(theirs) if theirs != who => {
            Err(gpufleet_core::ledger::not_your_job(id, &theirs, who, verb))
        }
        _ => Ok(()),
    }
}

/// The error for a job id the ledger does not hold, saying where the known
/// ones are listed.
pub(crate) fn unknown_job(id: &str) -> Error {
    Error::invalid_input(format!(
        "no job '{id}' in the ledger; `gpufleet jobs ls` lists them"
    ))
}

/// The newest record of job `id` if it holds instances now (what `jobs
/// logs` reads): an unknown job, one not launched yet, or one holding none
/// now is an error saying which.
pub async fn with_instances(
    ledger: &dyn gpufleet_core::ledger::Ledger,
    id: &str,
) -> Result<JobRecord> {
    let last = known(ledger, id).await?;
    if last.pool.is_none() {
        return Err(Error::invalid_input(format!(
            "job {id} has not been launched yet ({})",
            last.state
        )));
    }
    if last.instances.is_empty() {
        return Err(Error::invalid_input(format!(
            "job {id} holds no instance now ({})",
            last.state
        )));
    }
    Ok(last)
}

/// Each instance of `record`'s placement with its console output (what its
/// boot script and job printed), from its cloud's provider.
pub async fn console_logs(
    providers: &[std::sync::Arc<dyn gpufleet_core::Provider>],
    record: &JobRecord,
) -> Result<Vec<(gpufleet_core::InstanceId, String)>> {
    let Some(pool) = &record.pool else {
        return Ok(Vec::new());
    };
    let p = gpufleet_core::provider_for(providers, pool.cloud)?;
    let mut out = Vec::new();
    for i in &record.instances {
        out.push((i.clone(), p.console_output(i).await?));
    }
    Ok(out)
}

/// Prices each job from the ledger of spend: a job with instance records
/// costs what its instances cost (their recorded starts, ends and prices),
/// whatever its job records say. A job from before the ledger of spend
/// keeps the estimate from its records.
pub fn apply_spend(
    jobs: &mut [JobSummary],
    spend: &[gpufleet_core::ledger::InstanceSpend],
    now: OffsetDateTime,
) -> Result<()> {
    let mut by_job: std::collections::HashMap<&str, Money> = std::collections::HashMap::new();
    for s in spend {
        let m = by_job.entry(s.job_id.as_str()).or_insert(Money::ZERO);
        *m = m.checked_add(s.cost(now)?).ok_or_else(overflow)?;
    }
    for j in jobs.iter_mut() {
        if let Some(m) = by_job.get(j.id.as_str()) {
            j.cost_so_far = *m;
        }
    }
    Ok(())
}

/// The cost per completed job, the one definition every report uses
/// (`jobs ls`, `costs`, the Python package): what every job cost (those
/// that succeeded, failed, were cancelled, still run, and launch-only ones:
/// the waste is part of the price of what finished) over the number that
/// succeeded; `None` when none has. `jobs` are each job's cost and whether
/// it succeeded.
pub fn per_completed_job(jobs: impl IntoIterator<Item = (Money, bool)>) -> Result<Option<Money>> {
    let (mut total, mut done) = (Money::ZERO, 0i64);
    for (cost, succeeded) in jobs {
        total = total.checked_add(cost).ok_or_else(overflow)?;
        done += i64::from(succeeded);
    }
    Ok((done > 0).then(|| Money::from_micros(total.micros() / done)))
}

/// [`per_completed_job`] over `jobs` (every job of the ledger: `jobs ls`).
pub fn cost_per_completed_job(jobs: &[JobSummary]) -> Result<Option<Money>> {
    per_completed_job(
        jobs.iter()
            .map(|j| (j.cost_so_far, j.state == JobState::Succeeded)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_core::{Capacity, Cloud, InstanceId, Price, Region};
    use time::macros::datetime;

    fn pool(zone: &str) -> Pool {
        Pool {
            cloud: Cloud::Aws,
            region: Region::new("us-east-1"),
            zone: Some(gpufleet_core::Zone::new(zone)),
            instance_type: "g5.xlarge".into(),
            capacity: Capacity::Spot,
        }
    }

    fn rec(state: JobState, at: OffsetDateTime, attempt: u32, zone: &str) -> JobRecord {
        let mut r = JobRecord::new("j", "j", state, at);
        r.attempt = attempt;
        r.pool = Some(pool(zone));
        r.price = Some(Price::from_micros_per_hour(1_000_000));
        r.instances = vec![InstanceId::new("i-1")];
        r
    }

    #[test]
    fn cost_counts_each_placement_from_running_to_its_end() {
        let t = datetime!(2026-01-05 00:00 UTC);
        let h = time::Duration::HOUR;
        let history = vec![
            JobRecord::new("j", "j", JobState::Placing, t),
            rec(JobState::Launching, t, 1, "a"),
            rec(JobState::Running, t, 1, "a"),
            rec(JobState::Interrupted, t + 2 * h, 1, "a"),
            rec(JobState::Launching, t + 2 * h, 2, "b"),
            rec(JobState::Running, t + 2 * h, 2, "b"),
            rec(JobState::Moving, t + 3 * h, 2, "b"),
            rec(JobState::Launching, t + 3 * h, 3, "c"),
            rec(JobState::Running, t + 3 * h, 3, "c"),
            rec(JobState::Moved, t + 3 * h, 2, "b"),
            rec(JobState::Succeeded, t + 5 * h, 3, "c"),
        ];
        let s = summarize(&history, t + 10 * h).unwrap();
        assert_eq!(s.state, JobState::Succeeded);
        assert_eq!(s.preemptions, 1);
        assert_eq!(s.moves, 1);
        assert_eq!(s.pools.len(), 3);
        assert_eq!(s.attempts, 3);
        // 2 h + 1 h + 2 h at $1/h.
        assert_eq!(s.cost_so_far, Money::from_micros(5_000_000));
        let per = cost_per_completed_job(&[s]).unwrap().unwrap();
        assert_eq!(per, Money::from_micros(5_000_000));
    }
}
