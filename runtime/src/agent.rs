//! The node agent behind `gpufleet watch`. It runs on the GPU node, turns
//! the cloud's interruption notices into a checkpoint hook that runs before
//! the deadline, and samples the GPUs (NVML, else `nvidia-smi`) into the
//! summary the boot script publishes as tags and, with
//! [`AgentConfig::metrics`], a Prometheus endpoint.
//!
//! The hook runs in its own process group: at the deadline the whole group
//! is killed; asked to stop ([`run`]'s `stop`), the agent forwards SIGTERM
//! to the group and gives it what is left of its time, at most 10 s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use gpufleet_core::{Cloud, Error, ErrorKind, InterruptionNotice, NoticeKind, Result};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::gpu::ReaderChoice;

/// What the agent does: the arguments of `gpufleet watch`.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The cloud this node runs on (`None`: probe the three metadata
    /// services, each for [`probe_timeout`](Self::probe_timeout)).
    pub cloud: Option<Cloud>,
    /// A shell command to run once per notice, with `GPUFLEET_NOTICE_KIND`,
    /// `GPUFLEET_DEADLINE` (RFC 3339) and `GPUFLEET_SECONDS_LEFT` set; it is
    /// killed if it is still running at the deadline.
    pub on_notice: Option<String>,
    /// On Azure, acknowledge each scheduled event once its hook finished.
    pub ack: bool,
    /// Keep watching after a preemption was handled (else return).
    pub keep_watching: bool,
    /// Only sample the GPUs: no metadata service, no notices.
    pub no_notices: bool,
    /// How the GPUs are read.
    pub gpu: ReaderChoice,
    /// How often the GPUs are sampled (1 s to 5 min).
    pub sample: Duration,
    /// The window the published summary covers (at least `sample`, at
    /// most 24 h).
    pub gpu_window: Duration,
    /// Where the GPU summary is written after each sample.
    pub gpu_summary: Option<PathBuf>,
    /// Where Prometheus metrics are served (`/metrics`).
    pub metrics: Option<SocketAddr>,
    /// How often the metadata service is polled.
    pub poll: Duration,
    /// How long a hook may run for a notice without a deadline.
    pub hook_timeout: Duration,
    /// How long each metadata service is given to answer the probe.
    pub probe_timeout: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            cloud: None,
            on_notice: None,
            ack: false,
            keep_watching: false,
            no_notices: false,
            gpu: ReaderChoice::Auto,
            sample: Duration::from_secs(10),
            gpu_window: Duration::from_secs(15 * 60),
            gpu_summary: None,
            metrics: None,
            poll: Duration::from_secs(2),
            hook_timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(1),
        }
    }
}

impl AgentConfig {
    /// Checks the settings together: sampling bounds, and nothing asked of
    /// GPUs that are not read (`--gpu off` with `--metrics` silently did
    /// nothing, and `--no-notices --gpu off` watched nothing for ever).
    pub fn check(&self) -> Result<()> {
        if self.gpu == ReaderChoice::Off {
            let given: Vec<&str> = [
                (self.metrics.is_some(), "--metrics"),
                (self.gpu_summary.is_some(), "--gpu-summary"),
                (self.no_notices, "--no-notices"),
            ]
            .into_iter()
            .filter_map(|(on, flag)| on.then_some(flag))
            .collect();
            if !given.is_empty() {
                return Err(Error::invalid_input(format!(
                    "--gpu off samples no GPU, so {} would do nothing: drop {}, or let the GPUs be read (--gpu auto)",
                    given.join(" and "),
                    if given.len() == 1 { "it" } else { "them" }
                )));
            }
        }
        if self.sample < Duration::from_secs(1) || self.sample > Duration::from_secs(300) {
            return Err(Error::invalid_input(format!(
                "invalid --sample {:?}: expected 1s to 5m",
                self.sample
            )));
        }
        if self.gpu_window < self.sample || self.gpu_window > Duration::from_secs(24 * 3600) {
            return Err(Error::invalid_input(format!(
                "invalid --gpu-window {:?}: expected at least --sample ({:?}) and at most 24h",
                self.gpu_window, self.sample
            )));
        }
        Ok(())
    }
}

