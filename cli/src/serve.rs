//! `gpufleet serve`: a service's replicas behind a proxy, in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use gpufleet::runtime::config::{Config, Flags};
use gpufleet::runtime::serve::{run_service, ReplicaState, ServiceStatus};
use gpufleet::serve::ServiceSpec;
use gpufleet::{Error, ErrorKind};

use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Arguments of `gpufleet serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet --provider local serve --service examples/services/echo.toml --listen 127.0.0.1:8080\n  curl 'http://127.0.0.1:8080/hello?ms=200'\n  curl http://127.0.0.1:8080/-/metrics\n\nThe service file is described in docs/serving.md. Ctrl-C takes the service down: its replicas end."
)]
pub struct ServeArgs {
    /// The service file (TOML).
    #[arg(long, value_name = "FILE")]
    service: PathBuf,

    /// Where the proxy listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    listen: SocketAddr,
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

/// Reads and checks the service file at `path` (`serve`, `simulate
/// --serve`): an error names the file.
pub(crate) fn load_service(path: &std::path::Path) -> Result<ServiceSpec, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("cannot read service file {}: {e}", path.display()),
        )
    })?;
    ServiceSpec::from_toml(&text).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{}: {}", path.display(), e.message()),
        )
    })
}

/// Runs `gpufleet serve`.
pub fn run(args: ServeArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    let spec = load_service(&args.service)?;
    let cfg = Config::load(&flags)?;
    let rt = crate::shared::runtime()?;
    let listen = args.listen;
    let last = rt.block_on(async {
        let mut shown = String::new();
        let mut decisions = 0;
        let stop = async {
            let signal = gpufleet::runtime::stopped().await;
            eprintln!("{signal}: taking the service down (its replicas end)");
        };
        eprintln!(
            "serving {} on http://{listen} (metrics on /-/metrics); Ctrl-C takes it down",
            spec.name
        );
        run_service(&cfg, spec, listen, stop, |s| {
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
        _ => table(
            &mut out,
            &[
                "REPLICA",
                "STATE",
                "CAPACITY",
                "POOL",
                "$/H",
                "WHY STARTED",
                "WHY ENDED",
            ],
            &last.replicas,
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
        .map_err(write_failed)?,
    }
    Ok(())
}
