//! One test suite for every provider (feature `conformance`).
//!
//! Each `check_*` function exercises one capability through `dyn Provider` and
//! panics with a clear message when the provider breaks the contract; it
//! returns [`Outcome::Skipped`] when [`Capabilities`] rule the check out. The
//! [`conformance_suite!`](crate::conformance_suite) macro expands them into one
//! `#[tokio::test]` each for a [`Harness`]:
//!
//! ```ignore
//! struct MyHarness;
//! #[async_trait::async_trait]
//! impl gpufleet_core::conformance::Harness for MyHarness { /* … */ }
//! gpufleet_core::conformance_suite!(MyHarness);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use crate::catalog::{sort_offers, OfferQuery, OfferSort};
use crate::layers::{CallCounter, CapabilityLayer, LayerExt};
use crate::{Capabilities, Capability, Provider};
use crate::{
    Capacity, IdempotencyKey, Instance, InstanceId, InstanceState, LaunchRequest, NoticeKind,
    Offer, PlacementGroupId, PlacementGroupRequest, PlacementStrategy, TagFilter, Tags,
};
use crate::{ErrorKind, Result};

/// What a provider's test setup gives the suite.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A provider in a fresh state (each check calls this once).
    async fn provider(&self) -> Arc<dyn Provider>;

    /// An image to launch.
    fn image(&self) -> String {
        "gpufleet-conformance-image".into()
    }

    /// Makes the provider deliver a preemption notice for `instance` (through
    /// its metadata-service mock, say). `None` when this harness cannot, which
    /// skips the interruption check.
    async fn trigger_preemption(&self, _instance: &Instance) -> Option<Result<()>> {
        None
    }
}

/// How a check ended (a failed check panics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Everything held.
    Passed,
    /// Not applicable to this provider, and why.
    Skipped(String),
}

/// Prints a skipped check so it shows in test output.
pub fn report(name: &str, outcome: Outcome) {
    if let Outcome::Skipped(why) = outcome {
        eprintln!("conformance check {name} skipped: {why}");
    }
}

/// A log sink for secret-leak tests: a cloneable [`std::io::Write`] that keeps
/// everything written to it, a TRACE subscriber that writes to it, and a check
/// that none of the secrets appear.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// Captures every event at TRACE, plus `directives` (such as a provider's
    /// redacting caps), on this thread until the guard is dropped.
    ///
    /// # Panics
    /// When a directive does not parse.
    pub fn install(&self, directives: &[&str]) -> tracing::subscriber::DefaultGuard {
        let mut filter = tracing_subscriber::EnvFilter::new("trace");
        for d in directives {
            filter = filter.add_directive(
                d.parse()
                    .unwrap_or_else(|e| panic!("log directive '{d}': {e}")),
            );
        }
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Panics, naming the secret (not printing it), when any of `secrets`
    /// appears in the captured output; also when less than `min_bytes` were
    /// captured, since a check of nothing proves nothing.
    pub fn assert_free_of(&self, secrets: &[(&str, &str)], min_bytes: usize) {
        let text = self.text();
        assert!(
            text.len() >= min_bytes,
            "the logs captured only {} bytes (expected at least {min_bytes}): is the subscriber installed?",
            text.len()
        );
        for (what, secret) in secrets {
            assert!(!text.contains(secret), "the logs hold the {what}");
        }
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as u64 % 1_000_000_000;
    format!("{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn skip_unless(cond: bool, why: &str) -> Option<Outcome> {
    (!cond).then(|| Outcome::Skipped(why.to_string()))
}

macro_rules! expect_kind {
    ($result:expr, $kind:expr, $what:expr) => {
        match $result {
            Ok(_) => panic!("{}: expected {:?}, got success", $what, $kind),
            Err(e) => assert_eq!(e.kind(), $kind, "{}: expected {:?}, got {e}", $what, $kind),
        }
    };
}

// The checks, after `expect_kind!` so that they can use it.
mod capabilities;
mod catalog;
mod compute;
mod interruption;
mod placement;
pub use self::{capabilities::*, catalog::*, compute::*, interruption::*, placement::*};

/// The suite's checks, listed once: invokes the macro in brackets with any
/// tokens after it, then `test_name => check_function,` for every check. A
/// harness that needs its own test body (a stand-in server started per test)
/// defines that macro and passes it here, instead of copying the list:
///
/// ```ignore
/// macro_rules! my_check {
///     ($($name:ident => $check:ident,)*) => {$(
///         #[tokio::test]
///         async fn $name() { /* start the stand-in, run conformance::$check */ }
///     )*};
/// }
/// gpufleet_core::conformance_checks!([my_check]);
/// ```
#[macro_export]
macro_rules! conformance_checks {
    ([$($callback:tt)+] $($arg:tt)*) => {
        $($callback)+! { $($arg)*
            conformance_catalog => check_catalog,
            conformance_spot_prices => check_spot_prices,
            conformance_placement_groups => check_placement_groups,
            conformance_launch_lifecycle => check_launch_lifecycle,
            conformance_idempotent_launch => check_idempotent_launch,
            conformance_not_found => check_not_found,
            conformance_interruption_stream => check_interruption_stream,
            conformance_declared_capabilities => check_declared_capabilities,
        }
    };
}

/// Expands the suite into one `#[tokio::test]` per check for a [`Harness`]
/// expression (evaluated anew for each test).
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_checks!([$crate::conformance_suite] @each $harness;);
    };
    (@each $harness:expr; $($name:ident => $check:ident,)*) => {$(
        #[tokio::test]
        async fn $name() {
            let harness = $harness;
            let outcome = $crate::conformance::$check(&harness).await;
            $crate::conformance::report(stringify!($name), outcome);
        }
    )*};
}
