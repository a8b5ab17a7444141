//! Managed jobs from Python: `run`, `jobs_ls`, `jobs_show`, `jobs_cancel`,
//! `check` and the `FakeCloud` class, through the runtime the CLI's `run`,
//! `jobs` and `check` use (its job controller, ledgers and provider
//! factory). A call runs on one tokio runtime shared by the module, with
//! the GIL released; `run` checks for Ctrl-C between waits and, when
//! interrupted, gives the job's lease up (the job keeps its instances, as
//! `gpufleet run` does when detached) before raising `KeyboardInterrupt`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::FakeCloud as CoreFake;
use gpufleet_core::ledger::MemoryLedger;
use gpufleet_core::placer::parse_duration;
use gpufleet_core::{
    Cloud, Error as CoreError, ErrorKind, InstanceId, NoticeKind, Operation, Pool, Price,
};
use gpufleet_runtime::config::{Config, ConfigKey, Flags, ProviderKind};
use gpufleet_runtime::controller::{self, ControllerConfig};
use gpufleet_runtime::report::{InstanceRow, JobEvent, JobRow};
use gpufleet_runtime::verbs::{
    self,
    input::JobInput,
    run::{Driven, RunRequest, Stop, Submitted},
    InMemory, Site,
};
use pyo3::exceptions::{PyKeyboardInterrupt, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{bad, to_py, to_python};

/// The module's async runtime: two workers, as the CLI's.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<std::io::Result<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("gpufleet")
            .build()
    })
    .as_ref()
    .map_err(|e| {
        to_py(CoreError::new(
            ErrorKind::Unexpected,
            format!("cannot start the async runtime: {e}"),
        ))
    })
}

/// Runs `f` to its end on the module's runtime with the GIL released.
pub(crate) fn block_on<T: Send>(
    py: Python<'_>,
    f: impl std::future::Future<Output = Result<T, CoreError>> + Send,
) -> PyResult<T> {
    let rt = runtime()?;
    py.detach(|| rt.block_on(f)).map_err(to_py)
}

/// Every error kind by its name (`insufficient-capacity`).
fn error_kind(arg: &str, name: &str) -> PyResult<ErrorKind> {
    const KINDS: [ErrorKind; 13] = [
        ErrorKind::NotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::InsufficientCapacity,
        ErrorKind::QuotaExceeded,
        ErrorKind::RateLimited,
        ErrorKind::Unauthenticated,
        ErrorKind::PermissionDenied,
        ErrorKind::InvalidInput,
        ErrorKind::Unsupported,
        ErrorKind::Timeout,
        ErrorKind::Unavailable,
        ErrorKind::Conflict,
        ErrorKind::Unexpected,
    ];
    KINDS
        .into_iter()
        .find(|k| k.as_str() == name.trim())
        .ok_or_else(|| {
            let valid: Vec<&str> = KINDS.iter().map(|k| k.as_str()).collect();
            bad(
                arg,
                format!("unknown error kind '{name}'; valid: {}", valid.join(", ")),
            )
        })
}

fn duration(arg: &str, s: &str) -> PyResult<Duration> {
    parse_duration(s).map_err(|e| bad(arg, e.message()))
}

/// What a `FakeCloud`'s calls need of its fakes.
trait FakesOf {
    fn of(&self, cloud: Option<&str>) -> PyResult<Vec<&Arc<CoreFake>>>;
    fn for_pool(&self, pool: &str) -> PyResult<(Pool, &Arc<CoreFake>)>;
    fn holding(&self, id: &str) -> PyResult<(&Arc<CoreFake>, InstanceId)>;
}

impl FakesOf for InMemory {
    /// The fakes of `cloud` (every one when `None`); an unknown or
    /// unopened cloud names the opened ones.
    fn of(&self, cloud: Option<&str>) -> PyResult<Vec<&Arc<CoreFake>>> {
        let Some(name) = cloud else {
            return Ok(self.fakes.iter().map(|(_, f)| f).collect());
        };
        let c: Option<Cloud> = name.parse().ok();
        let found: Vec<&Arc<CoreFake>> = self
            .fakes
            .iter()
            .filter(|(k, _)| Some(*k) == c)
            .map(|(_, f)| f)
            .collect();
        if found.is_empty() {
            let open: Vec<&str> = self.fakes.iter().map(|(c, _)| c.as_str()).collect();
            return Err(bad(
                "cloud",
                format!(
                    "'{name}' is not one of this fake cloud's clouds: {}",
                    open.join(", ")
                ),
            ));
        }
        Ok(found)
    }

