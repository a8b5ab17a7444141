//! `costs` and `reconcile`: what the ledger of spend says was spent, and
//! the ledger made to agree with what the clouds show.

use std::collections::HashMap;
use std::sync::Arc;

use gpufleet_core::ledger::{Ledger, MemoryLedger};
use gpufleet_core::{Error, TagFilter};
use time::OffsetDateTime;

use super::{Opening, Site};
use crate::config::ProviderKind;
use crate::fleet::Unread;
use crate::spend::{CostBy, CostReport, Reconciliation};

/// The start of a `costs` window: a UTC date (`2026-11-01`, from its
/// midnight) or a duration back from `now` (`30d`, `12h`); refused when it
/// is neither, or after `now`.
pub fn since(s: &str, now: OffsetDateTime) -> Result<OffsetDateTime, Error> {
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    let from = if let Ok(d) = time::Date::parse(s.trim(), &fmt) {
        d.midnight().assume_utc()
    } else {
        gpufleet_core::placer::parse_duration(s)
            .ok()
            .and_then(|d| time::Duration::try_from(d).ok())
            .and_then(|d| now.checked_sub(d))
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "invalid --since '{s}': expected a duration back from now such as 30d or 12h, or a UTC date such as 2026-11-01"
                ))
            })?
    };
    if from > now {
        return Err(Error::invalid_input(format!(
            "invalid --since '{s}': it is after now ({}); give a past date or a duration back from now such as 30d",
            gpufleet_core::report::rfc3339(now)
        )));
    }
    Ok(from)
}

/// `costs`: the site's ledger's spend since `since` (as [`since`] reads
/// it; `30d` is the command's default) up to the clouds' now, grouped
/// `by`, with the cost per completed job and the saving against on-demand
/// at the catalog's prices (the cache `catalog refresh` keeps, else the
/// embedded snapshot). Read only: no ledger yet is no spend.
pub async fn costs(site: &Site, by: CostBy, since: &str) -> Result<CostReport, Error> {
    let now = site.now()?;
    let from = self::since(since, now)?;
    // Read only: a ledger not there yet is no spend, and is not created.
    let ledger = match site {
        Site::InMemory(_, m) => Some(m.ledger.clone()),
        Site::Configured(cfg) => crate::ledgers::open_read_only(&cfg.ledger).await?,
    };
    crate::spend::ledger_costs(site.config(), ledger.as_deref(), by, from, now).await
}

/// What `reconcile` found (and did, with `apply`).
#[derive(Debug)]
pub struct Reconciled {
    /// The ends recorded, the instances adopted, the launches failed.
    pub report: Reconciliation,
    /// What opening the clouds skipped, one line each.
    pub warnings: Vec<String>,
    /// The clouds that did not answer (a partial answer).
    pub unread: Vec<Unread>,
}

/// `reconcile`: the ledger made to agree with the clouds that answer: the
/// ends they caused recorded, the caller's managed instances the ledger
/// does not know adopted, launch-only jobs left with nothing alive failed;
/// with `apply`, carried out, else only said (nothing is written and no
/// ledger is created). Another owner's instances and jobs are left alone
/// unless `any_owner`. On the local provider, the instances of runs that
/// are gone are what there is to reconcile.
pub async fn reconcile(site: &Site, apply: bool, any_owner: bool) -> Result<Reconciled, Error> {
    let cfg = site.config();
    #[cfg(all(unix, feature = "serve"))]
    if cfg.provider == ProviderKind::Local {
        return Ok(Reconciled {
            report: crate::local::reconcile(cfg, apply).await?,
            warnings: Vec::new(),
            unread: Vec::new(),
        });
    }
    let mut fleet = site.open(Opening::Checked).await?;
    let listed = fleet.managed(&TagFilter::default()).await;
    // A dry run reads the ledger (opened read only) and writes nothing.
    let ledger: Arc<dyn Ledger> = match site {
        _ if apply => site.ledger().await?,
        Site::InMemory(_, m) => m.ledger.clone(),
        Site::Configured(cfg) => match crate::ledgers::open_read_only(&cfg.ledger).await? {
            Some(l) => l,
            None => Arc::new(MemoryLedger::new()),
        },
    };
    let mut prices = HashMap::new();
    for i in listed
        .iter()
        .filter(|i| any_owner || crate::reap::owned_by(i, &cfg.owner))
    {
        let p = fleet.price(&i.pool).await;
        prices.insert(i.pool.clone(), p);
    }
    let seen = crate::spend::Observed {
        providers: &fleet.providers,
        read: fleet.read_clouds(),
        listed: &listed,
        now: fleet.now,
    };
    let how = if apply {
        crate::spend::Apply::ALL
    } else {
        crate::spend::Apply::NOTHING
    };
    let owner = (!any_owner).then_some(cfg.owner.as_str());
    let report = crate::spend::reconcile(ledger.as_ref(), &seen, owner, &prices, how).await?;
    fleet.save()?;
    Ok(Reconciled {
        report,
        warnings: fleet.warnings.clone(),
        unread: fleet.unread.clone(),
    })
}
