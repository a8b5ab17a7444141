//! `gpufleet check`: which clouds are usable from here, as whom, and what
//! to do about the others (each cloud checked at once, bounded by
//! `--timeout`).

use std::time::Duration;

use clap::Args;
use gpufleet::check::CloudCheck;
use gpufleet::{Cloud, Error};

use crate::args::parse_dur;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;
use gpufleet::runtime::config::{Config, Flags};

/// Arguments of `gpufleet check`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet check                 every configured cloud\n  gpufleet check --cloud aws -o json"
)]
pub struct CheckArgs {
    /// Clouds to check (comma-separated; default: the configured `clouds`).
    #[arg(long, value_delimiter = ',', value_parser = crate::args::parse_cloud)]
    cloud: Vec<Cloud>,

    /// How long each cloud is given (1s to 60s).
    #[arg(long, value_parser = parse_dur, default_value = "3s", allow_hyphen_values = true)]
    timeout: Duration,
}

/// Runs `gpufleet check`.
pub fn run(args: CheckArgs, flags: Flags, format: OutputFormat) -> Result<(), Failure> {
    if args.timeout < Duration::from_secs(1) || args.timeout > Duration::from_secs(60) {
        return Err(Error::invalid_input(format!(
            "invalid --timeout {:?}: expected 1s to 60s",
            args.timeout
        ))
        .into());
    }
    let cfg = Config::load(&flags)?;
    let clouds = if args.cloud.is_empty() {
        cfg.clouds.clone()
    } else {
        args.cloud.clone()
    };
    let rt = crate::shared::runtime()?;
    let checks: Vec<CloudCheck> = rt.block_on(gpufleet::runtime::fleet::check_clouds(
        &cfg,
        &clouds,
        args.timeout,
    ));
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &checks)?,
        _ => {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            table(
                &mut out,
                &[
                    "CLOUD",
                    "USABLE",
                    "CREDENTIALS",
                    "IDENTITY",
                    "SCOPE",
                    "ENDPOINT",
                    ">TOOK",
                ],
                &checks,
                |c| {
                    vec![
                        c.cloud.to_string(),
                        if c.usable { "yes" } else { "no" }.into(),
                        dash(&c.credentials),
                        dash(&c.identity),
                        dash(&c.scope),
                        c.endpoints.join(", "),
                        format!("{:.1}s", c.elapsed_ms as f64 / 1000.0),
                    ]
                },
            )
            .map_err(write_failed)?;
            drop(out);
            for c in checks.iter().filter(|c| !c.usable) {
                eprintln!("{}", c.one_line());
            }
        }
    }
    let usable = checks.iter().filter(|c| c.usable).count();
    if usable == checks.len() {
        Ok(())
    } else if usable > 0 {
        Err(Failure::Partial(format!(
            "{} of {} clouds usable",
            usable,
            checks.len()
        )))
    } else {
        Err(Failure::Unusable(
            "no cloud is usable from here; `gpufleet --provider fake …` tries every command without one".into(),
        ))
    }
}
