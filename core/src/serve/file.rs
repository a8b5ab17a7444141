//! The service file (TOML) as written by a person, checked and turned into a
//! [`ServiceSpec`], every bad key named with what would be valid.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::placer::job::toml_error;
use crate::placer::{parse_duration, AccessFile, GpuFileOption, ImageFile, JobFile, JobSpec};
use crate::{Error, Result};

/// The most replicas a service may ask for.
pub const MAX_REPLICAS: u32 = 1_000;
/// The longest service name, in characters (it is carried in tags and
/// instance names, so it is a DNS label's alphabet).
pub const MAX_SERVICE_NAME_CHARS: usize = 40;
/// The most requests in flight per replica a target may name.
pub const MAX_TARGET_IN_FLIGHT: f64 = 100_000.0;
/// The most spot replicas kept beyond the target (`[spot] extra`).
pub const MAX_EXTRA_REPLICAS: u32 = 100;
/// The longest any of the service file's durations may be.
pub const MAX_SERVICE_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A service file:
///
/// ```toml
/// name = "echo"
/// run = "python3 -m http.server \"$PORT\""
/// readiness = "/"
///
/// [[gpu]]
/// model = "L4"
///
/// [replicas]
/// min = 0
/// max = 4
///
/// [autoscale]
/// target_in_flight = 8
/// up_after = "30s"
/// down_after = "5m"
/// idle = "15m"
///
/// [spot]
/// share = 1.0
/// min_on_demand = 0
/// extra = 1
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceFile {
    /// The service's name: lowercase letters, digits and hyphens.
    pub name: String,
    /// The server command; it must listen on the port in `PORT`.
    pub run: String,
    /// The port the server listens on, given to it in `PORT` (default
    /// 8080): the proxy reaches each replica at its instance's address and
    /// this port, so the network's firewall rules must let the controller
    /// in on it. The `local` provider gives each replica a free port of
    /// its own instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// Commands run once before `run` on every replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// The machine image, one for every cloud or one per cloud.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageFile>,
    /// Environment variables of `setup` and `run`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Access settings (as in job files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessFile>,
    /// The readiness check: a path, or a table.
    pub readiness: ReadinessFile,
    /// GPU options, any of them; the first is the unit replicas are counted in.
    #[serde(rename = "gpu")]
    pub gpus: Vec<GpuFileOption>,
    /// Throughput overrides by GPU model.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub throughput: BTreeMap<String, f64>,
    /// Allowed clouds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clouds: Vec<String>,
    /// Allowed regions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Allowed zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// How many replicas.
    #[serde(default)]
    pub replicas: ReplicasFile,
    /// When to scale.
    #[serde(default)]
    pub autoscale: AutoscaleFile,
    /// How much of the service runs on spot capacity.
    #[serde(default)]
    pub spot: SpotFile,
    /// The proxy's queue and retries.
    #[serde(default)]
    pub proxy: ProxyFile,
}

/// `readiness = "/health"` or `[readiness]` with its timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReadinessFile {
    /// Only the path.
    Path(String),
    /// The path and its timings.
    Table(ReadinessTable),
}

impl Default for ReadinessFile {
    fn default() -> Self {
        ReadinessFile::Path("/".into())
    }
}

/// The `[readiness]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadinessTable {
    /// The HTTP path that answers 200 when the replica can serve.
    pub path: String,
    /// One check's time limit (default 5s).
    #[serde(default)]
    pub timeout: Option<String>,
    /// How long a replica may take from launch to ready (default 20m).
    #[serde(default)]
    pub start_timeout: Option<String>,
}

/// The `[replicas]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicasFile {
    /// At least this many (default 1).
    #[serde(default)]
    pub min: Option<u32>,
    /// At most this many (default the larger of `min` and 1).
    #[serde(default)]
    pub max: Option<u32>,
}

/// The `[autoscale]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleFile {
    /// Requests in flight per ready replica the autoscaler aims at.
    #[serde(default)]
    pub target_in_flight: Option<f64>,
    /// Scale up once over the target this long (default 30s).
    #[serde(default)]
    pub up_after: Option<String>,
    /// Scale down once under the target this long (default 5m).
    #[serde(default)]
    pub down_after: Option<String>,
    /// Scale to zero after this long with no request (absent: never).
    #[serde(default)]
    pub idle: Option<String>,
}

