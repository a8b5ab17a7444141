//! The native half of gpufleet's Python package (`gpufleet._native`): the
//! embedded catalog's offers and the placer, through the same crates the
//! CLI uses (nothing is reimplemented in Python). The Python half
//! (`pysrc/gpufleet`) re-exports these and adds the typed wrappers.
//!
//! Errors cross the boundary as exceptions: one class per
//! [`ErrorKind`] under `gpufleet.Error`, each carrying `kind`, `cloud`,
//! `operation` and `message`; bad arguments raise `ValueError` or
//! `TypeError` naming the argument. PyO3 turns a panic into
//! `pyo3_runtime.PanicException`; none is expected.

mod advise;
mod fleet;
mod managed;

use std::time::Duration;

use gpufleet_core::catalog::{sort_offers, OfferQuery, OfferSort};
use gpufleet_core::placer::{parse_duration, CheckpointInterval, JobFile};
use gpufleet_core::{
    Capacity, Cloud, Error as CoreError, ErrorKind, GpuRequirement, Money, Snapshot,
};
use gpufleet_runtime::verbs::{
    self,
    input::{JobFlags, JobInput},
    Site,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    gpufleet,
    Error,
    PyException,
    "A gpufleet error: `kind`, `cloud`, `operation` and `message` say what failed."
);
create_exception!(
    gpufleet,
    NotFound,
    Error,
    "What was asked for does not exist."
);
create_exception!(gpufleet, AlreadyExists, Error, "It exists already.");
create_exception!(
    gpufleet,
    InsufficientCapacity,
    Error,
    "The cloud has no capacity for it now."
);
create_exception!(
    gpufleet,
    QuotaExceeded,
    Error,
    "An account quota would be exceeded."
);
create_exception!(
    gpufleet,
    RateLimited,
    Error,
    "The cloud throttled the call."
);
create_exception!(gpufleet, Unauthenticated, Error, "No usable credentials.");
create_exception!(
    gpufleet,
    PermissionDenied,
    Error,
    "The identity may not do it."
);
create_exception!(
    gpufleet,
    InvalidInput,
    Error,
    "A value is not valid; the message names it and what is."
);
create_exception!(gpufleet, Unsupported, Error, "Not supported here.");
create_exception!(gpufleet, Timeout, Error, "No answer in time.");
create_exception!(
    gpufleet,
    Unavailable,
    Error,
    "The service is unavailable now."
);
create_exception!(gpufleet, Conflict, Error, "Another actor holds it.");
create_exception!(
    gpufleet,
    Unexpected,
    Error,
    "Something gpufleet did not expect."
);

/// The Python exception of a gpufleet error, with its fields as attributes.
pub(crate) fn to_py(e: CoreError) -> PyErr {
    let text = e.to_string();
    let err = match e.kind() {
        ErrorKind::NotFound => NotFound::new_err(text),
        ErrorKind::AlreadyExists => AlreadyExists::new_err(text),
        ErrorKind::InsufficientCapacity => InsufficientCapacity::new_err(text),
        ErrorKind::QuotaExceeded => QuotaExceeded::new_err(text),
        ErrorKind::RateLimited => RateLimited::new_err(text),
        ErrorKind::Unauthenticated => Unauthenticated::new_err(text),
        ErrorKind::PermissionDenied => PermissionDenied::new_err(text),
        ErrorKind::InvalidInput => InvalidInput::new_err(text),
        ErrorKind::Unsupported => Unsupported::new_err(text),
        ErrorKind::Timeout => Timeout::new_err(text),
        ErrorKind::Unavailable => Unavailable::new_err(text),
        ErrorKind::Conflict => Conflict::new_err(text),
        _ => Unexpected::new_err(text),
    };
    Python::attach(|py| {
        let v = err.value(py);
        let _ = v.setattr("kind", e.kind().as_str());
        let _ = v.setattr("cloud", e.provider().map(|c| c.as_str().to_string()));
        let _ = v.setattr("operation", e.operation());
        let _ = v.setattr("message", e.message());
    });
    err
}

/// `ValueError` naming `arg` and what it must be.
pub(crate) fn bad(arg: &str, why: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{arg}: {why}"))
}