    /// The fake that serves `pool`'s cloud.
    fn for_pool(&self, pool: &str) -> PyResult<(Pool, &Arc<CoreFake>)> {
        let p: Pool = pool
            .parse()
            .map_err(|e: CoreError| bad("pool", e.message()))?;
        let fake = self.of(Some(p.cloud.as_str()))?[0];
        Ok((p, fake))
    }

    /// The live instance `id` is on, naming the live ones otherwise.
    fn holding(&self, id: &str) -> PyResult<(&Arc<CoreFake>, InstanceId)> {
        for (_, f) in &self.fakes {
            if f.live_instances().iter().any(|i| i.id.as_str() == id) {
                return Ok((f, InstanceId::new(id)));
            }
        }
        let live: Vec<String> = self
            .fakes
            .iter()
            .flat_map(|(_, f)| f.live_instances())
            .map(|i| i.id.to_string())
            .collect();
        Err(to_py(CoreError::new(
            ErrorKind::NotFound,
            format!(
                "no live instance '{id}' on this fake cloud; live: {}",
                if live.is_empty() {
                    "none".to_string()
                } else {
                    live.join(", ")
                }
            ),
        )))
    }
}

/// The fake clouds of the conformance suite, in this process: the embedded
/// catalog's offers, instances that launch at once, capacity, faults,
/// latency and interruptions set by the test, on a fake clock that a
/// managed job's waits move (so a day's job runs in a second). Jobs run
/// on it are recorded in its own ledger (in memory).
#[pyclass(name = "FakeCloud", module = "gpufleet._native")]
pub(crate) struct PyFakeCloud {
    inner: Arc<InMemory>,
}

