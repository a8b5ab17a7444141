//! The node agent's GPU side: readers (NVML, `nvidia-smi`), the sampler
//! that keeps the [`UsageWindow`] and writes the summary the boot script
//! publishes as tags, and the Prometheus endpoint.
//!
//! - **NVML** (`libnvidia-ml.so.1`, loaded at run time with `nvml-wrapper`:
//!   nothing of CUDA is needed to build gpufleet). Its calls block briefly in
//!   the driver, so they run on tokio's blocking pool.
//! - **`nvidia-smi`** when NVML cannot load: `nvidia-smi
//!   --query-gpu=index,utilization.gpu,memory.used,memory.total
//!   --format=csv,noheader,nounits`, read with the `csv` crate.
//! - **No GPU**: [`detect`] says so plainly, with why; the agent still runs
//!   (notices), and publishes `n0` so `reap` shows the node as unknown
//!   rather than idle.
//!
//! The endpoint serves the per-GPU gauges under the names NVIDIA's DCGM
//! exporter uses (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`,
//! `DCGM_FI_DEV_FB_FREE`, labels `gpu`, `UUID`, `device`, `modelName`,
//! `Hostname`), so dashboards built for it work, plus gpufleet's window
//! figures (`gpufleet_gpu_*`), in the OpenMetrics text format.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpufleet_core::usage::{GpuReader, GpuReading, GpuSummary, UsageWindow};
use gpufleet_core::{tags, Error, ErrorKind, Result};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use time::OffsetDateTime;

/// The `nvidia-smi` query the fallback reader runs.
pub const NVIDIA_SMI_QUERY: [&str; 3] = [
    "--query-gpu=index,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
    "--",
];

/// Reads through NVML.
pub struct NvmlReader {
    nvml: Arc<nvml_wrapper::Nvml>,
    version: String,
}

impl std::fmt::Debug for NvmlReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlReader")
            .field("version", &self.version)
            .finish()
    }
}

impl NvmlReader {
    /// Loads NVML (`libnvidia-ml.so.1` from the loader's path). Blocks
    /// briefly: call it from a blocking thread or at start-up.
    pub fn load() -> Result<Self> {
        let nvml = nvml_wrapper::Nvml::init()
            .map_err(|e| Error::new(ErrorKind::Unavailable, format!("NVML did not load: {e}")))?;
        let version = nvml
            .sys_nvml_version()
            .map(|v| format!("NVML {v}"))
            .unwrap_or_else(|_| "NVML".into());
        Ok(NvmlReader {
            nvml: Arc::new(nvml),
            version,
        })
    }
}

fn nvml_err(what: &str, e: nvml_wrapper::error::NvmlError) -> Error {
    Error::new(ErrorKind::Unavailable, format!("NVML: {what}: {e}"))
}

#[async_trait]
impl GpuReader for NvmlReader {
    fn source(&self) -> String {
        self.version.clone()
    }

    async fn read(&self) -> Result<Vec<GpuReading>> {
        let nvml = self.nvml.clone();
        tokio::task::spawn_blocking(move || {
            let n = nvml
                .device_count()
                .map_err(|e| nvml_err("device count", e))?;
            let mut out = Vec::with_capacity(n as usize);
            for index in 0..n {
                let d = nvml
                    .device_by_index(index)
                    .map_err(|e| nvml_err(&format!("GPU {index}"), e))?;
                let util = d
                    .utilization_rates()
                    .map_err(|e| nvml_err(&format!("GPU {index} utilisation"), e))?;
                let mem = d
                    .memory_info()
                    .map_err(|e| nvml_err(&format!("GPU {index} memory"), e))?;
                out.push(GpuReading {
                    index,
                    uuid: d.uuid().ok(),
                    name: d.name().ok(),
                    utilization_pct: util.gpu.min(100) as u8,
                    memory_used_mib: mem.used / (1024 * 1024),
                    memory_total_mib: mem.total / (1024 * 1024),
                });
            }
            Ok(out)
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("NVML reader task: {e}")))?
    }
}

/// Reads by running `nvidia-smi` (found on `PATH`, or the given program).
#[derive(Debug, Clone)]
pub struct NvidiaSmiReader {
    program: PathBuf,
    timeout: Duration,
}

