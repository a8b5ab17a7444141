//! Time, injectable so that tests and the simulator control it.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + Debug {
    /// Now, in UTC.
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<OffsetDateTime>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Sets the time.
    pub fn set(&self, at: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now = now.saturating_add(time::Duration::try_from(by).unwrap_or(time::Duration::MAX));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}
