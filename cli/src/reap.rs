//! `gpufleet reap`: find and end instances past their expiry, without a heartbeat, or idle by measured GPU use.

use std::time::Duration;

use clap::Args;
use gpufleet::TagFilter;

use crate::args::parse_dur;
use crate::instances::{finish_terminate, Terminated};
use crate::instances::{print_instances, rows, usd_sum};
use crate::output::{json, OutputFormat};
use crate::shared::Failure;
use gpufleet::ledger::EndedBy;
use gpufleet::runtime::config::{Config, Flags};

/// Arguments of `gpufleet reap`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet reap --idle 2h --below 5%      GPUs under 5% for two hours (dry run)\n  gpufleet reap --idle 12h --yes          no heartbeat for 12 hours: terminate"
)]
pub struct ReapArgs {
    /// Also reap instances idle this long: with --below, whose GPUs stayed
    /// under that utilisation (from the summary the node agent publishes);
    /// without it, whose job sent no heartbeat (instances without one count
    /// from their launch). At least 5m: a node's agent reports every 60 s.
    #[arg(long, value_parser = parse_idle, allow_hyphen_values = true)]
    idle: Option<Duration>,

    /// With --idle: idle means GPUs under this utilisation, in percent
    /// (1 to 100, e.g. 5 or 5%). Instances whose agent published nothing
    /// for longer than --grace are listed as unknown and never reaped.
    #[arg(long, value_name = "PCT", requires = "idle", value_parser = parse_pct, allow_hyphen_values = true)]
    below: Option<u8>,

    /// How old a GPU summary may be before the instance counts as unknown
    /// (also how long a new instance has to publish its first).
    #[arg(long, value_parser = parse_dur, default_value = "15m", requires = "below", allow_hyphen_values = true)]
    grace: Duration,

    /// Terminate them (without it, a dry run that only shows them).
    #[arg(long)]
    yes: bool,

    /// Other owners' instances (and those with no owner tag) too; without
    /// it, only yours (the config's owner), and the rest is said.
    #[arg(long)]
    any_owner: bool,
}

/// The shortest `--idle`: a node's agent writes its heartbeat every 60 s and
/// the clouds' tag reads lag by seconds to a minute, so a shorter window would
/// call a working node idle (and `--yes` would terminate it).
pub(crate) const MIN_IDLE: Duration = Duration::from_secs(5 * 60);

/// An `--idle` window: a duration of at least [`MIN_IDLE`].
pub(crate) fn parse_idle(s: &str) -> Result<Duration, String> {
    let d = parse_dur(s)?;
    if d < MIN_IDLE {
        return Err(format!(
            "invalid idle time '{s}': expected at least 5m (a node reports every 60 s, so a shorter window calls working nodes idle), such as 2h"
        ));
    }
    Ok(d)
}

/// A utilisation threshold in percent: `5` or `5%`, 1 to 100.
pub(crate) fn parse_pct(s: &str) -> Result<u8, String> {
    let t = s.trim().trim_end_matches('%').trim();
    match t.parse::<u8>() {
        Ok(v) if (1..=100).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid utilisation '{s}': expected a whole percent from 1 to 100, such as 5 or 5%"
        )),
    }
}