/// The `[spot]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpotFile {
    /// The share of the target run on spot, 0 to 1 (default 1).
    #[serde(default)]
    pub share: Option<f64>,
    /// On-demand replicas kept whatever spot offers (default 0).
    #[serde(default)]
    pub min_on_demand: Option<u32>,
    /// Spot replicas kept beyond the target (default 1 when spot is used).
    #[serde(default)]
    pub extra: Option<u32>,
    /// Keep the target ready through the loss of any one zone's spot
    /// capacity (default false: `extra` alone hedges).
    #[serde(default)]
    pub survive_zone_loss: Option<bool>,
}

/// The `[proxy]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFile {
    /// Requests held while no replica is ready (default 1000).
    #[serde(default)]
    pub queue: Option<u32>,
    /// How long a held request waits before a 503 (default 2m).
    #[serde(default)]
    pub queue_timeout: Option<String>,
    /// Other replicas an idempotent request is tried on (default 2).
    #[serde(default)]
    pub retries: Option<u32>,
    /// How long a client has to send a request's headers, and how long a
    /// kept-alive connection may sit idle (default 10s).
    #[serde(default)]
    pub header_timeout: Option<String>,
    /// How long a client has to send a request's whole body (default 60s).
    #[serde(default)]
    pub body_timeout: Option<String>,
    /// Client connections kept open at once (default 1024, and at most half
    /// the process's file descriptor limit).
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Request body bytes held across every connection at once, in MiB
    /// (default 128).
    #[serde(default)]
    pub max_held_mib: Option<u32>,
}

/// How a replica is known to be ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    /// The HTTP path that answers 200 when the replica can serve.
    pub path: String,
    /// One check's time limit.
    pub timeout: Duration,
    /// How long a replica may take from launch to ready before it is
    /// replaced.
    pub start_timeout: Duration,
}

/// The bounds on the number of replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaBounds {
    /// At least this many (0 only with [`AutoscaleSettings::idle`]).
    pub min: u32,
    /// At most this many.
    pub max: u32,
}

/// When the autoscaler moves the target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AutoscaleSettings {
    /// Requests in flight per ready replica aimed at.
    pub target_in_flight: f64,
    /// Up after this long over the target.
    pub up_after: Duration,
    /// Down after this long under it.
    pub down_after: Duration,
    /// To zero after this long with no request (never when `None`).
    pub idle: Option<Duration>,
}

/// How much of the service runs on spot capacity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpotSettings {
    /// The share of the target on spot, 0 to 1.
    pub share: f64,
    /// On-demand replicas kept whatever spot offers.
    pub min_on_demand: u32,
    /// Spot replicas kept beyond the spot target (SpotHedge's N+k).
    pub extra: u32,
    /// Keep the target ready through the loss of any one zone: more spot
    /// replicas spread over the open zones where there are two or more,
    /// on-demand standing in for what a zone's loss would take beyond them.
    #[serde(default)]
    pub survive_zone_loss: bool,
}

/// The proxy's queue, retries and the bounds it keeps on clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySettings {
    /// Requests held while no replica is ready; beyond it, 503.
    pub queue: u32,
    /// How long a held request waits before a 503.
    pub queue_timeout: Duration,
    /// Other replicas an idempotent request is tried on.
    pub retries: u32,
    /// How long a client has to send a request's headers (and how long a
    /// kept-alive connection may sit idle before its next one).
    pub header_timeout: Duration,
    /// How long a client has to send a request's whole body; beyond it,
    /// 408.
    pub body_timeout: Duration,
    /// Client connections kept open at once (further ones wait to be
    /// accepted); also at most half the process's file descriptor limit.
    pub max_connections: u32,
    /// Request body bytes held across every connection at once; a request
    /// that would go beyond it is answered 503.
    pub max_held_bytes: u64,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            queue: 1000,
            queue_timeout: Duration::from_secs(120),
            retries: 2,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_held_bytes: 128 << 20,
        }
    }
}

/// A checked service: what one replica is and runs ([`ServiceSpec::replica`],
/// whose GPU options, throughput table, workload and clouds are the service
/// file's), how many, and when to scale.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServiceSpec {
    /// The service's name.
    pub name: String,
    /// One replica's shape and workload. Its `hours` mean nothing (a
    /// replica serves until it is stopped); it is a `JobSpec` so that the
    /// offers a replica can use are matched exactly as a job's are.
    pub replica: JobSpec,
    /// The readiness check.
    pub readiness: Readiness,
    /// The bounds on replicas.
    pub replicas: ReplicaBounds,
    /// The autoscaler's settings.
    pub autoscale: AutoscaleSettings,
    /// The spot settings.
    pub spot: SpotSettings,
    /// The proxy's settings.
    pub proxy: ProxySettings,
    /// The port replicas listen on (their `PORT`), off the `local`
    /// provider.
    pub port: u16,
}

