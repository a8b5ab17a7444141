//! `gpufleet watch`: the node agent. Runs on the GPU node, turns the
//! cloud's interruption notices into a checkpoint hook that runs before the
//! deadline, and samples the GPUs (NVML, else `nvidia-smi`) into the summary
//! the boot script publishes as tags and, with `--metrics`, a Prometheus
//! endpoint.

use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use gpufleet::{Cloud, Error, ErrorKind, InterruptionNotice, NoticeKind};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::args::{parse_cloud, parse_dur};
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

/// Starts GPU sampling (and the metrics endpoint) as the arguments say;
/// the tasks run until the process ends.
async fn start_gpu(args: &WatchArgs) -> Result<Vec<tokio::task::JoinHandle<()>>, Failure> {
    use gpufleet::runtime::gpu::{detect, ReaderChoice, Sampler};
    if args.sample < Duration::from_secs(1) || args.sample > Duration::from_secs(300) {
        return Err(Error::invalid_input(format!(
            "invalid --sample {:?}: expected 1s to 5m",
            args.sample
        ))
        .into());
    }
    if args.gpu_window < args.sample || args.gpu_window > Duration::from_secs(24 * 3600) {
        return Err(Error::invalid_input(format!(
            "invalid --gpu-window {:?}: expected at least --sample ({:?}) and at most 24h",
            args.gpu_window, args.sample
        ))
        .into());
    }
    let choice = match args.gpu {
        GpuArg::Auto => ReaderChoice::Auto,
        GpuArg::Nvml => ReaderChoice::Nvml,
        GpuArg::NvidiaSmi => ReaderChoice::NvidiaSmi,
        GpuArg::Off => ReaderChoice::Off,
    };
    let mut no_gpu = false;
    let reader: std::sync::Arc<dyn gpufleet::usage::GpuReader> = match detect(choice).await {
        Ok(r) => r,
        Err(why) if choice == ReaderChoice::Off => {
            log(&why);
            return Ok(Vec::new());
        }
        Err(why) => {
            // Said plainly, and published as "no GPU" (n0) so `reap` shows
            // the node as unknown, never as idle.
            log(&format!(
                "{why}; publishing that this node has no GPU to read"
            ));
            no_gpu = true;
            std::sync::Arc::new(gpufleet::usage::ScriptedReader::new([Ok(Vec::new())]))
        }
    };
    let hostname = tokio::fs::read_to_string("/proc/sys/kernel/hostname")
        .await
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut sampler = Sampler::new(reader, args.gpu_window).with_hostname(hostname);
    if let Some(f) = &args.gpu_summary {
        sampler = sampler.with_summary_file(f);
    }
    let mut tasks = Vec::new();
    if let Some(addr) = args.metrics {
        let (local, task) = sampler.serve_metrics(addr).await?;
        log(&format!("metrics at http://{local}/metrics"));
        tasks.push(task);
    }
    log(&if no_gpu {
        format!(
            "no GPU to sample: publishing 'no GPU' every {:?}",
            args.sample
        )
    } else {
        format!(
            "sampling GPUs through {} every {:?}",
            sampler.source(),
            args.sample
        )
    });
    tasks.push(tokio::spawn(sampler.run(args.sample)));
    Ok(tasks)
}

/// The agent's log: tracing events under the `gpufleet::watch` target
/// (shown at info by default, on stderr with a timestamp; `GPUFLEET_LOG`
/// changes it like every other log).
fn log(msg: &str) {
    tracing::info!(target: "gpufleet::watch", "{msg}");
}

/// How a hook run ended.
enum Hook {
    Ok,
    Failed(String),
    Killed,
    /// The agent was asked to stop (SIGTERM) while the hook ran; the hook's
    /// process group got SIGTERM too.
    Terminated,
}

