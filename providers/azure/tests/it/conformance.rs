//! The conformance suite against the Azure stand-in (Resource Manager,
//! Retail Prices, Resource Graph and Scheduled Events on wiremock).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::azure as support;

use std::sync::Arc;

use async_trait::async_trait;
use gpufleet_core::conformance::{self, Harness};
use gpufleet_core::{Instance, Provider, Result};
use support::Arm;
use wiremock::MockServer;

struct ArmHarness {
    server: MockServer,
    arm: Arm,
}

#[async_trait]
impl Harness for ArmHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(support::provider(&self.server).await)
    }

    fn image(&self) -> String {
        "Canonical:ubuntu-24_04-lts:server:latest".into()
    }

    async fn trigger_preemption(&self, instance: &Instance) -> Option<Result<()>> {
        let (_, vm) = instance.id.as_str().split_once('/')?;
        self.arm.0.lock().unwrap().vm_name = vm.to_string();
        self.arm.0.lock().unwrap().events = serde_json::json!({
            "DocumentIncarnation": 1,
            "Events": [{
                "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                "EventStatus": "Scheduled",
                "EventType": "Preempt",
                "ResourceType": "VirtualMachine",
                "Resources": [vm],
                "NotBefore": "Sun, 22 Nov 2026 10:00:30 GMT",
                "Description": "",
                "EventSource": "Platform",
                "DurationInSeconds": -1
            }]
        });
        Some(Ok(()))
    }
}

macro_rules! arm_check {
    ($($name:ident => $check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let (server, arm) = Arm::start().await;
            // The suite opens the notice stream before it names the VM: IMDS
            // answers as the VM launched last, as it would on that VM.
            arm.0.lock().unwrap().imds_is_newest_vm = true;
            let h = ArmHarness { server, arm };
            let outcome = conformance::$check(&h).await;
            conformance::report(stringify!($name), outcome);
        }
    )*};
}

gpufleet_core::conformance_checks!([arm_check]);
