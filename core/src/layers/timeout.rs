//! Bounds each call (each attempt, when inside a [`super::RetryLayer`]).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Call, Interceptor, Next};
use crate::error::{Error, ErrorKind, Result};

/// Fails a call that takes longer than a limit with a retryable
/// [`ErrorKind::Timeout`]. Put it inside the retry layer so each attempt is
/// bounded, not the whole series.
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    limit: Duration,
}

impl TimeoutLayer {
    /// Each call may take at most `limit`.
    pub fn new(limit: Duration) -> Self {
        TimeoutLayer { limit }
    }
}

impl Interceptor for TimeoutLayer {
    fn intercept<'a, T: Send + 'a>(
        &'a self,
        call: &'a Call,
        next: Next<'a, T>,
    ) -> BoxFuture<'a, Result<T>> {
        async move {
            match tokio::time::timeout(self.limit, next()).await {
                Ok(result) => result,
                Err(_) => Err(Error::new(
                    ErrorKind::Timeout,
                    format!("no answer within {:?}", self.limit),
                )
                .with_provider(call.cloud)
                .with_operation(call.operation)),
            }
        }
        .boxed()
    }
}
