//! `gpufleet simulate --timeline START`: one start of one scenario, tick by
//! tick, for every policy beside every pool's availability.

use std::io::Write;

use gpufleet::report::{letter, TimelineDoc, MAX_POOLS};
use gpufleet::sim::{Place, PolicyKind, Scenario, SimPool, SimulatedTimes, Timeline};
use gpufleet::Error;

use super::SimulateArgs;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;
use gpufleet::sim::grid::types_in_order;

/// Ticks per printed row.
const ROW: usize = 72;

/// One run as a line of characters: `.` idle, `O` on-demand, a pool's letter
/// on spot there (lower case while paying a changeover).
fn draw(run: &Timeline) -> String {
    run.ticks
        .iter()
        .map(|t| {
            let c = match t.at {
                Place::Idle => return '.',
                Place::OnDemand => 'O',
                Place::Spot(k) => letter(k).unwrap_or('?'),
            };
            if t.changeover {
                c.to_ascii_lowercase()
            } else {
                c
            }
        })
        .collect()
}

/// Runs `gpufleet simulate --timeline START` over one pool set.
pub(super) fn run(
    args: &SimulateArgs,
    set: &[SimPool],
    scenario: &Scenario,
    policies: &[PolicyKind],
    start: usize,
    format: OutputFormat,
) -> Result<(), Failure> {
    if set.len() > MAX_POOLS && matches!(format, OutputFormat::Table) {
        return Err(Error::invalid_input(format!(
            "a timeline table draws at most {MAX_POOLS} pools, one letter each; this set has {}: choose fewer with --instance-type or --zone, or use --output json (no limit)",
            set.len()
        ))
        .into());
    }
    if let Some(note) = SimulatedTimes::of(set, scenario)?.rounding(scenario) {
        eprintln!("simulate: note: {note}");
    }
    let report = TimelineDoc::new(
        &args.traces.display().to_string(),
        set,
        scenario,
        policies,
        start,
    )?;
    let tick_h = report.tick_seconds as f64 / 3600.0;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => json(&mut out, &report),
        OutputFormat::Table => print(&mut out, &report, set, tick_h).map_err(write_failed),
    }
}

fn print(
    out: &mut impl Write,
    r: &TimelineDoc,
    set: &[SimPool],
    tick_h: f64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{} | job {} h, deadline {} h, changeover {:.2} h | start {} of {} ({}), {}-minute ticks",
        types_in_order(set).join("|"),
        r.job_hours,
        r.deadline_hours,
        r.changeover_hours,
        r.start,
        r.starts,
        r.start_time,
        r.tick_seconds / 60
    )?;
    table(
        out,
        &["POLICY", ">COST $", ">PREEMPTIONS", ">MOVES", "MISSED"],
        &r.runs,
        |run| {
            vec![
                run.policy.clone(),
                format!("{:.2}", run.cost_usd),
                run.preemptions.to_string(),
                run.moves.to_string(),
                if run.missed { "yes" } else { "no" }.to_string(),
            ]
        },
    )?;
    writeln!(out)?;
    for p in &r.pools {
        writeln!(
            out,
            "{} = spot {} {} (${:.4}/h, speed {:.2})",
            p.letter.unwrap_or('?'),
            p.instance_type,
            p.location,
            p.spot_usd_per_hour,
            p.throughput
        )?;
    }
    writeln!(
        out,
        "runs: . idle, O on-demand, a pool's letter on spot there (lower case: paying a changeover); pools: + capacity, _ none"
    )?;
    let lines: Vec<(String, String)> = r
        .runs
        .iter()
        .filter(|run| !run.ticks.is_empty())
        .map(|run| (run.policy.clone(), draw(run)))
        .chain(r.pools.iter().map(|p| {
            (
                p.letter.unwrap_or('?').to_string(),
                p.available
                    .iter()
                    .map(|a| if *a { '+' } else { '_' })
                    .collect(),
            )
        }))
        .collect();
    let width = lines.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let span = r.pools.first().map_or(0, |p| p.available.len());
    for from in (0..span).step_by(ROW) {
        writeln!(out, "\nfrom hour {:.1}", from as f64 * tick_h)?;
        for (name, line) in &lines {
            let part: String = line.chars().skip(from).take(ROW).collect();
            writeln!(out, "  {name:<width$}  {part}")?;
        }
    }
    if r.runs.iter().any(|run| run.ticks.is_empty()) {
        writeln!(
            out,
            "\n(the optimum's whole table is too large to keep here: its cost, and no path)"
        )?;
    }
    Ok(())
}
