//! Compute Engine error reasons mapped to gpufleet's error kinds, in one table.

use google_cloud_gax::error::rpc::StatusDetails;
use gpufleet_model::{Cloud, Error, ErrorKind};

/// `error.errors[].reason` values (and operation error codes) and their kinds.
const REASONS: &[(&str, ErrorKind)] = &[
    (
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        ErrorKind::InsufficientCapacity,
    ),
    (
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        ErrorKind::InsufficientCapacity,
    ),
    ("resourcePoolExhausted", ErrorKind::InsufficientCapacity),
    ("QUOTA_EXCEEDED", ErrorKind::QuotaExceeded),
    ("quotaExceeded", ErrorKind::QuotaExceeded),
    ("rateLimitExceeded", ErrorKind::RateLimited),
    ("userRateLimitExceeded", ErrorKind::RateLimited),
    ("notFound", ErrorKind::NotFound),
    ("alreadyExists", ErrorKind::AlreadyExists),
    // 412: a fingerprint (labels, metadata) that changed since it was read.
    ("conditionNotMet", ErrorKind::Conflict),
    ("invalid", ErrorKind::InvalidInput),
    ("badRequest", ErrorKind::InvalidInput),
    ("required", ErrorKind::InvalidInput),
    ("authError", ErrorKind::Unauthenticated),
    ("forbidden", ErrorKind::PermissionDenied),
    ("insufficientPermissions", ErrorKind::PermissionDenied),
    ("backendError", ErrorKind::Unavailable),
    ("internalError", ErrorKind::Unavailable),
];

/// The gpufleet error kind for a Compute Engine error reason, falling back to
/// the HTTP status; anything else is [`ErrorKind::Unexpected`].
pub fn error_kind_for_reason(reason: &str, status: Option<u16>) -> ErrorKind {
    let trusted = [
        (404, ErrorKind::NotFound),
        (409, ErrorKind::AlreadyExists),
        (412, ErrorKind::Conflict),
    ];
    ErrorKind::classify(REASONS, reason, status, &trusted)
}

/// Converts a Google Cloud client error: the reasons of the Compute Engine
/// error body (`error.errors[].reason`, which the client keeps as `ErrorInfo`
/// details) decide the kind, then the HTTP status; `Retry-After` is kept.
pub(crate) fn from_gax(operation: &'static str, err: google_cloud_gax::error::Error) -> Error {
    let status = err.http_status_code();
    let error = if let Some(s) = err.status() {
        let reasons: Vec<&str> = s
            .details
            .iter()
            .filter_map(|d| match d {
                StatusDetails::ErrorInfo(i) if !i.reason.is_empty() => Some(i.reason.as_str()),
                _ => None,
            })
            .collect();
        let kind = reasons
            .iter()
            .map(|r| error_kind_for_reason(r, None))
            .find(|k| *k != ErrorKind::Unexpected)
            .unwrap_or_else(|| error_kind_for_reason("", status));
        let shown = reasons.first().map_or_else(
            || format!("HTTP {}", status.unwrap_or(0)),
            |r| r.to_string(),
        );
        let mut e = Error::new(kind, format!("{shown}: {}", s.message));
        if let Some(r) = reasons.first() {
            e = e.with_context("reason", r.to_string());
        }
        e
    } else if err.is_timeout() {
        Error::new(ErrorKind::Timeout, "the request timed out")
    } else if err.is_authentication() {
        Error::new(
            ErrorKind::Unauthenticated,
            "no usable Google credentials (Application Default Credentials)",
        )
    } else if err.is_deserialization() {
        Error::new(
            ErrorKind::Unavailable,
            "unreadable response: truncated or malformed body",
        )
    } else if let Some(code) = status {
        // An error body that is not Google's JSON (a proxy's page, say).
        Error::new(
            error_kind_for_reason("", Some(code)),
            format!("HTTP {code} without a Google error body"),
        )
    } else if err.is_io() || err.is_connect() || err.is_transport() {
        Error::new(ErrorKind::Unavailable, "could not reach the endpoint")
    } else if err.is_binding() || err.is_serialization() {
        Error::new(ErrorKind::InvalidInput, "the request could not be built")
    } else {
        Error::new(ErrorKind::Unexpected, "unknown client error")
    };
    let error = match err
        .http_headers()
        .and_then(|h| h.get("retry-after"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        Some(secs) => error.with_retry_after(std::time::Duration::from_secs(secs.min(3600))),
        None => error,
    };
    error
        .with_provider(Cloud::Gcp)
        .with_operation(operation)
        .with_source(err)
}

/// An operation that finished with errors (`Operation.error.errors[].code`).
pub(crate) fn from_operation(
    operation: &'static str,
    codes: &[(String, String)],
    http_status: Option<i32>,
) -> Error {
    let status = http_status.and_then(|s| u16::try_from(s).ok());
    let kind = codes
        .iter()
        .map(|(c, _)| error_kind_for_reason(c, None))
        .find(|k| *k != ErrorKind::Unexpected)
        .unwrap_or_else(|| error_kind_for_reason("", status));
    let text = codes
        .iter()
        .map(|(c, m)| format!("{c}: {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    let mut e = Error::new(kind, text)
        .with_provider(Cloud::Gcp)
        .with_operation(operation);
    if let Some((c, _)) = codes.first() {
        e = e.with_context("reason", c.clone());
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_reasons_then_status() {
        for (reason, status, kind) in [
            (
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                400,
                ErrorKind::InsufficientCapacity,
            ),
            ("rateLimitExceeded", 403, ErrorKind::RateLimited),
            ("", 401, ErrorKind::Unauthenticated),
            ("somethingNew", 400, ErrorKind::Unexpected),
        ] {
            assert_eq!(
                error_kind_for_reason(reason, Some(status)),
                kind,
                "{reason} {status}"
            );
        }
    }
}