#[pymethods]
impl PyFakeCloud {
    /// A fake of each of `clouds` (default: aws, gcp, azure), its clock at
    /// `start` (RFC 3339; default: now).
    #[new]
    #[pyo3(signature = (clouds=None, *, start=None))]
    fn new(clouds: Option<Vec<String>>, start: Option<&str>) -> PyResult<Self> {
        let names = clouds.unwrap_or_else(|| vec!["aws".into(), "gcp".into(), "azure".into()]);
        let clouds = crate::clouds("clouds", Some(names))?;
        if clouds.is_empty() {
            return Err(bad("clouds", "give at least one of aws, gcp, azure"));
        }
        let start = match start {
            None => time::OffsetDateTime::now_utc(),
            Some(s) => {
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| {
                        bad(
                            "start",
                            format!(
                                "'{s}' is not an RFC 3339 time such as 2026-01-05T09:00:00Z: {e}"
                            ),
                        )
                    })?
            }
        };
        let clock = ManualClock::new(start);
        let mut fakes = Vec::new();
        for c in clouds {
            if fakes.iter().any(|(k, _)| *k == c) {
                continue;
            }
            fakes.push((
                c,
                Arc::new(CoreFake::from_snapshot(c).with_clock(clock.clone())),
            ));
        }
        Ok(PyFakeCloud {
            inner: Arc::new(InMemory {
                clock,
                fakes,
                ledger: Arc::new(MemoryLedger::new()),
            }),
        })
    }

    /// The fake clock's time (RFC 3339).
    #[getter]
    fn now(&self) -> String {
        gpufleet_core::report::rfc3339(self.inner.clock.now())
    }

    /// The clouds it fakes.
    #[getter]
    fn clouds(&self) -> Vec<String> {
        self.inner
            .fakes
            .iter()
            .map(|(c, _)| c.as_str().to_string())
            .collect()
    }

    /// Moves the fake clock forward by `duration` (`"90m"`), carrying out
    /// the interruptions whose deadline passes.
    fn advance(&self, duration: &str) -> PyResult<()> {
        let d = self::duration("duration", duration)?;
        self.inner.clock.advance(d);
        for (_, f) in &self.inner.fakes {
            f.settle();
        }
        Ok(())
    }

    /// Launches into `pool` (`CLOUD:REGION[/ZONE]:TYPE:spot|on-demand`, as
    /// the plans and offers name it) fail with insufficient capacity while
    /// `out` holds.
    #[pyo3(signature = (pool, out=true))]
    fn set_out_of_capacity(&self, pool: &str, out: bool) -> PyResult<()> {
        let (p, fake) = self.inner.for_pool(pool)?;
        fake.set_out_of_capacity(&p, out);
        Ok(())
    }

    /// At most `limit` live instances in `pool` (`None`: no limit).
    #[pyo3(signature = (pool, limit))]
    fn set_capacity_limit(&self, pool: &str, limit: Option<u32>) -> PyResult<()> {
        let (p, fake) = self.inner.for_pool(pool)?;
        fake.set_capacity_limit(&p, limit);
        Ok(())
    }

    /// `pool`'s price in US dollars per hour from now (`"2.45"`).
    fn set_price(&self, pool: &str, usd_per_hour: &str) -> PyResult<()> {
        let price: Price = usd_per_hour
            .parse()
            .map_err(|e| bad("usd_per_hour", format!("{e} (US dollars per hour)")))?;
        let (p, fake) = self.inner.for_pool(pool)?;
        fake.set_price(&p, price);
        Ok(())
    }

    /// Every call of `operation` (`launch`, `list_instances`, `terminate`, ...) takes
    /// `duration` of real time before it answers (`"0s"` removes it), on
    /// `cloud` or every cloud.
    #[pyo3(signature = (operation, duration, *, cloud=None))]
    fn set_latency(&self, operation: &str, duration: &str, cloud: Option<&str>) -> PyResult<()> {
        let op = Operation::parse(operation).map_err(|e| bad("operation", e.message()))?;
        let d = self::duration("duration", duration)?;
        for f in self.inner.of(cloud)? {
            f.set_latency(op, d);
        }
        Ok(())
    }

    /// The next call of `operation` fails with an error of `kind`
    /// (`insufficient-capacity`, `rate-limited`, `unavailable`, ...) on
    /// `cloud` or every cloud; faults queue up in order.
    #[pyo3(signature = (operation, kind, *, cloud=None, message=None))]
    fn fail_next(
        &self,
        operation: &str,
        kind: &str,
        cloud: Option<&str>,
        message: Option<&str>,
    ) -> PyResult<()> {
        let op = Operation::parse(operation).map_err(|e| bad("operation", e.message()))?;
        let kind = error_kind("kind", kind)?;
        let text = message.map_or_else(|| format!("injected {kind}"), str::to_string);
        for f in self.inner.of(cloud)? {
            f.fail_next(op, CoreError::new(kind, text.clone()));
        }
        Ok(())
    }

    /// The live instances, as rows of `gpufleet ls -o json`, each priced
    /// at what it is billed (its pool's price when it launched).
    fn instances(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let now = self.inner.clock.now();
        let rows: Vec<InstanceRow> = self
            .inner
            .fakes
            .iter()
            .flat_map(|(_, f)| {
                f.live_instances()
                    .into_iter()
                    .map(|i| InstanceRow::new(&i, f.billed_price(&i.id), now))
            })
            .collect();
        to_python(py, &rows)
    }

    /// Ends live instance `instance_id` now, with no notice, as a spot
    /// reclaim does.
    fn preempt(&self, instance_id: &str) -> PyResult<()> {
        let (f, id) = self.inner.holding(instance_id)?;
        f.preempt(&id).map_err(to_py)
    }

    /// Sends live instance `instance_id` a preemption notice; it ends
    /// `lead` (`"2m"`) of fake time later.
    #[pyo3(signature = (instance_id, lead="2m"))]
    fn notice(&self, instance_id: &str, lead: &str) -> PyResult<()> {
        let lead = duration("lead", lead)?;
        let (f, id) = self.inner.holding(instance_id)?;
        f.inject_interruption(&id, NoticeKind::Preemption, lead)
            .map(|_| ())
            .map_err(to_py)
    }

    /// What the clouds have billed so far, in US dollars (a decimal string,
    /// exact): every instance from its launch to its end at its price.
    fn billed(&self) -> PyResult<String> {
        let now = self.inner.clock.now();
        let mut total = gpufleet_core::Money::ZERO;
        for (_, f) in &self.inner.fakes {
            total = total
                .checked_add(f.billed(now).map_err(to_py)?)
                .ok_or_else(|| {
                    to_py(CoreError::new(
                        ErrorKind::Unexpected,
                        "the bill overflows the money type",
                    ))
                })?;
        }
        Ok(total.display(6).to_string())
    }

    /// How many calls of `operation` the clouds received.
    fn call_count(&self, operation: &str) -> PyResult<u64> {
        let op = Operation::parse(operation).map_err(|e| bad("operation", e.message()))?;
        Ok(self.inner.fakes.iter().map(|(_, f)| f.call_count(op)).sum())
    }

    fn __repr__(&self) -> String {
        format!("FakeCloud(clouds={:?}, now={})", self.clouds(), self.now())
    }
}

