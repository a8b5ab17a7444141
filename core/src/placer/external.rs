//! Terraform's `external` data source protocol: the query (a flat JSON
//! object of strings on stdin) as a job to rank. `gpufleet tf-external` is
//! the program; this is its parser, for embedders and fuzzing.

use std::collections::BTreeMap;

use crate::catalog::MAX_GPUS_PER_INSTANCE;
use crate::placer::{parse_duration, CheckpointInterval, JobSpec, MAX_JOB_HOURS};
use crate::suggest::check_known;
use crate::GpuRequirement;
use crate::Price;
use crate::Snapshot;
use crate::{Capacity, Cloud, Region};
use crate::{Error, Result};

/// A parsed query: the job, and the capacity and price limits on offers.
#[derive(Debug, Clone)]
pub struct ExternalQuery {
    /// The job to rank.
    pub job: JobSpec,
    /// Only this capacity, if given.
    pub capacity: Option<Capacity>,
    /// Only offers at or below this price, if given.
    pub max_price: Option<Price>,
    /// Instances launched together (`count`, as `launch --count` means it;
    /// the GPUs per instance are `gpu`'s `:N`).
    pub count: u32,
}

/// The most instances a query may ask for together, as `launch --count`.
pub const MAX_COUNT: u32 = 1000;

/// What each query key means, for `tf-external --help` and the docs.
pub const KEY_HELP: [(&str, &str); 11] = [
    (
        "gpu",
        "the GPU model and the GPUs per instance: \"H100:8\", \"A10G\" (1); required",
    ),
    (
        "count",
        "instances launched together, as `launch --count` (default 1; 1 to 1000)",
    ),
    ("capacity", "spot, on-demand or any (default any)"),
    (
        "clouds",
        "a comma-separated list of aws, gcp, azure (default: the config's enabled clouds)",
    ),
    ("regions", "a comma-separated list of regions"),
    (
        "max_price",
        "the highest price per instance-hour in USD, such as 30",
    ),
    ("hours", "reference GPU-hours of work (default 1)"),
    ("deadline", "a duration such as 48h"),
    ("interruptible", "true (default) or false"),
    (
        "checkpoint_interval",
        "a duration such as 30m, or auto (default)",
    ),
    ("name", "the job's name (default terraform)"),
];

