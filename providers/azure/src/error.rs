//! Azure Resource Manager error codes mapped to gpufleet's error kinds, in one table.

use gpufleet_model::ErrorKind;

/// ARM `error.code` values and their kinds.
const CODES: &[(&str, ErrorKind)] = &[
    ("SkuNotAvailable", ErrorKind::InsufficientCapacity),
    ("AllocationFailed", ErrorKind::InsufficientCapacity),
    ("ZonalAllocationFailed", ErrorKind::InsufficientCapacity),
    (
        "OverconstrainedAllocationRequest",
        ErrorKind::InsufficientCapacity,
    ),
    (
        "OverconstrainedZonalAllocationRequest",
        ErrorKind::InsufficientCapacity,
    ),
    ("OperationNotAllowed", ErrorKind::QuotaExceeded),
    ("QuotaExceeded", ErrorKind::QuotaExceeded),
    ("TooManyRequests", ErrorKind::RateLimited),
    ("ResourceNotFound", ErrorKind::NotFound),
    ("NotFound", ErrorKind::NotFound),
    ("ResourceGroupNotFound", ErrorKind::NotFound),
    ("Conflict", ErrorKind::AlreadyExists),
    ("InvalidParameter", ErrorKind::InvalidInput),
    ("BadRequest", ErrorKind::InvalidInput),
    ("InvalidAuthenticationToken", ErrorKind::Unauthenticated),
    ("ExpiredAuthenticationToken", ErrorKind::Unauthenticated),
    ("AuthorizationFailed", ErrorKind::PermissionDenied),
    ("InternalServerError", ErrorKind::Unavailable),
    ("ServiceUnavailable", ErrorKind::Unavailable),
];

/// The gpufleet error kind for an ARM error code, falling back to the HTTP
/// status; anything else is [`ErrorKind::Unexpected`].
pub fn error_kind_for_code(code: &str, status: Option<u16>) -> ErrorKind {
    ErrorKind::classify(CODES, code, status, &[(404, ErrorKind::NotFound)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_codes_then_status() {
        assert_eq!(
            error_kind_for_code("ZonalAllocationFailed", Some(409)),
            ErrorKind::InsufficientCapacity
        );
        assert_eq!(
            error_kind_for_code("OperationNotAllowed", Some(409)),
            ErrorKind::QuotaExceeded
        );
        assert_eq!(error_kind_for_code("", Some(429)), ErrorKind::RateLimited);
        assert_eq!(
            error_kind_for_code("Whatever", Some(400)),
            ErrorKind::Unexpected
        );
    }
}
