//! `gpufleet tf-external`: Terraform's `external` data source protocol.
//!
//! Terraform runs the program with the `query` object on stdin (a flat JSON
//! object of strings) and reads a flat JSON object of strings from stdout; a
//! failure is a non-zero exit with the reason on stderr.

use std::collections::BTreeMap;
use std::io::Read;

use gpufleet::placer::{
    parse_duration, rank, CheckpointInterval, HazardModel, JobSpec, RankContext,
};
use gpufleet::{Capacity, Cloud, Error, GpuRequirement, Price, Snapshot};

use crate::args::{known_regions, parse_cloud};
use crate::Failure;

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

fn bad(why: String) -> Failure {
    Failure::Error(Error::invalid_input(why))
}

/// Parses the query into a job and the capacity and price limits.
fn job(
    q: &BTreeMap<String, String>,
    snapshot: &Snapshot,
) -> Result<(JobSpec, Option<Capacity>, Option<Price>), Failure> {
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
    let count = match (q.get("count"), req.count) {
        (Some(c), _) => c
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=16).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "invalid count '{c}': expected GPUs per instance from 1 to 16"
                ))
            })?,
        (None, Some(n)) => n,
        (None, None) => 1,
    };
    let hours = match q.get("hours") {
        Some(h) => h
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|h| h.is_finite() && *h > 0.0)
            .ok_or_else(|| bad(format!("invalid hours '{h}': expected a positive number")))?,
        None => 1.0,
    };
    let name = q.get("name").cloned().unwrap_or_else(|| "terraform".into());
    let mut b = JobSpec::builder(name, req.model.clone(), count, hours);
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
            .map(|s| parse_cloud(s).map_err(|e| bad(format!("clouds: {e}"))))
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
        for r in known_regions(&clouds, &regions, snapshot)? {
            b = b.region(r);
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
    Ok((b.build()?, capacity, max_price))
}

/// Reads the query from stdin, ranks, and prints the best plan.
pub fn run() -> Result<(), Failure> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| bad(format!("cannot read the query from stdin: {e}")))?;
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
    let (catalog, _) = crate::catalog_cache::current(&crate::config::Flags::default())?;
    let snapshot = &catalog;
    let (job, capacity, max_price) = job(&q, snapshot)?;
    let offers: Vec<_> = snapshot
        .offers()
        .iter()
        .filter(|o| capacity.is_none_or(|c| o.pool.capacity == c))
        .filter(|o| max_price.is_none_or(|m| o.price <= m))
        .cloned()
        .collect();
    let model = HazardModel::default();
    let evidence = std::collections::HashMap::new();
    let ranking = rank(
        &job,
        &offers,
        &RankContext {
            now: time::OffsetDateTime::now_utc(),
            model: &model,
            evidence: &evidence,
            limit: 1,
        },
    );
    let Some(best) = ranking.feasible().next() else {
        return Err(Failure::NothingMatched(ranking.why_nothing()));
    };
    let o = &best.offer;
    let gpu = o.instance_type.gpu.as_ref();
    let mut out: BTreeMap<&str, String> = BTreeMap::new();
    out.insert("cloud", o.pool.cloud.to_string());
    out.insert("region", o.pool.region.to_string());
    out.insert(
        "zone",
        o.pool
            .zone
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    );
    out.insert("zone_name", o.zone_name.clone().unwrap_or_default());
    out.insert("instance_type", o.pool.instance_type.clone());
    out.insert("capacity", o.pool.capacity.to_string());
    out.insert(
        "gpu_model",
        gpu.map(|g| g.model.to_string()).unwrap_or_default(),
    );
    out.insert("gpu_count", gpu.map_or(0, |g| g.count).to_string());
    out.insert("price_per_hour_usd", o.price.display(4).to_string());
    out.insert(
        "expected_cost_usd",
        best.expected_cost.display(2).to_string(),
    );
    out.insert("expected_hours", format!("{:.2}", best.expected_hours));
    out.insert("p_deadline", format!("{:.3}", best.p_deadline));
    out.insert(
        "interruption_rate_per_hour",
        format!("{:.4}", best.hazard.rate_per_hour),
    );
    out.insert("pool", o.pool.to_string());
    out.insert("price_source", o.source.to_string());
    out.insert("explanation", best.explanation.clone());
    let text = serde_json::to_string(&out)
        .map_err(|e| Failure::Error(Error::new(gpufleet::ErrorKind::Unexpected, e.to_string())))?;
    println!("{text}");
    Ok(())
}
