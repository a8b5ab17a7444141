//! How a controller waits between polls: real time, or a fake cloud's
//! clock moved forward (tests, the examples and `--provider fake`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gpufleet_core::{clock::ManualClock, fake::FakeCloud};
use time::OffsetDateTime;

/// How the controller waits between polls: real time, or a fake cloud's
/// clock moved forward (tests and `--provider fake`).
#[async_trait]
pub trait Pacer: Send + Sync + std::fmt::Debug {
    /// Waits `d`.
    async fn pause(&self, d: Duration);
}

/// Waits in real time.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealTime;

#[async_trait]
impl Pacer for RealTime {
    async fn pause(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

/// Waits by moving a manual clock forward, for the controller on fake
/// clouds (your own tests, the examples): each pause advances the clock by
/// the time asked, carries out the interruptions the fakes have due, runs
/// the events whose time has come, and lets other tasks run. A 20-hour job
/// is driven in well under a second.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use gpufleet_core::{clock::ManualClock, fake::{FakeCloud, FAKE_EPOCH}, Cloud};
/// use gpufleet_runtime::controller::ManualPacer;
///
/// let clock = ManualClock::new(FAKE_EPOCH);
/// let aws = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()));
/// // Five hours in, every instance a job launched is preempted.
/// let pacer = ManualPacer::new(clock, vec![aws]).at(Duration::from_secs(5 * 3600), |fakes| {
///     for fake in fakes {
///         for i in fake.live_job_instances() {
///             let _ = fake.preempt(&i.id);
///         }
///     }
/// });
/// ```
pub struct ManualPacer {
    clock: ManualClock,
    fakes: Vec<Arc<FakeCloud>>,
    start: OffsetDateTime,
    /// Offsets from `start` (ascending) and what happens then.
    events: std::sync::Mutex<Vec<(Duration, PacerEvent)>>,
}

/// Something [`ManualPacer`] does to the fake clouds at a given time.
type PacerEvent = Box<dyn FnOnce(&[Arc<FakeCloud>]) + Send>;

impl ManualPacer {
    /// Moves `clock` (which `fakes` share) from where it stands now.
    pub fn new(clock: ManualClock, fakes: Vec<Arc<FakeCloud>>) -> Self {
        let start = gpufleet_core::clock::Clock::now(&clock);
        ManualPacer {
            clock,
            fakes,
            start,
            events: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The clock it moves.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The fakes it settles and hands to events.
    pub fn fakes(&self) -> &[Arc<FakeCloud>] {
        &self.fakes
    }

    /// Does `event` to the fakes once the clock has passed `offset` from
    /// when the pacer was made (at the end of the pause that passes it, so
    /// the controller sees it at its next poll).
    pub fn at(
        self,
        offset: Duration,
        event: impl FnOnce(&[Arc<FakeCloud>]) + Send + 'static,
    ) -> Self {
        {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            let i = events.partition_point(|(at, _)| *at <= offset);
            events.insert(i, (offset, Box::new(event)));
        }
        self
    }
}

impl std::fmt::Debug for ManualPacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.events.lock().map(|e| e.len()).unwrap_or(0);
        f.debug_struct("ManualPacer")
            .field("start", &self.start)
            .field("fakes", &self.fakes.len())
            .field("pending_events", &pending)
            .finish()
    }
}

#[async_trait]
impl Pacer for ManualPacer {
    async fn pause(&self, d: Duration) {
        self.clock.advance(d);
        for f in &self.fakes {
            f.settle();
        }
        let elapsed = gpufleet_core::clock::Clock::now(&self.clock) - self.start;
        let due: Vec<PacerEvent> = {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            let n = events
                .iter()
                .take_while(|(at, _)| time::Duration::try_from(*at).is_ok_and(|at| at <= elapsed))
                .count();
            events.drain(..n).map(|(_, e)| e).collect()
        };
        for event in due {
            event(&self.fakes);
        }
        tokio::task::yield_now().await;
    }
}
