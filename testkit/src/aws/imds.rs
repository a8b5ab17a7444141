//! An IMDSv2 stand-in on wiremock: tokens from `PUT /latest/api/token`, and
//! metadata only for requests that carry one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wiremock::matchers::{header, header_exists, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The session token the stand-in hands out (a fresh one per PUT).
pub struct Tokens {
    pub issued: Arc<AtomicUsize>,
}

impl Respond for Tokens {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.issued.fetch_add(1, Ordering::SeqCst);
        // IMDS echoes the lifetime it granted: the one asked for.
        let ttl = req
            .headers
            .get("x-aws-ec2-metadata-token-ttl-seconds")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("21600")
            .to_string();
        ResponseTemplate::new(200)
            .insert_header("x-aws-ec2-metadata-token-ttl-seconds", ttl.as_str())
            .set_body_string(TOKEN)
    }
}

pub const TOKEN: &str = "AQAEAGpufleetTestImdsTokenDoNotLog==";

/// Starts an IMDS stand-in with the token endpoint, the instance identity and
/// no notices; returns it and the count of tokens issued.
pub async fn start(instance_id: &str, region: &str) -> (MockServer, Arc<AtomicUsize>) {
    let server = MockServer::start().await;
    let issued = serve(&server, instance_id, region).await;
    (server, issued)
}

/// Mounts the token endpoint and the instance identity on `server`.
pub async fn serve(server: &MockServer, instance_id: &str, region: &str) -> Arc<AtomicUsize> {
    let issued = Arc::new(AtomicUsize::new(0));
    Mock::given(method("PUT"))
        .and(path("/latest/api/token"))
        .and(header_exists("x-aws-ec2-metadata-token-ttl-seconds"))
        .respond_with(Tokens {
            issued: issued.clone(),
        })
        .mount(server)
        .await;
    for (p, body) in [
        ("/latest/meta-data/instance-id", instance_id),
        ("/latest/meta-data/placement/region", region),
    ] {
        Mock::given(method("GET"))
            .and(path(p))
            .and(header("x-aws-ec2-metadata-token", TOKEN))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(server)
            .await;
    }
    // With the token, a path with nothing there is a 404, as IMDS answers
    // spot/instance-action and the rebalance recommendation before any.
    Mock::given(method("GET"))
        .and(header("x-aws-ec2-metadata-token", TOKEN))
        .respond_with(ResponseTemplate::new(404))
        .with_priority(9)
        .mount(server)
        .await;
    // Anything without a token is refused, as IMDSv2-only instances do.
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401))
        .with_priority(10)
        .mount(server)
        .await;
    issued
}

/// Serves a spot instance-action for the instance from now on.
pub async fn preempt(server: &MockServer, time: &str) {
    Mock::given(method("GET"))
        .and(path("/latest/meta-data/spot/instance-action"))
        .and(header("x-aws-ec2-metadata-token", TOKEN))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(format!(r#"{{"action": "terminate", "time": "{time}"}}"#)),
        )
        .with_priority(1)
        .mount(server)
        .await;
}
