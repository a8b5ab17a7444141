//! Jobs as tables, CSV and JSON: the list, and one job's history, usage and
//! cost per completed job.

use super::*;
use gpufleet::report::{rfc3339, to_the_second};
use gpufleet::runtime::report::{JobRow, JobShowDoc};

pub(super) fn print_list(
    list: &[JobSummary],
    rows: &[JobRow],
    format: OutputFormat,
) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &rows)?,
        OutputFormat::Csv => crate::output::csv_rows(&mut out, rows)?,
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
                rows,
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
    doc: &JobShowDoc,
    format: OutputFormat,
) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => json(&mut out, doc)?,
        OutputFormat::Table => {
            use std::io::Write;
            let w = |out: &mut std::io::StdoutLock<'_>, line: String| {
                writeln!(out, "{line}").map_err(write_failed)
            };
            for line in doc.header_lines(s) {
                w(&mut out, line)?;
            }
            w(&mut out, String::new())?;
            table(
                &mut out,
                &["AT", "STATE", "POOL", ">ATTEMPT", ">DONE H", "DETAIL"],
                &doc.events,
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
