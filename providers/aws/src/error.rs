//! EC2 error codes mapped to gpufleet's error kinds, in one table.

use gpufleet_core::ErrorKind;

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
];

/// The gpufleet error kind for an EC2 error code; unknown codes are
/// [`ErrorKind::Unexpected`] (callers keep the code in the error's context).
pub fn error_kind_for_code(code: &str) -> ErrorKind {
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(ErrorKind::Unexpected, |(_, k)| *k)
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
