//! The fake cloud's request-rate limits: EC2's published model, a token
//! bucket per account for the compute API's reads and one for its writes,
//! refilled with the passing of time up to the bucket's size. Time passes
//! by whichever clock moved more since the last call: the fake's own (which
//! a test moves a poll at a time, so a minute it skips refills as a minute
//! would) or tokio's (real time, or a test's paused time: while the fake's
//! clock stands still, callers that back off are not refused for ever). A call
//! that finds its bucket empty is refused as the cloud refuses it (EC2's
//! `RequestLimitExceeded`, Compute Engine's `rateLimitExceeded`, Azure
//! Resource Manager's 429 `TooManyRequests`), before it does anything.

use serde::Serialize;
use time::OffsetDateTime;
use tokio::time::Instant;

use crate::Cloud;
use crate::Operation;
use crate::{Error, ErrorKind};

/// One token bucket: how many calls can be made at once, and how many
/// tokens come back each second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    /// Tokens in a full bucket.
    pub bucket: u32,
    /// Tokens added back each second, up to the bucket.
    pub refill_per_second: u32,
}

/// The buckets of one account: the compute API's reads (instances,
/// placement groups, end reasons, consoles) and its writes (launches,
/// terminations, tags, placement groups). Catalog reads (instance types,
/// offers, spot prices, stability) are not limited here: gpufleet's
/// providers read them from the published catalog and price feeds, cached
/// per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateLimits {
    /// The bucket of reads.
    pub reads: RateLimit,
    /// The bucket of writes.
    pub writes: RateLimit,
}

impl RateLimits {
    /// EC2's request-rate limits by default (its API reference, "Request
    /// throttling"): non-mutating actions 100 tokens refilled at 20 a
    /// second, mutating actions 200 at 5 a second.
    pub const EC2: RateLimits = RateLimits {
        reads: RateLimit {
            bucket: 100,
            refill_per_second: 20,
        },
        writes: RateLimit {
            bucket: 200,
            refill_per_second: 5,
        },
    };
}

/// Whether a call of `operation` is limited, and by which bucket: `Some(true)`
/// for writes, `Some(false)` for reads, `None` for calls outside the model.
fn bucket_of(operation: Operation) -> Option<bool> {
    match operation {
        Operation::Launch
        | Operation::Terminate
        | Operation::TagInstances
        | Operation::CreatePlacementGroup
        | Operation::DeletePlacementGroup => Some(true),
        Operation::Instance
        | Operation::ListInstances
        | Operation::PlacementGroup
        | Operation::ListPlacementGroups
        | Operation::EndReason
        | Operation::ConsoleOutput => Some(false),
        Operation::InstanceTypes
        | Operation::Offers
        | Operation::SpotPriceHistory
        | Operation::Stability
        | Operation::Interruptions => None,
    }
}

/// The buckets' state.
#[derive(Debug, Clone)]
pub(super) struct Throttle {
    limits: RateLimits,
    /// Tokens left in each bucket (reads, writes), in thousandths.
    tokens: [u64; 2],
    /// When they were last refilled, on tokio's clock and the fake's.
    at: (Instant, OffsetDateTime),
    /// Calls refused so far.
    pub(super) refused: u64,
}

impl Throttle {
    pub(super) fn new(limits: RateLimits, now: (Instant, OffsetDateTime)) -> Self {
        Throttle {
            limits,
            tokens: [
                u64::from(limits.reads.bucket) * 1000,
                u64::from(limits.writes.bucket) * 1000,
            ],
            at: now,
            refused: 0,
        }
    }

    /// Takes a token for `operation` at `now`, or the cloud's refusal.
    pub(super) fn take(
        &mut self,
        cloud: Cloud,
        operation: Operation,
        now: (Instant, OffsetDateTime),
    ) -> Result<(), Error> {
        let Some(write) = bucket_of(operation) else {
            return Ok(());
        };
        let real = now.0.saturating_duration_since(self.at.0).as_millis();
        let fake = (now.1 - self.at.1).whole_milliseconds().max(0);
        let elapsed_ms = u64::try_from(real.max(fake.unsigned_abs())).unwrap_or(u64::MAX);
        if elapsed_ms > 0 {
            for (tokens, limit) in self
                .tokens
                .iter_mut()
                .zip([self.limits.reads, self.limits.writes])
            {
                let refill = elapsed_ms.saturating_mul(u64::from(limit.refill_per_second));
                *tokens = tokens
                    .saturating_add(refill)
                    .min(u64::from(limit.bucket) * 1000);
            }
            self.at = now;
        }
        let tokens = &mut self.tokens[usize::from(write)];
        if *tokens >= 1000 {
            *tokens -= 1000;
            return Ok(());
        }
        self.refused += 1;
        let (code, text) = match cloud {
            Cloud::Gcp => (
                "rateLimitExceeded",
                "Rate Limit Exceeded (HTTP 429)",
            ),
            Cloud::Azure => (
                "TooManyRequests",
                "The request is being throttled (HTTP 429); retry after the interval in Retry-After",
            ),
            _ => ("RequestLimitExceeded", "Request limit exceeded."),
        };
        Err(
            Error::new(ErrorKind::RateLimited, format!("{code}: {text}"))
                .with_context("code", code.to_string()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FAKE_EPOCH;
    use std::time::Duration;

    #[test]
    fn a_bucket_empties_refills_by_the_second_and_never_overflows() {
        let mut t = Throttle::new(
            RateLimits {
                reads: RateLimit {
                    bucket: 3,
                    refill_per_second: 2,
                },
                writes: RateLimit {
                    bucket: 1,
                    refill_per_second: 1,
                },
            },
            (Instant::now(), FAKE_EPOCH),
        );
        let start = Instant::now();
        let now = (start, FAKE_EPOCH);
        for _ in 0..3 {
            t.take(Cloud::Aws, Operation::Instance, now).unwrap();
        }
        let e = t
            .take(Cloud::Aws, Operation::ListInstances, now)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert!(e.to_string().contains("RequestLimitExceeded"), "{e}");
        // Writes have their own bucket; the catalog is not limited.
        t.take(Cloud::Aws, Operation::Launch, now).unwrap();
        assert!(t.take(Cloud::Aws, Operation::Terminate, now).is_err());
        t.take(Cloud::Aws, Operation::Offers, now).unwrap();
        // Half a second brings one read back; an hour fills the bucket, no more.
        let later = (start + Duration::from_millis(500), FAKE_EPOCH);
        t.take(Cloud::Aws, Operation::Instance, later).unwrap();
        assert!(t.take(Cloud::Aws, Operation::Instance, later).is_err());
        // The fake's clock moving an hour refills as an hour would.
        let hour = (later.0, FAKE_EPOCH + time::Duration::HOUR);
        for _ in 0..3 {
            t.take(Cloud::Gcp, Operation::Instance, hour).unwrap();
        }
        let e = t.take(Cloud::Gcp, Operation::Instance, hour).unwrap_err();
        assert!(e.to_string().contains("rateLimitExceeded"), "{e}");
        assert_eq!(t.refused, 4);
    }
}
