//! The conformance suite against moto_server (a real EC2 API emulator), with
//! an IMDSv2 stand-in for notices. moto answers placement-group calls with
//! HTTP 500, so that check (and, as a second opinion, the whole suite) also
//! runs against the stateful EC2 stand-in on wiremock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::aws as support;

use std::sync::Arc;

use async_trait::async_trait;
use gpufleet_core::conformance::{self, Harness, Outcome};
use gpufleet_core::{Instance, Provider, Result};
use support::{ec2_mock::Ec2Mock, imds, Moto};
use wiremock::MockServer;

/// An EC2 endpoint (moto, or the stand-in on wiremock) with an IMDSv2
/// stand-in for notices.
struct Ec2Harness {
    endpoint: String,
    /// The image to launch: moto only runs the AMIs it ships.
    image: &'static str,
    imds: MockServer,
    /// What serves `endpoint`, kept alive with the harness.
    _ec2: Box<dyn std::any::Any + Send + Sync>,
}

impl Ec2Harness {
    /// On moto, when it can be started.
    async fn moto() -> Option<Ec2Harness> {
        let moto = Moto::start()?;
        Some(Ec2Harness::on(moto.url.clone(), "ami-12c6146b", Box::new(moto)).await)
    }

    /// On the stateful EC2 stand-in.
    async fn stand_in() -> Ec2Harness {
        let (ec2, state) = Ec2Mock::start().await;
        let image = "ami-0123456789abcdef0";
        Ec2Harness::on(ec2.uri(), image, Box::new((ec2, state))).await
    }

    async fn on(
        endpoint: String,
        image: &'static str,
        ec2: Box<dyn std::any::Any + Send + Sync>,
    ) -> Ec2Harness {
        let imds = MockServer::start().await;
        Ec2Harness {
            endpoint,
            image,
            imds,
            _ec2: ec2,
        }
    }
}

#[async_trait]
impl Harness for Ec2Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(support::provider(&self.endpoint, Some(&self.imds.uri()), "us-east-1").await)
    }

    fn image(&self) -> String {
        self.image.into()
    }

    async fn trigger_preemption(&self, instance: &Instance) -> Option<Result<()>> {
        let (region, raw) = instance.id.as_str().split_once('/')?;
        imds::serve(&self.imds, raw, region).await;
        imds::preempt(&self.imds, "2026-11-22T10:00:00Z").await;
        Some(Ok(()))
    }
}

macro_rules! moto_check {
    ($($name:ident => $check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(h) = Ec2Harness::moto().await else { return };
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

/// Placement groups are not in moto: this is the check that covers them.
#[tokio::test]
async fn stand_in_placement_groups_pass() {
    let h = Ec2Harness::stand_in().await;
    assert_eq!(
        conformance::check_placement_groups(&h).await,
        Outcome::Passed
    );
}

mod stand_in {
    use super::*;
    gpufleet_core::conformance_suite!(Ec2Harness::stand_in().await);
}

/// moto answers RunInstances and DescribeInstances with the addresses EC2
/// gives (`privateIpAddress` from the subnet, `ipAddress` where the subnet
/// maps public addresses): both reach the instance, at launch and after.
#[tokio::test]
async fn moto_instances_carry_their_addresses() {
    let Some(h) = Ec2Harness::moto().await else {
        return;
    };
    let p = h.provider().await;
    let offer = p
        .offers(&gpufleet_core::catalog::OfferQuery::default())
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.pool.capacity == gpufleet_core::Capacity::OnDemand)
        .unwrap();
    let req = gpufleet_core::LaunchRequest::new(
        offer.pool.clone(),
        h.image,
        gpufleet_core::IdempotencyKey::new("svc-addr-1").unwrap(),
    );
    let launched = p.launch(&req).await.unwrap();
    let private = launched[0]
        .addresses
        .private
        .expect("a private address at launch");
    assert!(private.is_ipv4() && !private.is_loopback(), "{private}");
    let listed = p
        .list_instances(&gpufleet_core::TagFilter::default())
        .await
        .unwrap();
    let again = listed.iter().find(|i| i.id == launched[0].id).unwrap();
    assert_eq!(again.addresses.private, Some(private));
    assert_eq!(
        p.instance(&launched[0].id).await.unwrap().addresses.private,
        Some(private)
    );
    p.terminate(&launched[0].id).await.unwrap();
}