/// A serializable value as Python objects (dicts, lists, numbers, strings).
pub(crate) fn to_python<T: serde::Serialize>(py: Python<'_>, v: &T) -> PyResult<Py<PyAny>> {
    Ok(pythonize::pythonize(py, v)
        .map_err(|e| PyTypeError::new_err(format!("cannot convert to Python: {e}")))?
        .unbind())
}

fn duration(arg: &str, s: &str) -> PyResult<Duration> {
    parse_duration(s).map_err(|e| bad(arg, e.message()))
}

pub(crate) fn clouds(arg: &str, names: Option<Vec<String>>) -> PyResult<Vec<Cloud>> {
    names
        .unwrap_or_default()
        .iter()
        .map(|c| match c.parse::<Cloud>() {
            Ok(c) if c != Cloud::Fake => Ok(c),
            _ => Err(bad(
                arg,
                format!("unknown cloud '{c}'; valid: aws, gcp, azure"),
            )),
        })
        .collect()
}

fn gpus(arg: &str, gpu: Vec<String>) -> PyResult<Vec<GpuRequirement>> {
    gpu.iter()
        .map(|g| {
            g.parse::<GpuRequirement>()
                .map_err(|e| bad(arg, e.message()))
        })
        .collect()
}

/// The embedded catalog's offers matching the arguments, as the rows of
/// `gpufleet offers -o json`: cheapest first (`sort="price"`, or
/// `"price_per_gpu"`), at most `limit` (0 for all).
#[pyfunction]
#[pyo3(signature = (*, gpu=None, capacity=None, cloud=None, region=None, sort="price", limit=20))]
#[allow(clippy::too_many_arguments)]
fn offers(
    py: Python<'_>,
    gpu: Option<Vec<String>>,
    capacity: Option<String>,
    cloud: Option<Vec<String>>,
    region: Option<Vec<String>>,
    sort: &str,
    limit: usize,
) -> PyResult<Py<PyAny>> {
    let order = match sort {
        "price" => OfferSort::Price,
        "price_per_gpu" | "price-per-gpu" => OfferSort::PricePerGpu,
        other => {
            return Err(bad(
                "sort",
                format!("unknown order '{other}'; valid: price, price_per_gpu"),
            ))
        }
    };
    let snapshot = Snapshot::embedded();
    let mut query = OfferQuery::default();
    if let Some(g) = gpu {
        query.gpus = gpus("gpu", g)?;
    }
    query.clouds = clouds("cloud", cloud)?;
    query.capacity = match capacity.as_deref() {
        None => None,
        Some("spot") => Some(Capacity::Spot),
        Some("on_demand" | "on-demand") => Some(Capacity::OnDemand),
        Some(other) => {
            return Err(bad(
                "capacity",
                format!("unknown capacity '{other}'; valid: spot, on_demand"),
            ))
        }
    };
    query.regions = region
        .unwrap_or_default()
        .into_iter()
        .map(gpufleet_core::Region::new)
        .collect();
    let found = py.detach(|| {
        let mut found = snapshot.query(&query);
        sort_offers(&mut found, order);
        if limit > 0 {
            found.truncate(limit);
        }
        found
    });
    let rows: Vec<gpufleet_core::report::OfferRow> = found
        .iter()
        .map(gpufleet_core::report::OfferRow::from)
        .collect();
    to_python(py, &rows)
}

/// The job the keywords describe, as `gpufleet place` reads its flags
/// (checked when it is read).
#[allow(clippy::too_many_arguments)]
fn job_spec(
    gpu: Vec<String>,
    hours: f64,
    deadline: Option<&str>,
    budget: Option<&str>,
    cloud: Option<Vec<String>>,
    region: Option<Vec<String>>,
    checkpoint_interval: &str,
    checkpoint_cost: &str,
    restart_overhead: &str,
    not_interruptible: bool,
    name: &str,
) -> PyResult<JobInput> {
    if !(hours.is_finite() && hours > 0.0 && hours <= gpufleet_core::placer::MAX_JOB_HOURS) {
        return Err(bad(
            "hours",
            format!(
                "{hours} is not a positive number of hours of work up to {}",
                gpufleet_core::placer::MAX_JOB_HOURS
            ),
        ));
    }
    let mut flags = JobFlags::new(name, gpus("gpu", gpu)?, hours);
    flags.checkpoint_cost = duration("checkpoint_cost", checkpoint_cost)?;
    flags.restart_overhead = duration("restart_overhead", restart_overhead)?;
    flags.checkpoint_interval = match checkpoint_interval.trim() {
        "auto" => CheckpointInterval::Auto,
        other => CheckpointInterval::Every(duration("checkpoint_interval", other)?),
    };
    flags.deadline = deadline.map(|d| duration("deadline", d)).transpose()?;
    flags.budget = budget
        .map(|usd| usd.parse::<Money>().map_err(|e| bad("budget", e)))
        .transpose()?;
    flags.not_interruptible = not_interruptible;
    flags.clouds = clouds("cloud", cloud)?;
    flags.regions = region.unwrap_or_default();
    Ok(JobInput::Flags(flags))
}

