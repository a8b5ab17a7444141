//! Live offers from the clouds a caller can reach, each cloud falling back to
//! the snapshot on its own: what `gpufleet offers --live` shows; and a job's
//! offers from open providers with their stability signals
//! ([`job_offers`]): what the executor places on and `gpufleet place --live`
//! shows, from the same call.
//!
//! Every cloud is asked with a bound on how long it may take; a price far
//! under anything published is a bad feed, not a bargain, and is dropped
//! before it can rank first; a cloud that cannot be opened or does not
//! answer is served from the snapshot, with a note saying which and why.
//!
//! [`cache`] keeps what `gpufleet catalog refresh` fetched, per (cloud,
//! region), for the commands that read a catalog without asking the clouds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::catalog::plausible::plausible;
use gpufleet_core::catalog::GpuRequirement;
use gpufleet_core::placer::JobSpec;
use gpufleet_core::{
    Capacity, Cloud, Error, ErrorKind, Offer, OfferQuery, Pool, Provider, Result, Snapshot,
};

pub mod cache;

use crate::factory::{open, Settings};

/// How long one cloud's live catalog may take.
pub const LIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// Live offers, where each came from, and what was dropped.
#[derive(Debug, Default)]
pub struct LiveOffers {
    /// The offers: live where the cloud answered, else the snapshot's.
    pub offers: Vec<Offer>,
    /// One line per cloud served from the snapshot, saying why.
    pub notes: Vec<String>,
    /// Live prices dropped as implausible, one line each.
    pub dropped: Vec<String>,
}

/// [`live_offers`] for the clouds `query` names (all enabled when none),
/// each opened with `cfg`'s settings as `gpufleet check` would (a cloud
/// that cannot be used here is served from `snapshot`, saying why), within
/// [`LIVE_TIMEOUT`]: what `offers --live` shows.
pub async fn live_offers_for(
    cfg: &crate::config::Config,
    query: &OfferQuery,
    snapshot: &Snapshot,
) -> Result<LiveOffers, Error> {
    let mut settings = Vec::new();
    for &cloud in &query.clouds {
        let opened = match crate::clouds::live_settings(cfg, cloud).await? {
            Some(Ok(s)) => Ok(s),
            Some(Err(c)) => Err(c.one_line()),
            None => Err(format!("no live catalog for {cloud} yet")),
        };
        settings.push((cloud, opened));
    }
    // Each cloud that can be opened is checked first, all at once, within
    // the check budget: one that does not answer costs that much and is
    // served from the snapshot, not waited on for the catalog's timeout.
    let checks = futures::future::join_all(settings.iter().map(|(cloud, s)| async move {
        match s {
            Ok(_) => {
                Some(crate::clouds::check_cloud(cfg, *cloud, crate::clouds::CHECK_BUDGET).await)
            }
            Err(_) => None,
        }
    }))
    .await;
    for ((cloud, opened), check) in settings.iter_mut().zip(checks) {
        if let Some(c) = check.filter(|c| !c.usable) {
            *opened = Err(format!(
                "the live {} catalog is unavailable ({})",
                cloud.title(),
                c.one_line()
            ));
        }
    }
    Ok(live_offers(settings, query, snapshot, LIVE_TIMEOUT).await)
}

/// The offers matching `query` from each of `clouds`: `Ok(settings)` is
/// opened and asked (within `timeout`), `Err(why)` is a cloud that cannot be
/// used from here and is served from `snapshot`.
pub async fn live_offers(
    clouds: Vec<(Cloud, std::result::Result<Settings, String>)>,
    query: &OfferQuery,
    snapshot: &Snapshot,
    timeout: Duration,
) -> LiveOffers {
    let mut out = LiveOffers::default();
    for (cloud, settings) in clouds {
        let mut one = query.clone();
        one.clouds = vec![cloud];
        let live = match settings {
            Ok(s) => fetch(s.with_regions(&one.regions), &one, timeout)
                .await
                .map_err(|e| format!("the live {} catalog is unavailable ({e})", cloud.title())),
            Err(why) => Err(why),
        };
        match live {
            Ok(offers) => {
                let (offers, dropped) = plausible(offers, Snapshot::embedded());
                out.offers.extend(offers);
                out.dropped.extend(dropped);
            }
            Err(why) => {
                out.notes.push(format!(
                    "{why}; {cloud} is served from the embedded snapshot"
                ));
                out.offers.extend(snapshot.query(&one));
            }
        }
    }
    out
}

