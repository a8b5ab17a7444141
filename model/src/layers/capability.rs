//! Refuses a call the provider declares unsupported, before it is sent.

use futures::FutureExt;

use super::{Call, Interceptor, Next, Reply};
use crate::error::{Error, ErrorKind};

/// Checks each call against the provider's declared
/// [`Capabilities`](crate::Capabilities): an operation whose capability is
/// not declared (a spread group on Azure, a partition group on GCP, a spot
/// launch on a provider without spot) ends in [`ErrorKind::Unsupported`]
/// naming the provider, the operation and the capability, and the call is
/// never made. Innermost in the standard stack, so neither a retry nor a
/// timeout is spent on it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CapabilityLayer;

impl Interceptor for CapabilityLayer {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        if call.capabilities.has(call.requires) {
            return next();
        }
        let refused = Error::new(
            ErrorKind::Unsupported,
            format!(
                "{} does not support {} (capability `{}` is not declared)",
                call.provider, call.operation, call.requires
            ),
        )
        .with_operation(call.operation.as_str());
        async move { Err(refused) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::Capability;

    /// Operations are named by their trait method in settings and logs, and
    /// parse back; an unknown name is refused naming the valid ones.
    #[test]
    fn operations_round_trip_by_name() {
        for op in crate::provider::Operation::ALL {
            assert_eq!(crate::provider::Operation::parse(op.as_str()).unwrap(), op);
        }
        assert_eq!(
            crate::provider::Operation::Launch.capability(),
            Capability::Compute
        );
        let e = crate::provider::Operation::parse("no_such_call").unwrap_err();
        assert!(
            e.message().contains("no_such_call") && e.message().contains("list_instances"),
            "{e}"
        );
    }
}