/// Where a job is cheapest to finish, from the placer `gpufleet place` uses,
/// on the embedded catalog: `(decision, rows)`, the rows those of `place -o
/// json`.
#[pyfunction]
#[pyo3(signature = (
    *, gpu, hours, deadline=None, budget=None, cloud=None, region=None,
    checkpoint_interval="auto", checkpoint_cost="2m", restart_overhead="10m",
    not_interruptible=false, limit=10, name="python", provider=None, config=None, settings=None
))]
#[allow(clippy::too_many_arguments)]
fn place(
    py: Python<'_>,
    gpu: Vec<String>,
    hours: f64,
    deadline: Option<&str>,
    budget: Option<&str>,
    cloud: Option<Vec<String>>,
    region: Option<Vec<String>>,
    checkpoint_interval: &str,
    checkpoint_cost: &str,
    restart_overhead: &str,
    not_interruptible: bool,
    limit: usize,
    name: &str,
    provider: Option<&Bound<'_, PyAny>>,
    config: Option<&str>,
    settings: Option<std::collections::HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let job = job_spec(
        gpu,
        hours,
        deadline,
        budget,
        cloud,
        region,
        checkpoint_interval,
        checkpoint_cost,
        restart_overhead,
        not_interruptible,
        name,
    )?;
    placed(py, job, limit, provider, config, settings)
}

/// The words a job file says (TOML, or JSON when it ends in `.json` or
/// starts with `{`), as `gpufleet.Job`'s fields: what `Job.from_file`
/// shows. Only read, not checked (placing or running it checks it).
#[pyfunction]
fn job_file_words(py: Python<'_>, path: &str) -> PyResult<Py<PyAny>> {
    let file = read_job_file(path)?;
    let out = PyDict::new(py);
    if let Some(n) = &file.name {
        out.set_item("name", n)?;
    }
    out.set_item("hours", file.hours)?;
    let gpus: Vec<String> = file
        .gpus
        .iter()
        .map(|g| format!("{}:{}", g.model, g.count.unwrap_or(1)))
        .collect();
    out.set_item("gpu", gpus)?;
    for (key, value) in [
        ("deadline", &file.deadline),
        ("checkpoint_interval", &file.checkpoint_interval),
        ("checkpoint_cost", &file.checkpoint_cost),
        ("restart_overhead", &file.restart_overhead),
        ("setup", &file.setup),
        ("run", &file.run),
        ("checkpoint", &file.checkpoint),
    ] {
        if let Some(v) = value {
            out.set_item(key, v)?;
        }
    }
    if let Some(b) = &file.budget {
        out.set_item(
            "budget",
            b.as_str().map_or_else(|| b.to_string(), str::to_string),
        )?;
    }
    if !file.clouds.is_empty() {
        out.set_item("cloud", file.clouds.clone())?;
    }
    if !file.regions.is_empty() {
        out.set_item("region", file.regions.clone())?;
    }
    if file.interruptible == Some(false) {
        out.set_item("not_interruptible", true)?;
    }
    Ok(out.into_any().unbind())
}

/// The job file at `path`, parsed (not yet checked), read bounded as the
/// CLI reads it; an unreadable or malformed one names the file.
pub(crate) fn read_job_file(path: &str) -> PyResult<JobFile> {
    verbs::input::read_job_file(std::path::Path::new(path)).map_err(to_py)
}