/// Resolves once `stop` says true (never if its sender is gone without
/// saying so).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What to say about serving metrics on `addr`: a warning for any address
/// but loopback (the endpoint has no authentication).
pub fn metrics_warning(addr: SocketAddr) -> Option<String> {
    (!addr.ip().is_loopback()).then(|| format!(
        "warning: metrics on {addr} are served to every host that can reach it, not only this one (unauthenticated GPU figures); bind 127.0.0.1 unless a scraper elsewhere needs them and the network is yours"
    ))
}

/// Starts GPU sampling (and the metrics endpoint) as the arguments say;
/// the tasks run until the process ends.
async fn start_gpu(args: &AgentConfig) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    use crate::gpu::{detect, Sampler};
    let choice = args.gpu;
    let mut no_gpu = false;
    let reader: std::sync::Arc<dyn gpufleet_core::usage::GpuReader> = match detect(choice).await {
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
            std::sync::Arc::new(gpufleet_core::usage::ScriptedReader::new([Ok(Vec::new())]))
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
        if let Some(w) = metrics_warning(addr) {
            log(&w);
        }
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

/// The least time a hook gets, even for a notice whose deadline has passed
/// (a late notice, a clock off by seconds): enough to flush a checkpoint's
/// last bytes or say goodbye, not to hang a shutdown.
pub const MIN_HOOK_GRACE: Duration = Duration::from_secs(5);

/// The process groups of the hooks this agent started: whatever is left in
/// them (a hook's background children) is killed when the agent ends, however
/// it ends.
#[derive(Debug, Default)]
struct HookGroups(Vec<u32>);

impl Drop for HookGroups {
    fn drop(&mut self) {
        for pid in &self.0 {
            if group_alive(Some(*pid)) {
                signal_group(Some(*pid), "KILL");
            }
        }
    }
}

/// The seconds a hook is given for notice `n` at `now`: until its deadline,
/// or `limit` without one, and never under [`MIN_HOOK_GRACE`]; with what
/// to say when the deadline left less.
fn hook_budget(
    n: &InterruptionNotice,
    limit: Duration,
    now: OffsetDateTime,
) -> (i64, Option<String>) {
    let min = MIN_HOOK_GRACE.as_secs() as i64;
    match n.deadline.map(|d| (d - now).whole_seconds()) {
        Some(left) if left < min => (
            min,
            Some(if left <= 0 {
                format!(
                    "the notice's deadline passed {} s ago; giving the hook {min} s anyway",
                    -left
                )
            } else {
                format!("the notice's deadline is {left} s away; giving the hook {min} s")
            }),
        ),
        Some(left) => (left, None),
        None => (limit.as_secs() as i64, None),
    }
}

async fn run_hook(
    cmd: &str,
    n: &InterruptionNotice,
    limit: Duration,
    stop: &mut watch::Receiver<bool>,
    groups: &mut HookGroups,
) -> Hook {
    let (left, short) = hook_budget(n, limit, OffsetDateTime::now_utc());
    if let Some(why) = short {
        log(&why);
    }
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
    groups.0.extend(pid);
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
        _ = stopped(stop) => {
            // Being stopped (the node shutting down, a service manager):
            // the hook is told too, and given what is left of its time, at
            // most 10 s, before its group is killed.
            log("asked to stop (SIGTERM or Ctrl-C) while the hook runs; forwarding SIGTERM to it");
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

/// Runs the agent until a preemption is handled (or for ever with
/// [`keep_watching`](AgentConfig::keep_watching)), or with
/// [`no_notices`](AgentConfig::no_notices) until `stop` says true. Each
/// notice is handed to `on_notice` (the CLI prints it as a JSON line)
/// before its hook runs. `stop` is the process being asked to stop
/// (SIGTERM): a hook running then gets SIGTERM too.
pub async fn run(
    args: &AgentConfig,
    mut stop: watch::Receiver<bool>,
    mut on_notice: impl FnMut(&InterruptionNotice),
) -> Result<()> {
    args.check()?;
    let gpu_tasks = start_gpu(args).await?;
    let _stop_gpu = AbortOnDrop(gpu_tasks);
    if args.no_notices {
        stopped(&mut stop).await;
        log("stopping");
        return Ok(());
    }
    let endpoints = crate::factory::NodeEndpoints::from_env();
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
                    ))
                }
            },
        };
    let mut notices = endpoints.notices(cloud, args.poll)?;
    log(&format!(
        "watching {cloud} for interruption notices every {:?}",
        args.poll
    ));
    let mut failed_hook = None;
    let mut groups = HookGroups::default();
    loop {
        // Asked to stop (SIGTERM, Ctrl-C) between notices: stop now.
        let item = tokio::select! {
            item = notices.next() => item,
            () = stopped(&mut stop) => {
                log("stopping");
                return Ok(());
            }
        };
        let Some(item) = item else { break };
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
        on_notice(&n);
        if let Some(cmd) = &args.on_notice {
            match run_hook(cmd, &n, args.hook_timeout, &mut stop, &mut groups).await {
                Hook::Ok => {
                    log("hook finished");
                    if args.ack {
                        acknowledge(&endpoints, &n).await;
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
                        "stopped (SIGTERM or Ctrl-C) while the hook ran (the hook was sent SIGTERM too)",
                    ));
                }
            }
        }
        if n.kind == NoticeKind::Preemption && !args.keep_watching {
            return match failed_hook {
                None => {
                    log("preemption handled; exiting");
                    Ok(())
                }
                Some(why) => Err(Error::new(
                    ErrorKind::Unexpected,
                    format!("preemption not handled: {why}"),
                )),
            };
        }
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        "the notice stream ended",
    ))
}

