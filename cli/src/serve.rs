//! `gpufleet serve`: a service's replicas behind a proxy, in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::time::Duration;

use clap::{Args, Subcommand};
use gpufleet::runtime::config::{Config, Flags, ProviderKind};
use gpufleet::runtime::report::ServiceRow;
use gpufleet::runtime::serve::book::ServiceState;
use gpufleet::runtime::serve::{Reach, ReplicaState, ServeOptions, ServiceStatus};
use gpufleet::runtime::verbs::serve;
use gpufleet::{Error, ErrorKind};

use crate::args::parse_dur;
use crate::output::{csv_rows, json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Arguments of `gpufleet serve`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  gpufleet --provider local serve --service examples/services/echo.toml --listen 127.0.0.1:8080\n  curl 'http://127.0.0.1:8080/hello?ms=200'\n  curl http://127.0.0.1:9090/metrics   (with --metrics 127.0.0.1:9090)\n  gpufleet serve ls\n  gpufleet serve status echo -o json\n  gpufleet serve update --service examples/services/echo.toml\n  gpufleet serve down echo\n  gpufleet --provider live serve --service llm.toml --listen 0.0.0.0:8080 --reach private\n\nThe service file is described in docs/serving.md. Ctrl-C, or `gpufleet serve down NAME` from anywhere that opens the same ledger, takes the service down: its replicas end."
)]
pub struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,

    /// The service file (TOML).
    #[arg(long, value_name = "FILE", required = true)]
    service: Option<PathBuf>,

    /// Where the proxy listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    listen: SocketAddr,

    /// Which address of a replica's instance the proxy sends requests to:
    /// `private` (the proxy runs in the replicas' network: a VM in the same
    /// VPC or VNet, a peered network, a VPN) or `public` (where the cloud
    /// gives one: an EC2 subnet that maps public addresses). The firewall
    /// must let the proxy in on the service file's `port`.
    #[arg(long, value_name = "private|public", default_value = "private", value_parser = parse_reach)]
    reach: Reach,

    /// When another controller serves the service (its lease is live in the
    /// ledger), wait and take the service over once that lease lapses (its
    /// replicas are adopted), instead of being refused: a second machine
    /// sharing a PostgreSQL ledger keeps the service up when the first dies.
    #[arg(long)]
    standby: bool,

    /// Serve the proxy's Prometheus metrics on this address (`GET
    /// /metrics`); default: nowhere. Keep it off a public address: they
    /// show the service's load and what it costs an hour.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    metrics: Option<SocketAddr>,
}

fn parse_reach(s: &str) -> Result<Reach, String> {
    s.parse::<Reach>().map_err(|e| e.message().to_string())
}

/// `gpufleet serve ls | status | down | update`: the services in the
/// ledger, and requests to the controllers serving them.
#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// The services in the ledger: serving, down, or stopped (their
    /// controller went away without taking them down).
    Ls,
    /// One service: its replicas (state, capacity, pool, why each started
    /// and ended), scale decisions, rollouts, and its log.
    Status {
        /// The service's name.
        name: String,
    },
    /// Take a service down: its controller drains and ends every replica,
    /// then exits.
    Down {
        /// The service's name.
        name: String,
        /// How long to wait for the controller to say it is down.
        #[arg(long, value_parser = parse_dur, default_value = "2m")]
        wait: Duration,
        /// Take down another owner's service (default: only yours).
        #[arg(long)]
        any_owner: bool,
    },
    /// Roll out a new version of a service (the file's `name` says which):
    /// its replicas start beside the serving ones and take the traffic once
    /// ready; a version that never becomes ready is rolled back.
    Update {
        /// The new service file (TOML).
        #[arg(long, value_name = "FILE")]
        service: PathBuf,
        /// How long to wait for the rollout's outcome.
        #[arg(long, value_parser = parse_dur, default_value = "15m")]
        wait: Duration,
        /// Update another owner's service (default: only yours).
        #[arg(long)]
        any_owner: bool,
    },
}

impl ServeArgs {
    /// Whether the command prints rows (`serve ls`), so may print CSV.
    pub fn prints_rows(&self) -> bool {
        matches!(self.command, Some(ServeCommand::Ls))
    }
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("invalid address '{s}': expected IP:PORT such as 127.0.0.1:8080 or 0.0.0.0:80")
    })
}