/// [`place`] for the job in a job file: `gpufleet place --job PATH`.
#[pyfunction]
#[pyo3(signature = (path, *, limit=10, provider=None, config=None, settings=None))]
fn place_file(
    py: Python<'_>,
    path: &str,
    limit: usize,
    provider: Option<&Bound<'_, PyAny>>,
    config: Option<&str>,
    settings: Option<std::collections::HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    placed(
        py,
        JobInput::File(path.into()),
        limit,
        provider,
        config,
        settings,
    )
}

/// The placer's decision for `job`, as `gpufleet place` makes it (the
/// catalog every command reads, the config's placer), with the GIL
/// released while it decides: `{"decision", "rows"}`. With a `provider`
/// ("live", "fake" or a FakeCloud), its config's clouds for a job that names
/// none, its clock and its ledger's evidence; without, the default settings
/// and no ledger (`place --no-ledger`).
fn placed(
    py: Python<'_>,
    job: JobInput,
    limit: usize,
    provider: Option<&Bound<'_, PyAny>>,
    config: Option<&str>,
    settings: Option<std::collections::HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let (site, no_ledger) = match provider {
        Some(p) => (managed::site(p, config, settings)?, false),
        None if config.is_some() || settings.is_some() => {
            return Err(PyTypeError::new_err(
                "place: config and settings need a provider (\"live\", \"fake\" or a FakeCloud) whose ledger is read",
            ))
        }
        None => (
            Site::Configured(
                gpufleet_runtime::config::Config::load(&Default::default()).map_err(to_py)?,
            ),
            true,
        ),
    };
    let spec = job
        .read(site.config())
        .map_err(|e| {
            // The keyword a bad region came in, as every other keyword's
            // error names its own.
            if matches!(job, JobInput::Flags(_)) && e.message().starts_with("unknown region") {
                bad("region", e.message())
            } else {
                to_py(e)
            }
        })?
        .spec;
    let opts = verbs::place::PlaceOptions {
        live: false,
        no_ledger,
    };
    let placed = managed::block_on(py, verbs::place::place(&site, spec, opts))?;
    let rows = gpufleet_core::report::plan_rows(&placed.placement, limit);
    let out = PyDict::new(py);
    out.set_item(
        "decision",
        placed.placement.decision().map(|d| d.explanation.clone()),
    )?;
    out.set_item("rows", to_python(py, &rows)?)?;
    Ok(out.into_any().unbind())
}

/// `i64` as a whole number from 1, naming `arg` otherwise.
fn positive(arg: &str, v: i64) -> PyResult<u32> {
    u32::try_from(v).ok().filter(|n| *n >= 1).ok_or_else(|| {
        bad(
            arg,
            format!("{v} is not a whole number from 1 to {}", u32::MAX),
        )
    })
}

