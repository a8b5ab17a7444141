//! `gpufleet place`: one row per pool, in the order the policy ranks them.

use serde::Serialize;

use super::{rfc3339, round};
use crate::placer::Placement;

/// One pool as `place --output json` prints it (a stable schema,
/// documented in docs/placing.md).
#[derive(Debug, Clone, Serialize)]
pub struct PlanRow {
    /// Its place in the order shown: the pools the policy evaluated by its
    /// expected cost to finish, then the rest by the shortlist index.
    pub rank: usize,
    /// Cloud.
    pub cloud: String,
    /// Region.
    pub region: String,
    /// Zone, where the pool is zonal.
    pub zone: Option<String>,
    /// Instance type.
    pub instance_type: String,
    /// `on-demand` or `spot`.
    pub capacity: &'static str,
    /// GPU model.
    pub gpu_model: String,
    /// GPUs per instance.
    pub gpu_count: u32,
    /// Price of one instance, USD per hour.
    pub price_per_hour_usd: f64,
    /// The placement policy's expected cost to finish when the first move is
    /// to start here: the figure the decision compared. `None` (null) for a
    /// pool the policy did not evaluate (outside its shortlist).
    pub expected_cost_usd: Option<f64>,
    /// Whether the policy evaluated this pool (`expected_cost_usd` is set).
    pub evaluated: bool,
    /// The shortlist index: expected dollars per reference work-hour of
    /// running the rest here alone. What chose the shortlist; not an
    /// expected cost.
    pub index_usd_per_work_hour: f64,
    /// Hours to finish if run here alone, by the ranking index's model.
    pub expected_hours: f64,
    /// The chance running here alone meets the deadline, by the same model.
    pub p_deadline: f64,
    /// Interruptions per hour the hazard model expects here.
    pub interruption_rate_per_hour: f64,
    /// The checkpoint interval chosen for this pool, hours.
    pub checkpoint_interval_hours: f64,
    /// The job's work in this pool's hours.
    pub work_hours: f64,
    /// Whether the job can run here at all.
    pub feasible: bool,
    /// Why not, where it cannot.
    pub problems: Vec<String>,
    /// The stability signals the hazard came from.
    pub hazard_signals: Vec<String>,
    /// The ranking's explanation.
    pub explanation: String,
    /// Where the price came from.
    pub source: String,
    /// When gpufleet fetched or published the price (RFC 3339): what PRICE
    /// AGE counts from.
    pub observed_at: String,
    /// Since when the cloud says the price applies, where it says.
    pub effective_at: Option<String>,
    /// The placement policy starts the job here.
    pub chosen: bool,
    /// The policy modelled this pool jointly (its shortlist).
    pub shortlisted: bool,
    /// The policy's on-demand fallback.
    pub fallback: bool,
    /// Shortlisted, but no first move there is allowed (it cannot meet the
    /// deadline from there).
    pub ruled_out: bool,
}

impl PlanRow {
    /// The row of plan `i`, shown at `rank`.
    pub fn new(rank: usize, i: usize, placement: &Placement) -> Self {
        let p = &placement.plans[i];
        let o = &p.offer;
        let gpu = o.instance_type.gpu.as_ref();
        let cost = placement.expected_cost(i);
        PlanRow {
            rank,
            cloud: o.pool.cloud.to_string(),
            region: o.pool.region.to_string(),
            zone: o.pool.zone.as_ref().map(|z| z.to_string()),
            instance_type: o.pool.instance_type.clone(),
            capacity: o.pool.capacity.as_str(),
            gpu_model: gpu.map(|g| g.model.to_string()).unwrap_or_default(),
            gpu_count: o.instance_type.gpu_count(),
            price_per_hour_usd: o.price.usd_per_hour_f64(),
            // To the cent, as the decision line and the table say it.
            expected_cost_usd: cost.map(|c| round(c.as_usd_f64(), 2)),
            evaluated: cost.is_some(),
            index_usd_per_work_hour: round(placement.index(i).unwrap_or(f64::NAN), 3),
            expected_hours: round(p.expected_hours, 3),
            p_deadline: round(p.p_deadline, 3),
            interruption_rate_per_hour: round(p.hazard.rate_per_hour, 3),
            checkpoint_interval_hours: round(p.checkpoint_interval_hours, 3),
            work_hours: round(p.work_hours, 3),
            feasible: p.feasible,
            problems: p.problems.clone(),
            hazard_signals: p.hazard.signals.clone(),
            explanation: p.explanation.clone(),
            source: o.source.to_string(),
            observed_at: rfc3339(o.observed_at),
            effective_at: o.effective_at.map(rfc3339),
            chosen: placement.chosen().is_some_and(|(c, _)| c == i),
            shortlisted: placement.shortlisted(i),
            fallback: placement.fallback(i),
            ruled_out: cost.is_none() && (placement.shortlisted(i) || placement.fallback(i)),
        }
    }
}

/// The rows `place --limit LIMIT` shows, as (rank, plan index): the first
/// `limit` of the policy's order (`0` for all), and the policy's choice
/// always, even below the limit, so a script reads where the job would
/// start from `chosen`.
pub fn shown(placement: &Placement, limit: usize) -> Vec<(usize, usize)> {
    let shown = if limit == 0 { usize::MAX } else { limit };
    let order = placement.order();
    let mut rows: Vec<(usize, usize)> = order
        .iter()
        .enumerate()
        .take(shown)
        .map(|(k, i)| (k + 1, *i))
        .collect();
    if let Some((c, _)) = placement.chosen() {
        if !rows.iter().any(|(_, i)| *i == c) {
            if let Some(k) = order.iter().position(|i| *i == c) {
                rows.push((k + 1, c));
            }
        }
    }
    rows
}

/// The document `place --limit LIMIT --output json` prints.
pub fn plan_rows(placement: &Placement, limit: usize) -> Vec<PlanRow> {
    shown(placement, limit)
        .into_iter()
        .map(|(k, i)| PlanRow::new(k, i, placement))
        .collect()
}
