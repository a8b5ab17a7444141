//! Driving many jobs on one manual clock: the pacer every job of a fleet
//! test or bench pauses on, and the regions that sell a GPU on the fake
//! cloud. Shared by `runtime/tests/controller_scale.rs` and
//! `benches/controller.rs`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_core::catalog::OfferQuery;
use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::Catalog;
use gpufleet_runtime::controller::Pacer;
use time::OffsetDateTime;
use tokio::sync::watch;

/// Every job's pause waits on one shared clock, which the test moves a poll
/// at a time ([`Ticks::tick`]); each pause that begins is one job's poll
/// done, counted in [`Ticks::polls`].
#[derive(Debug)]
pub struct Ticks {
    clock: ManualClock,
    now: watch::Receiver<OffsetDateTime>,
    tx: Arc<watch::Sender<OffsetDateTime>>,
    /// The pauses begun so far, by every job.
    pub polls: Arc<AtomicU64>,
}

impl Clone for Ticks {
    fn clone(&self) -> Self {
        Ticks {
            clock: self.clock.clone(),
            now: self.now.clone(),
            tx: self.tx.clone(),
            polls: self.polls.clone(),
        }
    }
}

impl Ticks {
    /// Pauses on `clock`.
    pub fn new(clock: ManualClock) -> Self {
        let (tx, now) = watch::channel(clock.now());
        Ticks {
            clock,
            now,
            tx: Arc::new(tx),
            polls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock by `poll`, lets `fake` catch up with it, and wakes
    /// every pause that has ended.
    pub fn tick(&self, fake: &FakeCloud, poll: Duration) {
        self.clock.advance(poll);
        fake.settle();
        self.tx.send_replace(self.clock.now());
    }

    /// Waits (in real time, at most 10 minutes, then panics naming `what`)
    /// until `n` pauses have begun.
    pub async fn polled(&self, n: u64, what: &str) {
        let started = Instant::now();
        while self.polls.load(Ordering::SeqCst) < n {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "{what}: only {} of {n} polls after 10 minutes",
                self.polls.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[async_trait::async_trait]
impl Pacer for Ticks {
    async fn pause(&self, d: Duration) {
        self.polls.fetch_add(1, Ordering::SeqCst);
        let until = self.clock.now() + d;
        let mut rx = self.now.clone();
        while *rx.borrow_and_update() < until {
            if rx.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }
}

/// The first `n` regions (by name) where `fake`'s catalog sells `gpu`.
pub async fn regions_selling(fake: &FakeCloud, gpu: &str, n: usize) -> Vec<String> {
    let offers = fake
        .offers(&OfferQuery::new())
        .await
        .expect("the fake cloud's offers");
    offers
        .iter()
        .filter(|o| {
            o.instance_type
                .gpu
                .as_ref()
                .is_some_and(|g| g.model.to_string() == gpu)
        })
        .map(|o| o.pool.region.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(n)
        .collect()
}
