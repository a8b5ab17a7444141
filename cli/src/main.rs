//! `gpufleet`: the command-line tool.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 bad input, 3 nothing matched.

mod args;
mod catalog;
mod check;
mod config_show;
mod costs;
mod fit;
mod instances;
mod job;
mod jobs;
mod launch;
mod ls;
mod mix;
mod offers;
mod output;
mod place;
mod reap;
mod reconcile;
mod serve;
mod shared;
mod simulate;
mod terminate;
mod tf;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gpufleet::{Error, ErrorKind};

use gpufleet::runtime::config;

use crate::output::OutputFormat;
use crate::shared::Failure;

/// Provision GPU capacity across AWS, GCP and Azure, and keep fault-tolerant
/// jobs on the cheapest pool that is stable enough to finish them.
#[derive(Debug, Parser)]
#[command(name = "gpufleet", version, about, long_about = None)]
struct Cli {
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = OutputFormat::Table, help_heading = "Global options")]
    output: OutputFormat,

    /// Config file (default: `GPUFLEET_CONFIG`, else the platform config
    /// directory's `gpufleet/gpufleet.toml`).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        help_heading = "Global options"
    )]
    config: Option<std::path::PathBuf>,

    /// The real clouds (`live`), gpufleet's fake cloud (`fake`, kept in a
    /// state file between commands), or the fake cloud running each
    /// instance's boot script as a process on this machine (`local`: `run`
    /// and `serve`).
    #[arg(long, global = true, value_parser = args::parse_provider, help_heading = "Global options")]
    provider: Option<config::ProviderKind>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List GPU offers (instance type, location, capacity type, price), cheapest first.
    Offers(offers::OffersArgs),
    /// Rank pools by expected cost to finish a job (price, interruption hazard,
    /// checkpointing, restarts, GPU throughput, deadline, budget).
    Place(job::PlaceArgs),
    /// Replay spot availability traces through the placer and baseline policies.
    Simulate(simulate::SimulateArgs),
    /// Which GPU configurations hold a model (memory breakdown, cheapest first).
    Fit(fit::FitArgs),
    /// How much of a demand profile to commit to, run on-demand and run on spot.
    Mix(mix::MixArgs),
    /// Run a managed job to completion: place it, launch it, follow it, and
    /// re-place it after interruptions and capacity errors (resumable).
    Run(jobs::RunArgs),
    /// Keep an inference service's replicas on cheap stable capacity behind a
    /// proxy, scaled with its load (foreground; `--provider local` so far);
    /// ls, status, down, update.
    Serve(serve::ServeArgs),
    /// Managed jobs: ls, show, logs, cancel, resume.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// Place a job and launch it once, idempotently, tagged for cost
    /// attribution (not followed afterwards: `run` does that).
    Launch(launch::LaunchArgs),
    /// Managed instances across clouds with their cost so far, or `--cost-by`.
    Ls(ls::LsArgs),
    /// What was spent, from the ledger: by team, owner, job, cloud, GPU,
    /// capacity or day, with the cost per completed job.
    Costs(costs::CostsArgs),
    /// Make the ledger agree with the clouds: ends they caused, managed
    /// instances it does not know, launches left unfinished (dry run
    /// unless --yes).
    Reconcile(reconcile::ReconcileArgs),
    /// Terminate managed instances by id, job or tag.
    Terminate(terminate::TerminateArgs),
    /// Find managed instances past their expiry or without a recent heartbeat
    /// (a dry run unless `--yes`).
    Reap(reap::ReapArgs),
    /// Terraform `external` data source: a query on stdin, the best plan on stdout.
    #[command(after_long_help = TF_KEYS.as_str(), after_help = TF_KEYS.as_str())]
    TfExternal,
    /// On a GPU node: run a checkpoint hook on each interruption notice.
    Watch(watch::WatchArgs),
    /// Which clouds are usable from here (credentials, project or
    /// subscription, endpoints, identity) and what to do about the others.
    Check(check::CheckArgs),
    /// The effective configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The local catalog cache.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    #[command(
        after_help = "Examples:\n  gpufleet completions bash > ~/.local/share/bash-completion/completions/gpufleet\n  gpufleet completions zsh > \"${fpath[1]}/_gpufleet\"\n  gpufleet completions fish > ~/.config/fish/completions/gpufleet.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one per command into a directory.
    #[command(
        after_help = "Examples:\n  gpufleet man | man -l -\n  gpufleet man --out-dir /usr/local/share/man/man1"
    )]
    Man {
        /// Write gpufleet.1 and gpufleet-COMMAND.1 for every command here.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
}

/// `gpufleet config …`.
#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the effective settings and where each came from, secrets hidden.
    Show,
}

