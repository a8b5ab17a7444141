//! The metadata server of a GCE VM, for the notice tests: its answers,
//! the instance it knows, and a `preempted` that only a long poll turns.

use std::time::Duration;

use wiremock::{Mock, MockServer, ResponseTemplate};

/// A metadata-server answer: `Metadata-Flavor: Google` and the value.
pub fn metadata_value(v: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("Metadata-Flavor", "Google")
        .set_body_string(v)
}

/// A metadata-server stand-in that knows the instance (`zone`, `name`, no
/// maintenance event) and answers only requests with `Metadata-Flavor`; the
/// test mounts `preempted`.
pub async fn metadata_server(zone: &str, name: &str) -> MockServer {
    use wiremock::matchers::{header, method, path};
    let m = MockServer::start().await;
    let zone = format!("projects/1/zones/{zone}");
    for (p, v) in [
        ("/computeMetadata/v1/instance/zone", zone.as_str()),
        ("/computeMetadata/v1/instance/name", name),
        ("/computeMetadata/v1/instance/maintenance-event", "NONE"),
    ] {
        Mock::given(method("GET"))
            .and(path(p))
            .and(header("Metadata-Flavor", "Google"))
            .respond_with(metadata_value(v))
            .mount(&m)
            .await;
    }
    m
}

/// A GET of the instance's `preempted` value, for the test to answer.
pub fn preempted() -> wiremock::MockBuilder {
    use wiremock::matchers::{method, path};
    Mock::given(method("GET")).and(path("/computeMetadata/v1/instance/preempted"))
}

/// Mounts on `m` a `preempted` that a plain read answers `FALSE` and only a
/// long poll (`wait_for_change`, and `last_etag=etag` when `from_etag`)
/// answers `TRUE`, after `delay`; both carry `ETag: etag`.
pub async fn preempt_on_long_poll(m: &MockServer, etag: &str, from_etag: bool, delay: Duration) {
    use wiremock::matchers::query_param;
    let value = |v: &str| metadata_value(v).insert_header("ETag", etag);
    let mut poll = preempted().and(query_param("wait_for_change", "true"));
    if from_etag {
        poll = poll.and(query_param("last_etag", etag));
    }
    poll.respond_with(value("TRUE").set_delay(delay))
        .with_priority(1)
        .mount(m)
        .await;
    preempted()
        .respond_with(value("FALSE"))
        .with_priority(5)
        .mount(m)
        .await;
}

/// The notice stream of a VM whose metadata server is `m`.
pub fn metadata_stream(m: &MockServer) -> gpufleet_core::NoticeStream {
    let config = gpufleet_gcp::GcpBuilder::new()
        .with_project("p")
        .with_metadata_host(m.address().to_string())
        .build()
        .unwrap();
    gpufleet_gcp::metadata_notices(&config).unwrap()
}
