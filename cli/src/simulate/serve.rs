//! `gpufleet simulate --serve`: a service's replicas over the traces, for
//! on-demand, spot only, SpotHedge and gpufleet's own policy.

use std::io::Write;

use gpufleet::serve::ServiceSpec;
use gpufleet::sim::{Demand, ServePolicy, ServeReport, ServeScenario, SimPool};
use gpufleet::Error;

use super::SimulateArgs;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Runs `gpufleet simulate --serve` over one pool set.
pub(super) fn run(
    args: &SimulateArgs,
    set: &[SimPool],
    format: OutputFormat,
) -> Result<(), Failure> {
    let spec = match &args.service {
        Some(path) => {
            gpufleet::runtime::verbs::serve::load_service(path, gpufleet::Snapshot::embedded())?.1
        }
        None => ServiceSpec::from_toml(gpufleet::sim::DEFAULT_SIM_SERVICE)?,
    };
    let demand = match &args.demand {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::invalid_input(format!(
                    "cannot read the demand file '{}': {e}",
                    path.display()
                ))
            })?;
            Demand::from_csv(&path.display().to_string(), &text)?
        }
        None => Demand::diurnal(args.peak_rpm, args.trough_rpm)?,
    };
    let policies = if args.policies.is_empty() {
        ServePolicy::ALL.to_vec()
    } else {
        args.policies
            .iter()
            .map(|p| ServePolicy::parse(p))
            .collect::<Result<Vec<_>, _>>()?
    };
    let scenario = ServeScenario {
        spec,
        demand,
        request_seconds: args.request_seconds,
        utilization: args.utilization,
        cold_start_minutes: args.cold_start,
    };
    let report = gpufleet::sim::simulate_serve(set, &scenario, &policies)?;
    if let Some(path) = &args.plot {
        gpufleet::runtime::plot::serve_svg(path, &report)?;
        eprintln!("simulate: drew {}", path.display());
    }
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => json(&mut out, &report),
        OutputFormat::Table => print(&mut out, &report).map_err(write_failed),
    }
}

fn print(out: &mut impl Write, r: &ServeReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{} | {:.1} days | {} | {:.1} s a request, peak {:.1} in flight ({} replicas), utilization {}, cold start {} min",
        r.pools.join(", "),
        r.minutes as f64 / 1440.0,
        r.demand,
        r.request_seconds,
        r.peak_in_flight,
        r.peak_target,
        r.utilization,
        r.cold_start_minutes
    )?;
    table(
        out,
        &[
            "POLICY",
            ">COST $",
            ">VS ON-DEMAND",
            ">SERVED %",
            ">SHORT MIN",
            ">PREEMPTIONS",
            ">LAUNCHES",
            ">REFUSED",
            ">SPOT H",
            ">ON-DEMAND H",
        ],
        &r.results,
        |p| {
            vec![
                p.policy.as_str().to_string(),
                p.cost_usd.display(2).to_string(),
                p.cost_vs_on_demand
                    .map_or("-".into(), |v| format!("{v:.3}")),
                format!("{:.3}", p.served_share * 100.0),
                p.short_minutes.to_string(),
                p.preemptions.to_string(),
                p.launches.to_string(),
                p.refused_launches.to_string(),
                format!("{:.0}", p.spot_hours),
                format!("{:.0}", p.on_demand_hours),
            ]
        },
    )
}
