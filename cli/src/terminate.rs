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

    /// Other owners' instances too, by id, --job or --tag (without it,
    /// only yours: the config's owner, unless --tag owner=… says whose; an
    /// id of another owner's instance is refused, nothing terminated).
    #[arg(long)]
    any_owner: bool,

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
    if !args.any_owner && !filter.0.contains_key(tags::OWNER) {
        filter = filter.with(tags::OWNER, cfg.owner.clone());
    }
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let mut fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let mut victims: Vec<Instance> = Vec::new();
        // Every managed instance, listed once if a console id needs it.
        let mut listed = None;
        for id in &args.ids {
            let i = match fleet.find_managed(id, &mut listed).await {
                Ok(i) => i,
                // Nothing matched, as with `--job` or `--tag` (exit 3).
                Err(e) if e.kind() == gpufleet::ErrorKind::NotFound => {
                    return Err(Failure::NothingMatched(e.message().to_string()))
                }
                Err(e) => return Err(e.into()),
            };
            if i.state.is_live() {
                victims.push(i);
            }
        }
        // An id names one instance: another owner's (or no one's) is
        // refused before anything is terminated, naming whose it is.
        let (_, theirs) = gpufleet::runtime::reap::split_by_owner(
            victims.clone(),
            &cfg.owner,
            args.any_owner,
            |i: &Instance| i,
        );
        if !theirs.is_empty() {
            let named: Vec<String> = theirs
                .iter()
                .map(|i| {
                    format!(
                        "{} ({})",
                        i.id,
                        i.tags
                            .get(tags::OWNER)
                            .map_or_else(|| "no owner tag".to_string(), |o| format!("{o}'s"))
                    )
                })
                .collect();
            return Err(Error::invalid_input(format!(
                "not yours ({}): {}; nothing was terminated; --any-owner terminates other owners' instances",
                cfg.owner,
                named.join(", ")
            ))
            .into());
        }
        if args.job.is_some() || !args.tag.is_empty() {
            victims.extend(fleet.managed(&filter).await);
        }
        victims.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        victims.dedup_by(|a, b| a.id == b.id);
        if victims.is_empty() {
            return Err(Failure::NothingMatched(format!(
                "no managed instance matches{}",
                if args.any_owner {
                    ""
                } else {
                    " (of yours: --any-owner for everyone's)"
                }
            )));
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
        let groups = gpufleet::runtime::reap::drop_empty_groups(
            &fleet.providers,
            &filter,
            &victims,
            theirs,
            &|_| false,
        )
        .await;
        fleet.save()?;
        finish_terminate(result, groups, rows, Vec::new(), Vec::new(), format)?;
        crate::shared::partial(&fleet, warned)
    })
}