/// One line for people: what changed.
fn summary(s: &ServiceStatus) -> String {
    let count = |state: ReplicaState, spot: bool| {
        s.replicas
            .iter()
            .filter(|r| r.state == state && (r.capacity == gpufleet::Capacity::Spot) == spot)
            .count()
    };
    format!(
        "{}: target {}, ready {} (spot {}, on-demand {}), starting {}, draining {}, {}/h",
        s.name,
        s.target,
        s.ready,
        count(ReplicaState::Ready, true),
        count(ReplicaState::Ready, false),
        count(ReplicaState::Starting, true) + count(ReplicaState::Starting, false),
        count(ReplicaState::Draining, true) + count(ReplicaState::Draining, false),
        s.cost_per_hour.map_or_else(
            || "more than a price can hold".to_string(),
            |p| format!("${}", p.display(2))
        )
    )
}

/// Runs `gpufleet serve`.
pub fn run(args: ServeArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    if let Some(cmd) = args.command {
        return command(cmd, flags, format);
    }
    let Some(path) = args.service else {
        return Err(Error::invalid_input(
            "`gpufleet serve` needs --service FILE (or one of ls, status, down, update)",
        )
        .into());
    };
    let cfg = Config::load(&flags)?;
    let site = crate::shared::site(&cfg);
    let rt = crate::shared::runtime()?;
    let listen = args.listen;
    let last = rt.block_on(async {
        let mut shown = String::new();
        let mut decisions = 0;
        let stop = async {
            let signal = gpufleet::runtime::stopped().await;
            eprintln!("{signal}: taking the service down (its replicas end)");
        };
        let metrics = args.metrics.map_or_else(
            || "no metrics: --metrics ADDR serves them".to_string(),
            |m| format!("metrics on http://{m}/metrics"),
        );
        // Said once it serves, at the address bound (not before a refusal,
        // nor `:0` for a port the system gives).
        let serving = move |name: &str, at: std::net::SocketAddr| {
            eprintln!("serving {name} on http://{at} ({metrics}); Ctrl-C takes it down")
        };
        let opts = ServeOptions::new(listen)
            .with_reach(args.reach)
            .with_standby(args.standby)
            .with_metrics(args.metrics);
        serve::run(&site, &path, opts, stop, serving, |s| {
            for d in s.decisions.iter().skip(decisions) {
                eprintln!("scale: {d}");
            }
            decisions = s.decisions.len();
            let line = summary(s);
            if line != shown {
                eprintln!("{line}");
                shown = line;
            }
        })
        .await
    })?;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &last)?,
        _ => replicas_table(&mut out, &last)?,
    }
    Ok(())
}

/// `at` to the second, as RFC 3339 (`2026-12-06T03:52:20Z`).
fn seconds(at: time::OffsetDateTime) -> String {
    at.replace_nanosecond(0)
        .unwrap_or(at)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.to_string())
}

/// Where services served with `--provider local` are, when this command
/// reads another ledger and that one has some: a hint for a service not
/// found (or none listed).
fn local_hint(flags: &Flags, cfg: &Config) -> Option<String> {
    if matches!(cfg.provider, ProviderKind::Local | ProviderKind::Fake) {
        return None;
    }
    let local = Config::load(&Flags {
        provider: Some(ProviderKind::Local),
        ..flags.clone()
    })
    .ok()?;
    if local.ledger == cfg.ledger || !std::path::Path::new(&local.ledger).exists() {
        return None;
    }
    Some(format!(
        "services served with --provider local are in the local ledger ({}): add --provider local",
        local.ledger
    ))
}

