//! Live offers from the clouds a caller can reach, each cloud falling back to
//! the snapshot on its own: what `gpufleet offers --live` shows.
//!
//! Every cloud is asked with a bound on how long it may take; a price far
//! under anything published is a bad feed, not a bargain, and is dropped
//! before it can rank first; a cloud that cannot be opened or does not
//! answer is served from the snapshot, with a note saying which and why.

use std::time::Duration;

use gpufleet_core::catalog::plausible::plausible;
use gpufleet_core::{Cloud, Error, ErrorKind, Offer, OfferQuery, Result, Snapshot};

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
    use std::sync::Arc;

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