/// The port replicas listen on where the service file names none.
pub const DEFAULT_PORT: u16 = 8080;

/// Checks a service name: 1 to [`MAX_SERVICE_NAME_CHARS`] lowercase ASCII
/// letters, digits and hyphens, starting with a letter and not ending with a
/// hyphen.
pub fn check_service_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SERVICE_NAME_CHARS
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        let shown: String = name.chars().take(64).collect();
        Err(Error::invalid_input(format!(
            "invalid service name {shown:?}: expected 1 to {MAX_SERVICE_NAME_CHARS} lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen"
        )))
    }
}

fn duration(key: &str, value: Option<&str>, default: Duration, min: Duration) -> Result<Duration> {
    let Some(text) = value else {
        return Ok(default);
    };
    let d = parse_duration(text)
        .map_err(|e| Error::invalid_input(format!("{key}: {}", e.message())))?;
    if d < min || d > MAX_SERVICE_DURATION {
        return Err(Error::invalid_input(format!(
            "{key} = {text:?}: expected {} to 7d",
            crate::placer::format_duration(min)
        )));
    }
    Ok(d)
}

impl ServiceFile {
    /// Reads a service file in TOML; unknown keys are refused with where
    /// they are.
    pub fn from_toml(text: &str) -> Result<ServiceFile> {
        toml::from_str(text).map_err(|e| toml_error("service file", text, &e))
    }

