//! `gpufleet reap`: find and end instances past their expiry, without a heartbeat, or idle by measured GPU use.

use std::time::Duration;

use clap::Args;
use gpufleet::runtime::verbs::instances::{self, ReapRequest, MIN_IDLE};

use crate::args::parse_dur;
use crate::instances::{finish_terminate, print_instances};
use crate::output::{json, OutputFormat};
use crate::shared::Failure;
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
    let req = ReapRequest {
        idle: args.idle,
        below: args.below,
        grace: args.grace,
        apply: args.yes,
        any_owner: args.any_owner,
    };
    let cfg = Config::load(&flags)?;
    let site = crate::shared::site(&cfg);
    crate::shared::runtime()?.block_on(async {
        let mut fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let reaped = instances::reap(&site, &mut fleet, &req).await?;
        crate::shared::warn_all(&reaped.warnings);
        let doc = &reaped.doc;
        let (so_far, per_day) = (reaped.so_far_usd, reaped.per_day_usd);
        if format == OutputFormat::Table {
            for (rows, heading) in [
                (&doc.left_alone, "matching instance(s) of other owners left alone (--any-owner to include them):"),
                (&doc.unknown, "instance(s) with no recent GPU summary (unknown, never reaped):"),
            ] {
                if !rows.is_empty() {
                    eprintln!("{} {heading}", rows.len());
                    print_instances(rows, format, Some("WHY"))?;
                    eprintln!();
                }
            }
            if !doc.candidates.is_empty() {
                print_instances(&doc.candidates, format, Some("WHY"))?;
            }
        }
        if !args.yes {
            match format {
                OutputFormat::Table => eprintln!(
                    "dry run: {} forgotten instance(s), ${so_far:.2} so far, ${per_day:.2} a day; re-run with --yes to terminate them",
                    doc.candidates.len()
                ),
                _ => json(&mut std::io::stdout().lock(), doc)?,
            }
            return crate::shared::partial(&fleet, warned);
        }
        if format == OutputFormat::Table {
            eprintln!(
                "reaped {} instance(s) that had cost ${so_far:.2} and were costing ${per_day:.2} a day",
                doc.terminated.len()
            );
        }
        finish_terminate(
            instances::Ended {
                doc: reaped.doc,
                failed: reaped.failed,
            },
            format,
        )?;
        crate::shared::partial(&fleet, warned)
    })
}