/// The target `provider` names (`"live"`, `"fake"`, or a `FakeCloud`), its
/// settings layered over the environment and the config file as flags are
/// (`settings` keys are the config file's: `ledger`, `clouds`, `owner`,
/// `fake.state`, ...).
pub(crate) fn site(
    provider: &Bound<'_, PyAny>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Site> {
    let mut flags = Flags {
        config: config.map(std::path::PathBuf::from),
        ..Flags::default()
    };
    for (k, v) in settings.unwrap_or_default() {
        let key: ConfigKey = k
            .parse()
            .map_err(|e: CoreError| bad("settings", e.message()))?;
        flags = flags.with(key, v);
    }
    if let Ok(fc) = provider.extract::<PyRef<'_, PyFakeCloud>>() {
        let clouds: Vec<&str> = fc.inner.fakes.iter().map(|(c, _)| c.as_str()).collect();
        flags.provider = Some(ProviderKind::Fake);
        flags = flags.with(ConfigKey::Clouds, clouds.join(","));
        let cfg = Config::load(&flags).map_err(to_py)?;
        return Ok(Site::InMemory(cfg, fc.inner.clone()));
    }
    let Ok(name) = provider.extract::<String>() else {
        return Err(PyTypeError::new_err(
            "provider: expected \"live\", \"fake\", \"local\" or a gpufleet.FakeCloud",
        ));
    };
    let kind: ProviderKind = name
        .parse()
        .map_err(|e: CoreError| bad("provider", e.message()))?;
    flags.provider = Some(kind);
    Ok(Site::Configured(Config::load(&flags).map_err(to_py)?))
}

/// The job a `run` names: a path, or the document of a Python `Job`.
pub(crate) fn job_input(path: Option<&str>, doc: Option<&str>) -> PyResult<JobInput> {
    match (path, doc) {
        (Some(p), None) => Ok(JobInput::File(p.into())),
        (None, Some(d)) => Ok(JobInput::Document {
            text: d.to_string(),
            label: "the job".to_string(),
        }),
        _ => Err(PyTypeError::new_err("give a Job or a job file's path")),
    }
}

