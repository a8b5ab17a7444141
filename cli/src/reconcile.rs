//! `gpufleet reconcile`: the ledger made to agree with the clouds (a dry run
//! unless `--yes`).

use clap::Args;
use gpufleet::runtime::config::{Config, Flags};

use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Arguments of `gpufleet reconcile`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet reconcile              what it would change\n  gpufleet reconcile --yes -o json"
)]
pub struct ReconcileArgs {
    /// Record the ends, adopt the unknown instances and fail the stuck
    /// launches (default: only say what would be done).
    #[arg(long)]
    yes: bool,

    /// Every owner's instances and launches too (default: yours, the
    /// config's owner: another owner's are never touched).
    #[arg(long)]
    any_owner: bool,
}

/// Runs `gpufleet reconcile`.
pub fn run(args: ReconcileArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let site = crate::shared::site(&cfg);
    crate::shared::runtime()?.block_on(async {
        let done =
            gpufleet::runtime::verbs::spend::reconcile(&site, args.yes, args.any_owner).await?;
        crate::shared::warn_all(&done.warnings);
        let r = done.report;
        let mut out = std::io::stdout().lock();
        match format {
            OutputFormat::Table => {
                let verb = |done: &str, would: &str| if r.applied { done } else { would }.to_string();
                let mut lines: Vec<[String; 4]> = Vec::new();
                for e in &r.ended {
                    lines.push([verb("ended", "would end"), format!("{}:{}", e.cloud, e.id), e.job.clone(), e.reason.clone()]);
                }
                for u in &r.unknown {
                    lines.push([
                        verb("adopted", "would adopt"),
                        format!("{}:{}", u.cloud, u.id),
                        u.job.clone().unwrap_or_else(|| "-".into()),
                        format!(
                            "managed, yours, not in the ledger: {} old, {}",
                            gpufleet::placer::format_duration(std::time::Duration::from_secs_f64(u.age_hours * 3600.0)),
                            u.price_per_hour_usd.map_or("price unknown".into(), |p| format!("${p:.4}/h"))
                        ),
                    ]);
                }
                for s in &r.stuck {
                    lines.push([verb("failed", "would fail"), "-".into(), s.job.clone(), format!("{} since {} with nothing alive and no controller", s.state, s.since)]);
                }
                for l in &r.leftovers {
                    lines.push([verb("terminated", "would terminate"), l.instance.clone(), l.job.clone(), l.why.clone()]);
                }
                for j in &r.jobs_closed {
                    lines.push(["closed".into(), "-".into(), j.clone(), "its last instance ended".into()]);
                }
                if !lines.is_empty() {
                    table(&mut out, &["ACTION", "INSTANCE", "JOB", "WHY"], &lines, |l| l.to_vec())
                        .map_err(write_failed)?;
                }
                drop(out);
                match (r.is_clean(), r.applied) {
                    (true, _) => eprintln!("the ledger agrees with the clouds read"),
                    (false, true) => eprintln!("reconciled: {} ended, {} adopted, {} failed", r.ended.len(), r.unknown.len(), r.stuck.len()),
                    (false, false) => eprintln!("dry run: re-run with --yes to record this (unmanaged instances are never touched)"),
                }
            }
            _ => json(&mut out, &r)?,
        }
        crate::shared::partial_of(&done.unread, 0)
    })
}
