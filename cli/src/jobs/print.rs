//! Jobs as tables, CSV and JSON: the list, and one job's history, usage and
//! cost per completed job.

use super::*;

/// One job as `jobs ls -o json` prints it (a stable schema).
#[derive(Debug, Serialize)]
pub(super) struct JobRow {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) state: String,
    pub(super) pool: Option<String>,
    pub(super) started_at: String,
    pub(super) updated_at: String,
    pub(super) attempts: u32,
    pub(super) preemptions: usize,
    pub(super) restarts: usize,
    pub(super) moves: usize,
    pub(super) progress_hours: f64,
    pub(super) cost_so_far_usd: f64,
    pub(super) detail: String,
    /// The controller holding the job's lease now, if any.
    pub(super) driven_by: Option<String>,
}

pub(super) fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// An RFC 3339 time for a table: to the second (the JSON keeps the
/// fraction), `2026-11-28T13:09:36Z` rather than `…13:09:36.841420416Z`.
pub(super) fn to_the_second(t: &str) -> String {
    match (t.find('.'), t.find(['Z', '+']).or_else(|| t.rfind('-'))) {
        (Some(dot), Some(zone)) if dot < zone => format!("{}{}", &t[..dot], &t[zone..]),
        _ => t.to_string(),
    }
}

pub(super) fn row(s: &JobSummary) -> JobRow {
    JobRow {
        id: s.id.clone(),
        name: s.name.clone(),
        state: s.state.to_string(),
        pool: s.pool.as_ref().map(ToString::to_string),
        started_at: rfc3339(s.started_at),
        updated_at: rfc3339(s.updated_at),
        attempts: s.attempts,
        preemptions: s.preemptions,
        restarts: s.restarts,
        moves: s.moves,
        progress_hours: s.progress_hours,
        cost_so_far_usd: s.cost_so_far_usd(),
        detail: s.detail.clone(),
        driven_by: None,
    }
}

pub(super) fn print_list(
    list: &[JobSummary],
    leases: &[gpufleet::ledger::Lease],
    format: OutputFormat,
) -> Result<(), Failure> {
    let now = time::OffsetDateTime::now_utc();
    let rows: Vec<JobRow> = list
        .iter()
        .map(|s| {
            let mut r = row(s);
            r.driven_by = leases
                .iter()
                .find(|l| l.job_id == s.id && l.is_live(now))
                .map(|l| l.holder.clone());
            r
        })
        .collect();
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &rows)?,
        OutputFormat::Csv => crate::output::csv_rows(&mut out, &rows)?,
        OutputFormat::Table => {
            table(
                &mut out,
                &[
                    "JOB",
                    "STATE",
                    "POOL",
                    "STARTED",
                    ">PREEMPTIONS",
                    ">MOVES",
                    ">COST $",
                    "DRIVEN BY",
                ],
                &rows,
                |r| {
                    vec![
                        r.id.clone(),
                        r.state.clone(),
                        r.pool.clone().unwrap_or_else(|| "-".into()),
                        to_the_second(&r.started_at),
                        r.preemptions.to_string(),
                        r.moves.to_string(),
                        format!("{:.2}", r.cost_so_far_usd),
                        r.driven_by.clone().unwrap_or_else(|| "-".into()),
                    ]
                },
            )
            .map_err(write_failed)?;
            drop(out);
            match cost_per_completed_job(list)? {
                Some(per) => eprintln!(
                    "{} job(s); ${:.2} per completed job (every job's cost over the {} that succeeded)",
                    list.len(),
                    per.as_usd_f64(),
                    list.iter().filter(|j| j.state == JobState::Succeeded).count()
                ),
                None => eprintln!("{} job(s); none has completed yet", list.len()),
            }
        }
    }
    Ok(())
}

/// One event of `jobs show`'s timeline.
#[derive(Debug, Serialize)]
pub(super) struct Event {
    pub(super) at: String,
    pub(super) state: String,
    pub(super) pool: Option<String>,
    pub(super) attempt: u32,
    pub(super) instances: Vec<String>,
    pub(super) progress_hours: f64,
    pub(super) detail: String,
}

/// A job's measured GPU use, for output.
#[derive(Debug, Serialize)]
pub(super) struct UsageView {
    pub(super) instance_type: String,
    pub(super) instances: u32,
    pub(super) gpus_per_instance: u32,
    pub(super) measured_hours: f64,
    pub(super) mean_util_pct: Option<f64>,
    pub(super) max_util_pct: u8,
    pub(super) peak_memory_mib: u64,
    pub(super) memory_total_mib: u64,
    pub(super) updated_at: String,
}

