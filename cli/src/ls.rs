//! `gpufleet ls`: managed instances with their cost, GPU use and expiry, or costs grouped by job, owner or team.

use clap::{Args, ValueEnum};

use crate::instances::{print_instances, usd_sum};
use crate::output::OutputFormat;
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags};
use gpufleet::runtime::spend::CostBy as reap_by;

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

    /// The ledger's spend over the last 30 days by a tag instead of listing
    /// instances (as `costs --by`).
    #[arg(long, value_enum, allow_hyphen_values = true)]
    cost_by: Option<CostBy>,
}

/// Runs `gpufleet ls`.
pub fn ls(args: LsArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    if let Some(by) = args.cost_by {
        // The ledger's figures, as `costs` gives them (its default window).
        let by = match by {
            CostBy::Job => reap_by::Job,
            CostBy::Team => reap_by::Team,
            CostBy::Owner => reap_by::Owner,
        };
        let site = crate::shared::site(&cfg);
        let report = crate::shared::runtime()?
            .block_on(gpufleet::runtime::verbs::spend::costs(&site, by, "30d"))?;
        return crate::costs::print(&report, format);
    }
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let site = crate::shared::site(&cfg);
        let mut fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let listing =
            gpufleet::runtime::verbs::instances::ls(&site, &mut fleet, args.job.as_deref()).await;
        crate::shared::warn_all(&listing.warnings);
        let rows = listing.rows;
        print_instances(&rows, format, None)?;
        if format == OutputFormat::Table {
            let total = usd_sum(rows.iter().filter_map(|r| r.cost_so_far_usd));
            let hourly = usd_sum(rows.iter().filter_map(|r| r.price_per_hour_usd));
            eprintln!(
                "{} managed instance(s); ${hourly:.2}/hour, ${total:.2} so far",
                rows.len()
            );
        }
        crate::shared::partial(&fleet, warned)
    })
}
