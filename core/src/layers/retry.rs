//! Retries with exponential backoff and jitter, on `backon`.

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
/// Only errors that are [retryable](Error::is_retryable) (rate limits, timeouts,
/// unavailability) on [idempotent](Call::idempotent) calls are retried. A delay
/// is never shorter than the service's `Retry-After`. When retries run out, the
/// last error is returned [marked persistent](Error::is_persistent); a
/// non-retryable error is returned at once, unchanged.
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
}

impl Default for RetryLayer {
    fn default() -> Self {
        RetryLayer {
            max_retries: 4,
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            jitter: true,
        }
    }
}

impl RetryLayer {
    /// The defaults in the table above.
    pub fn new() -> Self {
        Self::default()
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
            let result = (|| next())
                .retry(self.backoff())
                .sleep(tokio::time::sleep)
                .when(|e: &Error| e.is_retryable())
                .adjust(move |e: &Error, delay| {
                    let delay = delay?;
                    match e.retry_after() {
                        Some(after) if after > max_retry_after => None,
                        Some(after) => Some(delay.max(after)),
                        None => Some(delay),
                    }
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
