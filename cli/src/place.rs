//! `gpufleet place`: rank pools by expected cost to finish a job.

use std::io::Write;
use std::time::Duration;

use gpufleet::placer::format_duration;
use gpufleet::report;
use gpufleet::runtime::verbs::{self, place::PlaceOptions};

use crate::job::{job_input, PlaceArgs};
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Runs `gpufleet place` on the embedded catalog, or with `--live` on the
/// enabled clouds' offers.
pub fn run(
    args: PlaceArgs,
    flags: gpufleet::runtime::config::Flags,
    format: OutputFormat,
) -> Result<(), Failure> {
    let cfg = gpufleet::runtime::config::Config::load(&flags)?;
    let job = job_input(&args)?.read(&cfg)?.spec;
    let opts = PlaceOptions {
        live: args.live,
        no_ledger: args.no_ledger,
    };
    let site = crate::shared::site(&cfg);
    let placed = crate::shared::runtime()?.block_on(verbs::place::place(&site, job, opts))?;
    if let Some(n) = placed.catalog_note.as_ref() {
        if format == OutputFormat::Table {
            eprintln!("{n}");
        }
    }
    crate::shared::warn_all(&placed.warnings);
    crate::shared::warn_dropped(&placed.dropped, 3);
    let (placement, now, unread) = (placed.placement, placed.now, placed.unread);
    let rows = report::shown(&placement, args.limit);
    let over_budget = placement.over_budget();
    let nothing = placement.ranking.feasible().next().is_none()
        || placement.decision().is_none()
        || over_budget.is_some();
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => {
            let rows = report::plan_rows(&placement, args.limit);
            if format == OutputFormat::Csv {
                crate::output::csv_rows(&mut out, &rows)?;
            } else {
                json(&mut out, &rows)?;
            }
        }
        OutputFormat::Table if !nothing => {
            if let Some(d) = placement.decision() {
                writeln!(out, "Decision: {}", d.explanation).map_err(io)?;
                writeln!(out).map_err(io)?;
            }
            table(
                &mut out,
                &[
                    "#",
                    "CLOUD",
                    "LOCATION",
                    "INSTANCE TYPE",
                    "CAPACITY",
                    ">$/HOUR",
                    ">PRICE AGE",
                    ">INTERRUPTS/H",
                    ">CKPT",
                    ">INDEX $/WORK-H",
                    ">E[COST] $",
                    "POLICY",
                ],
                rows.iter(),
                |(k, i)| {
                    let p = &placement.plans[*i];
                    let o = &p.offer;
                    let role = if placement.chosen().is_some_and(|(c, _)| c == *i) {
                        "chosen"
                    } else if placement.fallback(*i) {
                        "fallback"
                    } else if placement.shortlisted(*i) {
                        "shortlist"
                    } else {
                        ""
                    };
                    vec![
                        k.to_string(),
                        o.pool.cloud.to_string(),
                        o.pool.location(),
                        o.pool.instance_type.clone(),
                        o.pool.capacity.to_string(),
                        o.price.display(4).to_string(),
                        gpufleet::report::price_age(o.observed_at, now),
                        format!("{:.3}", p.hazard.rate_per_hour),
                        if o.pool.capacity == gpufleet::Capacity::OnDemand {
                            "-".to_string()
                        } else {
                            format_duration(Duration::from_secs_f64(
                                p.checkpoint_interval_hours * 3600.0,
                            ))
                        },
                        placement
                            .index(*i)
                            .map_or_else(|| "-".to_string(), |x| format!("{x:.3}")),
                        match placement.expected_cost(*i) {
                            Some(c) => c.display(2).to_string(),
                            None if placement.shortlisted(*i) || placement.fallback(*i) => {
                                "ruled out".to_string()
                            }
                            None => "-".to_string(),
                        },
                        role.to_string(),
                    ]
                },
            )
            .map_err(io)?;
            writeln!(out).map_err(io)?;
            writeln!(
                out,
                "E[COST]: the policy's expected cost to finish when starting there, the figure the decision compared ('-': outside its shortlist, not evaluated; 'ruled out': modelled, but starting there cannot meet the deadline)."
            )
            .map_err(io)?;
            writeln!(
                out,
                "INDEX $/WORK-H: the shortlist index, dollars per reference work-hour running there alone; it chose the shortlist and is not an expected cost. PRICE AGE: since gpufleet fetched the price (or published it, for the embedded catalog); `catalog refresh` fetches today's."
            )
            .map_err(io)?;
        }
        OutputFormat::Table => {}
    }
    if let Some((budget, cheapest)) = over_budget {
        return Err(Failure::NothingMatched(format!(
            "no plan is expected to finish within the ${} budget: the cheapest the placement policy found expects ${} to finish ({})",
            budget.display(2),
            cheapest.display(2),
            placement
                .decision()
                .map(|d| d.explanation.clone())
                .unwrap_or_default()
        )));
    }
    if nothing {
        return Err(Failure::NothingMatched(placement.ranking.why_nothing()));
    }
    if unread > 0 {
        return Err(Failure::Partial(format!(
            "partial answer: placed without {unread} cloud(s) that did not answer (exit 4)"
        )));
    }
    Ok(())
}
