//! The fleet's instances, spend and services from Python: `launch`, `ls`,
//! `terminate`, `reap`, `costs`, `reconcile`, `serve_ls` and
//! `serve_status`, each the runtime's verb the CLI's command calls, giving
//! the document that command prints with `-o json` (and, where the clouds
//! are read, `warnings`: what opening skipped and which clouds did not
//! answer).

use std::collections::HashMap;
use std::time::Duration;

use gpufleet_core::{Error as CoreError, PlacementStrategy, Pool};
use gpufleet_runtime::fleet::Fleet;
use gpufleet_runtime::spend::CostBy;
use gpufleet_runtime::verbs::instances::{self, ReapRequest, TerminateRequest};
use gpufleet_runtime::verbs::launch::{LaunchRequest, Launched};
use gpufleet_runtime::verbs::{self, Opening, Site};
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::managed::{block_on, runtime, site};
use crate::{bad, to_py, to_python};

/// Every line to say beside a fleet's answer: what opening skipped, and
/// the clouds that did not answer.
fn said(fleet: &Fleet, more: &[String]) -> Vec<String> {
    let mut out = fleet.warnings.clone();
    out.extend(fleet.unread.iter().map(|u| u.one_line()));
    out.extend(more.iter().cloned());
    out
}

/// `doc` as a dict, with `warnings` beside its keys.
fn with_warnings<T: serde::Serialize>(
    py: Python<'_>,
    doc: &T,
    warnings: Vec<String>,
) -> PyResult<Py<PyAny>> {
    let out = to_python(py, doc)?;
    out.bind(py).set_item("warnings", warnings)?;
    Ok(out)
}

/// The managed instances with their cost: `gpufleet ls -o json` (as
/// `instances`), of one `job` when given.
#[pyfunction]
#[pyo3(signature = (*, provider, job=None, config=None, settings=None))]
pub(crate) fn ls(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    job: Option<&str>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let site = site(provider, config, settings)?;
    let (rows, warnings) = block_on(py, async {
        let mut fleet = site.open(Opening::Checked).await?;
        let listing = instances::ls(&site, &mut fleet, job).await;
        Ok::<_, CoreError>((listing.rows, said(&fleet, &listing.warnings)))
    })?;
    let out = PyDict::new(py);
    out.set_item("instances", to_python(py, &rows)?)?;
    out.set_item("warnings", warnings)?;
    Ok(out.into_any().unbind())
}

/// Terminates instances by id, job or tag (`gpufleet terminate --yes -o
/// json`): the caller's own unless `any_owner`. Nothing matching raises
/// `NotFound`; an instance not terminated raises, after the others are.
#[pyfunction]
#[pyo3(signature = (ids=None, *, provider, job=None, tags=None, any_owner=false, config=None, settings=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn terminate(
    py: Python<'_>,
    ids: Option<Vec<String>>,
    provider: &Bound<'_, PyAny>,
    job: Option<String>,
    tags: Option<HashMap<String, String>>,
    any_owner: bool,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let mut tags: Vec<String> = tags
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    tags.sort();
    let req = TerminateRequest {
        ids: ids.unwrap_or_default(),
        job,
        tags,
        any_owner,
    };
    let site = site(provider, config, settings)?;
    let (ended, warnings) = block_on(py, async {
        let mut fleet = site.open(Opening::Checked).await?;
        let picked = instances::pick(&site, &mut fleet, &req).await?;
        let ended = picked.terminate(&site, &fleet).await?;
        Ok::<_, CoreError>((ended, said(&fleet, &[])))
    })?;
    if let Some(e) = ended.failed {
        return Err(to_py(e));
    }
    with_warnings(py, &ended.doc, warnings)
}

