//! Right-sizing from measurement: given what a job's GPUs did (its
//! [`JobUsage`]), the cheapest configuration that holds its measured peak
//! memory with headroom, and what that saves a month against what it ran
//! on.
//!
//! The model, in one place:
//!
//! - **Memory**: the job keeps its GPUs per instance (its parallelism), so a
//!   candidate needs that many GPUs of at least `peak × headroom` memory
//!   each.
//! - **Speed**: a GPU busy `u` % of the time on a model of throughput `t`
//!   would be busy `u × t / t'` % on one of throughput `t'` (the
//!   [`ThroughputTable`], 1.0 = one V100). Under 100 % the job takes as long
//!   as before (it waits on something else: data, the network, requests);
//!   over it, the job takes `u × t / t' / 100` times as long. So a job that
//!   used its GPUs little can move to a much slower, cheaper GPU for free,
//!   and a compute-bound one (mean utilisation at or over
//!   [`RightsizeOptions::compute_bound_pct`]) pays for every bit of speed it
//!   gives up: it is ranked by cost per unit of work, not price.
//! - **Cost**: price × slowdown × instances × hours a month (730), against
//!   the same for what it ran on, at the same capacity type.
//!
//! A candidate whose GPU has no throughput figure is shown only for jobs
//! that are not compute-bound, marked as such (its time is unknown).

use serde::Serialize;

use crate::placer::ThroughputTable;
use crate::usage::JobUsage;
use crate::{Capacity, Error, GpuModel, Offer, Price, Result};

/// Hours in an average month (8,760 / 12).
pub const HOURS_PER_MONTH: u64 = 730;

/// How right-sizing judges.
#[derive(Debug, Clone)]
pub struct RightsizeOptions {
    /// Memory needed per GPU, as a multiple of the measured peak (default
    /// 1.2: 20 % headroom).
    pub headroom: f64,
    /// A job at or over this mean utilisation is compute-bound (default 70).
    pub compute_bound_pct: f64,
    /// The capacity type compared (what the job ran on).
    pub capacity: Capacity,
    /// Throughput per GPU model.
    pub throughput: ThroughputTable,
    /// At most this many options (0: all).
    pub limit: usize,
}

impl Default for RightsizeOptions {
    fn default() -> Self {
        RightsizeOptions {
            headroom: 1.2,
            compute_bound_pct: 70.0,
            capacity: Capacity::OnDemand,
            throughput: ThroughputTable::default(),
            limit: 10,
        }
    }
}

/// What bound the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// Its GPUs were busy most of the time: a slower GPU is slower.
    Compute,
    /// Its GPUs waited most of the time: memory decides what fits.
    Memory,
}

/// One configuration it could run on.
#[derive(Debug, Clone, Serialize)]
pub struct RightsizeOption {
    /// The instance type.
    pub instance_type: String,
    /// Its cloud.
    pub cloud: String,
    /// Where the price is from (the cheapest region/zone in the catalog).
    pub location: String,
    /// Its GPU model.
    pub gpu: String,
    /// GPUs per instance.
    pub gpus: u32,
    /// Memory per GPU, GiB.
    pub gpu_memory_gib: u32,
    /// Its price an hour, one instance.
    pub price_per_hour: Price,
    /// How many times as long the job would take (1.0: as long); `None`
    /// when its GPU has no throughput figure.
    pub slowdown: Option<f64>,
    /// Expected utilisation there, percent.
    pub expected_util_pct: Option<f64>,
    /// Price × slowdown × instances × 730 h, USD.
    pub monthly_usd: f64,
    /// Against what it ran on, USD a month (negative: dearer).
    pub saving_monthly_usd: Option<f64>,
    /// Whether it is what the job ran on.
    pub current: bool,
}

/// The recommendation.
#[derive(Debug, Clone, Serialize)]
pub struct RightsizeReport {
    /// Compute- or memory-bound.
    pub bound: Bound,
    /// Memory needed per GPU with headroom, GiB.
    pub need_per_gpu_gib: f64,
    /// What it ran on, as priced now (`None`: not in the catalog).
    pub current: Option<RightsizeOption>,
    /// Cheapest first (by monthly cost of the same work).
    pub options: Vec<RightsizeOption>,
    /// What the measurement says, in a sentence.
    pub finding: String,
}