/// Runs a managed job until it ends: `gpufleet run --job FILE`; each
/// transition the ledger records goes to `on_event` (about every second,
/// and the rest when the drive ends), as `gpufleet run` prints them.
#[pyfunction]
#[pyo3(signature = (*, path=None, doc=None, provider, id=None, config=None, settings=None, script=None, on_event=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    py: Python<'_>,
    path: Option<&str>,
    doc: Option<&str>,
    provider: &Bound<'_, PyAny>,
    id: Option<&str>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
    script: Option<Vec<String>>,
    on_event: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    if on_event.is_some_and(|c| !c.is_callable()) {
        return Err(PyTypeError::new_err(
            "on_event: expected a callable taking one event (a dict)",
        ));
    }
    let input = job_input(path, doc)?;
    let site = site(provider, config, settings)?;
    if site.config().provider == ProviderKind::Local {
        // Its nodes would be processes of this interpreter, in real time.
        return Err(to_py(CoreError::new(
            ErrorKind::Unsupported,
            "the local provider's instances live inside the `gpufleet run` or `gpufleet serve` that made them; from Python, run on a gpufleet.FakeCloud or provider=\"fake\"",
        )));
    }
    let script = script
        .map(|lines| {
            gpufleet_runtime::fake_script::parse_script(&lines.join("\n"))
                .map_err(|e| bad("script", e.message()))
        })
        .transpose()?;
    if script.is_some() && !site.is_fake() {
        return Err(bad(
            "script",
            "a script plays on the fake cloud only (provider=\"fake\" or a FakeCloud)",
        ));
    }
    // Checked as `run` checks a job file, before anything is recorded.
    let read = input.read(site.config()).map_err(to_py)?;
    let Some(file) = read.file else {
        return Err(PyTypeError::new_err("run: give a Job or a job file's path"));
    };
    if let Some(id) = id {
        controller::check_job_id(id).map_err(|e| bad("id", e.message()))?;
    }
    let req = RunRequest {
        file,
        spec: read.spec,
        source: read.source,
        id: id.map(str::to_string),
        drive: ControllerConfig::default(),
        script,
    };
    let rt = runtime()?;
    // Opened, checked and recorded first; then driven in a task the
    // caller's thread waits on, looking for Ctrl-C between waits.
    let run = py
        .detach(|| rt.block_on(verbs::run::submit(&site, req)))
        .map_err(to_py)?;
    let run = match run {
        Submitted::Refused(why) => return Err(to_py(CoreError::invalid_input(why))),
        Submitted::Recorded(run) => run,
    };
    let mut warnings: Vec<String> = run.unread.iter().map(|u| u.one_line()).collect();
    warnings.extend(run.warnings.iter().cloned());
    let id = run.id.clone();
    // What `on_event` has been told: nothing of this run yet.
    let mut seen = run.seen;
    let ledger = run.ledger();
    let driver = run.into_driver();
    // Each transition recorded since `seen`, to `on_event`, oldest first.
    // A history that cannot be read now is read at the next tell, as
    // `gpufleet run` follows a job: only the callback's own exception stops
    // the drive.
    let tell = |py: Python<'_>, seen: &mut usize| -> PyResult<()> {
        let Some(callback) = on_event else {
            return Ok(());
        };
        let Ok(history) = py.detach(|| rt.block_on(ledger.job_history(&id))) else {
            return Ok(());
        };
        for r in history.iter().skip(*seen) {
            *seen += 1;
            callback.call1((to_python(py, &JobEvent::from(r))?,))?;
        }
        Ok(())
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut task = rt.spawn(async move {
        let stop = async move {
            // A dropped sender (the caller gone) detaches too.
            let _ = stop_rx.await;
            Stop::Detach
        };
        driver.drive(stop, |_, _| {}).await
    });
    let mut waits = 0u32;
    let mut stop_tx = Some(stop_tx);
    let ended = loop {
        let waited = py.detach(|| {
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(200), &mut task).await })
        });
        if let Ok(joined) = waited {
            break joined;
        }
        waits += 1;
        // Ctrl-C, or an exception from `on_event` (told every second).
        let stopped = py.check_signals().and_then(|()| {
            if waits.is_multiple_of(5) {
                tell(py, &mut seen)
            } else {
                Ok(())
            }
        });
        if let Err(e) = stopped {
            // The drive detaches: the fake state saved, the lease given up.
            if let Some(tx) = stop_tx.take() {
                let _ = tx.send(());
            }
            let _ = py.detach(|| rt.block_on(&mut task));
            if e.is_instance_of::<PyKeyboardInterrupt>(py) {
                return Err(PyKeyboardInterrupt::new_err(format!(
                    "interrupted: job {id} keeps its instances; gpufleet.run with id={id:?} drives it again, gpufleet.jobs.cancel({id:?}) ends it"
                )));
            }
            return Err(e);
        }
    };
    drop(stop_tx);
    tell(py, &mut seen)?;
    let driven = ended
        .map_err(|e| {
            to_py(CoreError::new(
                ErrorKind::Unexpected,
                format!("the job's drive stopped: {e}"),
            ))
        })?
        .map_err(to_py)?;
    let Driven::Ended {
        outcome,
        summary,
        warnings: more,
    } = driven
    else {
        return Err(to_py(CoreError::new(
            ErrorKind::Unexpected,
            format!("the drive of job {id} detached without being asked to"),
        )));
    };
    warnings.extend(more);
    let out = PyDict::new(py);
    out.set_item("outcome", to_python(py, &outcome)?)?;
    out.set_item("row", to_python(py, &JobRow::new(&summary))?)?;
    out.set_item("warnings", warnings)?;
    Ok(out.into_any().unbind())
}

