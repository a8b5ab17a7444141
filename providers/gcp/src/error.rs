//! Compute Engine error reasons mapped to gpufleet's error kinds, in one table.

use gpufleet_core::ErrorKind;

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
    if let Some((_, k)) = REASONS.iter().find(|(r, _)| *r == reason) {
        return *k;
    }
    match status {
        Some(401) => ErrorKind::Unauthenticated,
        Some(403) => ErrorKind::PermissionDenied,
        Some(404) => ErrorKind::NotFound,
        Some(409) => ErrorKind::AlreadyExists,
        Some(429) => ErrorKind::RateLimited,
        Some(500..=599) => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_reasons_then_status() {
        assert_eq!(
            error_kind_for_reason("ZONE_RESOURCE_POOL_EXHAUSTED", Some(400)),
            ErrorKind::InsufficientCapacity
        );
        assert_eq!(
            error_kind_for_reason("rateLimitExceeded", Some(403)),
            ErrorKind::RateLimited
        );
        assert_eq!(
            error_kind_for_reason("", Some(401)),
            ErrorKind::Unauthenticated
        );
        assert_eq!(
            error_kind_for_reason("somethingNew", Some(400)),
            ErrorKind::Unexpected
        );
    }
}
