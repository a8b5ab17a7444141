//! The conformance suite against moto_server (a real EC2 API emulator), with
//! an IMDSv2 stand-in for notices. moto answers placement-group calls with
//! HTTP 500, so that check (and, as a second opinion, the whole suite) also
//! runs against the stateful EC2 stand-in on wiremock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use gpufleet_core::conformance::{self, Harness, Outcome};
use gpufleet_core::{Instance, Provider, Result};
use support::{ec2_mock::Ec2Mock, imds, Moto};
use wiremock::MockServer;

/// moto for EC2, wiremock for IMDS.
struct MotoHarness {
    moto: Moto,
    imds: MockServer,
}

impl MotoHarness {
    async fn new() -> Option<MotoHarness> {
        let moto = Moto::start()?;
        let imds = MockServer::start().await;
        Some(MotoHarness { moto, imds })
    }
}

#[async_trait]
impl Harness for MotoHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(support::provider(&self.moto.url, Some(&self.imds.uri()), "us-east-1").await)
    }

    fn image(&self) -> String {
        // One of the AMIs moto ships.
        "ami-12c6146b".into()
    }

    async fn trigger_preemption(
        &self,
        _provider: &Arc<dyn Provider>,
        instance: &Instance,
    ) -> Option<Result<()>> {
        preempt_through(&self.imds, instance).await
    }
}

/// Serves `instance`'s identity on the IMDS stand-in and schedules its
/// spot interruption: what both harnesses do to preempt.
async fn preempt_through(imds: &MockServer, instance: &Instance) -> Option<Result<()>> {
    let (region, raw) = instance.id.as_str().split_once('/')?;
    imds::serve(imds, raw, region).await;
    imds::preempt(imds, "2026-11-22T10:00:00Z").await;
    Some(Ok(()))
}

macro_rules! moto_check {
    ($($name:ident => $check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(h) = MotoHarness::new().await else { return };
            let outcome = conformance::$check(&h).await;
            assert_eq!(outcome, Outcome::Passed, "{} did not run on moto", stringify!($name));
        }
    )*};
}

moto_check! {
    moto_catalog => check_catalog,
    moto_spot_prices => check_spot_prices,
    moto_launch_lifecycle => check_launch_lifecycle,
    moto_idempotent_launch => check_idempotent_launch,
    moto_not_found => check_not_found,
    moto_interruption_stream => check_interruption_stream,
}

/// The EC2 stand-in on wiremock, with an IMDS stand-in.
struct MockHarness {
    ec2: MockServer,
    _state: Ec2Mock,
    imds: MockServer,
}

impl MockHarness {
    async fn new() -> MockHarness {
        let (ec2, state) = Ec2Mock::start().await;
        MockHarness {
            ec2,
            _state: state,
            imds: MockServer::start().await,
        }
    }
}

#[async_trait]
impl Harness for MockHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(support::provider(&self.ec2.uri(), Some(&self.imds.uri()), "us-east-1").await)
    }

    async fn trigger_preemption(
        &self,
        _provider: &Arc<dyn Provider>,
        instance: &Instance,
    ) -> Option<Result<()>> {
        preempt_through(&self.imds, instance).await
    }
}

/// Placement groups are not in moto: this is the check that covers them.
#[tokio::test]
async fn stand_in_placement_groups_pass() {
    let h = MockHarness::new().await;
    assert_eq!(
        conformance::check_placement_groups(&h).await,
        Outcome::Passed
    );
}

mod stand_in {
    use super::*;
    gpufleet_core::conformance_suite!(MockHarness::new().await);
}