/// Every job in the ledger: `gpufleet jobs ls -o json`, with the cost per
/// completed job.
#[pyfunction]
#[pyo3(signature = (*, provider, config=None, settings=None))]
pub(crate) fn jobs_ls(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let target = site(provider, config, settings)?;
    let (list, rows) = block_on(py, verbs::jobs::list(&target))?;
    let per = gpufleet_runtime::jobs::cost_per_completed_job(&list).map_err(to_py)?;
    let out = PyDict::new(py);
    out.set_item("rows", to_python(py, &rows)?)?;
    out.set_item(
        "cost_per_completed_job_usd",
        per.map(|m| m.display(6).to_string()),
    )?;
    Ok(out.into_any().unbind())
}

/// One job's summary and history: `gpufleet jobs show ID -o json`.
#[pyfunction]
#[pyo3(signature = (id, *, provider, config=None, settings=None))]
pub(crate) fn jobs_show(
    py: Python<'_>,
    id: &str,
    provider: &Bound<'_, PyAny>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let target = site(provider, config, settings)?;
    let (_, doc) = block_on(py, verbs::jobs::show(&target, id))?;
    to_python(py, &doc)
}

/// Cancels a job: its instances ended, `cancelled` recorded, final
/// (`gpufleet jobs cancel ID -o json`); only the config's owner's unless
/// `any_owner`.
#[pyfunction]
#[pyo3(signature = (id, *, provider, config=None, settings=None, any_owner=false))]
pub(crate) fn jobs_cancel(
    py: Python<'_>,
    id: &str,
    provider: &Bound<'_, PyAny>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
    any_owner: bool,
) -> PyResult<Py<PyAny>> {
    let target = site(provider, config, settings)?;
    let done = block_on(py, verbs::jobs::cancel(&target, id, any_owner))?;
    let (outcome, unread) = (
        done.outcome,
        done.unread.iter().map(|u| u.one_line()).collect::<Vec<_>>(),
    );
    let out = PyDict::new(py);
    out.set_item("outcome", to_python(py, &outcome)?)?;
    out.set_item("warnings", unread)?;
    Ok(out.into_any().unbind())
}

/// Which clouds are usable from here, as whom: `gpufleet check -o json`.
#[pyfunction]
#[pyo3(signature = (*, provider, clouds=None, timeout="3s", config=None, settings=None))]
pub(crate) fn check(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    clouds: Option<Vec<String>>,
    timeout: &str,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let budget = duration("timeout", timeout)?;
    if budget < Duration::from_secs(1) || budget > Duration::from_secs(60) {
        return Err(bad("timeout", format!("'{timeout}' is not 1s to 60s")));
    }
    let target = site(provider, config, settings)?;
    if let Site::InMemory(_, f) = &target {
        // A FakeCloud is in this process: each of its clouds is usable, an
        // asked one it does not fake is named as not.
        let asked = match clouds {
            Some(c) => crate::clouds("clouds", Some(c))?,
            None => f.fakes.iter().map(|(c, _)| *c).collect(),
        };
        let rows: Vec<gpufleet_core::check::CloudCheck> = asked
            .into_iter()
            .map(|c| {
                let mut row = gpufleet_core::check::CloudCheck::new(c);
                if f.fakes.iter().any(|(k, _)| *k == c) {
                    row.usable = true;
                    row.credentials = Some("none needed (fake)".into());
                    row.endpoints = vec!["this process (gpufleet.FakeCloud)".into()];
                    row
                } else {
                    row.fail(
                        format!("this FakeCloud does not fake {c}"),
                        format!("make it with FakeCloud([..., \"{c}\"])"),
                    )
                }
            })
            .collect();
        return to_python(py, &rows);
    }
    let cfg = target.config();
    let clouds = match clouds {
        Some(c) => crate::clouds("clouds", Some(c))?,
        None => cfg.clouds.clone(),
    };
    let checks = block_on(py, async {
        Ok(gpufleet_runtime::fleet::check_clouds(cfg, &clouds, budget).await)
    })?;
    to_python(py, &checks)
}