/// Runs `gpufleet reap`.
pub fn reap(args: ReapArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let mut fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let all = fleet.managed(&TagFilter::default()).await;
        if let Err(e) = fleet.settle(&cfg, &all, &TagFilter::default()).await {
            eprintln!("warning: could not record in the ledger what the clouds ended ({e})");
        }
        let driven = gpufleet::runtime::reap::driven_jobs(&cfg, fleet.now).await; // not reaped for their expiry
        let picked = gpufleet::runtime::reap::select(all, fleet.now, args.idle, args.below, args.grace, &driven);
        // Yours only, unless --any-owner: the others are said, not touched.
        let split = |v| gpufleet::runtime::reap::split_by_owner(v, &cfg.owner, args.any_owner, |(i, _): &(gpufleet::Instance, String)| i);
        let (victims, others) = split(picked.victims);
        let (unknown, _) = split(picked.unknown);
        let (victims, reasons): (Vec<_>, Vec<_>) = victims.into_iter().unzip();
        let (unknown, unknown_why): (Vec<_>, Vec<_>) = unknown.into_iter().unzip();
        let (others, others_why): (Vec<_>, Vec<_>) = others.into_iter().unzip();
        let mut left_alone = rows(&mut fleet, &others).await;
        left_alone.iter_mut().zip(others_why).for_each(|(r, why)| {
            let whose = r.owner.as_deref().map_or_else(|| "no one's (no owner tag)".to_string(), |o| format!("{o}'s"));
            r.reason = Some(format!("{why}; left alone: {whose}, not {}'s (--any-owner to include it)", cfg.owner));
        });
        if format == OutputFormat::Table && !left_alone.is_empty() {
            eprintln!(
                "{} matching instance(s) of other owners left alone (--any-owner to include them):",
                left_alone.len()
            );
            print_instances(&left_alone, format, Some("WHY"))?;
            eprintln!();
        }
        let mut rows = rows(&mut fleet, &victims).await;
        rows.iter_mut().zip(reasons).for_each(|(r, why)| r.reason = Some(why));
        let mut unknown_rows = self::rows(&mut fleet, &unknown).await;
        unknown_rows.iter_mut().zip(unknown_why).for_each(|(r, why)| r.reason = Some(why));
        if format == OutputFormat::Table && !unknown_rows.is_empty() {
            eprintln!(
                "{} instance(s) with no recent GPU summary (unknown, never reaped):",
                unknown_rows.len()
            );
            print_instances(&unknown_rows, format, Some("WHY"))?;
            eprintln!();
        }
        let so_far = usd_sum(rows.iter().filter_map(|r| r.cost_so_far_usd));
        let per_day = usd_sum(rows.iter().filter_map(|r| r.cost_per_day_usd));
        if !args.yes {
            match format {
                OutputFormat::Table => {
                    if !rows.is_empty() {
                        print_instances(&rows, format, Some("WHY"))?;
                    }
                    eprintln!(
                        "dry run: {} forgotten instance(s), ${so_far:.2} so far, ${per_day:.2} a day; re-run with --yes to terminate them",
                        rows.len()
                    );
                }
                _ => json(
                    &mut std::io::stdout().lock(),
                    &Terminated::dry_run(rows, unknown_rows).with_left_alone(left_alone),
                )?,
            }
            return crate::shared::partial(&fleet, warned);
        }
        if format == OutputFormat::Table && !rows.is_empty() {
            print_instances(&rows, format, Some("WHY"))?;
        }
        let ledger = cfg.open_ledger().await;
        let why = |i: &gpufleet::Instance| {
            let reason = rows
                .iter()
                .find(|r| r.id == i.id.as_str())
                .and_then(|r| r.reason.clone())
                .unwrap_or_default();
            let by = if i.expires_at.is_some_and(|t| t <= fleet.now) {
                EndedBy::Ttl
            } else {
                EndedBy::Reap
            };
            (by, format!("gpufleet reap: {reason}"))
        };
        let out = gpufleet::runtime::reap::terminate_recorded(
            &fleet.providers,
            &victims,
            ledger.as_ref().ok().map(|l| l.as_ref()),
            &why,
            fleet.now,
        )
        .await;
        let result = (out.terminated, out.failed);
        // Groups whose last instance went (now or earlier), except those of
        // jobs the ledger says are launching right now (all of them kept when
        // the ledger cannot say).
        let launching = match &ledger {
            Ok(l) => gpufleet::runtime::reap::launching_jobs(l.as_ref(), fleet.now).await,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ledger; placement groups are kept this time");
                None
            }
        };
        let busy = |job: &str| launching.as_ref().is_none_or(|l| l.iter().any(|j| j == job));
        // This owner's empty groups only, unless --any-owner.
        let group_filter = if args.any_owner {
            TagFilter::default()
        } else {
            TagFilter::default().with(gpufleet::tags::OWNER, cfg.owner.clone())
        };
        let groups = gpufleet::runtime::reap::drop_empty_groups(&fleet.providers, &group_filter, &victims, false, &busy).await;
        fleet.save()?;
        if format == OutputFormat::Table {
            eprintln!(
                "reaped {} instance(s) that had cost ${so_far:.2} and were costing ${per_day:.2} a day",
                result.0.len()
            );
        }
        finish_terminate(result, groups, rows, unknown_rows, left_alone, format)?;
        crate::shared::partial(&fleet, warned)
    })
}
