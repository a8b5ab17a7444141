//! What every command shares and no command owns: how a command fails
//! (and so its exit code), the async runtime it runs on, SIGTERM, opening
//! the fleet and printing the warnings the library returns.

use gpufleet::runtime::config::Config;
use gpufleet::runtime::fleet::{Fleet, Unread};
use gpufleet::runtime::verbs::{Opening, Site};
use gpufleet::{Error, ErrorKind};

/// The async runtime commands that talk to clouds run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("cannot start the async runtime: {e}"),
            )
        })
}

/// How a command failed, and so which exit code it gets.
#[derive(Debug)]
pub enum Failure {
    /// A gpufleet error (bad input exits 2, anything else 1).
    Error(Error),
    /// The command ran but nothing matched (exit 3).
    NothingMatched(String),
    /// Stopped by Ctrl-C after saying what it did (exit 130).
    Interrupted,
    /// The reader of stdout went away (`| head`): nothing more to say
    /// (exit 0).
    ClosedPipe,
    /// No cloud is usable (`gpufleet check`; exit 1), with what to do.
    Unusable(String),
    /// The command failed and has said why already (exit 1).
    Reported,
    /// The answer is partial: some clouds were not read, each named in a
    /// warning line (exit 4).
    Partial(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Error(e)
    }
}

/// Prints each warning the library returned, one `warning:` line each.
pub fn warn_all(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {}", gpufleet::report::printable(w, true));
    }
}

/// Warns about live prices dropped under the plausible floor: the first
/// `show`, then how many more.
pub fn warn_dropped(dropped: &[String], show: usize) {
    for d in dropped.iter().take(show) {
        eprintln!("warning: dropped an implausible live price: {d}");
    }
    if dropped.len() > show {
        eprintln!(
            "warning: … and {} more implausible prices dropped",
            dropped.len() - show
        );
    }
}

/// Opens the providers `cfg` enables, each live cloud checked at once
/// within its budget: one warning line per cloud left out.
pub async fn open_checked_fleet(cfg: &Config) -> Result<Fleet, Error> {
    Ok(said(site(cfg).open(Opening::Checked).await?))
}

/// Where the commands act: the configured clouds and ledger.
pub fn site(cfg: &Config) -> Site {
    Site::Configured(cfg.clone())
}

/// Says the clouds left out at opening, one warning line each.
pub fn warn_unread(unread: &[Unread]) {
    for u in unread {
        eprintln!(
            "warning: {}",
            gpufleet::report::printable(&u.one_line(), true)
        );
    }
}

/// `fleet`, once its warnings and the clouds it left out are said.
fn said(fleet: Fleet) -> Fleet {
    warn_all(&fleet.warnings);
    warn_unread(&fleet.unread);
    fleet
}

/// Ends a command that read several clouds: a warning line for each cloud
/// left out since opening, and the partial-answer failure (exit 4) if any
/// was.
pub fn partial(fleet: &Fleet, warned: usize) -> Result<(), Failure> {
    partial_of(&fleet.unread, warned)
}

/// [`partial`] for the clouds a library verb left out (`warned` of them
/// said already).
pub fn partial_of(unread: &[Unread], warned: usize) -> Result<(), Failure> {
    warn_unread(unread.get(warned..).unwrap_or_default());
    if unread.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = unread.iter().map(|u| u.cloud.as_str()).collect();
    Err(Failure::Partial(format!(
        "partial answer: {} not read (exit 4)",
        names.join(", ")
    )))
}