/// The forgotten instances (`gpufleet reap -o json`): past their expiry,
/// silent for `idle`, or with GPUs under `below` percent for `idle`; the
/// caller's own unless `any_owner`. A dry run unless `yes`.
#[pyfunction]
#[pyo3(signature = (*, provider, idle=None, below=None, grace="15m", yes=false, any_owner=false, config=None, settings=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn reap(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    idle: Option<&str>,
    below: Option<i64>,
    grace: &str,
    yes: bool,
    any_owner: bool,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let dur = |arg: &str, s: &str| -> PyResult<Duration> {
        gpufleet_core::placer::parse_duration(s).map_err(|e| bad(arg, e.message()))
    };
    let below = below
        .map(|v| {
            u8::try_from(v)
                .ok()
                .filter(|p| (1..=100).contains(p))
                .ok_or_else(|| bad("below", format!("{v} is not a whole percent from 1 to 100")))
        })
        .transpose()?;
    let req = ReapRequest {
        idle: idle.map(|s| dur("idle", s)).transpose()?,
        below,
        grace: dur("grace", grace)?,
        apply: yes,
        any_owner,
    };
    req.check().map_err(|e| bad("idle", e.message()))?;
    let site = site(provider, config, settings)?;
    let (reaped, warnings) = block_on(py, async {
        let mut fleet = site.open(Opening::Checked).await?;
        let reaped = instances::reap(&site, &mut fleet, &req).await?;
        let warnings = said(&fleet, &reaped.warnings);
        Ok::<_, CoreError>((reaped, warnings))
    })?;
    if let Some(e) = reaped.failed {
        return Err(to_py(e));
    }
    let out = with_warnings(py, &reaped.doc, warnings)?;
    out.bind(py).set_item("so_far_usd", reaped.so_far_usd)?;
    out.bind(py).set_item("per_day_usd", reaped.per_day_usd)?;
    Ok(out)
}

/// What the ledger says was spent (`gpufleet costs -o json`): grouped `by`
/// team, owner, job, cloud, gpu, capacity or day, since `since` (`30d`, a
/// UTC date such as `2026-11-01`).
#[pyfunction]
#[pyo3(signature = (*, provider, by="team", since="30d", config=None, settings=None))]
pub(crate) fn costs(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    by: &str,
    since: &str,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let by: CostBy = by.parse().map_err(|e: CoreError| bad("by", e.message()))?;
    let site = site(provider, config, settings)?;
    let now = site.now().map_err(to_py)?;
    verbs::spend::since(since, now).map_err(|e| bad("since", e.message()))?;
    let report = block_on(py, verbs::spend::costs(&site, by, since))?;
    to_python(py, &report)
}

/// The ledger made to agree with the clouds (`gpufleet reconcile -o
/// json`): carried out with `yes`, else only said.
#[pyfunction]
#[pyo3(signature = (*, provider, yes=false, any_owner=false, config=None, settings=None))]
pub(crate) fn reconcile(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    yes: bool,
    any_owner: bool,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let site = site(provider, config, settings)?;
    let done = block_on(py, verbs::spend::reconcile(&site, yes, any_owner))?;
    let mut warnings = done.warnings.clone();
    warnings.extend(done.unread.iter().map(|u| u.one_line()));
    with_warnings(py, &done.report, warnings)
}