impl NvidiaSmiReader {
    /// `nvidia-smi` from `PATH`, given 10 s per query.
    pub fn new() -> Self {
        NvidiaSmiReader {
            program: PathBuf::from("nvidia-smi"),
            timeout: Duration::from_secs(10),
        }
    }

    /// Runs `program` instead.
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }
}

impl Default for NvidiaSmiReader {
    fn default() -> Self {
        NvidiaSmiReader::new()
    }
}

/// Parses `nvidia-smi`'s CSV (`index, utilization.gpu, memory.used,
/// memory.total` per line, no header, no units).
pub fn parse_nvidia_smi(out: &str) -> Result<Vec<GpuReading>> {
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .trim(csv::Trim::All)
        .from_reader(out.as_bytes());
    let mut readings = Vec::new();
    for (line, rec) in rd.records().enumerate() {
        let rec = rec.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("nvidia-smi line {}: {e}", line + 1),
            )
        })?;
        let field = |i: usize, what: &str| -> Result<u64> {
            let v = rec.get(i).unwrap_or("");
            v.parse::<u64>().map_err(|_| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "nvidia-smi line {}: {what} is '{v}', expected a whole number (is the GPU in MIG mode or lost?)",
                        line + 1
                    ),
                )
            })
        };
        if rec.len() < 4 {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "nvidia-smi line {}: {} fields, expected 4 (index, utilization.gpu, memory.used, memory.total)",
                    line + 1,
                    rec.len()
                ),
            ));
        }
        let r = GpuReading {
            index: u32::try_from(field(0, "index")?).unwrap_or(u32::MAX),
            uuid: None,
            name: None,
            utilization_pct: field(1, "utilization.gpu")?.min(100) as u8,
            memory_used_mib: field(2, "memory.used")?,
            memory_total_mib: field(3, "memory.total")?,
        };
        r.validate()?;
        readings.push(r);
    }
    Ok(readings)
}

#[async_trait]
impl GpuReader for NvidiaSmiReader {
    fn source(&self) -> String {
        format!("{}", self.program.display())
    }

    async fn read(&self) -> Result<Vec<GpuReading>> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&NVIDIA_SMI_QUERY[..2]).kill_on_drop(true);
        let out = tokio::time::timeout(self.timeout, cmd.output())
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{} did not answer within {:?}",
                        self.program.display(),
                        self.timeout
                    ),
                )
            })?
            .map_err(|e| {
                let kind = if e.kind() == std::io::ErrorKind::NotFound {
                    ErrorKind::NotFound
                } else {
                    ErrorKind::Unavailable
                };
                Error::new(kind, format!("cannot run {}: {e}", self.program.display()))
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let said = format!("{stdout} {}", String::from_utf8_lossy(&out.stderr));
            // nvidia-smi exits 6 ("No devices were found") on a node without
            // a GPU the driver can see.
            if said.contains("No devices were found") {
                return Ok(Vec::new());
            }
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{} exited with {}: {}",
                    self.program.display(),
                    out.status,
                    said.trim()
                ),
            ));
        }
        parse_nvidia_smi(&stdout)
    }
}

/// Which reader to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderChoice {
    /// NVML, else `nvidia-smi`, else none.
    Auto,
    /// NVML only.
    Nvml,
    /// `nvidia-smi` only.
    NvidiaSmi,
    /// Do not sample.
    Off,
}

/// The reader `choice` gives on this node, or why there is none (no GPU,
/// no driver, sampling off).
pub async fn detect(choice: ReaderChoice) -> std::result::Result<Arc<dyn GpuReader>, String> {
    let nvml = || async {
        tokio::task::spawn_blocking(NvmlReader::load)
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))
            .and_then(|r| r)
    };
    let smi = || async {
        let r = NvidiaSmiReader::new();
        r.read().await.map(|gpus| (r, gpus))
    };
    match choice {
        ReaderChoice::Off => Err("GPU sampling is off".into()),
        ReaderChoice::Nvml => match nvml().await {
            Ok(r) => Ok(Arc::new(r)),
            Err(e) => Err(e.to_string()),
        },
        ReaderChoice::NvidiaSmi => match smi().await {
            Ok((_, g)) if g.is_empty() => Err("no GPU: nvidia-smi found no devices".into()),
            Ok((r, _)) => Ok(Arc::new(r)),
            Err(e) => Err(e.to_string()),
        },
        ReaderChoice::Auto => {
            let nvml_err = match nvml().await {
                Ok(r) => return Ok(Arc::new(r)),
                Err(e) => e,
            };
            match smi().await {
                Ok((_, g)) if g.is_empty() => Err("no GPU: nvidia-smi found no devices".into()),
                Ok((r, _)) => Ok(Arc::new(r)),
                Err(e) if e.kind() == ErrorKind::NotFound => Err(format!(
                    "no GPU found: {nvml_err}, and nvidia-smi is not on PATH"
                )),
                Err(e) => Err(format!("no GPU reader: {nvml_err}; {e}")),
            }
        }
    }
}

