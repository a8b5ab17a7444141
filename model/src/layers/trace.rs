//! One `tracing` span per call.

use std::time::Instant;

use futures::FutureExt;
use tracing::Instrument;

use super::{Call, Interceptor, Next, Reply};
use crate::error::ErrorKind;

/// Opens a span `gpufleet.call` per call with the provider, operation and target
/// (pool or resource id), and logs how it ended and how long it took: a
/// failure at WARN, except `NotFound`, which is an answer rather than a fault
/// (`terminate ID` asks every cloud for the instance, a sweep looks for what
/// may already be gone) and is logged at DEBUG like a success. It logs no
/// request or response bodies, so no credentials or tokens can reach the logs
/// through it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingLayer;

impl Interceptor for TracingLayer {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        let span = tracing::info_span!(
            "gpufleet.call",
            provider = %call.provider,
            operation = call.operation.as_str(),
            target = call.target.as_deref().unwrap_or(""),
        );
        async move {
            let start = Instant::now();
            let result = next().await;
            let elapsed_ms = start.elapsed().as_millis() as u64;
            match &result {
                Ok(_) => tracing::debug!(elapsed_ms, "ok"),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    tracing::debug!(elapsed_ms, error = %e, "not found")
                }
                Err(e) => tracing::warn!(
                    elapsed_ms,
                    error.kind = %e.kind(),
                    error.retryable = e.is_retryable(),
                    error = %e,
                    "failed"
                ),
            }
            result
        }
        .instrument(span)
        .boxed()
    }
}
