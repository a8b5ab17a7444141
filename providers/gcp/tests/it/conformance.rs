//! The conformance suite against the Compute Engine + Cloud Billing
//! stand-in, with a metadata-server stand-in for preemption notices.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::gcp as support;

use std::sync::Arc;

use async_trait::async_trait;
use gpufleet_core::conformance::{self, Harness};
use gpufleet_core::{Instance, Provider, Result};
use support::Gce;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

struct GceHarness {
    server: MockServer,
    metadata: MockServer,
    _gce: Gce,
}

impl GceHarness {
    async fn new() -> GceHarness {
        let (server, gce) = Gce::start().await;
        GceHarness {
            server,
            metadata: MockServer::start().await,
            _gce: gce,
        }
    }
}

fn metadata_value(value: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("Metadata-Flavor", "Google")
        .insert_header("Content-Type", "application/text")
        .set_body_string(value)
}

#[async_trait]
impl Harness for GceHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(support::provider(&self.server, Some(&self.metadata)).await)
    }

    fn image(&self) -> String {
        "projects/debian-cloud/global/images/family/debian-12".into()
    }

    async fn trigger_preemption(&self, instance: &Instance) -> Option<Result<()>> {
        let (zone, name) = instance.id.as_str().split_once('/')?;
        // The instance's metadata server says it was preempted.
        let zone = format!("projects/123456789/zones/{zone}");
        for (key, value) in [
            ("zone", zone.as_str()),
            ("name", name),
            ("maintenance-event", "NONE"),
            ("preempted", "TRUE"),
        ] {
            Mock::given(method("GET"))
                .and(path(format!("/computeMetadata/v1/instance/{key}")))
                .and(header("Metadata-Flavor", "Google"))
                .respond_with(metadata_value(value))
                .mount(&self.metadata)
                .await;
        }
        Some(Ok(()))
    }
}

macro_rules! gce_check {
    ($($name:ident => $check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let h = GceHarness::new().await;
            let outcome = conformance::$check(&h).await;
            conformance::report(stringify!($name), outcome);
        }
    )*};
}

gpufleet_core::conformance_checks!([gce_check]);
