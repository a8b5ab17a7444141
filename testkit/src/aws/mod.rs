//! Test support: a `moto_server` per test (a real EC2 API emulator from PyPI)
//! and providers pointed at stand-ins.

use std::time::Duration;

use gpufleet_aws::{AwsBuilder, AwsProvider};

pub mod ec2_mock;
pub mod imds;

pub mod moto;
pub use moto::Moto;

pub use crate::common::*;

/// The static test credentials the stand-ins are called with.
const ACCESS_KEY: &str = "AKIAGPUFLEETTEST0001";
const SECRET_KEY: &str = "gpufleet/test/secret/key/0001";

/// A provider for `regions` against `endpoint`, with static test credentials,
/// the snapshot's on-demand prices and fast polling.
pub async fn provider(endpoint: &str, imds: Option<&str>, regions: &str) -> AwsProvider {
    let mut b = AwsBuilder::new()
        .with_regions(regions)
        .with_endpoint_url(endpoint)
        .with_sqs_endpoint_url(endpoint)
        .with_live_prices(false)
        .with_static_credentials(ACCESS_KEY, SECRET_KEY)
        .with_notice_poll(Duration::from_millis(100));
    if let Some(url) = imds {
        b = b.with_metadata_endpoint(url);
    }
    AwsProvider::new(b.build().unwrap()).await.unwrap()
}

/// An EC2 client for the stand-in at `endpoint` in `region`, with the
/// test credentials under the provider name `who`.
fn ec2(endpoint: &str, region: &str, who: &'static str) -> aws_sdk_ec2::Client {
    use aws_sdk_ec2::config::{Credentials, Region};
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version_latest()
        .endpoint_url(endpoint)
        .region(Region::new(region.to_string()))
        .credentials_provider(Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, who))
        .build();
    aws_sdk_ec2::Client::from_conf(config)
}

/// Tags an instance as its node's boot script does (`aws ec2 create-tags`
/// with the node's own identity): what the node reports reaches gpufleet
/// this way only. `id` is gpufleet's (`region/i-…`).
pub async fn node_tags(endpoint: &str, id: &gpufleet_core::InstanceId, tags: &[(&str, &str)]) {
    use aws_sdk_ec2::types::Tag;
    let (region, native) = id.as_str().split_once('/').unwrap();
    let tags: Vec<Tag> = tags
        .iter()
        .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
        .collect();
    ec2(endpoint, region, "node")
        .create_tags()
        .resources(native)
        .set_tags(Some(tags))
        .send()
        .await
        .unwrap();
}

/// A VPC and subnet in moto at `endpoint` whose addresses are on the
/// loopback network (`127.0.0.0/16`, the subnet `127.0.10.0/24` in
/// us-east-1a): an instance launched into it gets a private address such as
/// `127.0.10.4`, where a test can stand in for the server the instance would
/// run. Returns the subnet's id and its zone's id (`use1-az…`), as gpufleet
/// names zones.
pub async fn loopback_subnet(endpoint: &str) -> (String, String) {
    let ec2 = ec2(endpoint, "us-east-1", "operator");
    let vpc = ec2
        .create_vpc()
        .cidr_block("127.0.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
    let subnet = ec2
        .create_subnet()
        .vpc_id(vpc)
        .cidr_block("127.0.10.0/24")
        .availability_zone("us-east-1a")
        .send()
        .await
        .unwrap();
    let subnet = subnet.subnet().unwrap();
    (
        subnet.subnet_id().unwrap().to_string(),
        subnet.availability_zone_id().unwrap().to_string(),
    )
}

/// The SQS client type [`sqs`] returns, for tests' helpers to name.
pub use aws_sdk_sqs::Client as SqsClient;

/// An SQS client for the stand-in at `endpoint` (moto), as an operator's
/// tools would use it: to make the interruption queue and, in place of
/// EventBridge, to put EC2's events on it.
pub fn sqs(endpoint: &str) -> aws_sdk_sqs::Client {
    use aws_sdk_sqs::config::{Credentials, Region};
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version_latest()
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            ACCESS_KEY, SECRET_KEY, None, None, "operator",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// An EventBridge event about `instance` (EC2's own id, `i-…`) of
/// `detail_type`, with `detail` (its fields besides `instance-id`), shaped as
/// AWS documents the three events the interruption queue takes.
pub fn ec2_event(
    detail_type: &str,
    region: &str,
    instance: &str,
    detail: &[(&str, &str)],
) -> String {
    let mut d = serde_json::Map::new();
    d.insert("instance-id".into(), instance.into());
    for (k, v) in detail {
        d.insert((*k).into(), (*v).into());
    }
    let now = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    serde_json::json!({
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": "123456789012",
        "time": now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        "region": region,
        "resources": [format!("arn:aws:ec2:{region}:123456789012:instance/{instance}")],
        "detail": d,
    })
    .to_string()
}
