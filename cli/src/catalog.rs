//! `gpufleet catalog refresh`: fetch the live catalogs into the local cache
//! (`gpufleet::runtime::live::cache`) and say what it holds.

use std::io::IsTerminal;

use clap::Args;
use gpufleet::runtime::config::{Config, Flags};
use gpufleet::runtime::live::cache::{self, Progress};
use gpufleet::Cloud;

use crate::args::parse_cloud;
use crate::output::OutputFormat;
use crate::shared::Failure;

/// Arguments of `gpufleet catalog refresh`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet catalog refresh --cloud aws\n  gpufleet catalog refresh --cloud aws -o json"
)]
pub struct RefreshArgs {
    /// Clouds to fetch (comma-separated; default: the enabled ones).
    #[arg(long, value_delimiter = ',', value_parser = parse_cloud, allow_hyphen_values = true)]
    cloud: Vec<Cloud>,
}

/// Runs `gpufleet catalog refresh`.
pub fn refresh(args: RefreshArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let rt = crate::shared::runtime()?;
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let done = rt.block_on(cache::refresh(&cfg, &args.cloud, |p| match p {
        Progress::Started { total } => bar.set_length(total as u64),
        Progress::Fetching { label } => bar.set_message(label),
        Progress::Fetched {
            label,
            offers,
            done,
            total,
        } => {
            if !tty {
                eprintln!("{label}: {offers} offers ({done}/{total})");
            }
            bar.inc(1);
        }
    }));
    let done = match done {
        Ok(d) => {
            bar.finish_and_clear();
            d
        }
        Err(e) => {
            bar.abandon();
            return Err(e.into());
        }
    };
    for n in &done.notes {
        eprintln!("{n}");
    }
    crate::shared::warn_all(&done.warnings);
    crate::shared::warn_dropped(&done.dropped, 5);
    for (c, r, e) in &done.failed {
        eprintln!("warning: {c} {r} not refreshed ({e}); its cached offers are kept");
    }
    if format == OutputFormat::Table {
        println!(
            "{} offers in {} region(s) refreshed; the cache {} holds {} offers in {} region(s)",
            done.offers_refreshed,
            done.refreshed.len(),
            done.path.display(),
            done.offers,
            done.regions
        );
    } else {
        crate::output::json(
            &mut std::io::stdout().lock(),
            &gpufleet::runtime::report::RefreshDoc::new(&done),
        )?;
    }
    if done.failed.is_empty() && done.unread.is_empty() {
        Ok(())
    } else {
        Err(Failure::Partial(format!(
            "partial refresh: {} region(s) not fetched, {} cloud(s) not read (exit 4)",
            done.failed.len(),
            done.unread.len()
        )))
    }
}
