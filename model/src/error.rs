//! The one public error type.

use std::fmt;
use std::time::Duration;

use crate::cloud::{Cloud, ParseCloudError};

/// A `Result` with gpufleet's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in terms a caller can act on. Each provider maps its cloud's
/// error codes to these in one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[derive(strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "kebab-case")]
pub enum ErrorKind {
    /// The instance, placement group or other resource does not exist.
    NotFound,
    /// A resource with that name already exists.
    AlreadyExists,
    /// The pool has no capacity now (EC2 `InsufficientInstanceCapacity`, GCE
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, Azure `AllocationFailed`). Try another pool.
    InsufficientCapacity,
    /// An account quota or limit is reached (EC2 `VcpuLimitExceeded`, GCE
    /// `QUOTA_EXCEEDED`).
    QuotaExceeded,
    /// The API throttled the caller (EC2 `RequestLimitExceeded`, HTTP 429).
    RateLimited,
    /// No valid credentials.
    Unauthenticated,
    /// Credentials are valid but not allowed to do this.
    PermissionDenied,
    /// The request is malformed; the message names the bad value.
    InvalidInput,
    /// The provider cannot do this (see [`crate::Capabilities`]).
    Unsupported,
    /// The call did not finish in time.
    Timeout,
    /// The service is unreachable or failing (HTTP 5xx, connection refused).
    Unavailable,
    /// Someone else changed it first: a lease held by another controller, or
    /// a write under a fencing token that is no longer current.
    Conflict,
    /// Anything else; the message keeps the cloud's own code.
    Unexpected,
}

