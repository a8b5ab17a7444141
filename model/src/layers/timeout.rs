//! Bounds each call (each attempt, when inside a [`super::RetryLayer`]).

use std::time::Duration;

use futures::FutureExt;

use super::{Call, Interceptor, Next, Reply};
use crate::error::{Error, ErrorKind};
use crate::provider::Operation;

/// Fails a call that takes longer than a limit with a retryable
/// [`ErrorKind::Timeout`]. Put it inside the retry layer so each attempt is
/// bounded, not the whole series.
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    limit: Duration,
    per_operation: Vec<(Operation, Duration)>,
}

impl TimeoutLayer {
    /// Each call may take at most `limit`.
    pub fn new(limit: Duration) -> Self {
        TimeoutLayer {
            limit,
            per_operation: Vec::new(),
        }
    }

    /// Calls of `operation` (such as [`Operation::Launch`]) may take `limit` instead:
    /// a launch waits for the cloud's own operations, and cutting it short
    /// drops its clean-up.
    pub fn with_limit_for(mut self, operation: Operation, limit: Duration) -> Self {
        self.per_operation.retain(|(op, _)| *op != operation);
        self.per_operation.push((operation, limit));
        self
    }

    /// The limit for `operation`.
    pub fn limit_for(&self, operation: Operation) -> Duration {
        self.per_operation
            .iter()
            .find(|(op, _)| *op == operation)
            .map_or(self.limit, |(_, d)| *d)
    }
}

impl Interceptor for TimeoutLayer {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        let limit = self.limit_for(call.operation);
        async move {
            match tokio::time::timeout(limit, next()).await {
                Ok(result) => result,
                Err(_) => Err(Error::new(
                    ErrorKind::Timeout,
                    format!("no answer within {limit:?}"),
                )
                .with_provider(call.cloud)
                .with_operation(call.operation.as_str())),
            }
        }
        .boxed()
    }
}
