//! `gpufleet terminate`: end instances by id, job or filter, and their placement groups.

use clap::Args;
use gpufleet::runtime::verbs::instances::{self, TerminateRequest};
use gpufleet::{Error, ErrorKind};

use crate::instances::{confirm, finish_terminate, print_instances};
use crate::output::OutputFormat;
use crate::shared::Failure;
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
    let req = TerminateRequest {
        ids: args.ids,
        job: args.job,
        tags: args.tag,
        any_owner: args.any_owner,
    };
    let cfg = Config::load(&flags)?;
    let site = crate::shared::site(&cfg);
    crate::shared::runtime()?.block_on(async {
        let mut fleet = crate::shared::open_checked_fleet(&cfg).await?;
        let warned = fleet.unread.len();
        let picked = match instances::pick(&site, &mut fleet, &req).await {
            Ok(p) => p,
            // Nothing matched (exit 3).
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Failure::NothingMatched(e.message().to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        if format == OutputFormat::Table {
            print_instances(&picked.rows, format, None)?;
        }
        let n = picked.victims.len();
        if !args.yes && !confirm(&format!("terminate these {n} instance(s)"))? {
            return Err(Error::invalid_input("not confirmed; nothing was terminated").into());
        }
        let ended = picked.terminate(&site, &fleet).await?;
        finish_terminate(ended, format)?;
        crate::shared::partial(&fleet, warned)
    })
}