/// The offers of `snapshot` a job that ran on `current_type` can move to:
/// within `clouds`, `regions` and `gpus` (each empty for any), and only
/// GPUs it can run on ([`super::compatible`]); what it ran on is always
/// among them, whatever the filters, to price the saving. With each GPU
/// model left out and why.
pub fn candidates(
    snapshot: &crate::Snapshot,
    current_type: &str,
    clouds: &[crate::Cloud],
    regions: &[crate::Region],
    gpus: &[GpuModel],
) -> (Vec<Offer>, Vec<String>) {
    let offers: Vec<Offer> = snapshot
        .offers()
        .iter()
        .filter(|o| {
            o.instance_type.name == current_type
                || ((clouds.is_empty() || clouds.contains(&o.pool.cloud))
                    && (regions.is_empty() || regions.contains(&o.pool.region))
                    && (gpus.is_empty()
                        || o.instance_type
                            .gpu
                            .as_ref()
                            .is_some_and(|g| gpus.contains(&g.model))))
        })
        .cloned()
        .collect();
    let ran_on = snapshot
        .instance_types()
        .iter()
        .find(|t| t.name == current_type)
        .and_then(|t| t.gpu.as_ref())
        .map(|g| g.model.clone());
    super::compatible::compatible_offers(&offers, ran_on.as_ref(), gpus)
}

/// Right-sizes a job from its measured use over `offers`.
pub fn rightsize(
    usage: &JobUsage,
    offers: &[Offer],
    opts: &RightsizeOptions,
) -> Result<RightsizeReport> {
    if !(opts.headroom.is_finite() && (1.0..=4.0).contains(&opts.headroom)) {
        return Err(Error::invalid_input(format!(
            "invalid headroom {}: expected 1.0 (none) to 4.0",
            opts.headroom
        )));
    }
    let mean = usage.mean_util_pct().ok_or_else(|| {
        Error::invalid_input("the job has no GPU measurement yet (no summary from its node agent)")
    })?;
    if usage.gpus == 0 || usage.memory_total_mib == 0 {
        return Err(Error::invalid_input(
            "the job's measurement has no GPU in it: nothing to size",
        ));
    }
    let need_mib = usage.peak_memory_mib as f64 * opts.headroom;
    let need_gib = need_mib / 1024.0;
    let bound = if mean >= opts.compute_bound_pct {
        Bound::Compute
    } else {
        Bound::Memory
    };
    let instances = u64::from(usage.instances.max(1));
    // The cheapest offer of each instance type at the job's capacity.
    let mut cheapest: std::collections::BTreeMap<(String, String), &Offer> = Default::default();
    for o in offers {
        if o.pool.capacity != opts.capacity {
            continue;
        }
        let key = (o.pool.cloud.to_string(), o.instance_type.name.clone());
        match cheapest.get(&key) {
            Some(c) if c.price <= o.price => {}
            _ => {
                cheapest.insert(key, o);
            }
        }
    }
    let current_offer = cheapest
        .values()
        .find(|o| o.instance_type.name == usage.instance_type)
        .copied();
    let current_model = current_offer
        .and_then(|o| o.instance_type.gpu.as_ref())
        .map(|g| g.model.clone());
    let t_cur = current_model
        .as_ref()
        .and_then(|m| opts.throughput.factor(m));
    let option = |o: &Offer, is_current: bool| -> Result<Option<RightsizeOption>> {
        let Some(g) = o.instance_type.gpu.as_ref() else {
            return Ok(None);
        };
        let same_model = current_model.as_ref() == Some(&g.model);
        let t_new = opts.throughput.factor(&g.model);
        let expected = match (t_cur, t_new) {
            _ if same_model => Some(mean),
            (Some(a), Some(b)) => Some(mean * a / b),
            _ => None,
        };
        let slowdown = expected.map(|u| (u / 100.0).max(1.0));
        let monthly = o
            .price
            .cost_for_seconds(HOURS_PER_MONTH * 3600)?
            .as_usd_f64()
            * slowdown.unwrap_or(1.0)
            * instances as f64;
        Ok(Some(RightsizeOption {
            instance_type: o.instance_type.name.clone(),
            cloud: o.pool.cloud.to_string(),
            location: o.pool.location(),
            gpu: model_name(&g.model),
            gpus: g.count,
            gpu_memory_gib: g.memory_gib,
            price_per_hour: o.price,
            slowdown: slowdown.map(|s| (s * 100.0).round() / 100.0),
            expected_util_pct: expected.map(|u| (u * 10.0).round() / 10.0),
            monthly_usd: (monthly * 100.0).round() / 100.0,
            saving_monthly_usd: None,
            current: is_current,
        }))
    };
    let current = match current_offer {
        Some(o) => option(o, true)?,
        None => None,
    };
    let mut options = Vec::new();
    for o in cheapest.values() {
        let Some(g) = o.instance_type.gpu.as_ref() else {
            continue;
        };
        if g.count != usage.gpus || f64::from(g.memory_gib) * 1024.0 < need_mib {
            continue;
        }
        let Some(mut opt) = option(o, o.instance_type.name == usage.instance_type)? else {
            continue;
        };
        if opt.slowdown.is_none() && bound == Bound::Compute {
            continue;
        }
        opt.saving_monthly_usd = current
            .as_ref()
            .map(|c| ((c.monthly_usd - opt.monthly_usd) * 100.0).round() / 100.0);
        options.push(opt);
    }
    // Known speeds first among equals: an unknown one is a guess.
    options.sort_by(|a, b| {
        a.monthly_usd
            .total_cmp(&b.monthly_usd)
            .then(a.slowdown.is_none().cmp(&b.slowdown.is_none()))
            .then(a.instance_type.cmp(&b.instance_type))
    });
    if opts.limit > 0 {
        options.truncate(opts.limit);
    }
    let peak_gib = usage.peak_memory_mib as f64 / 1024.0;
    let total_gib = usage.memory_total_mib as f64 / 1024.0;
    let finding = match bound {
        Bound::Compute => format!(
            "compute-bound: its GPUs were busy {mean:.0}% of the time on average, so a slower GPU would take longer, not cost less; options are ranked by the cost of the same work (price x slowdown)"
        ),
        Bound::Memory => format!(
            "not compute-bound: its GPUs were busy {mean:.0}% of the time and held at most {peak_gib:.1} of {total_gib:.0} GiB; any GPU with {need_gib:.1} GiB ({:.0}% headroom) fast enough to stay under 100% busy does the same work in the same time",
            (opts.headroom - 1.0) * 100.0
        ),
    };
    Ok(RightsizeReport {
        bound,
        need_per_gpu_gib: (need_gib * 10.0).round() / 10.0,
        current,
        options,
        finding,
    })
}

