//! `gpufleet costs`: what the ledger says was spent, grouped, with the cost
//! per completed job and the saving against on-demand.

use clap::{Args, ValueEnum};
use gpufleet::runtime::config::{Config, Flags};
use gpufleet::runtime::spend::{CostBy, CostReport};

use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// How `costs --by` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ByArg {
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
    /// The UTC day.
    Day,
}

impl From<ByArg> for CostBy {
    fn from(b: ByArg) -> Self {
        match b {
            ByArg::Team => CostBy::Team,
            ByArg::Owner => CostBy::Owner,
            ByArg::Job => CostBy::Job,
            ByArg::Cloud => CostBy::Cloud,
            ByArg::Gpu => CostBy::Gpu,
            ByArg::Capacity => CostBy::Capacity,
            ByArg::Day => CostBy::Day,
        }
    }
}

/// Arguments of `gpufleet costs`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet costs --by team\n  gpufleet costs --by day --since 7d -o csv\n  gpufleet costs --by job --since 2026-11-01 -o json"
)]
pub struct CostsArgs {
    /// How to group the spend.
    #[arg(long, value_enum, default_value = "team")]
    by: ByArg,

    /// From how long ago (`30d`, `12h`) or from a UTC date (`2026-11-01`).
    #[arg(long, default_value = "30d", allow_hyphen_values = true)]
    since: String,
}

/// Runs `gpufleet costs`.
pub fn run(args: CostsArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let site = crate::shared::site(&cfg);
    let report = crate::shared::runtime()?.block_on(gpufleet::runtime::verbs::spend::costs(
        &site,
        args.by.into(),
        &args.since,
    ))?;
    print(&report, format)
}

/// Prints a cost report (`costs`, `ls --cost-by`).
pub fn print(r: &CostReport, format: OutputFormat) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, r)?,
        OutputFormat::Csv => crate::output::csv_rows(&mut out, &r.rows)?,
        OutputFormat::Table => {
            let head = r.by.field().to_uppercase();
            let rows = r.rows.iter().chain(std::iter::once(&r.total));
            table(
                &mut out,
                &[
                    &head,
                    ">INSTANCES",
                    ">RUNNING",
                    ">HOURS",
                    ">COST $",
                    ">ON-DEMAND $",
                    ">SAVED $",
                    ">$/HOUR NOW",
                ],
                rows,
                |c| {
                    vec![
                        c.key.clone(),
                        c.instances.to_string(),
                        c.running.to_string(),
                        format!("{:.1}", c.hours),
                        c.cost.display(2).to_string(),
                        c.on_demand.display(2).to_string(),
                        c.saving().map_or("?".into(), |m| m.display(2).to_string()),
                        c.per_hour_now.display(4).to_string(),
                    ]
                },
            )
            .map_err(write_failed)?;
            drop(out);
            match (r.cost_per_completed_job, r.mean_cost_of_a_succeeded_job) {
                (Some(c), Some(s)) => eprintln!(
                    "{} job(s) succeeded since {}: ${} per completed job (every job's spend over those that succeeded, as `jobs ls` says it); the jobs that succeeded cost ${} each on average",
                    r.completed_jobs,
                    &r.since[..10.min(r.since.len())],
                    c.display(2),
                    s.display(2)
                ),
                _ => eprintln!("no job succeeded since {}", &r.since[..10.min(r.since.len())]),
            }
            eprintln!(
                "from the ledger: instance-hours at the price recorded at launch (not disks, egress, support or credits); ON-DEMAND: the same hours at the catalog's on-demand price{}",
                if r.total.unpriced_hours > 0.0 {
                    format!(" ({:.1} h with no on-demand price left out)", r.total.unpriced_hours)
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(())
}
