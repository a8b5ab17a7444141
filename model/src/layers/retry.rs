//! Retries with exponential backoff and jitter, on `backon`, within a retry
//! budget shared by every call to one account.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use derive_setters::Setters;
use futures::FutureExt;

use super::{Call, Interceptor, Next, Reply};
use crate::error::Error;

/// Retries failed calls, as documented data rather than loops in each provider:
///
/// | setting | default |
/// |---|---|
/// | retries after the first attempt | 4 |
/// | first delay | 200 ms, doubling, with full jitter |
/// | longest delay | 20 s |
/// | longest `Retry-After` honoured | 60 s (a longer one gives up at once) |
///
/// | retry budget per account | 500 tokens; a retry takes 5 (10 after a timeout), a call that succeeds at once gives 1 back, one that succeeds after retries gives back what they took |
///
/// Only errors that are [retryable](Error::is_retryable) (rate limits, timeouts,
/// unavailability) on [idempotent](Call::idempotent) calls are retried. A delay
/// is never shorter than the service's `Retry-After`. When retries run out, the
/// last error is returned [marked persistent](Error::is_persistent); a
/// non-retryable error is returned at once, unchanged.
///
/// **One budget per account.** Clones share their [`RetryBudget`]: a layer
/// for another account takes [`RetryLayer::for_account`]. When a throttled
/// account has spent it, calls fail at their first error instead of each
/// retrying on its own (a retry storm that keeps the account throttled, for
/// every tool in it), until successes earn it back: the same rule as the AWS
/// SDKs' standard retry mode.
#[derive(Debug, Clone, Setters)]
#[setters(generate = false, prefix = "with_", strip_option)]
pub struct RetryLayer {
    /// Sets how many retries follow the first attempt.
    #[setters(generate)]
    max_retries: usize,
    /// Sets the first delay.
    #[setters(generate)]
    min_delay: Duration,
    /// Sets the longest delay between attempts.
    #[setters(generate)]
    max_delay: Duration,
    /// Sets the longest `Retry-After` that is waited for.
    #[setters(generate)]
    max_retry_after: Duration,
    jitter: bool,
    budget: Arc<RetryBudget>,
}

impl Default for RetryLayer {
    fn default() -> Self {
        RetryLayer {
            max_retries: 4,
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            jitter: true,
            budget: Arc::new(RetryBudget::new(RetryBudget::CAPACITY)),
        }
    }
}

/// The retries one account may still make: tokens taken by each retry and
/// earned back by calls that succeed (see [`RetryLayer`]).
#[derive(Debug)]
pub struct RetryBudget {
    tokens: AtomicU32,
    capacity: u32,
}

impl RetryBudget {
    /// Tokens in a full budget.
    pub const CAPACITY: u32 = 500;
    /// What a retry takes.
    pub const RETRY_COST: u32 = 5;
    /// What a retry after a timeout takes.
    pub const TIMEOUT_COST: u32 = 10;

    /// A full budget of `capacity` tokens.
    pub fn new(capacity: u32) -> Self {
        RetryBudget {
            tokens: AtomicU32::new(capacity),
            capacity,
        }
    }

    /// Tokens left.
    pub fn tokens(&self) -> u32 {
        self.tokens.load(Ordering::SeqCst)
    }

    /// Takes `cost` tokens if there are that many.
    fn take(&self, cost: u32) -> bool {
        self.tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| t.checked_sub(cost))
            .is_ok()
    }

    /// Gives `n` tokens back, up to the capacity.
    fn give(&self, n: u32) {
        let cap = self.capacity;
        let _ = self
            .tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(n).min(cap))
            });
    }
}

impl RetryLayer {
    /// The defaults in the table above.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same settings with a budget of its own, `capacity` tokens: for
    /// another account (each provider opened gets one).
    pub fn for_account(&self, capacity: u32) -> Self {
        RetryLayer {
            budget: Arc::new(RetryBudget::new(capacity)),
            ..self.clone()
        }
    }

    /// The budget this layer's calls share.
    pub fn budget(&self) -> &Arc<RetryBudget> {
        &self.budget
    }

    /// Turns jitter off (for deterministic tests).
    pub fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    fn backoff(&self) -> ExponentialBuilder {
        let b = ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries);
        if self.jitter {
            b.with_jitter()
        } else {
            b
        }
    }
}

impl Interceptor for RetryLayer {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            if !call.idempotent {
                return next().await;
            }
            let max_retry_after = self.max_retry_after;
            let budget = &self.budget;
            let spent = AtomicU32::new(0);
            let result = (|| next())
                .retry(self.backoff())
                .sleep(tokio::time::sleep)
                .when(|e: &Error| e.is_retryable())
                .adjust(|e: &Error, delay| {
                    let delay = match e.retry_after() {
                        Some(after) if after > max_retry_after => None,
                        Some(after) => Some(delay?.max(after)),
                        None => delay,
                    }?;
                    // A retry that will be made takes its tokens; none
                    // left, none is made.
                    let cost = if e.kind() == crate::error::ErrorKind::Timeout {
                        RetryBudget::TIMEOUT_COST
                    } else {
                        RetryBudget::RETRY_COST
                    };
                    if !budget.take(cost) {
                        tracing::debug!(
                            provider = %call.provider,
                            operation = call.operation.as_str(),
                            "retry budget spent; not retrying"
                        );
                        return None;
                    }
                    spent.fetch_add(cost, Ordering::SeqCst);
                    Some(delay)
                })
                .notify(|e: &Error, delay| {
                    tracing::debug!(
                        provider = %call.provider,
                        operation = call.operation.as_str(),
                        error.kind = %e.kind(),
                        delay_ms = delay.as_millis() as u64,
                        "retrying"
                    );
                })
                .await;
            if result.is_ok() {
                budget.give(spent.load(Ordering::SeqCst).max(1));
            }
            result.map_err(|e| {
                if e.is_retryable() {
                    e.set_persistent()
                } else {
                    e
                }
            })
        }
        .boxed()
    }
}
