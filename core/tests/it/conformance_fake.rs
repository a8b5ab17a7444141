//! The conformance suite against the fake cloud, bare and behind every layer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gpufleet_core::conformance::Harness;
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::layers::{CapabilityLayer, LayerExt, RetryLayer, TimeoutLayer, TracingLayer};
use gpufleet_core::{Cloud, Instance, NoticeKind, Provider, Result};

/// Keeps the concrete fake next to the provider handed to the suite, so it can
/// inject notices.
struct FakeHarness {
    cloud: Arc<FakeCloud>,
    layered: bool,
}

impl FakeHarness {
    fn new(cloud: Cloud, layered: bool) -> Self {
        FakeHarness {
            cloud: Arc::new(FakeCloud::from_snapshot(cloud)),
            layered,
        }
    }

    /// A fake that declares (and behaves as) a cloud with cluster groups
    /// only and no spot capacity, behind the standard layers.
    fn limited() -> Self {
        let fake = FakeCloud::from_snapshot(Cloud::Azure);
        let caps = fake
            .capabilities()
            .without_spread()
            .without_partition()
            .without_spot();
        FakeHarness {
            cloud: Arc::new(fake.with_capabilities(caps)),
            layered: true,
        }
    }
}

#[async_trait]
impl Harness for FakeHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        let p: Arc<dyn Provider> = self.cloud.clone();
        if self.layered {
            p.layer(CapabilityLayer)
                .layer(TimeoutLayer::new(Duration::from_secs(5)))
                .layer(RetryLayer::default().with_min_delay(Duration::from_millis(1)))
                .layer(TracingLayer)
        } else {
            p
        }
    }

    async fn trigger_preemption(&self, instance: &Instance) -> Option<Result<()>> {
        Some(
            self.cloud
                .inject_interruption(
                    &instance.id,
                    NoticeKind::Preemption,
                    Duration::from_secs(120),
                )
                .map(|_| ()),
        )
    }
}

mod aws {
    gpufleet_core::conformance_suite!(super::FakeHarness::new(gpufleet_core::Cloud::Aws, false));
}

mod gcp {
    gpufleet_core::conformance_suite!(super::FakeHarness::new(gpufleet_core::Cloud::Gcp, false));
}

mod azure {
    gpufleet_core::conformance_suite!(super::FakeHarness::new(gpufleet_core::Cloud::Azure, false));
}

mod layered {
    gpufleet_core::conformance_suite!(super::FakeHarness::new(gpufleet_core::Cloud::Aws, true));
}

mod limited {
    gpufleet_core::conformance_suite!(super::FakeHarness::limited());
}
