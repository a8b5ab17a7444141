//! The link-local instance metadata services gpufleet reads on a node: the
//! GCE metadata server (`Metadata-Flavor: Google`) and Azure IMDS
//! (`Metadata: true`). Both want one plain GET with a header that proves the
//! caller is not a browser being redirected, and answer text; this is that
//! GET, written once for both providers. (AWS goes through `aws-config`'s
//! IMDSv2 client, which also handles the session token.)
//!
//! Failures are short reasons meant for a line in a log or an error:
//! `timed out`, `unreachable`, `HTTP 404`, or a missing response header
//! that says the answer did not come from the service asked for. They never
//! contain a URL's query or any header value.

/// One metadata service: the header a request must carry, and the header
/// (if any) its answers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// Its name in a failure: `GCE metadata server`, `Azure IMDS`.
    pub name: &'static str,
    /// The request header (name, value).
    pub request_header: (&'static str, &'static str),
    /// The header (name, value) every real answer carries, checked.
    pub answer_header: Option<(&'static str, &'static str)>,
}

/// The GCE metadata server.
pub const GCE: Service = Service {
    name: "GCE metadata server",
    request_header: ("Metadata-Flavor", "Google"),
    answer_header: Some(("metadata-flavor", "Google")),
};

/// Azure's Instance Metadata Service (also Scheduled Events).
pub const AZURE_IMDS: Service = Service {
    name: "Azure IMDS",
    request_header: ("Metadata", "true"),
    answer_header: None,
};

/// An answer: its body and its `ETag` (when it is plain ASCII letters and
/// digits, as the GCE server sends for `wait_for_change`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The body.
    pub body: String,
    /// The entity tag.
    pub etag: Option<String>,
}

impl Service {
    /// GETs `url` with this service's header.
    pub async fn get(
        &self,
        client: &reqwest::Client,
        url: &str,
    ) -> std::result::Result<Answer, String> {
        let (name, value) = self.request_header;
        let resp = client
            .get(url)
            .header(name, value)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "timed out".to_string()
                } else {
                    "unreachable".to_string()
                }
            })?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status().as_u16()));
        }
        if let Some((h, want)) = self.answer_header {
            if resp.headers().get(h).and_then(|v| v.to_str().ok()) != Some(want) {
                return Err(format!(
                    "the answer lacks '{h}: {want}': not a {}",
                    self.name
                ));
            }
        }
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .filter(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric()))
            .map(str::to_string);
        let body = resp
            .text()
            .await
            .map_err(|_| "the answer's body could not be read".to_string())?;
        Ok(Answer { body, etag })
    }

    /// Whether the service answers `url` within `timeout`.
    pub async fn probe(&self, url: &str, timeout: std::time::Duration) -> bool {
        let Ok(client) = reqwest::Client::builder().timeout(timeout).build() else {
            return false;
        };
        self.get(&client, url).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    #[tokio::test]
    async fn sends_the_header_and_checks_the_answer() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/computeMetadata/v1/instance/id"))
            .and(header("Metadata-Flavor", "Google"))
            .respond_with(
                ResponseTemplate::new(200)
                    .insert_header("Metadata-Flavor", "Google")
                    .insert_header("ETag", "abc123")
                    .set_body_string("42"),
            )
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/plain"))
            .respond_with(ResponseTemplate::new(200).set_body_string("x"))
            .mount(&server)
            .await;
        let client = reqwest::Client::new();
        let url = format!("{}/computeMetadata/v1/instance/id", server.uri());
        let a = GCE.get(&client, &url).await.unwrap();
        assert_eq!(a.body, "42");
        assert_eq!(a.etag.as_deref(), Some("abc123"));
        // A server that is not the metadata server is told apart.
        let e = GCE
            .get(&client, &format!("{}/plain", server.uri()))
            .await
            .unwrap_err();
        assert!(e.contains("not a GCE metadata server"), "{e}");
        // Azure has no answer header; a 404 is a short reason.
        assert_eq!(
            AZURE_IMDS
                .get(&client, &format!("{}/plain", server.uri()))
                .await
                .unwrap()
                .body,
            "x"
        );
        let e = AZURE_IMDS
            .get(&client, &format!("{}/nothing?token=secret", server.uri()))
            .await
            .unwrap_err();
        assert_eq!(e, "HTTP 404");
        assert!(GCE.probe(&url, std::time::Duration::from_secs(2)).await);
        assert!(
            !GCE.probe("http://127.0.0.1:9/", std::time::Duration::from_millis(300))
                .await
        );
    }
}