/// Launches instances under an idempotency key (`gpufleet launch -o
/// json`): in `pool`, or where the job (`path` or `doc`) is cheapest to
/// finish. The same `name` (or `key`) finds what it launched. Ctrl-C rolls
/// the launch back and raises `KeyboardInterrupt`.
#[pyfunction]
#[pyo3(signature = (*, provider, path=None, doc=None, pool=None, name=None, key=None, image=None, count=1, placement_group=None, config=None, settings=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    path: Option<&str>,
    doc: Option<&str>,
    pool: Option<&str>,
    name: Option<String>,
    key: Option<String>,
    image: Option<String>,
    count: i64,
    placement_group: Option<&str>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let site = site(provider, config, settings)?;
    let pool: Option<Pool> = pool
        .map(|p| {
            p.parse().map_err(|_| {
                bad(
                    "pool",
                    format!("'{p}' is not CLOUD:REGION[/ZONE]:INSTANCE_TYPE:spot|on-demand, as offers and place give it"),
                )
            })
        })
        .transpose()?;
    let placement_strategy = placement_group
        .map(|s| {
            s.parse::<PlacementStrategy>()
                .map_err(|e| bad("placement_group", e))
        })
        .transpose()?;
    let count = u32::try_from(count)
        .ok()
        .filter(|n| (1..=verbs::launch::MAX_LAUNCH_COUNT).contains(n))
        .ok_or_else(|| {
            bad(
                "count",
                format!(
                    "{count} is not 1 to {} instances",
                    verbs::launch::MAX_LAUNCH_COUNT
                ),
            )
        })?;
    let job = match (path, doc) {
        (None, None) => None,
        (p, d) => Some(
            crate::managed::job_input(p, d)?
                .read(site.config())
                .map_err(to_py)?
                .spec,
        ),
    };
    let checked = LaunchRequest {
        job,
        pool,
        name,
        key,
        image,
        count,
        placement_strategy,
    }
    .check()
    .map_err(to_py)?;
    let job_id = checked.job_id.clone();
    let rt = runtime()?;
    // The launch runs in a task; the caller's thread waits on it, looking
    // for Ctrl-C between waits, and a Ctrl-C is the launch's stop signal
    // (a roll-back).
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut stop_rx = Some(stop_rx);
    let stop = move || {
        let rx = stop_rx.take();
        async move {
            if let Some(rx) = rx {
                if rx.await.is_ok() {
                    return "KeyboardInterrupt";
                }
            }
            // Asked a second time, or the caller gone: no more signals.
            std::future::pending().await
        }
    };
    let task_site = site.clone();
    let mut task = rt.spawn(async move {
        let mut opened = Vec::new();
        let launched = verbs::launch::launch(&task_site, checked, stop, |note| {
            if let verbs::launch::LaunchNote::Opened { warnings, unread } = note {
                opened = warnings;
                opened.extend(unread.iter().map(|u| u.one_line()));
            }
        })
        .await;
        launched.map(|l| (l, opened))
    });
    let mut stop_tx = Some(stop_tx);
    let mut interrupted = false;
    let joined = loop {
        let waited = py.detach(|| {
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(200), &mut task).await })
        });
        if let Ok(joined) = waited {
            break joined;
        }
        if py.check_signals().is_err() {
            interrupted = true;
            if let Some(tx) = stop_tx.take() {
                let _ = tx.send(());
            }
        }
    };
    drop(stop_tx);
    let (launched, warnings) = joined
        .map_err(|e| {
            to_py(CoreError::new(
                gpufleet_core::ErrorKind::Unexpected,
                format!("the launch stopped: {e}"),
            ))
        })?
        .map_err(to_py)?;
    match launched {
        Launched::Done { doc, unread } => {
            let mut warnings = warnings;
            warnings.extend(unread.iter().map(|u| u.one_line()));
            let out = with_warnings(py, &doc, warnings)?;
            if interrupted {
                // It finished before the roll-back could start.
                return Err(PyKeyboardInterrupt::new_err(format!(
                    "interrupted after job {job_id}'s launch finished: gpufleet.ls(job=...) shows its instances"
                )));
            }
            Ok(out)
        }
        Launched::RolledBack { rolled, .. } => Err(PyKeyboardInterrupt::new_err(match rolled {
            Some(r) => format!(
                "interrupted: rolled back, {} instance(s) terminated; nothing of job {job_id} is left running{}",
                r.terminated,
                r.left.map(|l| format!(" (but {l})")).unwrap_or_default()
            ),
            None => format!("interrupted: the launch of job {job_id} had already finished"),
        })),
        Launched::LeftAsItWas => Err(PyKeyboardInterrupt::new_err(format!(
            "interrupted: job {job_id}'s launch left as it was; launching it again resumes it"
        ))),
    }
}

/// Every service in the ledger (`gpufleet serve ls -o json`).
#[pyfunction]
#[pyo3(signature = (*, provider, config=None, settings=None))]
pub(crate) fn serve_ls(
    py: Python<'_>,
    provider: &Bound<'_, PyAny>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let site = site(provider, config, settings)?;
    let rows = block_on(py, verbs::serve::ls(&site))?;
    to_python(py, &rows)
}

/// One service's status and log (`gpufleet serve status NAME -o json`).
#[pyfunction]
#[pyo3(signature = (name, *, provider, config=None, settings=None))]
pub(crate) fn serve_status(
    py: Python<'_>,
    name: &str,
    provider: &Bound<'_, PyAny>,
    config: Option<&str>,
    settings: Option<HashMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let site: Site = site(provider, config, settings)?;
    let (_, doc) = block_on(py, verbs::serve::status(&site, name))?;
    to_python(py, &doc)
}
