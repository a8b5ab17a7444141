//! `mix` and `simulate`: the commitment advisor and the trace simulator,
//! through the same functions as `gpufleet mix` (core's `MixAsk`) and
//! `gpufleet simulate` (the runtime's `verbs::simulate`).

use gpufleet_core::advisor::mix::{parse_discount, parse_profile, parse_share, MixAsk, MixChoice};
use gpufleet_core::report::MixDoc;
use gpufleet_core::sim::{PolicyKind, Scenario};
use gpufleet_core::{Cloud, Price, Region, Snapshot};
use gpufleet_runtime::verbs;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{bad, clouds, to_py, to_python};

/// How much of a demand profile to commit to, run on-demand and run on spot:
/// the document of `gpufleet mix -o json`.
#[pyfunction]
#[pyo3(signature = (
    profile, *, region, gpu=None, instance_type=None, cloud=None, interruptible_share="0",
    discount_1y=None, discount_3y=None, on_demand_price=None, spot_price=None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mix(
    py: Python<'_>,
    profile: &str,
    region: &str,
    gpu: Option<&str>,
    instance_type: Option<&str>,
    cloud: Option<&str>,
    interruptible_share: &str,
    discount_1y: Option<&str>,
    discount_3y: Option<&str>,
    on_demand_price: Option<&str>,
    spot_price: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let text = std::fs::read_to_string(profile).map_err(|e| {
        bad(
            "profile",
            format!("cannot read the demand profile '{profile}': {e}"),
        )
    })?;
    let demand = parse_profile(&text).map_err(|e| bad("profile", format!("{profile}: {e}")))?;
    let gpu = gpu
        .map(|g| {
            g.parse()
                .map_err(|e: gpufleet_core::Error| bad("gpu", e.message()))
        })
        .transpose()?;
    if gpu.is_some() == instance_type.is_some() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "mix: give one of gpu (such as \"A100:8\") or instance_type (such as \"p4d.24xlarge\")",
        ));
    }
    let cloud: Option<Cloud> = clouds("cloud", cloud.map(|c| vec![c.to_string()]))?
        .into_iter()
        .next();
    let price = |arg: &str, v: Option<&str>| {
        v.map(|p| {
            p.parse::<Price>()
                .map_err(|e| bad(arg, format!("{e} (US dollars per hour)")))
        })
        .transpose()
    };
    let share = match interruptible_share.trim() {
        "0" => None,
        s => Some((
            parse_share(s, "interruptible_share")
                .map_err(|e| bad("interruptible_share", e.message()))?,
            format!("interruptible_share={s}"),
        )),
    };
    let discount = |arg: &str, d: Option<&str>| {
        d.map(|d| parse_discount(d, arg).map_err(|e| bad(arg, e.message())))
            .transpose()
    };
    let snapshot = Snapshot::embedded();
    let clouds: Vec<Cloud> = cloud.into_iter().collect();
    let region = snapshot
        .known_regions(&clouds, &[region])
        .map_err(|e| bad("region", e.message()))?
        .into_iter()
        .next()
        .unwrap_or_else(|| Region::new(region));
    let ask = MixAsk {
        choice: MixChoice {
            cloud,
            region,
            instance_type: instance_type.map(str::to_string),
            gpu,
            on_demand_price: price("on_demand_price", on_demand_price)?,
            spot_price: price("spot_price", spot_price)?,
        },
        interruptible_share: share,
        discounts: (
            discount("discount_1y", discount_1y)?,
            discount("discount_3y", discount_3y)?,
        ),
    };
    let advice = py
        .detach(|| ask.advise(snapshot.offers(), &demand))
        .map_err(to_py)?;
    to_python(
        py,
        &MixDoc::new(
            &advice.report,
            advice.cloud,
            &advice.region,
            &advice.instance_type,
            profile,
        ),
    )
}

fn hours(arg: &str, v: f64) -> PyResult<f64> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(bad(
            arg,
            format!("{v} is not a number of hours, 0 or more, such as 24 or 0.5"),
        ))
    }
}

/// One job scenario replayed on availability traces for each policy: the
/// document of `gpufleet simulate -o json` (one scenario) and the notes the
/// CLI prints beside it.
#[pyfunction]
#[pyo3(signature = (
    traces, *, pools=None, instance_type=None, zone=None, job_hours=24.0, deadline_hours=36.0,
    changeover_hours=0.1667, starts=50, policies=None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn simulate(
    py: Python<'_>,
    traces: &str,
    pools: Option<&str>,
    instance_type: Option<Vec<String>>,
    zone: Option<&str>,
    job_hours: f64,
    deadline_hours: f64,
    changeover_hours: f64,
    starts: i64,
    policies: Option<Vec<String>>,
) -> PyResult<Py<PyAny>> {
    let max = gpufleet_core::sim::MAX_STARTS;
    let starts = usize::try_from(starts)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            bad(
                "starts",
                format!("{starts} is not a whole number from 1 to {max}"),
            )
        })?;
    let scenario = Scenario {
        job_hours: hours("job_hours", job_hours)?,
        deadline_hours: hours("deadline_hours", deadline_hours)?,
        changeover_hours: hours("changeover_hours", changeover_hours)?,
        starts,
    };
    let policies = match policies {
        None => PolicyKind::STANDARD.to_vec(),
        Some(p) => p
            .iter()
            .map(|p| PolicyKind::parse(p).map_err(|e| bad("policies", e.message())))
            .collect::<PyResult<Vec<_>>>()?,
    };
    let replay = verbs::simulate::Traces {
        dir: traces.into(),
        manifest: pools.map(Into::into),
    };
    let what = verbs::simulate::Replay::One {
        instance_types: instance_type.unwrap_or_default(),
        zone: zone.map(str::to_string),
        scenario,
    };
    let done = py
        .detach(|| verbs::simulate::simulate(&replay, &what, &policies, &|_| {}))
        .map_err(to_py)?;
    let (rows, notes) = (done.rows, done.notes);
    let out = PyDict::new(py);
    out.set_item("rows", to_python(py, &rows)?)?;
    out.set_item("notes", notes)?;
    Ok(out.into_any().unbind())
}
