//! `gpufleet watch`: runs on the GPU node, turns the cloud's interruption
//! notices into a checkpoint hook that runs before the deadline.

use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use gpufleet::{Cloud, Error, ErrorKind, InterruptionNotice, NoticeKind};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::args::{parse_cloud, parse_dur};
use crate::Failure;

/// Arguments of `gpufleet watch`.
#[derive(Debug, Args)]
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

fn log(msg: &str) {
    let now = OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default();
    eprintln!("{now} watch: {msg}");
}

/// How a hook run ended.
enum Hook {
    Ok,
    Failed(String),
    Killed,
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
    match tokio::time::timeout(budget, child.wait()).await {
        Ok(Ok(status)) if status.success() => Hook::Ok,
        Ok(Ok(status)) => Hook::Failed(format!("the hook exited with {status}")),
        Ok(Err(e)) => Hook::Failed(e.to_string()),
        Err(_) => {
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pid}")])
                    .status();
            }
            let _ = child.kill().await;
            Hook::Killed
        }
    }
}

/// Runs `gpufleet watch` until a preemption is handled (or forever with
/// `--keep-watching`).
pub fn run(args: WatchArgs, format: crate::output::OutputFormat) -> Result<(), Failure> {
    let rt = crate::runtime()?;
    rt.block_on(async {
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
