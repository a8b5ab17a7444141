//! `gpufleet watch`: the node agent (`gpufleet::runtime::agent`). This file
//! parses its flags, stops it on SIGTERM or Ctrl-C, and prints each notice
//! as a JSON line with `-o json`.

use std::time::Duration;

use clap::Args;
use gpufleet::runtime::agent::{self, AgentConfig};
use gpufleet::runtime::gpu::ReaderChoice;
use gpufleet::Cloud;

use crate::args::{parse_cloud, parse_dur};
use crate::output::OutputFormat;
use crate::shared::Failure;

/// Arguments of `gpufleet watch`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet watch --on-notice 'kill -USR1 $(pgrep -f train.py)'\n  gpufleet watch --no-notices --metrics 127.0.0.1:9400"
)]
pub struct WatchArgs {
    /// The cloud this node runs on (default: probe the three metadata
    /// services with short timeouts).
    #[arg(long, value_parser = parse_cloud, allow_hyphen_values = true)]
    cloud: Option<Cloud>,

    /// A shell command to run once per notice, with `GPUFLEET_NOTICE_KIND`,
    /// `GPUFLEET_DEADLINE` (RFC 3339) and `GPUFLEET_SECONDS_LEFT` set; it is
    /// killed if it is still running at the deadline.
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    on_notice: Option<String>,

    /// On Azure, acknowledge each scheduled event (`StartRequests`) once its
    /// hook has finished, so Azure may go ahead before `NotBefore` instead of
    /// holding the VM until then.
    #[arg(long)]
    ack: bool,

    /// Keep watching after a preemption was handled (default: exit 0).
    #[arg(long)]
    keep_watching: bool,

    /// Only sample the GPUs: no metadata service, no notices (for a node
    /// gpufleet did not launch, or to serve `--metrics` alone). Runs until
    /// SIGTERM or Ctrl-C.
    #[arg(long, conflicts_with_all = ["on_notice", "ack", "keep_watching", "cloud"])]
    no_notices: bool,

    /// How the GPUs are read: auto (NVML, else nvidia-smi), nvml,
    /// nvidia-smi, or off.
    #[arg(long, value_enum, default_value = "auto")]
    gpu: GpuArg,

    /// How often the GPUs are sampled.
    #[arg(long, value_parser = parse_dur, default_value = "10s", allow_hyphen_values = true)]
    sample: Duration,

    /// The window the published summary covers (mean and peak).
    #[arg(long, value_parser = parse_dur, default_value = "15m", allow_hyphen_values = true)]
    gpu_window: Duration,

    /// Write the GPU summary here after each sample (`tag value` per line;
    /// the boot script publishes it with the heartbeat).
    #[arg(long, value_name = "FILE")]
    gpu_summary: Option<std::path::PathBuf>,

    /// Serve Prometheus metrics (DCGM exporter names) at http://ADDR/metrics,
    /// e.g. 127.0.0.1:9400 (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    metrics: Option<std::net::SocketAddr>,

    /// How often to poll the metadata service.
    #[arg(long, value_parser = parse_dur, default_value = "2s", allow_hyphen_values = true)]
    poll: Duration,

    /// How long a hook may run for a notice without a deadline.
    #[arg(long, value_parser = parse_dur, default_value = "2m", allow_hyphen_values = true)]
    hook_timeout: Duration,

    /// How long each metadata service is given to answer the detection probe.
    #[arg(long, value_parser = parse_dur, default_value = "1s", allow_hyphen_values = true)]
    probe_timeout: Duration,
}

/// How the GPUs are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GpuArg {
    /// NVML, else nvidia-smi, else none.
    Auto,
    /// NVML only (libnvidia-ml.so.1).
    Nvml,
    /// nvidia-smi only (from PATH).
    NvidiaSmi,
    /// Do not sample.
    Off,
}

fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("invalid address '{s}': expected IP:PORT, such as 127.0.0.1:9400 or 0.0.0.0:9400")
    })
}

/// Runs `gpufleet watch` until a preemption is handled (or forever with
/// `--keep-watching`).
pub fn run(args: WatchArgs, format: OutputFormat) -> Result<(), Failure> {
    let config = AgentConfig {
        cloud: args.cloud,
        on_notice: args.on_notice,
        ack: args.ack,
        keep_watching: args.keep_watching,
        no_notices: args.no_notices,
        gpu: match args.gpu {
            GpuArg::Auto => ReaderChoice::Auto,
            GpuArg::Nvml => ReaderChoice::Nvml,
            GpuArg::NvidiaSmi => ReaderChoice::NvidiaSmi,
            GpuArg::Off => ReaderChoice::Off,
        },
        sample: args.sample,
        gpu_window: args.gpu_window,
        gpu_summary: args.gpu_summary,
        metrics: args.metrics,
        poll: args.poll,
        hook_timeout: args.hook_timeout,
        probe_timeout: args.probe_timeout,
    };
    // Checked by `agent::run` before anything starts.
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            // SIGTERM or Ctrl-C stops the agent at any time (a running
            // hook's group is sent SIGTERM within its deadline).
            gpufleet::runtime::stopped().await;
            let _ = stop.send(true);
        });
        agent::run(&config, stopped, |n| {
            if format != OutputFormat::Table {
                // One JSON document per line for scripts: the notice as
                // gpufleet's model has it.
                if let Ok(line) = serde_json::to_string(n) {
                    println!("{line}");
                }
            }
        })
        .await
        .map_err(Failure::from)
    })
}
