//! `place`: where a job is cheapest to finish, by the config's placer, on
//! the catalog every command reads (or the clouds' live offers), with the
//! ledger's evidence of interruptions.

use std::collections::HashMap;

use gpufleet_core::placer::{JobSpec, PlaceRequest, Placement, PoolEvidence};
use gpufleet_core::{Error, Offer, Pool};
use time::OffsetDateTime;

use super::Site;

/// How to place.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlaceOptions {
    /// Ask the enabled clouds for their offers and stability signals, as a
    /// managed job's placement does, instead of the catalog.
    pub live: bool,
    /// Leave the ledger's evidence out.
    pub no_ledger: bool,
}

/// A placement and what went into it.
#[derive(Debug)]
pub struct Placed {
    /// The placer's answer.
    pub placement: Placement,
    /// The time it was placed at (the clouds' clock).
    pub now: OffsetDateTime,
    /// What the catalog cache said of itself (stale, absent), if anything.
    pub catalog_note: Option<String>,
    /// What to say beside it (clouds skipped, not answering), one line each.
    pub warnings: Vec<String>,
    /// Live prices dropped as implausible, each described.
    pub dropped: Vec<String>,
    /// Live clouds that did not answer (placed without them).
    pub unread: usize,
}

/// The ledger's evidence for the placer at `now`, or none with `no_ledger`
/// (a ledger absent is none; it is only read).
pub async fn evidence(
    site: &Site,
    now: OffsetDateTime,
    no_ledger: bool,
) -> Result<HashMap<Pool, PoolEvidence>, Error> {
    if no_ledger {
        return Ok(HashMap::new());
    }
    let since = site.config().placer().evidence_since(now);
    match site {
        Site::InMemory(_, m) => m.ledger.evidence(since).await,
        Site::Configured(cfg) => crate::ledgers::evidence_since(&cfg.ledger, since).await,
    }
}

/// Places `job` (a job that names no cloud gets the config's).
pub async fn place(site: &Site, mut job: JobSpec, opts: PlaceOptions) -> Result<Placed, Error> {
    let cfg = site.config();
    job.clouds = cfg.clouds_or_enabled(&job.clouds);
    let now = site.now()?;
    let evidence = evidence(site, now, opts.no_ledger).await?;
    let (catalog, catalog_note) = crate::live::cache::current(cfg);
    let mut warnings = Vec::new();
    let mut dropped = Vec::new();
    let mut unread = 0;
    let live: Vec<Offer>;
    let offers: &[Offer] = if opts.live {
        // The clouds opened as a run opens them: what opening skipped and
        // which did not answer are said beside the placement.
        let fleet = site.open(super::Opening::Every).await?;
        let got = crate::live::job_offers(&fleet.providers, &job).await?;
        warnings = fleet.warnings.clone();
        for (cloud, e) in &got.failed {
            warnings.push(format!("{cloud} did not answer ({e}); placing without it"));
        }
        dropped = got.dropped;
        unread = got.failed.len();
        live = got.offers;
        &live
    } else {
        catalog.offers()
    };
    let placer = cfg.placer();
    let placement = placer.place(&PlaceRequest::new(&job, offers, &evidence, now))?;
    Ok(Placed {
        placement,
        now,
        catalog_note,
        warnings,
        dropped,
        unread,
    })
}