    /// Checks the file and turns it into a spec.
    pub fn into_spec(self) -> Result<ServiceSpec> {
        check_service_name(&self.name)?;
        if self.run.trim().is_empty() {
            return Err(Error::invalid_input(
                "run: the server command is empty; give the command that serves on $PORT",
            ));
        }
        if self.gpus.is_empty() {
            return Err(Error::invalid_input(
                "[[gpu]]: a service needs at least one GPU option, such as [[gpu]] model = \"L4\"",
            ));
        }
        let readiness = match &self.readiness {
            ReadinessFile::Path(path) => ReadinessTable {
                path: path.clone(),
                ..ReadinessTable::default()
            },
            ReadinessFile::Table(t) => t.clone(),
        };
        if !readiness.path.starts_with('/')
            || readiness
                .path
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::invalid_input(format!(
                "readiness = {:?}: expected an HTTP path starting with '/', such as \"/health\"",
                readiness.path
            )));
        }
        let readiness = Readiness {
            timeout: duration(
                "readiness.timeout",
                readiness.timeout.as_deref(),
                Duration::from_secs(5),
                Duration::from_millis(10),
            )?,
            start_timeout: duration(
                "readiness.start_timeout",
                readiness.start_timeout.as_deref(),
                Duration::from_secs(20 * 60),
                Duration::from_secs(1),
            )?,
            path: readiness.path,
        };

        let a = &self.autoscale;
        let autoscale = AutoscaleSettings {
            target_in_flight: match a.target_in_flight {
                None => 4.0,
                Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TARGET_IN_FLIGHT => t,
                Some(t) => {
                    return Err(Error::invalid_input(format!(
                        "autoscale.target_in_flight = {t}: expected more than 0 and at most {MAX_TARGET_IN_FLIGHT}"
                    )))
                }
            },
            up_after: duration("autoscale.up_after", a.up_after.as_deref(), Duration::from_secs(30), Duration::ZERO)?,
            down_after: duration(
                "autoscale.down_after",
                a.down_after.as_deref(),
                Duration::from_secs(300),
                Duration::ZERO,
            )?,
            idle: a
                .idle
                .as_deref()
                .map(|s| duration("autoscale.idle", Some(s), Duration::ZERO, Duration::from_secs(1)))
                .transpose()?,
        };

        let min = self.replicas.min.unwrap_or(1);
        let max = self.replicas.max.unwrap_or(min.max(1));
        if max == 0 || max > MAX_REPLICAS {
            return Err(Error::invalid_input(format!(
                "replicas.max = {max}: expected 1 to {MAX_REPLICAS}"
            )));
        }
        if min > max {
            return Err(Error::invalid_input(format!(
                "replicas.min = {min}: expected 0 to replicas.max ({max})"
            )));
        }
        match (min, autoscale.idle) {
            (0, None) => {
                return Err(Error::invalid_input(
                    "replicas.min = 0 needs autoscale.idle (how long without a request before the service scales to zero), such as idle = \"15m\"",
                ))
            }
            (m, Some(_)) if m > 0 => {
                return Err(Error::invalid_input(format!(
                    "autoscale.idle scales to zero, which replicas.min = {m} forbids: set replicas.min = 0 or remove idle"
                )))
            }
            _ => {}
        }

        let share = match self.spot.share {
            None => 1.0,
            Some(s) if (0.0..=1.0).contains(&s) => s,
            Some(s) => {
                return Err(Error::invalid_input(format!(
                    "spot.share = {s}: expected 0 (all on-demand) to 1 (all spot)"
                )))
            }
        };
        let min_on_demand = self.spot.min_on_demand.unwrap_or(0);
        if min_on_demand > max {
            return Err(Error::invalid_input(format!(
                "spot.min_on_demand = {min_on_demand}: expected 0 to replicas.max ({max})"
            )));
        }
        let extra = self.spot.extra.unwrap_or(if share > 0.0 { 1 } else { 0 });
        if extra > MAX_EXTRA_REPLICAS {
            return Err(Error::invalid_input(format!(
                "spot.extra = {extra}: expected 0 to {MAX_EXTRA_REPLICAS}"
            )));
        }
        if extra > 0 && share == 0.0 {
            return Err(Error::invalid_input(format!(
                "spot.extra = {extra} keeps spot replicas beyond the target, but spot.share = 0 uses no spot: set share above 0 or extra = 0"
            )));
        }
        let survive_zone_loss = self.spot.survive_zone_loss.unwrap_or(false);
        if survive_zone_loss && share == 0.0 {
            return Err(Error::invalid_input(
                "spot.survive_zone_loss = true guards spot replicas, but spot.share = 0 uses no spot: set share above 0 or leave survive_zone_loss out",
            ));
        }
        let spot = SpotSettings {
            share,
            min_on_demand,
            extra,
            survive_zone_loss,
        };

        let defaults = ProxySettings::default();
        let queue = self.proxy.queue.unwrap_or(defaults.queue);
        if queue > 1_000_000 {
            return Err(Error::invalid_input(format!(
                "proxy.queue = {queue}: expected 0 to 1000000"
            )));
        }
        let retries = self.proxy.retries.unwrap_or(defaults.retries);
        if retries > 10 {
            return Err(Error::invalid_input(format!(
                "proxy.retries = {retries}: expected 0 to 10"
            )));
        }
        let max_connections = self
            .proxy
            .max_connections
            .unwrap_or(defaults.max_connections);
        if !(1..=1_000_000).contains(&max_connections) {
            return Err(Error::invalid_input(format!(
                "proxy.max_connections = {max_connections}: expected 1 to 1000000"
            )));
        }
        let max_held_bytes = match self.proxy.max_held_mib {
            None => defaults.max_held_bytes,
            Some(m) if (16..=65_536).contains(&m) => u64::from(m) << 20,
            Some(m) => {
                return Err(Error::invalid_input(format!(
                    "proxy.max_held_mib = {m}: expected 16 (one largest request body) to 65536"
                )))
            }
        };
        let proxy = ProxySettings {
            queue,
            queue_timeout: duration(
                "proxy.queue_timeout",
                self.proxy.queue_timeout.as_deref(),
                defaults.queue_timeout,
                Duration::ZERO,
            )?,
            retries,
            header_timeout: duration(
                "proxy.header_timeout",
                self.proxy.header_timeout.as_deref(),
                defaults.header_timeout,
                Duration::from_secs(1),
            )?,
            body_timeout: duration(
                "proxy.body_timeout",
                self.proxy.body_timeout.as_deref(),
                defaults.body_timeout,
                Duration::from_secs(1),
            )?,
            max_connections,
            max_held_bytes,
        };

        // One replica: matched to offers exactly as a job is.
        let replica = JobFile {
            name: Some(self.name.clone()),
            hours: 1.0,
            gpus: self.gpus,
            interruptible: Some(true),
            throughput: self.throughput,
            clouds: self.clouds,
            regions: self.regions,
            zones: self.zones,
            run: Some(self.run),
            setup: self.setup,
            image: self.image,
            env: self.env,
            access: self.access,
            ..JobFile::default()
        }
        .into_spec()?;
        if replica.workload.env.contains_key("PORT") {
            return Err(Error::invalid_input(
                "env.PORT: gpufleet sets PORT to the port the replica must listen on; remove it from env",
            ));
        }
        let port = match self.port {
            None => DEFAULT_PORT,
            Some(p) => u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
                Error::invalid_input(format!("port = {p}: expected a TCP port, 1 to 65535"))
            })?,
        };
        Ok(ServiceSpec {
            name: self.name,
            port,
            replica,
            readiness,
            replicas: ReplicaBounds { min, max },
            autoscale,
            spot,
            proxy,
        })
    }
}