/// Acknowledges an Azure scheduled event (`StartRequests`), so Azure may go
/// ahead before `NotBefore`; a notice from elsewhere has nothing to
/// acknowledge.
async fn acknowledge(endpoints: &crate::factory::NodeEndpoints, n: &InterruptionNotice) {
    #[cfg(feature = "azure")]
    if gpufleet_azure::interruption::event_id(n).is_some() {
        match gpufleet_azure::interruption::acknowledge(&endpoints.azure, n).await {
            Ok(()) => log("scheduled event acknowledged"),
            Err(e) => log(&format!("could not acknowledge the scheduled event: {e}")),
        }
    }
    #[cfg(not(feature = "azure"))]
    let _ = (endpoints, n);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_off_loopback_are_warned_about() {
        let at = |s: &str| {
            s.parse::<SocketAddr>()
                .unwrap_or_else(|e| panic!("{s}: {e}"))
        };
        assert!(metrics_warning(at("127.0.0.1:9400")).is_none());
        assert!(metrics_warning(at("[::1]:9400")).is_none());
        let w = metrics_warning(at("0.0.0.0:9400")).unwrap_or_default();
        assert!(w.contains("every host"), "{w}");
        assert!(metrics_warning(at("10.0.0.5:9400")).is_some());
    }

    #[test]
    fn a_past_deadline_still_gives_the_hook_its_minimum() {
        let now = OffsetDateTime::now_utc();
        let notice = |secs: i64| InterruptionNotice {
            instance: None,
            kind: NoticeKind::Preemption,
            deadline: Some(now + time::Duration::seconds(secs)),
            source: "test".into(),
            received_at: now,
        };
        let limit = Duration::from_secs(30);
        assert_eq!(hook_budget(&notice(120), limit, now), (120, None));
        let (s, why) = hook_budget(&notice(-30), limit, now);
        assert_eq!(s, MIN_HOOK_GRACE.as_secs() as i64);
        assert!(why.unwrap_or_default().contains("passed 30 s ago"));
        let (s, why) = hook_budget(&notice(2), limit, now);
        assert_eq!(s, 5);
        assert!(why.is_some());
    }
}
