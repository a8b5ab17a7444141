//! Test support: a `moto_server` per test (a real EC2 API emulator from PyPI)
//! and providers pointed at stand-ins.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpufleet_aws::{AwsBuilder, AwsProvider};

pub mod ec2_mock;
pub mod imds;

/// A running `moto_server` on 127.0.0.1, killed on drop.
pub struct Moto {
    child: Child,
    pub url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[path = "moto_bin.rs"]
mod moto_bin;
use moto_bin::moto_binary;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Moto {
    /// Starts a fresh moto, or `None` (with a loud message) when it is not
    /// installed and `GPUFLEET_REQUIRE_MOTO` is unset. CI sets it: there a
    /// missing moto fails the run.
    pub fn start() -> Option<Moto> {
        let bin = match moto_binary() {
            Ok(b) => b,
            Err(why) => {
                assert!(
                    std::env::var_os("GPUFLEET_REQUIRE_MOTO").is_none(),
                    "GPUFLEET_REQUIRE_MOTO is set but moto_server is not available: {why}"
                );
                eprintln!("\n*** SKIPPED: {why} ***\n");
                return None;
            }
        };
        let port = free_port();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not start in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    }
}

/// A provider for `regions` against `endpoint`, with static test credentials,
/// the snapshot's on-demand prices and fast polling.
pub async fn provider(endpoint: &str, imds: Option<&str>, regions: &str) -> AwsProvider {
    let mut b = AwsBuilder::new()
        .with_regions(regions)
        .with_endpoint_url(endpoint)
        .with_live_prices(false)
        .with_static_credentials("AKIAGPUFLEETTEST0001", "gpufleet/test/secret/key/0001")
        .with_notice_poll(Duration::from_millis(100));
    if let Some(url) = imds {
        b = b.with_metadata_endpoint(url);
    }
    AwsProvider::new(b.build().unwrap()).await.unwrap()
}