impl ErrorKind {
    /// Whether an error of this kind is worth retrying with the same request.
    pub fn is_retryable_by_default(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited | ErrorKind::Timeout | ErrorKind::Unavailable
        )
    }

    /// The kind an HTTP status says by itself, for the statuses every
    /// cloud's API means the same way: 401, 403, 429 and 5xx; anything else is
    /// [`ErrorKind::Unexpected`]. A provider whose API's 404 or 409 is
    /// trustworthy maps those itself: from a misdirected endpoint a 404 must
    /// not read as "already gone".
    pub fn from_http_status(status: u16) -> ErrorKind {
        match status {
            401 => ErrorKind::Unauthenticated,
            403 => ErrorKind::PermissionDenied,
            429 => ErrorKind::RateLimited,
            500..=599 => ErrorKind::Unavailable,
            _ => ErrorKind::Unexpected,
        }
    }

    /// The kind a cloud API's error `code` has in its `codes` table, else
    /// what its HTTP `status` says: first by `statuses` (the ones this API
    /// means reliably, such as its 404), then by
    /// [`ErrorKind::from_http_status`]. With neither, [`ErrorKind::Unexpected`].
    pub fn classify(
        codes: &[(&str, ErrorKind)],
        code: &str,
        status: Option<u16>,
        statuses: &[(u16, ErrorKind)],
    ) -> ErrorKind {
        if let Some((_, k)) = codes.iter().find(|(c, _)| *c == code) {
            return *k;
        }
        let Some(status) = status else {
            return ErrorKind::Unexpected;
        };
        statuses
            .iter()
            .find(|(s, _)| *s == status)
            .map_or_else(|| ErrorKind::from_http_status(status), |(_, k)| *k)
    }

    /// A short name: `not-found`, `insufficient-capacity`, …
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// gpufleet's error: a kind to act on, whether a retry may help, which provider
/// and operation failed, context, and the underlying cause.
pub struct Error {
    kind: ErrorKind,
    message: String,
    retryable: bool,
    persistent: bool,
    provider: Option<Cloud>,
    operation: Option<&'static str>,
    context: Vec<(&'static str, String)>,
    retry_after: Option<Duration>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// An error of `kind`; retryable as the kind is by default.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            retryable: kind.is_retryable_by_default(),
            persistent: false,
            provider: None,
            operation: None,
            context: Vec::new(),
            retry_after: None,
            source: None,
        }
    }

    /// Bad input, with a message that names the bad value and what is valid.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// The provider does not support `operation`.
    pub fn unsupported(operation: &'static str) -> Self {
        Error::new(ErrorKind::Unsupported, "not supported by this provider")
            .with_operation(operation)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without provider, operation and context.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable && !self.persistent
    }

    /// Whether retries were made and gave up on this error.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// The provider that failed.
    pub fn provider(&self) -> Option<Cloud> {
        self.provider
    }

    /// The operation that failed (`launch`, `offers`, …).
    pub fn operation(&self) -> Option<&'static str> {
        self.operation
    }

    /// Key/value context (pool, region, request id, the cloud's error code).
    pub fn context(&self) -> &[(&'static str, String)] {
        &self.context
    }

    /// How long the service asked the caller to wait (`Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Overrides whether the error is retryable.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Marks the error as the last of a series of retries.
    pub fn set_persistent(mut self) -> Self {
        self.persistent = true;
        self
    }

    /// Names the provider.
    pub fn with_provider(mut self, cloud: Cloud) -> Self {
        self.provider.get_or_insert(cloud);
        self
    }

    /// Names the operation.
    pub fn with_operation(mut self, operation: &'static str) -> Self {
        self.operation.get_or_insert(operation);
        self
    }

    /// Adds context.
    pub fn with_context(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.context.push((key, value.into()));
        self
    }

    /// Records the service's `Retry-After`.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.provider {
            write!(f, "{p}: ")?;
        }
        if let Some(op) = self.operation {
            write!(f, "{op}: ")?;
        }
        write!(f, "{}", self.message)?;
        if !self.context.is_empty() {
            f.write_str(" (")?;
            for (i, (k, v)) in self.context.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}: {v}")?;
            }
            f.write_str(")")?;
        }
        if self.persistent {
            f.write_str(" [gave up after retries]")?;
        }
        if let Some(src) = &self.source {
            write!(f, ": {src}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind)
            .field("message", &self.message)
            .field("retryable", &self.retryable)
            .field("persistent", &self.persistent);
        if let Some(p) = self.provider {
            d.field("provider", &p);
        }
        if let Some(op) = self.operation {
            d.field("operation", &op);
        }
        if !self.context.is_empty() {
            d.field("context", &self.context);
        }
        if let Some(after) = self.retry_after {
            d.field("retry_after", &after);
        }
        if let Some(src) = &self.source {
            d.field("source", src);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

impl Clone for Error {
    /// Clones everything but the source, which is kept as its message.
    fn clone(&self) -> Self {
        Error {
            kind: self.kind,
            message: self.message.clone(),
            retryable: self.retryable,
            persistent: self.persistent,
            provider: self.provider,
            operation: self.operation,
            context: self.context.clone(),
            retry_after: self.retry_after,
            source: self
                .source
                .as_ref()
                .map(|s| Box::new(SourceMessage(s.to_string())) as _),
        }
    }
}

#[derive(Debug)]
struct SourceMessage(String);

impl fmt::Display for SourceMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceMessage {}

impl From<ParseCloudError> for Error {
    fn from(e: ParseCloudError) -> Self {
        Error::invalid_input(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the statuses every cloud means the same way map by themselves;
    /// 404 and 409 stay `Unexpected` unless a provider trusts its API's.
    #[test]
    fn http_statuses_that_mean_the_same_everywhere() {
        for (status, kind) in [
            (401, ErrorKind::Unauthenticated),
            (403, ErrorKind::PermissionDenied),
            (429, ErrorKind::RateLimited),
            (500, ErrorKind::Unavailable),
            (503, ErrorKind::Unavailable),
            (599, ErrorKind::Unavailable),
            (400, ErrorKind::Unexpected),
            (404, ErrorKind::Unexpected),
            (409, ErrorKind::Unexpected),
            (200, ErrorKind::Unexpected),
            (600, ErrorKind::Unexpected),
        ] {
            assert_eq!(ErrorKind::from_http_status(status), kind, "{status}");
        }
    }

    #[test]
    fn a_code_wins_then_the_trusted_statuses_then_the_common_ones() {
        let codes = [("QuotaExceeded", ErrorKind::QuotaExceeded)];
        let trusted = [(404, ErrorKind::NotFound)];
        let kind = |code, status| ErrorKind::classify(&codes, code, status, &trusted);
        assert_eq!(kind("QuotaExceeded", Some(404)), ErrorKind::QuotaExceeded);
        assert_eq!(kind("Other", Some(404)), ErrorKind::NotFound);
        assert_eq!(kind("Other", Some(503)), ErrorKind::Unavailable);
        assert_eq!(kind("Other", Some(409)), ErrorKind::Unexpected);
        assert_eq!(kind("Other", None), ErrorKind::Unexpected);
        // Without trusted statuses a 404 says nothing by itself.
        assert_eq!(
            ErrorKind::classify(&codes, "Other", Some(404), &[]),
            ErrorKind::Unexpected
        );
    }

    #[test]
    fn display_carries_provider_operation_and_context() {
        let e = Error::new(ErrorKind::InsufficientCapacity, "no capacity")
            .with_provider(Cloud::Aws)
            .with_operation("launch")
            .with_context("code", "InsufficientInstanceCapacity")
            .set_persistent();
        assert_eq!(
            e.to_string(),
            "aws: launch: no capacity (code: InsufficientInstanceCapacity) [gave up after retries]"
        );
        assert!(!e.is_retryable());
        assert!(Error::new(ErrorKind::RateLimited, "slow down").is_retryable());
        assert!(!Error::new(ErrorKind::NotFound, "gone").is_retryable());
    }
}