/// `gpufleet catalog …`.
#[derive(Debug, Subcommand)]
enum CatalogCommand {
    /// Fetch the live catalogs and prices into the local cache that `offers`,
    /// `place` and `tf-external` read while it is fresher than `catalog_max_age`.
    Refresh(catalog::RefreshArgs),
}

/// The log filter without `GPUFLEET_LOG`: gpufleet's own warnings, but not
/// the tracing layer's line per failed cloud call, which the command reports
/// itself as its warning or error (the line said it a second time).
const DEFAULT_LOG: &str = "error,gpufleet::watch=info,gpufleet=warn,gpufleet_core=warn,gpufleet_core::layers::trace=error,gpufleet_runtime=warn,gpufleet_aws=warn,gpufleet_gcp=warn,gpufleet_azure=warn";

fn init_tracing() {
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("GPUFLEET_LOG")
        // By default gpufleet's own warnings only: the SDKs' (a credentials
        // chain retrying IMDS, a connection pool) stay behind GPUFLEET_LOG,
        // and what went wrong reaches the user as gpufleet's error.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    // Never log credentials, whatever GPUFLEET_LOG asks for: where it enables
    // TRACE, cap the targets that would print them (only then: the directive
    // must not raise a quieter level).
    if filter.max_level_hint() == Some(tracing_subscriber::filter::LevelFilter::TRACE) {
        for d in gpufleet::aws::REDACTING_LOG_DIRECTIVES {
            if let Ok(d) = d.parse() {
                filter = filter.add_directive(d);
            }
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Clap's multi-line errors folded into one line that names the bad value and
/// the valid choices.
fn one_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    let line = parts.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    format!("error: {line} (see 'gpufleet --help')")
}

/// A reader that closed its end (`gpufleet offers | head`, or `2>&1 | head`
/// when the closed pipe is standard error) ends the command quietly with exit
/// 0, as `ls | head` does: `println!` and `eprintln!` on a closed pipe panic
/// (Rust ignores SIGPIPE), so the panic hook recognises both.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        let printing =
            msg.contains("failed printing to stdout") || msg.contains("failed printing to stderr");
        if printing && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Writes the line that explains how the command ended to standard error,
/// ignoring a closed one: the exit code still says what happened.
fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    let line = line.to_string();
    let _ = writeln!(
        std::io::stderr().lock(),
        "{}",
        gpufleet::report::printable(&line, true)
    );
}

/// `tf-external --help`: the query's keys and what each means.
static TF_KEYS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let mut s = String::from("Query keys (a flat JSON object of strings on stdin):\n");
    for (k, what) in gpufleet::placer::external::KEY_HELP {
        s.push_str(&format!("  {k:<20} {what}\n"));
    }
    s.push_str("\nExample:\n  echo '{\"gpu\": \"A100:8\", \"count\": \"2\", \"hours\": \"20\", \"deadline\": \"48h\"}' | gpufleet tf-external\n\nAnswer keys: cloud, region, zone, zone_name, instance_type, capacity, gpu_model, gpu_count, count, price_per_hour_usd, expected_cost_usd, expected_hours, p_deadline, and the rest docs/operating.md lists.");
    s
});

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind as K;
            if matches!(
                e.kind(),
                K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            say(one_line(&e));
            return ExitCode::from(2);
        }
    };
    init_tracing();
    let flags = config::Flags {
        config: cli.config.clone(),
        provider: cli.provider,
        ..config::Flags::default()
    };
    // Commands whose output is a document, not rows, cannot give CSV: say so
    // before doing anything.
    let document = match &cli.command {
        Command::Launch(_) => Some("launch"),
        Command::Terminate(_) => Some("terminate"),
        Command::Reap(_) => Some("reap"),
        Command::Reconcile(_) => Some("reconcile"),
        Command::Run(_) => Some("run"),
        Command::Serve(s) if !s.prints_rows() => Some("serve"),
        Command::Simulate(_) => Some("simulate"),
        Command::TfExternal => Some("tf-external"),
        Command::Watch(_) => Some("watch"),
        Command::Check(_) => Some("check"),
        Command::Catalog(_) => Some("catalog refresh"),
        Command::Jobs(j) if !matches!(j, jobs::JobsCommand::Ls) => {
            Some("jobs show/logs/cancel/resume")
        }
        _ => None,
    };
    if let (Some(what), output::OutputFormat::Csv) = (document, cli.output) {
        say(format_args!("error: invalid value 'csv' for '--output': `{what}` prints a document, not rows; use -o json or -o table"));
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Offers(args) => offers::run(args, flags, cli.output),
        Command::Place(args) => place::run(args, flags, cli.output),
        Command::Simulate(args) => simulate::run(args, cli.output),
        Command::Fit(args) => fit::run(args, flags, cli.output),
        Command::Mix(args) => mix::run(args, cli.output),
        Command::Run(args) => jobs::run(args, flags, cli.output),
        Command::Serve(args) => serve::run(args, flags, cli.output),
        Command::Jobs(cmd) => jobs::jobs(cmd, flags, cli.output),
        Command::Launch(args) => launch::launch(args, flags, cli.output),
        Command::Ls(args) => ls::ls(args, flags, cli.output),
        Command::Costs(args) => costs::run(args, flags, cli.output),
        Command::Reconcile(args) => reconcile::run(args, flags, cli.output),
        Command::Terminate(args) => terminate::terminate(args, flags, cli.output),
        Command::Reap(args) => reap::reap(args, flags, cli.output),
        Command::TfExternal => tf::run(flags),
        Command::Watch(args) => watch::run(args, cli.output),
        Command::Check(args) => check::run(args, flags, cli.output),
        Command::Completions { shell } => {
            // Rendered into memory first (the generator panics on a write
            // error), then written like every other output.
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "gpufleet", &mut script);
            use std::io::Write;
            std::io::stdout()
                .write_all(&script)
                .map_err(output::write_failed)
        }
        Command::Man { out_dir } => man(out_dir),
        Command::Config(ConfigCommand::Show) => config_show::config_show(flags, cli.output),
        Command::Catalog(CatalogCommand::Refresh(args)) => {
            catalog::refresh(args, flags, cli.output)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::NothingMatched(why)) => {
            say(why);
            ExitCode::from(3)
        }
        Err(Failure::Interrupted) => ExitCode::from(130),
        Err(Failure::ClosedPipe) => ExitCode::SUCCESS,
        Err(Failure::Reported) => ExitCode::from(1),
        Err(Failure::Partial(why)) => {
            say(why);
            ExitCode::from(4)
        }
        Err(Failure::Unusable(why)) => {
            say(why);
            ExitCode::from(1)
        }
        Err(Failure::Error(e)) => {
            say(format_args!("error: {e}"));
            if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// `gpufleet man`: the page on stdout, or every command's page in a
/// directory.
fn man(out_dir: Option<std::path::PathBuf>) -> Result<(), Failure> {
    let cmd = <Cli as clap::CommandFactory>::command();
    let failed = |what: String, e: std::io::Error| {
        Failure::Error(Error::new(ErrorKind::Unavailable, format!("{what}: {e}")))
    };
    match out_dir {
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .map_err(output::write_failed),
        Some(dir) => {
            if !dir.is_dir() {
                return Err(Error::invalid_input(format!(
                    "--out-dir {}: not a directory (create it first)",
                    dir.display()
                ))
                .into());
            }
            clap_mangen::generate_to(cmd, &dir)
                .map_err(|e| failed(format!("writing manual pages into {}", dir.display()), e))?;
            eprintln!("wrote the manual pages into {}", dir.display());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use gpufleet_testkit::docs::{command_part, words};

    fn examples(cmd: &clap::Command, found: &mut Vec<String>) {
        if let Some(h) = cmd.get_after_help() {
            let text = h.to_string();
            for line in text
                .lines()
                .skip_while(|l| !l.starts_with("Examples:"))
                .skip(1)
            {
                // The command itself, before any trailing comment column.
                let cmdline = command_part(line.trim());
                if cmdline.starts_with("gpufleet ") {
                    found.push(cmdline.to_string());
                }
            }
        }
        for sub in cmd.get_subcommands() {
            examples(sub, found);
        }
    }

    /// Every example in every command's help parses as written.
    #[test]
    fn every_help_example_parses() {
        let mut found = Vec::new();
        examples(&Cli::command(), &mut found);
        assert!(found.len() >= 20, "{found:?}");
        for ex in &found {
            let argv = words(ex);
            if let Err(e) = Cli::try_parse_from(&argv) {
                panic!("the example `{ex}` does not parse: {e}");
            }
        }
    }

    /// Every `gpufleet` command in the README's and the docs' shell blocks
    /// parses as written, as the help's examples do (issue 79: the docs'
    /// examples drifted from the commands).
    #[test]
    fn every_doc_example_parses() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let found = gpufleet_testkit::docs::examples(&root);
        assert!(found.len() >= 30, "{found:?}");
        for (file, ex) in &found {
            let argv = words(ex);
            if let Err(e) = Cli::try_parse_from(&argv) {
                panic!("{file}: the example `{ex}` does not parse: {e}");
            }
        }
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