/// Parses the query text: a JSON object whose values are all strings.
pub fn parse_query(input: &str, snapshot: &Snapshot) -> Result<ExternalQuery> {
    let value: serde_json::Value = serde_json::from_str(input.trim())
        .map_err(|e| bad(format!("the query on stdin is not JSON: {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| bad("the query must be a JSON object of strings".into()))?;
    let mut q = BTreeMap::new();
    for (k, v) in obj {
        let Some(s) = v.as_str() else {
            return Err(bad(format!(
                "query key '{k}' is {v}, not a string: Terraform's external protocol passes strings only"
            )));
        };
        q.insert(k.clone(), s.to_string());
    }
    job(&q, snapshot)
}

/// The query keys `tf-external` understands.
pub const KEYS: [&str; 11] = [
    "gpu",
    "count",
    "capacity",
    "clouds",
    "regions",
    "max_price",
    "hours",
    "deadline",
    "interruptible",
    "checkpoint_interval",
    "name",
];

fn bad(why: String) -> Error {
    Error::invalid_input(why)
}

/// Parses a query map into a job and the capacity and price limits.
pub fn job(q: &BTreeMap<String, String>, snapshot: &Snapshot) -> Result<ExternalQuery> {
    for k in q.keys() {
        if !KEYS.contains(&k.as_str()) {
            return Err(bad(format!(
                "unknown query key '{k}'; valid keys: {}",
                KEYS.join(", ")
            )));
        }
    }
    let gpu = q
        .get("gpu")
        .ok_or_else(|| bad("the query needs 'gpu', such as \"H100:8\" or \"A10G\"".into()))?;
    let req: GpuRequirement = gpu
        .parse()
        .map_err(|e: Error| bad(format!("gpu: {}", e.message())))?;
    let gpus = req.count.unwrap_or(1);
    if !(1..=MAX_GPUS_PER_INSTANCE).contains(&gpus) {
        return Err(bad(format!(
            "invalid gpu '{gpu}': expected 1 to {MAX_GPUS_PER_INSTANCE} GPUs per instance after ':'"
        )));
    }
    // Instances, as `launch --count` means it (it used to replace the GPU
    // count: `{"gpu": "A100:8", "count": "1"}` asked for one GPU).
    let count = match q.get("count") {
        Some(c) => c
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_COUNT).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "invalid count '{c}': expected instances launched together, 1 to {MAX_COUNT} (the GPUs per instance are gpu's, as in \"A100:8\")"
                ))
            })?,
        None => 1,
    };
    let hours = match q.get("hours") {
        Some(h) => h
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|h| h.is_finite() && *h > 0.0 && *h <= MAX_JOB_HOURS)
            .ok_or_else(|| {
                bad(format!(
                    "invalid hours '{h}': expected a positive number up to {MAX_JOB_HOURS}"
                ))
            })?,
        None => 1.0,
    };
    let name = q.get("name").cloned().unwrap_or_else(|| "terraform".into());
    let mut b = JobSpec::builder(name, req.model.clone(), gpus, hours);
    let capacity = match q.get("capacity").map(|s| s.trim()) {
        None | Some("any" | "") => None,
        Some("spot") => Some(Capacity::Spot),
        Some("on-demand" | "on_demand" | "ondemand") => {
            b = b.not_interruptible();
            Some(Capacity::OnDemand)
        }
        Some(other) => {
            return Err(bad(format!(
                "invalid capacity '{other}': expected spot, on-demand or any"
            )))
        }
    };
    if let Some(i) = q.get("interruptible") {
        match i.trim() {
            "true" => {}
            "false" => b = b.not_interruptible(),
            other => {
                return Err(bad(format!(
                    "invalid interruptible '{other}': expected true or false"
                )))
            }
        }
    }
    if let Some(d) = q.get("deadline") {
        b = b.deadline(parse_duration(d).map_err(|e| bad(format!("deadline: {}", e.message())))?);
    }
    if let Some(c) = q.get("checkpoint_interval") {
        b = b.checkpoint_interval(match c.trim() {
            "auto" => CheckpointInterval::Auto,
            other => CheckpointInterval::Every(
                parse_duration(other)
                    .map_err(|e| bad(format!("checkpoint_interval: {}", e.message())))?,
            ),
        });
    }
    let clouds: Vec<Cloud> = match q.get("clouds") {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.parse::<Cloud>() {
                Ok(c) if c != Cloud::Fake => Ok(c),
                _ => Err(bad(format!(
                    "clouds: unknown cloud '{s}'; valid clouds: aws, gcp, azure"
                ))),
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    for c in &clouds {
        b = b.cloud(*c);
    }
    if let Some(list) = q.get("regions") {
        let regions: Vec<String> = list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let scope: Vec<Cloud> = if clouds.is_empty() {
            Cloud::REAL.to_vec()
        } else {
            clouds.clone()
        };
        let known: Vec<Region> = scope.iter().flat_map(|c| snapshot.regions(*c)).collect();
        for r in &regions {
            check_known("region", r, known.iter().map(Region::as_str))?;
            b = b.region(Region::new(r.as_str()));
        }
    }
    let max_price = match q.get("max_price") {
        Some(p) => Some(p.trim().parse::<Price>().map_err(|e| {
            bad(format!(
                "invalid max_price '{p}': {e}; expected USD per hour such as 30"
            ))
        })?),
        None => None,
    };
    Ok(ExternalQuery {
        job: b.build()?,
        capacity,
        max_price,
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hours and counts past what a job can hold are refused naming the value
    /// and the range, as `place` refuses them.
    #[test]
    fn out_of_range_values_name_the_range() {
        let snapshot = Snapshot::embedded();
        for (query, needle) in [
            (
                r#"{"gpu": "A100:8", "hours": "1e7"}"#,
                "invalid hours '1e7': expected a positive number up to 1000000",
            ),
            (r#"{"gpu": "A100:8", "hours": "0"}"#, "invalid hours '0'"),
            (
                r#"{"gpu": "A100", "count": "1001"}"#,
                "invalid count '1001': expected instances launched together, 1 to 1000",
            ),
            (r#"{"gpu": "A100:17"}"#, "A100:17"),
        ] {
            let e = parse_query(query, snapshot).unwrap_err();
            assert!(e.message().contains(needle), "{query}: {}", e.message());
        }
        let q = parse_query(r#"{"gpu": "A100:8", "hours": "1000000"}"#, snapshot).unwrap();
        assert_eq!(q.job.hours, MAX_JOB_HOURS);
        // `count` is instances, as `launch --count`; the GPUs stay gpu's.
        let q = parse_query(r#"{"gpu": "A100:8", "count": "2"}"#, snapshot).unwrap();
        assert_eq!((q.job.gpus[0].count, q.count), (8, 2));
        let q = parse_query(r#"{"gpu": "A100:8", "count": "1"}"#, snapshot).unwrap();
        assert_eq!(q.job.gpus[0].count, 8);
        assert_eq!(KEY_HELP.map(|(k, _)| k), KEYS);
    }
}