/// A job's offers from open providers.
#[derive(Debug, Default)]
pub struct JobOffers {
    /// The offers of every provider that answered, each spot pool with the
    /// provider's stability signal (placement score, eviction band, rate)
    /// where it published one.
    pub offers: Vec<Offer>,
    /// Live prices dropped as implausible, one line each.
    pub dropped: Vec<String>,
    /// The providers that did not answer, and why.
    pub failed: Vec<(Cloud, Error)>,
}

/// The offers for `job` (its GPU options, regions and zones) from each of
/// `providers` on the job's allowed clouds, with the providers' stability
/// signals merged in: the one way the executor (`run`, `launch`, `jobs
/// serve`) and `place --live` read offers. A price under the plausible floor
/// ([`plausible`]) is dropped with a warning, as `offers --live` drops it. A
/// provider that fails is skipped (and logged); when every provider asked
/// fails, the last error is returned.
pub async fn job_offers(providers: &[Arc<dyn Provider>], job: &JobSpec) -> Result<JobOffers> {
    let mut q = OfferQuery::new();
    q.gpus = job
        .gpus
        .iter()
        .map(|g| GpuRequirement {
            model: g.model.clone(),
            count: Some(g.count),
        })
        .collect();
    q.regions = job.regions.clone();
    q.zones = job.zones.clone();
    let mut out = JobOffers::default();
    let mut asked = 0;
    for p in providers {
        if !job.clouds.is_empty() && !job.clouds.contains(&p.cloud()) {
            continue;
        }
        asked += 1;
        match p.offers(&q).await {
            Ok(offers) => {
                // A price far under anything published is a bad feed, not a
                // bargain, and must not be where the job starts.
                let (mut offers, dropped) = plausible(offers, Snapshot::embedded());
                if let Some(first) = dropped.first() {
                    tracing::warn!(
                        provider = p.name(),
                        dropped = dropped.len(),
                        first = %first,
                        "implausible live prices dropped; those pools are not placed on"
                    );
                }
                out.dropped.extend(dropped);
                merge_stability(p.as_ref(), &mut offers).await;
                out.offers.extend(offers);
            }
            Err(e) => {
                tracing::warn!(provider = p.name(), error = %e, "offers failed; placing without this provider");
                out.failed.push((p.cloud(), e));
            }
        }
    }
    if out.offers.is_empty() {
        if let Some((_, e)) = out.failed.pop() {
            return Err(e);
        }
        if asked == 0 {
            return Err(Error::invalid_input(
                "no provider for the job's allowed clouds",
            ));
        }
    }
    Ok(out)
}

/// Sets each spot offer's stability to what `provider` publishes for its
/// pool, where it publishes anything (a provider that declares no stability
/// signal, or fails to answer, leaves the offers as they are).
async fn merge_stability(provider: &dyn Provider, offers: &mut [Offer]) {
    let spot: Vec<Pool> = offers
        .iter()
        .filter(|o| o.pool.capacity == Capacity::Spot)
        .map(|o| o.pool.clone())
        .collect();
    if spot.is_empty() || !provider.capabilities().stability {
        return;
    }
    let Ok(stab) = provider.stability(&spot).await else {
        return;
    };
    let by_pool: HashMap<Pool, _> = spot.into_iter().zip(stab).collect();
    for o in offers.iter_mut() {
        if let Some(s) = by_pool.get(&o.pool) {
            if s.bucket.is_some()
                || s.placement_score.is_some()
                || s.interruption_rate_per_hour.is_some()
            {
                o.stability = s.clone();
            }
        }
    }
}

async fn fetch(settings: Settings, query: &OfferQuery, timeout: Duration) -> Result<Vec<Offer>> {
    let p = open(settings).await?;
    match tokio::time::timeout(timeout, p.offers(query)).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("no answer within {} s", timeout.as_secs()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_core::fake::FakeCloud;
    use gpufleet_core::Region;

    #[tokio::test]
    async fn each_cloud_falls_back_on_its_own_and_says_why() {
        let snapshot = Snapshot::embedded();
        let q = OfferQuery::new().region(Region::new("us-east-1"));
        let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
        let got = live_offers(
            vec![
                (Cloud::Aws, Ok(Settings::Fake(fake))),
                (Cloud::Azure, Err("no Azure subscription".into())),
            ],
            &q,
            snapshot,
            Duration::from_secs(5),
        )
        .await;
        assert!(got.offers.iter().any(|o| o.pool.cloud == Cloud::Aws));
        assert_eq!(got.notes.len(), 1, "{:?}", got.notes);
        assert!(
            got.notes[0].contains("no Azure subscription")
                && got.notes[0].contains("embedded snapshot"),
            "{:?}",
            got.notes
        );
        assert!(got
            .offers
            .iter()
            .all(|o| o.pool.region.as_str() == "us-east-1"));
    }
}
