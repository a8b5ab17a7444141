//! `gpufleet serve`: a service's replicas behind a proxy, in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::time::Duration;

use clap::{Args, Subcommand};
use gpufleet::runtime::config::{Config, Flags, ProviderKind};
use gpufleet::runtime::report::ServiceRow;
use gpufleet::runtime::serve::book::{self, ServiceRequest, ServiceState, ServiceView};
use gpufleet::runtime::serve::{run_service, Reach, ReplicaState, ServeOptions, ServiceStatus};
use gpufleet::serve::ServiceSpec;
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

/// Reads and checks the service file at `path` (`serve`, `serve update`,
/// `simulate --serve`): its values, and its clouds, regions and zones
/// against `snapshot` as a job file's are; an error names the file. Also
/// gives the text read.
pub(crate) fn load_service(
    path: &std::path::Path,
    snapshot: &gpufleet::Snapshot,
) -> Result<(String, ServiceSpec), Error> {
    let text = gpufleet::runtime::input::read_text(path, "service file")?;
    let in_file = |e: Error| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{}: {}", path.display(), e.message()),
        )
    };
    let spec = ServiceSpec::from_toml(&text).map_err(in_file)?;
    spec.replica.check_locations(snapshot).map_err(in_file)?;
    Ok((text, spec))
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
    let (catalog, _) = gpufleet::runtime::live::cache::current(&cfg);
    let (text, spec) = load_service(&path, &catalog)?;
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
        let name = spec.name.clone();
        // Said once it serves, at the address bound (not before a refusal,
        // nor `:0` for a port the system gives).
        let serving = move |at: std::net::SocketAddr| {
            eprintln!("serving {name} on http://{at} ({metrics}); Ctrl-C takes it down")
        };
        let opts = ServeOptions::new(listen)
            .with_reach(args.reach)
            .with_standby(args.standby)
            .with_metrics(args.metrics)
            .with_service_file(text);
        run_service(&cfg, spec, opts, stop, serving, |s| {
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

/// Who asks, for the service's log: the user and the host.
fn requester() -> String {
    let user = whoami::username().unwrap_or_else(|_| "someone".into());
    match whoami::hostname() {
        Ok(host) => format!("{user}@{host}"),
        Err(_) => user,
    }
}

/// `at` to the second, as RFC 3339 (`2026-12-06T03:52:20Z`).
fn seconds(at: time::OffsetDateTime) -> String {
    at.replace_nanosecond(0)
        .unwrap_or(at)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.to_string())
}

fn ls_row(s: &ServiceView) -> ServiceRow {
    ServiceRow::new(s)
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
    let rt = crate::shared::runtime()?;
    let mut out = std::io::stdout().lock();
    match cmd {
        ServeCommand::Ls => {
            let all = rt.block_on(async {
                let l = cfg.open_ledger().await?;
                book::services(l.as_ref()).await
            })?;
            let rows: Vec<ServiceRow> = all.iter().map(ls_row).collect();
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
            let (view, history) = rt
                .block_on(async {
                    let l = cfg.open_ledger().await?;
                    let view = book::service(l.as_ref(), &name).await?;
                    let history = book::history(l.as_ref(), &name).await?;
                    Ok::<_, Error>((view, history))
                })
                .map_err(hinted)?;
            if format == OutputFormat::Json {
                let history: Vec<serde_json::Value> = history
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "seq": e.seq,
                            "at": e.at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
                            "kind": e.kind.as_str(),
                            "what": serde_json::from_str::<serde_json::Value>(&e.doc).unwrap_or(serde_json::Value::String(e.doc.clone())),
                        })
                    })
                    .collect();
                let controller = ls_row(&view).controller;
                let mut doc = serde_json::to_value(&view.doc.status).map_err(|e| {
                    Error::new(ErrorKind::Unexpected, "cannot encode the status").with_source(e)
                })?;
                if let Some(m) = doc.as_object_mut() {
                    m.insert("state".into(), view.state.as_str().into());
                    m.insert("down_because".into(), view.doc.down_because.clone().into());
                    m.insert("controller".into(), controller.into());
                    m.insert("listen".into(), view.doc.listen.clone().into());
                    m.insert("history".into(), history.into());
                }
                return json(&mut out, &doc);
            }
            let row = ls_row(&view);
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
            let who = (!any_owner).then_some(cfg.owner.as_str());
            let by = requester();
            let (view, done) = rt
                .block_on(async {
                    let l = cfg.open_ledger().await?;
                    let seq =
                        book::request(l.as_ref(), &name, &ServiceRequest::Down { by }, who).await?;
                    if seq == 0 {
                        // No controller: marked down in the ledger only.
                        return Ok::<_, Error>((book::service(l.as_ref(), &name).await?, true));
                    }
                    eprintln!(
                        "asked the controller of {name} to take it down; waiting up to {}",
                        gpufleet::placer::format_duration(wait)
                    );
                    book::wait_for(l.as_ref(), &name, wait, |s| !s.doc.up).await
                })
                .map_err(hinted)?;
            if !done {
                if view.state == ServiceState::Stopped {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!(
                            "service {name}'s controller ({}) stopped before taking it down; `gpufleet serve down {name}` again marks it down",
                            view.doc.holder
                        ),
                    )
                    .into());
                }
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "service {name} is still {} after {}: its controller ({}) has the request and acts on it at its next step",
                        view.state,
                        gpufleet::placer::format_duration(wait),
                        view.doc.holder
                    ),
                )
                .into());
            }
            match format {
                OutputFormat::Json => json(&mut out, &ls_row(&view)),
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
            let who = (!any_owner).then_some(cfg.owner.as_str());
            let (catalog, _) = gpufleet::runtime::live::cache::current(&cfg);
            let (text, spec) = load_service(&service, &catalog)?;
            gpufleet::runtime::serve::check_replica_script(&spec).map_err(|e| {
                Error::invalid_input(format!("{}: {}", service.display(), e.message()))
            })?;
            let name = spec.name.clone();
            let by = requester();
            let (view, done, seq) = rt.block_on(async {
                let l = cfg.open_ledger().await?;
                let before = book::service(l.as_ref(), &name).await?;
                let newest = before.doc.status.rollouts.iter().map(|r| r.version).max().unwrap_or(0).max(before.doc.status.version);
                let request = ServiceRequest::Update { service_file: text, by };
                let seq = book::request(l.as_ref(), &name, &request, who).await?;
                eprintln!("asked the controller of {name} to roll out the new version; waiting up to {} for its outcome", gpufleet::placer::format_duration(wait));
                let (view, done) = book::wait_for(l.as_ref(), &name, wait, |s| {
                    s.doc.requests_handled >= seq
                        && s.doc.status.rollouts.iter().any(|r| r.version > newest && r.outcome != "rolling-out")
                })
                .await?;
                Ok::<_, Error>((view, done, seq))
            })
            .map_err(hinted)?;
            let rollout = view
                .doc
                .status
                .rollouts
                .iter()
                .rev()
                .find(|r| r.outcome != "rolling-out" || !done)
                .cloned();
            if !done && view.state != ServiceState::Serving {
                // Its controller went away (or it was taken down) first.
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "the rollout of {name} (request {seq}) has no outcome: the service is {} now{}",
                        view.state,
                        view.doc
                            .down_because
                            .as_ref()
                            .map(|w| format!(" ({w})"))
                            .unwrap_or_default()
                    ),
                )
                .into());
            }
            if !done {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the rollout of {name} (request {seq}) had no outcome after {}: `gpufleet serve status {name}` follows it",
                        gpufleet::placer::format_duration(wait)
                    ),
                )
                .into());
            }
            match format {
                OutputFormat::Json => json(&mut out, &rollout)?,
                _ => {
                    if let Some(r) = &rollout {
                        println!("{name} version {}: {}: {}", r.version, r.outcome, r.why);
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
