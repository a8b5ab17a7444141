//! Interruption notices from an IMDSv2 stand-in: tokens on every request and
//! refreshed before they expire, a notice delivered exactly once, flaps and
//! slow answers survived, rebalance recommendations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit::aws as support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use gpufleet_aws::{AwsBuilder, AwsProvider};
use gpufleet_core::{InterruptionSource, NoticeKind};
use support::imds;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn provider(imds: &MockServer, token_ttl: Duration) -> AwsProvider {
    let c = AwsBuilder::new()
        .with_regions("us-east-1")
        .with_endpoint_url("http://127.0.0.1:9")
        .with_metadata_endpoint(imds.uri())
        .with_static_credentials("AKIAGPUFLEETTEST0001", "gpufleet/test/secret/key/0001")
        .with_notice_poll(Duration::from_millis(100))
        .with_imds_token_ttl(token_ttl)
        .build()
        .unwrap();
    AwsProvider::new(c).await.unwrap()
}

#[tokio::test]
async fn a_preemption_notice_arrives_once_with_its_deadline() {
    let (server, _) = imds::start("i-0abc1234def567890", "us-east-1").await;
    let p = provider(&server, Duration::from_secs(21_600)).await;
    let mut notices = p.interruptions().await.unwrap();
    // Nothing while instance-action is 404.
    support::no_notice(&mut notices, 500, "a notice").await;
    imds::preempt(&server, "2026-11-22T08:22:00Z").await;
    let n = support::next_notice(&mut notices, 5).await;
    assert_eq!(n.kind, NoticeKind::Preemption);
    assert_eq!(
        n.deadline,
        Some(OffsetDateTime::parse("2026-11-22T08:22:00Z", &Rfc3339).unwrap())
    );
    assert_eq!(
        n.instance.as_ref().unwrap().as_str(),
        "us-east-1/i-0abc1234def567890"
    );
    assert_eq!(n.source, "aws-imds:spot/instance-action");
    // Polled ten more times: no second notice.
    support::no_notice(&mut notices, 1000, "a notice").await;
    // Every metadata read carried the session token (IMDSv2 only).
    for r in server.received_requests().await.unwrap() {
        if r.method.as_str() == "GET" {
            assert!(
                r.headers.get("x-aws-ec2-metadata-token").is_some(),
                "{} without a token",
                r.url
            );
        }
    }
}

#[tokio::test]
async fn the_token_is_refreshed_before_it_expires() {
    let (server, issued) = imds::start("i-0abc1234def567890", "us-east-1").await;
    // The SDK refreshes a token 120 s before it expires: a 121 s token is
    // good for one second, so over 3.5 s of polling (35 polls of 3 reads) a
    // session lasts about a second.
    let p = provider(&server, Duration::from_secs(121)).await;
    let mut notices = p.interruptions().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_millis(3500), notices.next()).await;
    let n = issued.load(Ordering::SeqCst);
    assert!(n >= 3, "{n} tokens in 3.5 s: not refreshed");
    assert!(n <= 8, "{n} tokens: one per request is not a session");
    let puts: Vec<_> = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "PUT")
        .collect();
    for r in &puts {
        assert_eq!(
            r.headers
                .get("x-aws-ec2-metadata-token-ttl-seconds")
                .unwrap()
                .to_str()
                .unwrap(),
            "121"
        );
    }
}

#[tokio::test]
async fn a_flapping_endpoint_is_survived() {
    let (server, _) = imds::start("i-0abc1234def567890", "us-east-1").await;
    // Five failures (500s and a slow answer), then the notice.
    Mock::given(method("GET"))
        .and(path("/latest/meta-data/spot/instance-action"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(4)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/latest/meta-data/spot/instance-action"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(3)))
        .up_to_n_times(1)
        .with_priority(2)
        .mount(&server)
        .await;
    imds::preempt(&server, "2026-11-22T08:22:00Z").await;
    let p = provider(&server, Duration::from_secs(21_600)).await;
    let mut notices = p.interruptions().await.unwrap();
    let n = support::next_notice(&mut notices, 15).await;
    assert_eq!(n.kind, NoticeKind::Preemption);
    support::no_notice(&mut notices, 800, "the notice came twice").await;
}

#[tokio::test]
async fn an_unreachable_metadata_service_never_ends_or_fails_the_stream() {
    // A port nobody listens on (wiremock servers are pooled and reused, so a
    // dropped one is not dead).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let uri = format!("http://127.0.0.1:{port}");
    let c = AwsBuilder::new()
        .with_regions("us-east-1")
        .with_metadata_endpoint(uri)
        .with_static_credentials("AKIAGPUFLEETTEST0001", "x")
        .with_notice_poll(Duration::from_millis(50))
        .build()
        .unwrap();
    let p = AwsProvider::new(c).await.unwrap();
    let mut notices = p.interruptions().await.unwrap();
    support::no_notice(
        &mut notices,
        1000,
        "the stream ended or yielded while the service was down",
    )
    .await;
}

#[tokio::test]
async fn a_rebalance_recommendation_is_its_own_notice() {
    let (server, _) = imds::start("i-0abc1234def567890", "us-east-1").await;
    Mock::given(method("GET"))
        .and(path("/latest/meta-data/events/recommendations/rebalance"))
        .respond_with(
            ResponseTemplate::new(200).set_body_string(r#"{"noticeTime": "2026-11-22T08:17:00Z"}"#),
        )
        .with_priority(1)
        .mount(&server)
        .await;
    let p = provider(&server, Duration::from_secs(21_600)).await;
    let mut notices = p.interruptions().await.unwrap();
    let n = support::next_notice(&mut notices, 5).await;
    assert_eq!(n.kind, NoticeKind::Rebalance);
    assert_eq!(n.deadline, None);
    support::no_notice(&mut notices, 600, "a notice").await;
}