/// Sends `signal` to the hook's whole process group (it runs in its own,
/// so whatever it started goes too).
fn signal_group(pid: Option<u32>, signal: &str) {
    #[cfg(unix)]
    {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        let sig = if signal == "TERM" {
            Signal::SIGTERM
        } else {
            Signal::SIGKILL
        };
        if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
            if let Err(e) = killpg(Pid::from_raw(pid), sig) {
                tracing::debug!(target: "gpufleet::watch", error = %e, "signalling the hook's group");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (pid, signal);
}

/// Whether anything is left in the hook's process group (signal 0 to it).
fn group_alive(pid: Option<u32>) -> bool {
    #[cfg(unix)]
    {
        use nix::sys::signal::killpg;
        use nix::unistd::Pid;
        pid.and_then(|p| i32::try_from(p).ok())
            .is_some_and(|p| killpg(Pid::from_raw(p), None).is_ok())
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

async fn run_hook(cmd: &str, n: &InterruptionNotice, limit: Duration) -> Hook {
    let now = OffsetDateTime::now_utc();
    let left = n
        .deadline
        .map(|d| (d - now).whole_seconds().max(0))
        .unwrap_or(limit.as_secs() as i64);
    let mut c = tokio::process::Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .env("GPUFLEET_NOTICE_KIND", n.kind.as_str())
        .env("GPUFLEET_SECONDS_LEFT", left.to_string())
        .env("GPUFLEET_NOTICE_SOURCE", &n.source)
        // Its own process group, so that killing it at the deadline takes
        // whatever it started too.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(d) = n.deadline.and_then(|d| d.format(&Rfc3339).ok()) {
        c.env("GPUFLEET_DEADLINE", d);
    }
    if let Some(i) = &n.instance {
        c.env("GPUFLEET_INSTANCE", i.as_str());
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => return Hook::Failed(format!("could not start the hook: {e}")),
    };
    let budget = Duration::from_secs(left.max(0) as u64);
    log(&format!("running the hook; {left} s until the deadline"));
    let pid = child.id();
    let deadline = tokio::time::sleep(budget);
    tokio::pin!(deadline);
    tokio::select! {
        r = child.wait() => match r {
            Ok(status) if status.success() => Hook::Ok,
            Ok(status) => Hook::Failed(format!("the hook exited with {status}")),
            Err(e) => Hook::Failed(e.to_string()),
        },
        _ = &mut deadline => {
            signal_group(pid, "KILL");
            let _ = child.kill().await;
            Hook::Killed
        }
        _ = crate::shared::terminated() => {
            // Being stopped (the node shutting down, a service manager):
            // the hook is told too, and given what is left of its time, at
            // most 10 s, before its group is killed.
            log("asked to stop (SIGTERM) while the hook runs; forwarding SIGTERM to it");
            signal_group(pid, "TERM");
            let grace = tokio::time::sleep(Duration::from_secs(10));
            tokio::pin!(grace);
            tokio::select! {
                _ = child.wait() => {}
                _ = &mut grace => {}
                _ = &mut deadline => {}
            }
            // The grace is the group's, not only the hook's: what the hook
            // started may still be handling its SIGTERM (saving a
            // checkpoint) after the hook itself has exited, and was killed
            // mid-way when the group was killed as soon as the hook ended.
            while group_alive(pid) {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = &mut grace => break,
                    _ = &mut deadline => break,
                }
            }
            signal_group(pid, "KILL");
            let _ = child.kill().await;
            Hook::Terminated
        }
    }
}

/// Runs `gpufleet watch` until a preemption is handled (or forever with
/// `--keep-watching`).
pub fn run(args: WatchArgs, format: crate::output::OutputFormat) -> Result<(), Failure> {
    // With the GPUs off there is nothing to serve or write: these were
    // silently ignored (and `--no-notices --gpu off` watched nothing, for
    // ever).
    if args.gpu == GpuArg::Off {
        let given: Vec<&str> = [
            (args.metrics.is_some(), "--metrics"),
            (args.gpu_summary.is_some(), "--gpu-summary"),
            (args.no_notices, "--no-notices"),
        ]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect();
        if !given.is_empty() {
            return Err(Error::invalid_input(format!(
                "--gpu off samples no GPU, so {} would do nothing: drop {}, or let the GPUs be read (--gpu auto)",
                given.join(" and "),
                if given.len() == 1 { "it" } else { "them" }
            ))
            .into());
        }
    }
    let rt = crate::shared::runtime()?;
    rt.block_on(async {
        let gpu_tasks = start_gpu(&args).await?;
        let _stop_gpu = AbortOnDrop(gpu_tasks);
        if args.no_notices {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = crate::shared::terminated() => {}
            }
            log("stopping");
            return Ok(());
        }
        let endpoints = gpufleet::runtime::factory::NodeEndpoints::from_env();
        let cloud = match args.cloud {
            Some(c) => c,
            None => match endpoints.detect(args.probe_timeout).await {
                Some(c) => {
                    log(&format!("detected {c} from its metadata service"));
                    c
                }
                None => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "no metadata service answered (AWS IMDS, GCE metadata, Azure IMDS); give --cloud or the endpoint variables",
                    )
                    .into())
                }
            },
        };
        let mut notices = endpoints.notices(cloud, args.poll)?;
        log(&format!("watching {cloud} for interruption notices every {:?}", args.poll));
        let mut failed_hook = None;
        while let Some(item) = notices.next().await {
            let n = match item {
                Ok(n) => n,
                Err(e) => {
                    log(&format!("unreadable notice: {e}"));
                    continue;
                }
            };
            log(&format!(
                "{} notice from {}{}",
                n.kind.as_str(),
                n.source,
                n.deadline
                    .and_then(|d| d.format(&Rfc3339).ok())
                    .map(|d| format!(", deadline {d}"))
                    .unwrap_or_default()
            ));
            if format != crate::output::OutputFormat::Table {
                // One JSON document per line for scripts: the notice as gpufleet's model has it.
                if let Ok(line) = serde_json::to_string(&n) {
                    println!("{line}");
                }
            }
            if let Some(cmd) = &args.on_notice {
                match run_hook(cmd, &n, args.hook_timeout).await {
                    Hook::Ok => {
                        log("hook finished");
                        if args.ack && gpufleet::azure::interruption::event_id(&n).is_some() {
                            match gpufleet::azure::interruption::acknowledge(&endpoints.azure, &n).await {
                                Ok(()) => log("scheduled event acknowledged"),
                                Err(e) => log(&format!("could not acknowledge the scheduled event: {e}")),
                            }
                        }
                    }
                    Hook::Failed(why) => {
                        log(&why);
                        failed_hook = Some(why);
                    }
                    Hook::Killed => {
                        log("the hook was still running at the deadline; killed it");
                        failed_hook = Some("the hook outlived the deadline and was killed".into());
                    }
                    Hook::Terminated => {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            "stopped by SIGTERM while the hook ran (the hook was sent SIGTERM too)",
                        )
                        .into());
                    }
                }
            }
            if n.kind == NoticeKind::Preemption && !args.keep_watching {
                return match failed_hook {
                    None => {
                        log("preemption handled; exiting");
                        Ok(())
                    }
                    Some(why) => Err(Error::new(ErrorKind::Unexpected, format!("preemption not handled: {why}")).into()),
                };
            }
        }
        Err(Error::new(ErrorKind::Unavailable, "the notice stream ended").into())
    })
}

/// Aborts the tasks when dropped.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
