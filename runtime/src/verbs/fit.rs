//! `fit --from-job`: the cheapest configuration that holds what a managed
//! job measurably used, on the catalog every command reads.

use gpufleet_core::advisor::rightsize::{candidates, rightsize, RightsizeOptions};
use gpufleet_core::usage::JobUsage;
use gpufleet_core::{Capacity, Cloud, Error, GpuModel};

use super::Site;
use crate::report::{FitFromJobDoc, UsageView};

/// What to fit a job's measurement to.
#[derive(Debug, Clone, Default)]
pub struct FromJob {
    /// Clouds to consider (none: every one).
    pub clouds: Vec<Cloud>,
    /// Regions to consider (none: every one).
    pub regions: Vec<String>,
    /// GPU models it may move to besides its own.
    pub gpus: Vec<String>,
    /// Memory headroom (default: the advisor's).
    pub headroom: Option<f64>,
    /// Show at most this many options.
    pub limit: usize,
}

/// What a fit came to.
#[derive(Debug)]
pub enum Fitted {
    /// The job has no GPU measurement yet (why, in words).
    NotMeasured(String),
    /// The options, and the measurement they answer.
    Fitted {
        /// The document `fit --from-job -o json` prints.
        doc: Box<FitFromJobDoc>,
        /// The measurement.
        usage: Box<JobUsage>,
    },
}

/// Fits job `job`'s measured use: priced at the capacity it last ran on.
pub async fn from_job(site: &Site, job: &str, req: &FromJob) -> Result<Fitted, Error> {
    let ledger = site.ledger().await?;
    let latest = crate::jobs::known(ledger.as_ref(), job).await?;
    let Some(usage) = ledger.job_usage(job).await? else {
        return Ok(Fitted::NotMeasured(format!(
            "job {job} has no GPU measurement yet: its nodes' agent (`gpufleet watch`, started by the boot script) publishes a summary a minute after it starts, and the controller keeps it"
        )));
    };
    let (catalog, _) = crate::live::cache::current(site.config());
    let regions = catalog.known_regions(&req.clouds, &req.regions)?;
    let mut gpus = Vec::new();
    for g in &req.gpus {
        gpus.push(GpuModel::parse(g).map_err(|e| Error::invalid_input(e.to_string()))?);
    }
    let (offers, left_out) =
        candidates(&catalog, &usage.instance_type, &req.clouds, &regions, &gpus);
    let opts = RightsizeOptions {
        headroom: req.headroom.unwrap_or(RightsizeOptions::default().headroom),
        capacity: latest
            .pool
            .as_ref()
            .map_or(Capacity::OnDemand, |p| p.capacity),
        limit: req.limit,
        ..RightsizeOptions::default()
    };
    let report = rightsize(&usage, &offers, &opts)?;
    Ok(Fitted::Fitted {
        doc: Box::new(FitFromJobDoc {
            job: job.to_string(),
            measured: UsageView::from(&usage),
            capacity: opts.capacity.as_str().to_string(),
            left_out,
            report,
        }),
        usage: Box::new(usage),
    })
}
