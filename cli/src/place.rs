//! `gpufleet place`: rank pools by expected cost to finish a job.

use std::io::Write;
use std::time::Duration;

use gpufleet::placer::{format_duration, JobSpec, PlaceRequest, Placement};
use gpufleet::runtime::live;
use gpufleet::Error;
use serde::Serialize;
use time::format_description::well_known::Rfc3339;

use crate::job::{evidence, job_from, PlaceArgs};
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// One pool as `--output json` prints it (a stable schema, documented in
/// docs/placing.md).
#[derive(Debug, Serialize)]
struct PlanRow {
    /// Its place in the order shown: the pools the policy evaluated by its
    /// expected cost to finish, then the rest by the shortlist index.
    rank: usize,
    cloud: String,
    region: String,
    zone: Option<String>,
    instance_type: String,
    capacity: &'static str,
    gpu_model: String,
    gpu_count: u32,
    price_per_hour_usd: f64,
    /// The placement policy's expected cost to finish when the first move is
    /// to start here: the figure the decision compared. `None` (null) for a
    /// pool the policy did not evaluate (outside its shortlist).
    expected_cost_usd: Option<f64>,
    /// Whether the policy evaluated this pool (`expected_cost_usd` is set).
    evaluated: bool,
    /// The shortlist index: expected dollars per reference work-hour of
    /// running the rest here alone. What chose the shortlist; not an
    /// expected cost.
    index_usd_per_work_hour: f64,
    /// Hours to finish if run here alone, and the chance that meets the
    /// deadline, by the ranking index's model.
    expected_hours: f64,
    p_deadline: f64,
    interruption_rate_per_hour: f64,
    checkpoint_interval_hours: f64,
    work_hours: f64,
    feasible: bool,
    problems: Vec<String>,
    hazard_signals: Vec<String>,
    explanation: String,
    source: String,
    observed_at: String,
    /// The placement policy starts the job here.
    chosen: bool,
    /// The policy modelled this pool jointly (its shortlist).
    shortlisted: bool,
    /// The policy's on-demand fallback.
    fallback: bool,
    /// Shortlisted, but no first move there is allowed (it cannot meet the
    /// deadline from there).
    ruled_out: bool,
}

impl PlanRow {
    fn new(rank: usize, i: usize, placement: &Placement) -> Self {
        let p = &placement.plans[i];
        let o = &p.offer;
        let gpu = o.instance_type.gpu.as_ref();
        let cost = placement.expected_cost(i);
        PlanRow {
            rank,
            cloud: o.pool.cloud.to_string(),
            region: o.pool.region.to_string(),
            zone: o.pool.zone.as_ref().map(|z| z.to_string()),
            instance_type: o.pool.instance_type.clone(),
            capacity: o.pool.capacity.as_str(),
            gpu_model: gpu.map(|g| g.model.to_string()).unwrap_or_default(),
            gpu_count: o.instance_type.gpu_count(),
            price_per_hour_usd: o.price.usd_per_hour_f64(),
            // To the cent, as the decision line and the table say it.
            expected_cost_usd: cost.map(|c| (c.as_usd_f64() * 100.0).round() / 100.0),
            evaluated: cost.is_some(),
            index_usd_per_work_hour: round3(placement.index(i).unwrap_or(f64::NAN)),
            expected_hours: round3(p.expected_hours),
            p_deadline: round3(p.p_deadline),
            interruption_rate_per_hour: round3(p.hazard.rate_per_hour),
            checkpoint_interval_hours: round3(p.checkpoint_interval_hours),
            work_hours: round3(p.work_hours),
            feasible: p.feasible,
            problems: p.problems.clone(),
            hazard_signals: p.hazard.signals.clone(),
            explanation: p.explanation.clone(),
            source: o.source.to_string(),
            observed_at: o.observed_at.format(&Rfc3339).unwrap_or_default(),
            chosen: placement.chosen().is_some_and(|(c, _)| c == i),
            shortlisted: placement.shortlisted(i),
            fallback: placement.fallback(i),
            ruled_out: cost.is_none() && (placement.shortlisted(i) || placement.fallback(i)),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The job's offers from the enabled providers with their stability
/// signals: the call `run`'s executor makes ([`live::job_offers`]). A cloud
/// that does not answer is named on stderr and placed without.
fn live_offers(
    cfg: &gpufleet::runtime::config::Config,
    job: &JobSpec,
) -> Result<Vec<gpufleet::Offer>, Error> {
    crate::shared::runtime()?.block_on(async {
        let fleet = crate::shared::open_fleet(cfg).await?;
        let got = live::job_offers(&fleet.providers, job).await?;
        for (cloud, e) in &got.failed {
            eprintln!("warning: {cloud} did not answer ({e}); placing without it");
        }
        crate::shared::warn_dropped(&got.dropped, 3);
        Ok(got.offers)
    })
}

/// Runs `gpufleet place` on the embedded catalog, or with `--live` on the
/// enabled clouds' offers.
pub fn run(
    args: PlaceArgs,
    flags: gpufleet::runtime::config::Flags,
    format: OutputFormat,
) -> Result<(), Failure> {
    let cfg = gpufleet::runtime::config::Config::load(&flags)?;
    let (catalog, note) = gpufleet::runtime::live::cache::current(&cfg);
    let snapshot = &catalog;
    if let Some(n) = &note {
        if format == OutputFormat::Table {
            eprintln!("{n}");
        }
    }
    let mut job = job_from(&args, snapshot)?;
    job.clouds = cfg.clouds_or_enabled(&job.clouds);
    let now = gpufleet::runtime::fleet::now(&cfg)?;
    let placer = cfg.placer();
    let evidence = evidence(args.no_ledger, &cfg.ledger, placer.evidence_since(now))?;
    let live;
    let offers = if args.live {
        live = live_offers(&cfg, &job)?;
        &live
    } else {
        snapshot.offers()
    };
    let placement = placer.place(&PlaceRequest::new(&job, offers, &evidence, now))?;
    // `--limit 0` shows every pool the policy chose between.
    let shown = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    let order = placement.order();
    let mut rows: Vec<(usize, usize)> = order
        .iter()
        .enumerate()
        .take(shown)
        .map(|(k, i)| (k + 1, *i))
        .collect();
    // The policy's choice is always a row, even below `--limit`: a script
    // reads where the job would start from `chosen`.
    if let Some((c, _)) = placement.chosen() {
        if !rows.iter().any(|(_, i)| *i == c) {
            if let Some(k) = order.iter().position(|i| *i == c) {
                rows.push((k + 1, c));
            }
        }
    }
    let nothing = placement.ranking.feasible().next().is_none() || placement.decision().is_none();
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => {
            let rows: Vec<PlanRow> = rows
                .iter()
                .map(|(k, i)| PlanRow::new(*k, *i, &placement))
                .collect();
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
                "INDEX $/WORK-H: the shortlist index, dollars per reference work-hour running there alone; it chose the shortlist and is not an expected cost."
            )
            .map_err(io)?;
        }
        OutputFormat::Table => {}
    }
    if nothing {
        return Err(Failure::NothingMatched(placement.ranking.why_nothing()));
    }
    Ok(())
}