impl UsageView {
    pub(super) fn new(u: &gpufleet::usage::JobUsage) -> Self {
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

    /// One line for people.
    pub(super) fn line(&self) -> String {
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

/// Prints, on stderr, the records of job `id` after the first `seen`, one
/// line each (`  2026-11-28T15:26:52Z launching  aws:…  key …: start …`),
/// and moves `seen` on. A ledger that cannot be read now is passed over:
/// the next look, or the summary, says what happened.
pub(super) async fn new_events(ledger: &dyn gpufleet::ledger::Ledger, id: &str, seen: &mut usize) {
    let Ok(history) = ledger.job_history(id).await else {
        return;
    };
    let from = (*seen).min(history.len());
    for r in &history[from..] {
        let at = to_the_second(&rfc3339(r.at));
        let pool = r
            .pool
            .as_ref()
            .map_or_else(|| "-".to_string(), ToString::to_string);
        let running = r.state == gpufleet::ledger::JobState::Running;
        let detail: String = if running && r.detail.is_empty() && !r.instances.is_empty() {
            let ids: Vec<String> = r.instances.iter().map(ToString::to_string).collect();
            format!("on {}", ids.join(", "))
        } else {
            r.detail.chars().take(160).collect()
        };
        eprintln!("  {at} {:<12}{pool}  {detail}", r.state.to_string());
    }
    *seen = history.len();
}

pub(super) fn print_show(
    s: &JobSummary,
    history: &[gpufleet::ledger::JobRecord],
    usage: Option<&gpufleet::usage::JobUsage>,
    format: OutputFormat,
) -> Result<(), Failure> {
    let usage = usage.map(UsageView::new);
    let events: Vec<Event> = history
        .iter()
        .map(|r| Event {
            at: rfc3339(r.at),
            state: r.state.to_string(),
            pool: r.pool.as_ref().map(ToString::to_string),
            attempt: r.attempt,
            instances: r.instances.iter().map(ToString::to_string).collect(),
            progress_hours: r.progress_hours,
            detail: r.detail.clone(),
        })
        .collect();
    let per = cost_per_completed_job(std::slice::from_ref(s))?;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => json(
            &mut out,
            &serde_json::json!({
                "job": row(s),
                "pools": s.pools.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "cost_per_completed_job_usd": per.map(|m| m.as_usd_f64()),
                "gpu_usage": usage,
                "events": events,
            }),
        )?,
        OutputFormat::Table => {
            use std::io::Write;
            let w = |out: &mut std::io::StdoutLock<'_>, line: String| {
                writeln!(out, "{line}").map_err(write_failed)
            };
            w(&mut out, format!("job        {} ({})", s.id, s.name))?;
            w(
                &mut out,
                if s.detail.is_empty() {
                    format!("state      {}", s.state)
                } else {
                    format!("state      {}: {}", s.state, s.detail)
                },
            )?;
            w(
                &mut out,
                format!("progress   {:.2} hours of work saved", s.progress_hours),
            )?;
            w(
                &mut out,
                format!(
                    "pools      {}",
                    s.pools
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ),
            )?;
            w(
                &mut out,
                format!(
                    "preempted  {} time(s); moved {} time(s); {} launch attempt(s)",
                    s.preemptions, s.moves, s.attempts
                ),
            )?;
            w(
                &mut out,
                format!("cost       ${:.2} so far", s.cost_so_far_usd()),
            )?;
            w(
                &mut out,
                match per {
                    Some(m) => format!("per job    ${:.2} per completed job", m.as_usd_f64()),
                    None => "per job    (not completed yet)".to_string(),
                },
            )?;
            w(
                &mut out,
                match &usage {
                    Some(u) => format!("gpu use    {}", u.line()),
                    None => "gpu use    not measured (no GPU summary from the node agent yet)"
                        .to_string(),
                },
            )?;
            w(&mut out, String::new())?;
            table(
                &mut out,
                &["AT", "STATE", "POOL", ">ATTEMPT", ">DONE H", "DETAIL"],
                &events,
                |e| {
                    vec![
                        to_the_second(&e.at),
                        e.state.clone(),
                        e.pool.clone().unwrap_or_else(|| "-".into()),
                        e.attempt.to_string(),
                        format!("{:.2}", e.progress_hours),
                        e.detail.chars().take(100).collect(),
                    ]
                },
            )
            .map_err(write_failed)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::to_the_second;

    #[test]
    fn table_times_are_to_the_second() {
        assert_eq!(
            to_the_second("2026-11-28T13:09:36.841420416Z"),
            "2026-11-28T13:09:36Z"
        );
        assert_eq!(
            to_the_second("2026-11-28T13:09:36.5+01:00"),
            "2026-11-28T13:09:36+01:00"
        );
        assert_eq!(
            to_the_second("2026-11-28T13:09:36.5-05:00"),
            "2026-11-28T13:09:36-05:00"
        );
        assert_eq!(
            to_the_second("2026-11-28T13:09:36Z"),
            "2026-11-28T13:09:36Z"
        );
    }
}