fn command(cmd: ServeCommand, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    let hinted = |e: Error| -> Failure {
        match (e.kind(), local_hint(&flags, &cfg)) {
            (ErrorKind::NotFound, Some(hint)) => {
                Error::new(ErrorKind::NotFound, format!("{}; {hint}", e.message())).into()
            }
            _ => e.into(),
        }
    };
    let site = crate::shared::site(&cfg);
    let rt = crate::shared::runtime()?;
    let mut out = std::io::stdout().lock();
    match cmd {
        ServeCommand::Ls => {
            let rows = rt.block_on(serve::ls(&site))?;
            if rows.is_empty() {
                if let Some(hint) = local_hint(&flags, &cfg) {
                    eprintln!(
                        "note: no service in ledger {}; {hint}",
                        gpufleet::runtime::ledgers::shown(&cfg.ledger)
                    );
                }
            }
            match format {
                OutputFormat::Json => json(&mut out, &rows),
                OutputFormat::Csv => csv_rows(&mut out, &rows),
                OutputFormat::Table => table(
                    &mut out,
                    &[
                        "NAME",
                        "STATE",
                        "VERSION",
                        "TARGET",
                        "READY",
                        "SPOT",
                        "ON-DEMAND",
                        "$/H",
                        "LISTEN",
                        "UPDATED",
                    ],
                    &rows,
                    |r| {
                        vec![
                            r.name.clone(),
                            r.state.to_string(),
                            r.version.to_string(),
                            r.target.to_string(),
                            r.ready.to_string(),
                            r.spot.to_string(),
                            r.on_demand.to_string(),
                            r.cost_per_hour
                                .map_or_else(|| "-".into(), |p| p.display(4).to_string()),
                            r.listen.clone().unwrap_or_default(),
                            seconds(r.updated_at),
                        ]
                    },
                )
                .map_err(write_failed),
            }
        }
        ServeCommand::Status { name } => {
            let (view, doc) = rt.block_on(serve::status(&site, &name)).map_err(hinted)?;
            if format == OutputFormat::Json {
                return json(&mut out, &doc);
            }
            let row = ServiceRow::new(&view);
            println!(
                "{}: {} (version {}), target {}, ready {}, {}/h; controller {}{}",
                view.name,
                view.state,
                row.version,
                row.target,
                row.ready,
                row.cost_per_hour
                    .map_or_else(|| "-".into(), |p| format!("${}", p.display(2))),
                row.controller,
                view.doc
                    .down_because
                    .as_ref()
                    .map(|w| format!("; {w}"))
                    .unwrap_or_default()
            );
            if view.state == ServiceState::Stopped {
                println!(
                    "its controller stopped without taking it down (last heard from {}): the replicas below are as it last saw them; `gpufleet serve down {}` marks it down",
                    seconds(view.updated_at),
                    view.name
                );
            }
            replicas_table(&mut out, &view.doc.status)?;
            for d in &view.doc.status.decisions {
                println!("scale {}: {d}", seconds(d.at));
            }
            for r in &view.doc.status.rollouts {
                println!("rollout v{} {}: {}", r.version, r.outcome, r.why);
            }
            Ok(())
        }
        ServeCommand::Down {
            name,
            wait,
            any_owner,
        } => {
            let view = rt
                .block_on(serve::down(&site, &name, wait, any_owner, |s| {
                    eprintln!("{s}")
                }))
                .map_err(hinted)?;
            match format {
                OutputFormat::Json => json(&mut out, &ServiceRow::new(&view)),
                _ => {
                    println!(
                        "{name} is down: {}",
                        view.doc.down_because.as_deref().unwrap_or("taken down")
                    );
                    Ok(())
                }
            }
        }
        ServeCommand::Update {
            service,
            wait,
            any_owner,
        } => {
            let updated = rt
                .block_on(serve::update(&site, &service, wait, any_owner, |s| {
                    eprintln!("{s}")
                }))
                .map_err(hinted)?;
            let rollout = updated.rollout.clone();
            match format {
                OutputFormat::Json => json(&mut out, &rollout)?,
                _ => {
                    if let Some(r) = &rollout {
                        println!(
                            "{} version {}: {}: {}",
                            updated.service, r.version, r.outcome, r.why
                        );
                    }
                }
            }
            if rollout.as_ref().is_some_and(|r| r.outcome == "promoted") {
                Ok(())
            } else {
                Err(Failure::Reported)
            }
        }
    }
}

/// The replicas' table (`serve` when it stops, `serve status`).
fn replicas_table(out: &mut impl std::io::Write, s: &ServiceStatus) -> Result<(), Failure> {
    table(
        out,
        &[
            "REPLICA",
            "STATE",
            "CAPACITY",
            "POOL",
            "$/H",
            "WHY STARTED",
            "WHY ENDED",
        ],
        &s.replicas,
        |r| {
            vec![
                r.id.clone(),
                r.state.to_string(),
                r.capacity.to_string(),
                r.pool.to_string(),
                r.price.display(4).to_string(),
                r.started_because.clone(),
                r.ended_because.clone().unwrap_or_default(),
            ]
        },
    )
    .map_err(write_failed)
}