/// The labels DCGM's exporter puts on per-GPU series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)]
struct DcgmLabels {
    gpu: String,
    UUID: String,
    device: String,
    modelName: String,
    Hostname: String,
}

/// What the sampler has seen, shared with the endpoint.
#[derive(Debug, Default)]
struct State {
    window: UsageWindow,
    latest: Vec<GpuReading>,
    summary: Option<GpuSummary>,
    samples: u64,
    errors: u64,
}

/// Samples a reader into a window, writes the summary file, serves
/// `/metrics`.
#[derive(Debug, Clone)]
pub struct Sampler {
    reader: Arc<dyn GpuReader>,
    state: Arc<Mutex<State>>,
    summary_file: Option<PathBuf>,
    hostname: String,
}

impl Sampler {
    /// A sampler over `reader` with a summary window of `window`.
    pub fn new(reader: Arc<dyn GpuReader>, window: Duration) -> Self {
        Sampler {
            reader,
            state: Arc::new(Mutex::new(State {
                window: UsageWindow::new(window),
                ..State::default()
            })),
            summary_file: None,
            hostname: String::new(),
        }
    }

    /// Writes the summary to `path` after each sample (`tag value` per line,
    /// replaced atomically), for the boot script's heartbeat to publish.
    pub fn with_summary_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.summary_file = Some(path.into());
        self
    }

    /// The `Hostname` label on the series.
    pub fn with_hostname(mut self, name: impl Into<String>) -> Self {
        self.hostname = name.into();
        self
    }

    /// The reader's source, for the log.
    pub fn source(&self) -> String {
        self.reader.source()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one sample at `at`; the summary after it.
    pub async fn sample(&self, at: OffsetDateTime) -> Result<GpuSummary> {
        let read = self.reader.read().await;
        let summary = {
            let mut st = self.state();
            let readings = match read {
                Ok(r) => r,
                Err(e) => {
                    st.errors += 1;
                    return Err(e);
                }
            };
            if let Err(e) = st.window.add(at, &readings) {
                st.errors += 1;
                return Err(e);
            }
            st.samples += 1;
            st.latest = readings;
            let s = st
                .window
                .summary()
                .ok_or_else(|| Error::new(ErrorKind::Unexpected, "no summary after a sample"))?;
            st.summary = Some(s.clone());
            s
        };
        if let Some(path) = &self.summary_file {
            write_summary(path, &summary).await?;
        }
        Ok(summary)
    }

    /// The latest summary.
    pub fn summary(&self) -> Option<GpuSummary> {
        self.state().summary.clone()
    }

    /// Samples every `every` until the task is dropped; failures are logged
    /// (one line per distinct error) and sampling goes on.
    pub async fn run(self, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_err = String::new();
        loop {
            tick.tick().await;
            match self.sample(OffsetDateTime::now_utc()).await {
                Ok(_) => last_err.clear(),
                Err(e) => {
                    let text = e.to_string();
                    if text != last_err {
                        tracing::warn!(error = %text, "GPU sample failed");
                        last_err = text;
                    }
                }
            }
        }
    }

    /// The OpenMetrics text of the current readings and window.
    pub fn metrics_text(&self) -> Result<String> {
        let st = self.state();
        let mut reg = Registry::default();
        let util = Family::<DcgmLabels, Gauge>::default();
        let used = Family::<DcgmLabels, Gauge>::default();
        let free = Family::<DcgmLabels, Gauge>::default();
        for r in &st.latest {
            let labels = DcgmLabels {
                gpu: r.index.to_string(),
                UUID: r.uuid.clone().unwrap_or_default(),
                device: format!("nvidia{}", r.index),
                modelName: r.name.clone().unwrap_or_default(),
                Hostname: self.hostname.clone(),
            };
            util.get_or_create(&labels)
                .set(i64::from(r.utilization_pct));
            used.get_or_create(&labels)
                .set(i64::try_from(r.memory_used_mib).unwrap_or(i64::MAX));
            free.get_or_create(&labels).set(
                i64::try_from(r.memory_total_mib.saturating_sub(r.memory_used_mib))
                    .unwrap_or(i64::MAX),
            );
        }
        reg.register("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)", util);
        reg.register(
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB)",
            used,
        );
        reg.register(
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB)",
            free,
        );
        let gpus = Gauge::<i64>::default();
        gpus.set(st.latest.len() as i64);
        reg.register("gpufleet_gpus", "GPUs the agent reads", gpus);
        let samples = Counter::<u64>::default();
        samples.inc_by(st.samples);
        reg.register("gpufleet_gpu_samples", "GPU samples taken", samples);
        let errors = Counter::<u64>::default();
        errors.inc_by(st.errors);
        reg.register(
            "gpufleet_gpu_sample_errors",
            "GPU samples that failed",
            errors,
        );
        if let Some(s) = &st.summary {
            let mean = Gauge::<i64>::default();
            mean.set(i64::from(s.mean_util_pct));
            reg.register(
                "gpufleet_gpu_utilization_mean_percent",
                "Mean utilization over GPUs and the summary window (in %)",
                mean,
            );
            let peak = Gauge::<i64>::default();
            peak.set(i64::try_from(s.peak_memory_mib).unwrap_or(i64::MAX));
            reg.register(
                "gpufleet_gpu_memory_peak_mib",
                "The most memory one GPU held over the summary window (in MiB)",
                peak,
            );
            #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
            struct Below {
                below_percent: String,
            }
            let quiet = Family::<Below, Gauge>::default();
            for (level, mins) in &s.quiet {
                quiet
                    .get_or_create(&Below {
                        below_percent: level.to_string(),
                    })
                    .set(i64::from(*mins) * 60);
            }
            reg.register(
                "gpufleet_gpu_quiet_seconds",
                "How long the GPUs have stayed under each utilization level",
                quiet,
            );
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg)
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("encoding metrics: {e}")))?;
        Ok(out)
    }

    /// Serves `GET /metrics` on `addr` until the task is dropped; the
    /// address it listens on (the port is chosen when `addr`'s is 0).
    pub async fn serve_metrics(
        &self,
        addr: SocketAddr,
    ) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("cannot listen on {addr} for metrics: {e}"),
            )
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("metrics listener: {e}")))?;
        let me = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let me = me.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let me = me.clone();
                        async move { Ok::<_, std::convert::Infallible>(me.respond(&req)) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await
                    {
                        tracing::debug!(error = %e, "metrics connection ended");
                    }
                });
            }
        });
        Ok((local, task))
    }

    fn respond<B>(
        &self,
        req: &hyper::Request<B>,
    ) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
        use hyper::{Method, StatusCode};
        let reply = |status: StatusCode, ctype: &str, body: String| {
            let mut r = hyper::Response::new(http_body_util::Full::new(body.into()));
            *r.status_mut() = status;
            if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
                r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
            r
        };
        if req.method() != Method::GET {
            return reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "only GET\n".into(),
            );
        }
        match req.uri().path() {
            "/metrics" => match self.metrics_text() {
                Ok(body) => reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                ),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("{e}\n"),
                ),
            },
            _ => reply(
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found: the metrics are at /metrics\n".into(),
            ),
        }
    }
}

