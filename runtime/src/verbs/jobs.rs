//! `jobs ls`, `jobs show`, `jobs cancel` and `jobs serve`.

use std::future::Future;

use gpufleet_core::{Error, Result};

use super::{Opening, Site};
use crate::controller::{Controller, ControllerConfig, Outcome, ServeConfig, ServeReport};
use crate::fleet::{Fleet, Unread};
use crate::jobs::JobSummary;
use crate::report::{ConsoleOutput, JobRow, JobShowDoc};
use time::OffsetDateTime;

/// Every job in the site's ledger, summed up with its spend: the summaries (for
/// [`cost_per_completed_job`](crate::jobs::cost_per_completed_job)) and the rows `gpufleet jobs ls` prints, each
/// naming the controller whose lease on it is live, at the clouds' now (the
/// fake clock's on the fake cloud).
pub async fn list(site: &Site) -> Result<(Vec<JobSummary>, Vec<JobRow>)> {
    let now = site.now()?;
    let ledger = site.ledger().await?;
    let (records, leases, spend) = (
        ledger.jobs().await?,
        ledger.leases().await?,
        ledger.spend(None).await?,
    );
    let mut list = crate::jobs::summarize_all(records, now)?;
    crate::jobs::apply_spend(&mut list, &spend, now)?;
    // Leases run on the ledger's (the system's) clock, not the fake one.
    let wall = OffsetDateTime::now_utc();
    let rows = list
        .iter()
        .map(|s| {
            let mut r = JobRow::new(s);
            r.driven_by = leases
                .iter()
                .find(|l| l.job_id == s.id && l.is_live(wall))
                .map(|l| l.holder.clone());
            r
        })
        .collect();
    Ok((list, rows))
}

/// Everything `gpufleet jobs show ID` says about job `id`: its summary
/// (spend applied) and the document with its history, GPU use and file; an
/// id the ledger does not hold is an error saying so.
pub async fn show(site: &Site, id: &str) -> Result<(JobSummary, JobShowDoc)> {
    let now = site.now()?;
    let ledger = site.ledger().await?;
    let history = ledger.job_history(id).await?;
    if history.is_empty() {
        return Err(crate::jobs::unknown_job(id));
    }
    let (usage, spend, spec) = (
        ledger.job_usage(id).await?,
        ledger.spend(None).await?,
        ledger.job_spec(id).await?,
    );
    let mut s = [crate::jobs::summarize(&history, now)?];
    crate::jobs::apply_spend(&mut s, &spend, now)?;
    let [s] = s;
    let doc = JobShowDoc::new(&s, &history, usage.as_ref(), spec.as_deref())?;
    Ok((s, doc))
}

/// `jobs logs ID`: the console output of each instance job `id` holds now
/// (the clouds are opened only for a job that has instances), with the
/// pool they are in.
pub async fn logs(site: &Site, id: &str) -> Result<JobLogs> {
    let ledger = site.ledger().await?;
    let last = crate::jobs::with_instances(ledger.as_ref(), id).await?;
    let fleet = site.open(Opening::Every).await?;
    let outputs = crate::jobs::console_logs(&fleet.providers, &last)
        .await?
        .into_iter()
        .map(|(i, output)| ConsoleOutput {
            instance: i.to_string(),
            output,
        })
        .collect();
    Ok(JobLogs {
        pool: last
            .pool
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        outputs,
        warnings: fleet.warnings.clone(),
    })
}

/// What [`logs`] read.
#[derive(Debug)]
pub struct JobLogs {
    /// The pool the instances are in.
    pub pool: String,
    /// Each instance's console output (`jobs logs -o json` prints these).
    pub outputs: Vec<ConsoleOutput>,
    /// What opening the clouds skipped, one line each.
    pub warnings: Vec<String>,
}

/// What a cancel did.
#[derive(Debug)]
pub struct Cancelled {
    /// The job's outcome (cancelled, or the end it had reached).
    pub outcome: Outcome,
    /// The clouds that did not answer and were not swept (a partial
    /// answer).
    pub unread: Vec<Unread>,
}

/// Cancels job `id`: known, the caller's own unless `any_owner`; each cloud
/// checked first, so one that does not answer neither holds the cancel up
/// nor is swept (it is named in [`Cancelled::unread`]).
pub async fn cancel(site: &Site, id: &str, any_owner: bool) -> Result<Cancelled, Error> {
    crate::jobs::known(site.ledger().await?.as_ref(), id).await?;
    let fleet = site.open(Opening::Checking).await?;
    let ctl = site
        .controller(&fleet, id, ControllerConfig::default())
        .await?;
    let owner = site.config().owner.as_str();
    let outcome = ctl.cancel_as(id, (!any_owner).then_some(owner)).await?;
    fleet.save()?;
    Ok(Cancelled {
        outcome,
        unread: fleet.unread.clone(),
    })
}

/// A controller serving the ledger's managed jobs beside others (`jobs
/// serve`).
pub struct JobServer {
    fleet: Fleet,
    ctl: Controller,
}

impl JobServer {
    /// Opens the clouds as a controller beside others and a controller
    /// over them, driving as `drive` says.
    pub async fn open(site: &Site, drive: ControllerConfig) -> Result<JobServer, Error> {
        let fleet = site.open(Opening::Shared).await?;
        let ctl = site.controller(&fleet, "", drive).await?;
        Ok(JobServer { fleet, ctl })
    }

    /// What the warnings of opening the clouds said, one line each.
    pub fn warnings(&self) -> &[String] {
        &self.fleet.warnings
    }

    /// The name its leases are held under.
    pub fn holder(&self) -> &str {
        &self.ctl.config().holder
    }

    /// Where its ledger is (passwords masked).
    pub fn ledger_location(&self) -> String {
        self.ctl.executor().ledger().location()
    }

    /// Serves until `stop` resolves ([`Controller::serve`]). The shared
    /// fake cloud keeps its own state as it goes: nothing is saved over it.
    pub async fn serve(
        &self,
        config: ServeConfig,
        stop: impl Future<Output = ()>,
    ) -> Result<ServeReport, Error> {
        self.ctl.serve(config, stop).await
    }
}
