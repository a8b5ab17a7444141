//! Helpers every provider's tests use, written once: each provider's
//! `tests/support` includes this file by path (test support is not a crate
//! of its own).

use std::time::Duration;

use gpufleet_core::layers::RetryLayer;
use gpufleet_core::{Capacity, Cloud, IdempotencyKey, Pool, Region, Zone};

/// A retry layer quick enough for tests: 20 ms before the first retry, at
/// most 3 retries, no jitter.
pub fn retry() -> RetryLayer {
    RetryLayer::new()
        .with_min_delay(Duration::from_millis(20))
        .with_max_retries(3)
        .without_jitter()
}

/// An idempotency key (the tests' keys are valid ones).
pub fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

/// A pool of `itype` in `cloud`'s `region`, in `zone` if given.
pub fn pool_in(
    (cloud, region): (Cloud, &str),
    zone: Option<&str>,
    itype: &str,
    capacity: Capacity,
) -> Pool {
    Pool {
        cloud,
        region: Region::new(region),
        zone: zone.map(Zone::new),
        instance_type: itype.into(),
        capacity,
    }
}
