//! `gpufleet ls`: managed instances with their cost, GPU use and expiry, or costs grouped by job, owner or team.

use clap::{Args, ValueEnum};
use gpufleet::{tags, TagFilter};

use crate::instances::{managed, print_instances, rows, usd_sum};
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags};
use gpufleet::runtime::reap;

/// How `ls --cost-by` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CostBy {
    /// The job tag.
    Job,
    /// The team tag.
    Team,
    /// The owner tag.
    Owner,
}

/// Arguments of `gpufleet ls`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet ls\n  gpufleet ls --job train-42 -o json\n  gpufleet ls --cost-by team"
)]
pub struct LsArgs {
    /// Only this job's instances.
    #[arg(long, allow_hyphen_values = true)]
    job: Option<String>,

    /// Sum cost by a tag instead of listing instances (showback).
    #[arg(long, value_enum, allow_hyphen_values = true)]
    cost_by: Option<CostBy>,
}

/// Runs `gpufleet ls`.
pub fn ls(args: LsArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let mut fleet = crate::shared::open_fleet(&cfg).await?;
        let mut filter = TagFilter::default();
        if let Some(j) = &args.job {
            filter = filter.with(tags::JOB, j.clone());
        }
        let instances = managed(&fleet, &filter).await?;
        match args.cost_by {
            None => {
                let rows = rows(&mut fleet, &instances).await;
                print_instances(&rows, format, None)?;
                if format == OutputFormat::Table {
                    let total = usd_sum(rows.iter().filter_map(|r| r.cost_so_far_usd));
                    let hourly = usd_sum(rows.iter().filter_map(|r| r.price_per_hour_usd));
                    eprintln!(
                        "{} managed instance(s); ${hourly:.2}/hour, ${total:.2} so far",
                        rows.len()
                    );
                }
            }
            Some(by) => {
                let mut priced = Vec::with_capacity(instances.len());
                for i in &instances {
                    priced.push((i.clone(), fleet.price(&i.pool).await));
                }
                let tag = match by {
                    CostBy::Job => reap::CostBy::Job,
                    CostBy::Team => reap::CostBy::Team,
                    CostBy::Owner => reap::CostBy::Owner,
                };
                let list = reap::showback(&priced, tag, fleet.now)?;
                let mut out = std::io::stdout().lock();
                match format {
                    OutputFormat::Json => json(&mut out, &list)?,
                    OutputFormat::Csv => crate::output::csv_rows(&mut out, &list)?,
                    OutputFormat::Table => {
                        let by_name = match by {
                            CostBy::Job => "JOB",
                            CostBy::Team => "TEAM",
                            CostBy::Owner => "OWNER",
                        };
                        table(
                            &mut out,
                            &[by_name, ">INSTANCES", ">$/HOUR", ">COST SO FAR $", ">$/DAY"],
                            &list,
                            |g| {
                                vec![
                                    g.key.clone(),
                                    g.instances.to_string(),
                                    format!("{:.4}", g.per_hour_usd),
                                    format!("{:.2}", g.cost_so_far_usd),
                                    format!("{:.2}", g.per_day_usd),
                                ]
                            },
                        )
                        .map_err(write_failed)?;
                    }
                }
            }
        }
        Ok(())
    })
}