fn model_name(m: &GpuModel) -> String {
    m.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Snapshot;
    use time::OffsetDateTime;

    fn usage(instance_type: &str, gpus: u32, util: u64, peak: u64, total: u64) -> JobUsage {
        JobUsage {
            gpus,
            instances: 1,
            instance_type: instance_type.into(),
            observed_secs: 3600,
            util_pct_secs: 3600 * util,
            max_util_pct: util as u8,
            peak_memory_mib: peak,
            memory_total_mib: total,
            updated_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    /// `u` right-sized on the embedded catalog with the default options.
    fn on_embedded(u: &JobUsage) -> Result<RightsizeReport> {
        rightsize(
            u,
            Snapshot::embedded().offers(),
            &RightsizeOptions::default(),
        )
    }

    #[test]
    fn an_idle_big_gpu_is_moved_to_a_small_one_with_the_saving() {
        // One A100 80GB (a2-ultragpu-1g) holding 12 GiB at 8 %.
        let r = on_embedded(&usage("a2-ultragpu-1g", 1, 8, 12 * 1024, 81_920)).unwrap();
        assert_eq!(r.bound, Bound::Memory);
        let cur = r
            .current
            .as_ref()
            .expect("the current type is in the catalog");
        let best = &r.options[0];
        assert!(best.gpu_memory_gib as f64 >= 12.0 * 1.2, "{best:?}");
        assert!(
            best.monthly_usd < cur.monthly_usd / 2.0,
            "{best:?} vs {cur:?}"
        );
        assert!(best.saving_monthly_usd.unwrap() > 0.0);
        assert!(r.finding.starts_with("not compute-bound"), "{}", r.finding);
        // Everything listed holds the peak with headroom and has one GPU.
        assert!(r
            .options
            .iter()
            .all(|o| o.gpus == 1 && f64::from(o.gpu_memory_gib) >= 14.4));
    }

    #[test]
    fn a_compute_bound_job_pays_for_speed_it_gives_up() {
        // Eight A100s 95 % busy: a slower GPU would take longer.
        let r = on_embedded(&usage("p4d.24xlarge", 8, 95, 30 * 1024, 40_960)).unwrap();
        assert_eq!(r.bound, Bound::Compute);
        assert!(r.finding.starts_with("compute-bound"), "{}", r.finding);
        for o in &r.options {
            let s = o
                .slowdown
                .expect("only known speeds for a compute-bound job");
            // Monthly cost includes the slowdown.
            let plain = o.price_per_hour.usd_per_hour_f64() * 730.0;
            assert!(
                (o.monthly_usd - plain * s).abs() < 0.05 * plain.max(1.0),
                "{o:?}"
            );
        }
        // A V100 machine would take more than twice as long.
        if let Some(v) = r.options.iter().find(|o| o.gpu == "V100") {
            assert!(v.slowdown.unwrap() > 2.0, "{v:?}");
        }
    }

    #[test]
    fn no_measurement_or_bad_headroom_is_refused() {
        let snap = Snapshot::embedded();
        let mut u = usage("p4d.24xlarge", 8, 50, 1, 40_960);
        u.observed_secs = 0;
        let e = on_embedded(&u).unwrap_err();
        assert!(e.to_string().contains("no GPU measurement"), "{e}");
        let u = usage("p4d.24xlarge", 8, 50, 1, 40_960);
        let opts = RightsizeOptions {
            headroom: 0.5,
            ..RightsizeOptions::default()
        };
        assert!(rightsize(&u, snap.offers(), &opts).is_err());
    }
}
