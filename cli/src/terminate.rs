//! `gpufleet terminate`: end instances by id, job or filter, and their placement groups.

use clap::Args;
use gpufleet::{tags, Error, Instance, TagFilter};

use crate::instances::{confirm, finish_terminate, print_instances, rows};
use crate::output::OutputFormat;
use crate::shared::Failure;
use gpufleet::ledger::EndedBy;
use gpufleet::runtime::config::{Config, Flags};

/// Arguments of `gpufleet terminate`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet terminate --job train-42\n  gpufleet terminate i-0123456789abcdef0 --yes"
)]
pub struct TerminateArgs {
    /// Instance ids, as `ls` prints them (`us-east-1/i-0abc…`) or as the
    /// cloud shows them (`i-0abc…`).
    ids: Vec<String>,

    /// Every managed instance of this job.
    #[arg(long, allow_hyphen_values = true)]
    job: Option<String>,

    /// Every managed instance with this tag (`KEY=VALUE`, repeatable):
    /// `team`, `project`, `owner` and `job` are gpufleet's own tags
    /// (`gpufleet:team`, …), any other key is matched as written.
    #[arg(long, value_name = "KEY=VALUE", allow_hyphen_values = true)]
    tag: Vec<String>,

    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

/// Runs `gpufleet terminate`.
pub fn terminate(args: TerminateArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    if args.ids.is_empty() && args.job.is_none() && args.tag.is_empty() {
        return Err(Error::invalid_input(
            "say what to terminate: instance ids, --job NAME or --tag KEY=VALUE",
        )
        .into());
    }
    let mut filter = TagFilter::default();
    for t in &args.tag {
        let Some((k, v)) = t.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(
                Error::invalid_input(format!("invalid --tag '{t}': expected KEY=VALUE")).into(),
            );
        };
        // `--tag team=research` means the team tag `launch --team` wrote.
        filter = filter.with(tags::named(k).unwrap_or(k), v);
    }
    if let Some(j) = &args.job {
        filter = filter.with(tags::JOB, j.clone());
    }
    let cfg = Config::load(&flags)?;
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let mut fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let mut victims: Vec<Instance> = Vec::new();
        // Every managed instance, listed once if a console id needs it.
        let mut listed = None;
        for id in &args.ids {
            let found = fleet.find(id, &mut listed).await?;
            // Nothing matched, as with `--job` or `--tag` (exit 3).
            let Some(i) = found else {
                let unread: Vec<&str> = fleet.unread.iter().map(|u| u.cloud.as_str()).collect();
                return Err(Failure::NothingMatched(format!(
                    "no instance {id} in {}; gpufleet's ids look like \
                     us-east-1/i-0abc… (AWS), us-central1-a/gf-0123abcd (GCP) or \
                     gpufleet/gf-0123abcd-0 (Azure), as `gpufleet ls` shows them",
                    if unread.is_empty() {
                        "any enabled cloud".to_string()
                    } else {
                        format!("the clouds read ({} not read)", unread.join(", "))
                    }
                )));
            };
            if i.tags.get(tags::MANAGED).map(String::as_str) != Some("true") {
                return Err(Error::invalid_input(format!(
                    "instance {id} ({}) is not managed by gpufleet (no {} tag): it is not gpufleet's and was left alone; terminate it with the {} console or CLI if you mean to",
                    i.pool.cloud,
                    tags::MANAGED,
                    i.pool.cloud
                ))
                .into());
            }
            if i.state.is_live() {
                victims.push(i);
            }
        }
        if args.job.is_some() || !args.tag.is_empty() {
            victims.extend(fleet.managed(&filter).await);
        }
        victims.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        victims.dedup_by(|a, b| a.id == b.id);
        if victims.is_empty() {
            return Err(Failure::NothingMatched("no managed instance matches".into()));
        }
        let rows = rows(&mut fleet, &victims).await;
        if format == OutputFormat::Table {
            print_instances(&rows, format, None)?;
        }
        if !args.yes && !confirm(&format!("terminate these {} instance(s)", victims.len()))? {
            return Err(Error::invalid_input("not confirmed; nothing was terminated").into());
        }
        let ledger = cfg.open_ledger().await?;
        let who = format!("gpufleet terminate by {}", cfg.owner);
        let out = gpufleet::runtime::reap::terminate_recorded(
            &fleet.providers,
            &victims,
            Some(ledger.as_ref()),
            &|_| (EndedBy::Terminate, who.clone()),
            fleet.now,
        )
        .await;
        let result = (out.terminated, out.failed);
        let theirs = args.job.is_none() && args.tag.is_empty();
        let groups = gpufleet::runtime::reap::drop_empty_groups(&fleet.providers, &filter, &victims, theirs, &|_| false).await;
        fleet.save()?;
        finish_terminate(result, groups, rows, Vec::new(), format)?;
        crate::shared::partial(&fleet, warned)
    })
}