/// Which GPU configurations hold a model, cheapest first, from the
/// embedded catalog: the document of `gpufleet fit -o json`.
#[pyfunction]
#[pyo3(signature = (
    *, params=None, model=None, precision="bf16", training=None, context=None, batch=1,
    layers=None, kv_heads=None, head_dim=None, hidden=None, activation_checkpointing=true,
    cloud=None, region=None, gpu=None, max_nodes=None, limit=15
))]
#[allow(clippy::too_many_arguments)]
fn fit(
    py: Python<'_>,
    params: Option<&str>,
    model: Option<&str>,
    precision: &str,
    training: Option<&str>,
    context: Option<i64>,
    batch: i64,
    layers: Option<i64>,
    kv_heads: Option<i64>,
    head_dim: Option<i64>,
    hidden: Option<i64>,
    activation_checkpointing: bool,
    cloud: Option<Vec<String>>,
    region: Option<Vec<String>>,
    gpu: Option<Vec<String>>,
    max_nodes: Option<u32>,
    limit: usize,
) -> PyResult<Py<PyAny>> {
    use gpufleet_core::advisor::fit::{
        fit as fit_model, parse_params, preset, FitOptions, FitRequest, Precision, TrainingMethod,
        Workload, DEFAULT_CONTEXT, DEFAULT_MAX_NODES,
    };
    let mut r = match (model, params) {
        (Some(m), p) => {
            let r = FitRequest::preset(preset(m).map_err(|e| bad("model", e.message()))?);
            match p {
                Some(p) => {
                    r.with_params(parse_params(p).map_err(|e| bad("params", e.message()))?, p)
                }
                None => r,
            }
        }
        (None, Some(p)) => {
            FitRequest::params(parse_params(p).map_err(|e| bad("params", e.message()))?, p)
                .map_err(|e| bad("params", e.message()))?
        }
        (None, None) => {
            return Err(PyTypeError::new_err(
                "fit: give params (such as \"7B\") or model (such as \"llama-3-8b\")",
            ))
        }
    };
    r = r.with_precision(Precision::parse(precision).map_err(|e| bad("precision", e.message()))?);
    let context = positive("context", context.unwrap_or(i64::from(DEFAULT_CONTEXT)))?;
    let batch = positive("batch", batch)?;
    r = r.with_workload(match training {
        None => Workload::Inference { context, batch },
        Some(t) => Workload::Training {
            method: match t {
                "full" => TrainingMethod::Full,
                "lora" => TrainingMethod::Lora,
                other => {
                    return Err(bad(
                        "training",
                        format!(
                            "unknown training '{other}'; valid: full, lora (None for inference)"
                        ),
                    ))
                }
            },
            context,
            batch,
            activation_checkpointing,
        },
    });
    if let Some(v) = layers {
        r = r.with_layers(positive("layers", v)?);
    }
    if let Some(v) = kv_heads {
        r = r.with_kv_heads(positive("kv_heads", v)?);
    }
    if let Some(v) = head_dim {
        r = r.with_head_dim(positive("head_dim", v)?);
    }
    if let Some(v) = hidden {
        r = r.with_hidden(positive("hidden", v)?);
    }
    let snapshot = Snapshot::embedded();
    let clouds = clouds("cloud", cloud)?;
    let regions = snapshot
        .known_regions(&clouds, &region.unwrap_or_default())
        .map_err(|e| bad("region", e.message()))?;
    let mut gpus = Vec::new();
    for g in gpu.unwrap_or_default() {
        gpus.push(gpufleet_core::GpuModel::parse(&g).map_err(|e| bad("gpu", e))?);
    }
    let options = FitOptions {
        clouds,
        regions,
        gpus,
        max_nodes: max_nodes.unwrap_or(DEFAULT_MAX_NODES),
    };
    let mut report = py
        .detach(|| {
            let (offers, _) = gpufleet_core::advisor::compatible::compatible_offers(
                snapshot.offers(),
                None,
                &options.gpus,
            );
            fit_model(&r, &offers, &options)
        })
        .map_err(to_py)?;
    if limit > 0 {
        report.configs.truncate(limit);
    }
    to_python(py, &gpufleet_core::report::FitDoc::from(&report))
}

/// `gpufleet._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(offers, m)?)?;
    m.add_function(wrap_pyfunction!(place, m)?)?;
    m.add_function(wrap_pyfunction!(place_file, m)?)?;
    m.add_function(wrap_pyfunction!(job_file_words, m)?)?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(advise::mix, m)?)?;
    m.add_function(wrap_pyfunction!(advise::simulate, m)?)?;
    m.add_function(wrap_pyfunction!(managed::run, m)?)?;
    m.add_function(wrap_pyfunction!(managed::jobs_ls, m)?)?;
    m.add_function(wrap_pyfunction!(managed::jobs_show, m)?)?;
    m.add_function(wrap_pyfunction!(managed::jobs_cancel, m)?)?;
    m.add_function(wrap_pyfunction!(managed::check, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::launch, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::ls, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::terminate, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::reap, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::costs, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::reconcile, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::serve_ls, m)?)?;
    m.add_function(wrap_pyfunction!(fleet::serve_status, m)?)?;
    m.add_class::<managed::PyFakeCloud>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("AlreadyExists", py.get_type::<AlreadyExists>())?;
    m.add(
        "InsufficientCapacity",
        py.get_type::<InsufficientCapacity>(),
    )?;
    m.add("QuotaExceeded", py.get_type::<QuotaExceeded>())?;
    m.add("RateLimited", py.get_type::<RateLimited>())?;
    m.add("Unauthenticated", py.get_type::<Unauthenticated>())?;
    m.add("PermissionDenied", py.get_type::<PermissionDenied>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("Unexpected", py.get_type::<Unexpected>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