impl ServiceSpec {
    /// Reads and checks a service file in TOML.
    pub fn from_toml(text: &str) -> Result<ServiceSpec> {
        ServiceFile::from_toml(text)?.into_spec()
    }

    /// The fewest replicas the service runs when it has load (1, or `min`
    /// when higher).
    pub fn floor(&self) -> u32 {
        self.replicas.min.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ECHO: &str = r#"
name = "echo"
run = "python3 -m http.server $PORT"
readiness = "/"
[[gpu]]
model = "L4"
[replicas]
min = 0
max = 4
[autoscale]
target_in_flight = 8
idle = "15m"
"#;

    #[test]
    fn reads_a_service_with_defaults() {
        let s = ServiceSpec::from_toml(ECHO).unwrap();
        assert_eq!(s.name, "echo");
        assert_eq!(s.replicas, ReplicaBounds { min: 0, max: 4 });
        assert_eq!(s.autoscale.target_in_flight, 8.0);
        assert_eq!(s.autoscale.up_after, Duration::from_secs(30));
        assert_eq!(s.autoscale.down_after, Duration::from_secs(300));
        assert_eq!(s.autoscale.idle, Some(Duration::from_secs(900)));
        assert_eq!(s.spot.share, 1.0);
        assert_eq!(s.spot.extra, 1);
        assert_eq!(s.readiness.path, "/");
        assert_eq!(s.readiness.timeout, Duration::from_secs(5));
        assert_eq!(s.port, 8080);
        let on_8000 = ECHO.replace("name = \"echo\"", "name = \"echo\"\nport = 8000");
        assert_eq!(ServiceSpec::from_toml(&on_8000).unwrap().port, 8000);
        assert_eq!(
            s.replica.workload.run.as_deref(),
            Some("python3 -m http.server $PORT")
        );
        assert!(s.replica.deadline.is_none());
        assert_eq!(s.floor(), 1);
    }

    fn refused(text: &str) -> String {
        ServiceSpec::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_values_are_refused_with_the_key_and_range() {
        let with = |from: &str, to: &str| ECHO.replace(from, to);
        for (text, expect) in [
            (
                with("name = \"echo\"", "name = \"Echo_1\""),
                "invalid service name",
            ),
            (
                with("name = \"echo\"", "name = \"echo\"\nport = 70000"),
                "port = 70000: expected a TCP port, 1 to 65535",
            ),
            (
                with("name = \"echo\"", "name = \"echo\"\nport = 0"),
                "port = 0: expected a TCP port",
            ),
            (
                with("max = 4", "max = 0"),
                "replicas.max = 0: expected 1 to 1000",
            ),
            (
                with("max = 4", "max = 4\nextra_key = 1"),
                "unknown field `extra_key`",
            ),
            (
                with("min = 0", "min = 5"),
                "replicas.min = 5: expected 0 to replicas.max (4)",
            ),
            (with("idle = \"15m\"", "idle = \"soon\""), "autoscale.idle"),
            (
                with("target_in_flight = 8", "target_in_flight = 0"),
                "autoscale.target_in_flight = 0",
            ),
            (
                with("idle = \"15m\"", ""),
                "replicas.min = 0 needs autoscale.idle",
            ),
            (with("min = 0", "min = 1"), "replicas.min = 1 forbids"),
            (
                with("readiness = \"/\"", "readiness = \"health\""),
                "starting with '/'",
            ),
            (
                format!("{ECHO}[spot]\nshare = 1.5\n"),
                "spot.share = 1.5: expected 0",
            ),
            (
                format!("{ECHO}[spot]\nshare = 0.0\nextra = 2\n"),
                "spot.share = 0 uses no spot",
            ),
            (
                format!("{ECHO}[spot]\nshare = 0.0\nextra = 0\nsurvive_zone_loss = true\n"),
                "spot.survive_zone_loss = true guards spot replicas, but spot.share = 0",
            ),
            (
                format!("{ECHO}[spot]\nsurvive_zone_loss = \"yes\"\n"),
                "survive_zone_loss",
            ),
            (
                format!("{ECHO}[spot]\nmin_on_demand = 9\n"),
                "spot.min_on_demand = 9: expected 0 to replicas.max (4)",
            ),
            (
                format!("{ECHO}[proxy]\nretries = 11\n"),
                "proxy.retries = 11: expected 0 to 10",
            ),
            (format!("{ECHO}[env]\nPORT = \"1\"\n"), "env.PORT"),
            (with("model = \"L4\"", "model = \"L44\""), "L4"),
        ] {
            let got = refused(&text);
            assert!(got.contains(expect), "{expect:?} not in {got:?}");
        }
    }
}
