//! EC2 error codes mapped to gpufleet's error kinds, in one table, and SDK
//! errors converted to [`gpufleet_model::Error`] (SDK types never leave this
//! crate).

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::operation::RequestId;
use aws_smithy_async::future::pagination_stream::PaginationStream;
use gpufleet_model::{Cloud, Error, ErrorKind};

/// EC2 API error codes and what they mean to a caller.
const CODES: &[(&str, ErrorKind)] = &[
    (
        "InsufficientInstanceCapacity",
        ErrorKind::InsufficientCapacity,
    ),
    ("InsufficientCapacity", ErrorKind::InsufficientCapacity),
    ("InsufficientHostCapacity", ErrorKind::InsufficientCapacity),
    ("SpotMaxPriceTooLow", ErrorKind::InsufficientCapacity),
    ("MaxSpotInstanceCountExceeded", ErrorKind::QuotaExceeded),
    ("VcpuLimitExceeded", ErrorKind::QuotaExceeded),
    ("InstanceLimitExceeded", ErrorKind::QuotaExceeded),
    ("RequestLimitExceeded", ErrorKind::RateLimited),
    ("Throttling", ErrorKind::RateLimited),
    ("UnauthorizedOperation", ErrorKind::PermissionDenied),
    ("AuthFailure", ErrorKind::Unauthenticated),
    ("InvalidClientTokenId", ErrorKind::Unauthenticated),
    ("ExpiredToken", ErrorKind::Unauthenticated),
    ("InvalidInstanceID.NotFound", ErrorKind::NotFound),
    ("InvalidInstanceID.Malformed", ErrorKind::InvalidInput),
    ("InvalidPlacementGroup.Unknown", ErrorKind::NotFound),
    ("InvalidPlacementGroup.Duplicate", ErrorKind::AlreadyExists),
    ("InvalidGroup.NotFound", ErrorKind::NotFound),
    ("IdempotentParameterMismatch", ErrorKind::InvalidInput),
    ("InvalidParameterValue", ErrorKind::InvalidInput),
    ("InvalidParameterCombination", ErrorKind::InvalidInput),
    ("MissingParameter", ErrorKind::InvalidInput),
    ("Unsupported", ErrorKind::Unsupported),
    ("InternalError", ErrorKind::Unavailable),
    ("ServiceUnavailable", ErrorKind::Unavailable),
    ("Unavailable", ErrorKind::Unavailable),
    // SQS (the interruption queue), JSON and query protocols.
    (
        "AWS.SimpleQueueService.NonExistentQueue",
        ErrorKind::NotFound,
    ),
    ("QueueDoesNotExist", ErrorKind::NotFound),
    ("AccessDenied", ErrorKind::PermissionDenied),
    ("AccessDeniedException", ErrorKind::PermissionDenied),
    ("RequestThrottled", ErrorKind::RateLimited),
    ("ThrottlingException", ErrorKind::RateLimited),
];

/// The gpufleet error kind for an EC2 error code; unknown codes are
/// [`ErrorKind::Unexpected`] (callers keep the code in the error's context).
pub fn error_kind_for_code(code: &str) -> ErrorKind {
    ErrorKind::classify(CODES, code, None, &[])
}

/// The `items` of every page of a paginated call
/// (`…into_paginator().send()`), in order, taken out of each page (the
/// SDK's output fields are public: nothing is copied); its error converted
/// as [`from_sdk`] does for `operation`.
pub(crate) async fn all_items<T, I, E>(
    pages: PaginationStream<std::result::Result<T, SdkError<E, HttpResponse>>>,
    operation: &'static str,
    items: impl FnMut(T) -> Option<Vec<I>>,
) -> gpufleet_model::Result<Vec<I>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let pages: Vec<T> = pages
        .try_collect()
        .await
        .map_err(|e| from_sdk(operation, e))?;
    Ok(pages.into_iter().filter_map(items).flatten().collect())
}

/// Converts an SDK error from `operation` into a gpufleet error: service
/// errors by their code (kept in the context, with the request id), timeouts
/// and connection failures by what they are. Nothing here can panic.
pub(crate) fn from_sdk<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = raw_status(&err);
    let error = match &err {
        SdkError::ServiceError(ctx) => {
            let e = ctx.err();
            let code = e.code().unwrap_or("").to_string();
            // No status is trusted beyond the common ones: EC2's own 404s
            // carry a code; one without is not "gone".
            let kind = ErrorKind::classify(CODES, &code, status, &[]);
            let message = e.message().unwrap_or("no message").to_string();
            let shown = if code.is_empty() {
                format!("HTTP {}", status.unwrap_or(0))
            } else {
                code.clone()
            };
            let mut error = Error::new(kind, format!("{shown}: {message}"));
            if !code.is_empty() {
                error = error.with_context("code", code);
            }
            if let Some(id) = e.meta().request_id() {
                error = error.with_context("request_id", id.to_string());
            }
            // Throttles may say when to come back (seconds).
            if let Some(secs) = ctx
                .raw()
                .headers()
                .get("retry-after")
                .and_then(|v| v.trim().parse::<u64>().ok())
            {
                error = error.with_retry_after(std::time::Duration::from_secs(secs.min(3600)));
            }
            error
        }
        SdkError::TimeoutError(_) => Error::new(ErrorKind::Timeout, "the request timed out"),
        SdkError::DispatchFailure(f) => {
            if f.is_timeout() {
                Error::new(ErrorKind::Timeout, "connecting timed out")
            } else if f.is_io() {
                Error::new(ErrorKind::Unavailable, "could not reach the endpoint")
            } else {
                Error::new(ErrorKind::Unavailable, "the request could not be sent")
            }
        }
        SdkError::ResponseError(_) => Error::new(
            ErrorKind::Unavailable,
            format!(
                "unreadable response (HTTP {}): truncated or malformed body",
                status.unwrap_or(0)
            ),
        ),
        SdkError::ConstructionFailure(_) => {
            Error::new(ErrorKind::InvalidInput, "the request could not be built")
        }
        _ => Error::new(ErrorKind::Unexpected, "unknown SDK error"),
    };
    error
        .with_provider(Cloud::Aws)
        .with_operation(operation)
        .with_source(err)
}

fn raw_status<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    match err {
        SdkError::ServiceError(ctx) => Some(ctx.raw().status().as_u16()),
        SdkError::ResponseError(ctx) => Some(ctx.raw().status().as_u16()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_the_codes_that_matter() {
        assert_eq!(
            error_kind_for_code("InsufficientInstanceCapacity"),
            ErrorKind::InsufficientCapacity
        );
        assert_eq!(
            error_kind_for_code("RequestLimitExceeded"),
            ErrorKind::RateLimited
        );
        assert_eq!(
            error_kind_for_code("VcpuLimitExceeded"),
            ErrorKind::QuotaExceeded
        );
        assert_eq!(
            error_kind_for_code("InvalidInstanceID.NotFound"),
            ErrorKind::NotFound
        );
        assert_eq!(error_kind_for_code("SomethingNew"), ErrorKind::Unexpected);
    }
}