/// Writes the summary file (`tag value` per line) through a temporary file
/// renamed into place, so the reader never sees half of it.
async fn write_summary(path: &std::path::Path, s: &GpuSummary) -> Result<()> {
    let body = format!(
        "{} {}\n{} {}\n",
        tags::GPU,
        s.tag_value(),
        tags::GPU_QUIET,
        s.quiet_tag_value()
    );
    let tmp = path.with_extension("tmp");
    let io = |e: std::io::Error| {
        Error::new(
            ErrorKind::Unavailable,
            format!("cannot write the GPU summary to {}: {e}", path.display()),
        )
    };
    tokio::fs::write(&tmp, body).await.map_err(io)?;
    tokio::fs::rename(&tmp, path).await.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_core::usage::{uniform, ScriptedReader};

    #[test]
    fn nvidia_smi_output_is_read_and_bad_lines_named() {
        let r = parse_nvidia_smi("0, 97, 71234, 81559\n1, 3, 1024, 81559\n").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].utilization_pct, 97);
        assert_eq!(r[1].memory_used_mib, 1024);
        assert_eq!(r[1].memory_total_mib, 81559);
        assert!(parse_nvidia_smi("").unwrap().is_empty());
        let e = parse_nvidia_smi("0, [N/A], 1, 2\n").unwrap_err();
        assert!(e.to_string().contains("utilization.gpu is '[N/A]'"), "{e}");
        let e = parse_nvidia_smi("0, 5\n").unwrap_err();
        assert!(e.to_string().contains("2 fields"), "{e}");
        assert!(parse_nvidia_smi("0, 5, 9, 2\n").is_err());
    }

    /// Reads a real GPU through NVML. Opt-in (`GPUFLEET_TEST_NVML=1`), for
    /// machines that have one; skipped elsewhere.
    #[tokio::test]
    async fn a_real_gpu_reads_through_nvml_when_asked() {
        if std::env::var("GPUFLEET_TEST_NVML").as_deref() != Ok("1") {
            eprintln!("skipped: set GPUFLEET_TEST_NVML=1 on a machine with an NVIDIA GPU");
            return;
        }
        let r = tokio::task::spawn_blocking(NvmlReader::load)
            .await
            .unwrap()
            .expect("NVML loads");
        let gpus = r.read().await.expect("NVML reads");
        assert!(!gpus.is_empty(), "NVML found no GPU");
        for g in &gpus {
            g.validate().unwrap();
            assert!(
                g.uuid.as_deref().is_some_and(|u| u.starts_with("GPU-")),
                "{g:?}"
            );
        }
        let s = Sampler::new(Arc::new(r), Duration::from_secs(60));
        s.sample(OffsetDateTime::now_utc()).await.unwrap();
        assert!(s.metrics_text().unwrap().contains("DCGM_FI_DEV_GPU_UTIL{"));
    }

    #[tokio::test]
    async fn the_sampler_writes_the_summary_file_and_metrics() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let file = dir.join("gpu");
        let reader = Arc::new(ScriptedReader::new([
            Ok(uniform(2, 10, 100, 1000)),
            Err(Error::new(ErrorKind::Unavailable, "driver busy")),
            Ok(uniform(2, 30, 300, 1000)),
        ]));
        let s = Sampler::new(reader, Duration::from_secs(900))
            .with_summary_file(&file)
            .with_hostname("node-1");
        let t0 = OffsetDateTime::from_unix_timestamp(1_767_950_000).unwrap();
        s.sample(t0).await.unwrap();
        assert!(s.sample(t0 + time::Duration::seconds(10)).await.is_err());
        let sum = s.sample(t0 + time::Duration::seconds(20)).await.unwrap();
        assert_eq!(sum.mean_util_pct, 20);
        assert_eq!(sum.peak_memory_mib, 300);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with(&format!("gpufleet:gpu {}\n", sum.tag_value())),
            "{text}"
        );
        assert!(text.contains("gpufleet:gpu-quiet o0-"), "{text}");
        let m = s.metrics_text().unwrap();
        assert!(
            m.contains(r#"DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="",device="nvidia1",modelName="",Hostname="node-1"} 30"#),
            "{m}"
        );
        assert!(m.contains("DCGM_FI_DEV_FB_FREE{"), "{m}");
        assert!(m.contains("gpufleet_gpu_samples_total 2"), "{m}");
        assert!(m.contains("gpufleet_gpu_sample_errors_total 1"), "{m}");
        assert!(
            m.contains(r#"gpufleet_gpu_quiet_seconds{below_percent="5"} 0"#),
            "{m}"
        );
    }
}
