//! A small typed client for the Azure Resource Manager operations gpufleet
//! uses, on `azure_core`'s HTTP pipeline (bearer-token policy from an
//! `azure_identity` credential, request ids, user agent). The pipeline's own
//! retries are off: gpufleet's `RetryLayer` is the one place that retries.
//!
//! It follows `nextLink` pages (refusing a link that repeats) and
//! long-running operations (`Azure-AsyncOperation`, else `Location`,
//! waiting as `Retry-After` asks, within the configured bounds).

use std::sync::Arc;
use std::time::Duration;

use azure_core::cloud::CloudConfiguration;
use azure_core::credentials::{
    AccessToken, Secret as AzSecret, TokenCredential, TokenRequestOptions,
};
use azure_core::http::headers::HeaderName;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::policies::Policy;
use azure_core::http::{
    ClientOptions, Context, Method, Pipeline, PipelineSendOptions, RawResponse, Request,
    RetryOptions, Transport, Url,
};
use gpufleet_model::paging::PageTokens;
use gpufleet_model::{Cloud, Error, ErrorKind, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use time::OffsetDateTime;
use tokio::time::Instant;

use crate::error::error_kind_for_code;
use crate::models::{AsyncOperation, CloudError, ErrorDetail, Page};
use crate::AzureConfig;

const RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");
const ASYNC_OPERATION: HeaderName = HeaderName::from_static("azure-asyncoperation");
const LOCATION: HeaderName = HeaderName::from_static("location");
const REQUEST_ID: HeaderName = HeaderName::from_static("x-ms-request-id");

/// A bearer token given in the configuration, for stand-ins.
#[derive(Debug)]
struct StaticToken(AzSecret);

#[async_trait::async_trait]
impl TokenCredential for StaticToken {
    async fn get_token(
        &self,
        _scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        Ok(AccessToken::new(
            self.0.clone(),
            OffsetDateTime::now_utc() + time::Duration::hours(1),
        ))
    }
}

/// Adds the configured static token to every request: for stand-ins, which
/// may be plain HTTP on 127.0.0.1 (the SDK's bearer policy rightly refuses
/// to send tokens without TLS). Only ever built for a static token, which
/// the builder allows only with an ARM endpoint override.
#[derive(Debug)]
struct StandInAuth(AzSecret);

#[async_trait::async_trait]
impl Policy for StandInAuth {
    #[allow(elided_lifetimes_in_paths)]
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> azure_core::http::policies::PolicyResult {
        request.insert_header("authorization", format!("Bearer {}", self.0.secret()));
        match next.split_first() {
            Some((first, rest)) => first.send(ctx, request, rest).await,
            None => Err(azure_core::Error::with_message(
                azure_core::error::ErrorKind::Other,
                "no transport after the auth policy",
            )),
        }
    }
}

/// The first of several credentials that yields a token.
#[derive(Debug)]
struct Chain(Vec<Arc<dyn TokenCredential>>);

#[async_trait::async_trait]
impl TokenCredential for Chain {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        let mut last = None;
        for c in &self.0 {
            match c.get_token(scopes, options.clone()).await {
                Ok(t) => return Ok(t),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            azure_core::Error::with_message(
                azure_core::error::ErrorKind::Credential,
                "no Azure credential source is configured",
            )
        }))
    }
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// The cloud a service principal or workload identity signs in to: the
/// sovereign cloud whose Resource Manager `arm_endpoint` is (its Entra ID
/// authority), unless `AZURE_AUTHORITY_HOST` is set, which azure_identity
/// then reads itself; `None` (public, or that variable) otherwise.
fn sign_in_cloud(arm_endpoint: &str, authority_host_set: bool) -> Option<Arc<CloudConfiguration>> {
    use crate::builder::{CHINA_ARM_ENDPOINT, US_GOVERNMENT_ARM_ENDPOINT};
    if authority_host_set {
        return None;
    }
    let host = |u: &str| {
        Url::parse(u)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
    };
    let arm_host = host(arm_endpoint)?;
    let same_host = |known: &str| host(known).as_deref() == Some(arm_host.as_str());
    if same_host(US_GOVERNMENT_ARM_ENDPOINT) {
        Some(Arc::new(CloudConfiguration::AzureGovernment))
    } else if same_host(CHINA_ARM_ENDPOINT) {
        Some(Arc::new(CloudConfiguration::AzureChina))
    } else {
        None
    }
}

/// The credential: the static token for a stand-in, else (in this order)
/// a service principal secret (`AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
/// `AZURE_CLIENT_SECRET`), workload identity (`AZURE_FEDERATED_TOKEN_FILE`),
/// then managed identity and the Azure CLI / azd, whichever answers first.
fn credential(config: &AzureConfig) -> Result<Arc<dyn TokenCredential>> {
    let fail = |what: &str, e: azure_core::Error| {
        Error::new(ErrorKind::Unauthenticated, format!("{what}: {e}")).with_provider(Cloud::Azure)
    };
    if let Some(c) = &config.credential {
        return Ok(c.get().clone());
    }
    if let Some(t) = &config.static_token {
        return Ok(Arc::new(StaticToken(AzSecret::new(t.expose().to_string()))));
    }
    let client_options = || ClientOptions {
        cloud: sign_in_cloud(&config.arm_endpoint, env_set("AZURE_AUTHORITY_HOST")),
        ..Default::default()
    };
    if env_set("AZURE_CLIENT_SECRET") && env_set("AZURE_TENANT_ID") && env_set("AZURE_CLIENT_ID") {
        let tenant = std::env::var("AZURE_TENANT_ID").unwrap_or_default();
        let client = std::env::var("AZURE_CLIENT_ID").unwrap_or_default();
        let secret = std::env::var("AZURE_CLIENT_SECRET").unwrap_or_default();
        let c = azure_identity::ClientSecretCredential::new(
            &tenant,
            client,
            AzSecret::new(secret),
            Some(azure_identity::ClientSecretCredentialOptions {
                client_options: client_options(),
            }),
        )
        .map_err(|e| fail("service principal credential", e))?;
        return Ok(c);
    }
    if env_set("AZURE_FEDERATED_TOKEN_FILE") {
        let c = azure_identity::WorkloadIdentityCredential::new(Some(
            azure_identity::WorkloadIdentityCredentialOptions {
                credential_options: azure_identity::ClientAssertionCredentialOptions {
                    client_options: client_options(),
                },
                ..Default::default()
            },
        ))
        .map_err(|e| fail("workload identity credential", e))?;
        return Ok(c);
    }
    let mut chain: Vec<Arc<dyn TokenCredential>> = Vec::new();
    if let Ok(c) = azure_identity::ManagedIdentityCredential::new(None) {
        chain.push(c);
    }
    if let Ok(c) = azure_identity::DeveloperToolsCredential::new(None) {
        chain.push(c);
    }
    Ok(Arc::new(Chain(chain)))
}

/// A response: status, the headers gpufleet reads, body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    retry_after: Option<Duration>,
    async_operation: Option<String>,
    location: Option<String>,
    request_id: Option<String>,
}

impl Answer {
    fn from_raw(raw: RawResponse) -> Answer {
        let h = raw.headers();
        let s = |n: &HeaderName| h.get_optional_str(n).map(str::to_string);
        Answer {
            status: u16::from(raw.status()),
            retry_after: h
                .get_optional_str(&RETRY_AFTER)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|secs| Duration::from_secs(secs.min(3600))),
            async_operation: s(&ASYNC_OPERATION),
            location: s(&LOCATION),
            request_id: s(&REQUEST_ID),
            body: raw.body().to_vec(),
        }
    }

    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The answer if it is a success, else its error.
    fn checked(self, operation: &'static str) -> Result<Answer> {
        if self.ok() {
            Ok(self)
        } else {
            Err(self.error(operation))
        }
    }

    fn json<T: DeserializeOwned>(&self, operation: &'static str) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!(
                    "unreadable response (HTTP {}): truncated or malformed body ({e})",
                    self.status
                ),
            )
            .with_provider(Cloud::Azure)
            .with_operation(operation)
        })
    }

    /// The gpufleet error for a failed answer.
    pub(crate) fn error(&self, operation: &'static str) -> Error {
        let detail = serde_json::from_slice::<CloudError>(&self.body)
            .map(|c| c.error)
            .unwrap_or_default();
        let mut e = detail_error(&detail, Some(self.status), operation);
        if let Some(id) = &self.request_id {
            e = e.with_context("request_id", id.clone());
        }
        if let Some(after) = self.retry_after {
            e = e.with_retry_after(after);
        }
        e
    }
}

/// A request body as JSON.
fn encode(body: Option<&impl Serialize>) -> Result<Option<Vec<u8>>> {
    body.map(serde_json::to_vec)
        .transpose()
        .map_err(|e| Error::invalid_input(format!("request body: {e}")).with_provider(Cloud::Azure))
}

/// An ARM error detail as a gpufleet error: the most specific known code
/// (nested details first, as allocation failures put it there).
pub(crate) fn detail_error(
    detail: &ErrorDetail,
    status: Option<u16>,
    operation: &'static str,
) -> Error {
    let mut codes: Vec<&ErrorDetail> = detail.details.iter().collect();
    codes.push(detail);
    let kind = codes
        .iter()
        .map(|d| error_kind_for_code(&d.code, None))
        .find(|k| *k != ErrorKind::Unexpected)
        .unwrap_or_else(|| error_kind_for_code(&detail.code, status));
    let shown = if detail.code.is_empty() {
        format!("HTTP {}", status.unwrap_or(0))
    } else {
        detail.code.clone()
    };
    let message = if detail.message.is_empty() {
        "no message".to_string()
    } else {
        detail.message.chars().take(500).collect()
    };
    let mut e = Error::new(kind, format!("{shown}: {message}"))
        .with_provider(Cloud::Azure)
        .with_operation(operation);
    if !detail.code.is_empty() {
        e = e.with_context("code", detail.code.clone());
    }
    e
}

/// The ARM client.
#[derive(Debug)]
pub(crate) struct Arm {
    pipeline: Pipeline,
    public: Pipeline,
    base: Url,
    pub(crate) subscription: String,
    poll: Duration,
    timeout: Duration,
    max_pages: usize,
}

fn pipeline(auth: Option<Arc<dyn Policy>>) -> Result<Pipeline> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("HTTP client: {e}")))?;
    let options = ClientOptions {
        retry: RetryOptions::none(),
        transport: Some(Transport::new(Arc::new(client))),
        ..ClientOptions::default()
    };
    Ok(Pipeline::new(
        option_env!("CARGO_PKG_NAME"),
        option_env!("CARGO_PKG_VERSION"),
        options,
        Vec::new(),
        auth.into_iter().collect(),
        None,
    ))
}

impl Arm {
    pub(crate) fn new(config: &AzureConfig) -> Result<Arm> {
        let base = Url::parse(&config.arm_endpoint).map_err(|e| {
            Error::invalid_input(format!("ARM endpoint '{}': {e}", config.arm_endpoint))
        })?;
        let scope = format!("{}/.default", config.arm_endpoint.trim_end_matches('/'));
        let auth: Arc<dyn Policy> = match &config.static_token {
            Some(t) => Arc::new(StandInAuth(AzSecret::new(t.expose().to_string()))),
            None => Arc::new(BearerTokenAuthorizationPolicy::new(
                credential(config)?,
                [scope],
            )),
        };
        Ok(Arm {
            pipeline: pipeline(Some(auth))?,
            public: pipeline(None)?,
            base,
            subscription: config.subscription_id.clone(),
            poll: config.operation_poll,
            timeout: config.operation_timeout,
            max_pages: config.max_pages,
        })
    }

    /// `{endpoint}{path}?api-version=…` (path from `/subscriptions/…`).
    pub(crate) fn url(&self, path: &str, api_version: &str) -> Result<Url> {
        let mut url = self.base.join(path).map_err(|e| {
            Error::invalid_input(format!("bad ARM path '{path}': {e}")).with_provider(Cloud::Azure)
        })?;
        url.query_pairs_mut()
            .append_pair("api-version", api_version);
        Ok(url)
    }

    /// Sends one request; transport failures are errors, any status is an
    /// answer.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        operation: &'static str,
        authed: bool,
    ) -> Result<Answer> {
        // The token goes to the Resource Manager endpoint only: a `nextLink`
        // or operation URL the service sends naming another origin (scheme,
        // host, port) is refused, not followed with the token.
        if authed && url.origin() != self.base.origin() {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "refusing to send the Azure token to {}: the service named it (a next-page or operation link) but it is not the Resource Manager endpoint {}",
                    url.origin().ascii_serialization(),
                    self.base.origin().ascii_serialization()
                ),
            )
            .with_provider(Cloud::Azure)
            .with_operation(operation));
        }
        // A SAS URL (boot diagnostics' log blob) is a credential: when the
        // request fails, nothing that could quote it is logged or kept.
        let secret_url = url.query_pairs().any(|(k, _)| k == "sig");
        let mut req = Request::new(url, method);
        req.insert_header("accept", "application/json");
        if let Some(b) = body {
            req.insert_header("content-type", "application/json");
            req.set_body(b);
        }
        let pipeline = if authed { &self.pipeline } else { &self.public };
        let sent = pipeline
            .send(
                &Context::new(),
                &mut req,
                Some(PipelineSendOptions {
                    skip_checks: true,
                    ..PipelineSendOptions::default()
                }),
            )
            .await;
        match sent {
            Ok(raw) => Ok(Answer::from_raw(raw)),
            Err(e) if secret_url => {
                drop(e);
                tracing::debug!(operation, "request to a SAS URL failed");
                Err(Error::new(
                    ErrorKind::Unavailable,
                    "could not read the blob (its URL is not shown: it holds a SAS token)",
                )
                .with_provider(Cloud::Azure)
                .with_operation(operation))
            }
            Err(e) => {
                tracing::debug!(error = ?e, operation, "request failed");
                use azure_core::error::ErrorKind as K;
                let kind = match e.kind() {
                    K::Credential => ErrorKind::Unauthenticated,
                    K::Io | K::Connection => {
                        if format!("{e:?}").contains("timed out") {
                            ErrorKind::Timeout
                        } else {
                            ErrorKind::Unavailable
                        }
                    }
                    _ => ErrorKind::Unavailable,
                };
                let what = match kind {
                    ErrorKind::Unauthenticated => "no Azure credential gave a token (service principal, workload identity, managed identity, Azure CLI)",
                    ErrorKind::Timeout => "the request timed out",
                    _ => "could not reach the endpoint",
                };
                Err(Error::new(kind, what)
                    .with_provider(Cloud::Azure)
                    .with_operation(operation)
                    .with_source(e))
            }
        }
    }

    /// A request whose success body is `T`.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
        operation: &'static str,
    ) -> Result<T> {
        let a = self
            .send(method, url, encode(body)?, operation, true)
            .await?;
        a.checked(operation)?.json(operation)
    }

    /// Every page of a list, following `nextLink`.
    pub(crate) async fn list<T: DeserializeOwned>(
        &self,
        first: Url,
        operation: &'static str,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut pages = PageTokens::new(Cloud::Azure, operation, self.max_pages);
        let mut next = Some(first);
        while let Some(url) = next.take() {
            let page: Page<T> = self.call(Method::Get, url, None::<&()>, operation).await?;
            out.extend(page.value);
            next = next_page(&mut pages, page.next_link.as_deref(), operation)?;
        }
        Ok(out)
    }

    /// The text at `url`, fetched without the token (a SAS URL carries its
    /// own); the URL itself appears in no error.
    pub(crate) async fn public_text(&self, url: Url, operation: &'static str) -> Result<String> {
        let a = self.send(Method::Get, url, None, operation, false).await?;
        if !a.ok() {
            return Err(Error::new(
                if a.status == 404 {
                    ErrorKind::NotFound
                } else {
                    ErrorKind::Unavailable
                },
                format!("HTTP {} reading the blob", a.status),
            )
            .with_provider(Cloud::Azure)
            .with_operation(operation));
        }
        Ok(String::from_utf8_lossy(&a.body).into_owned())
    }

    /// Every page of a public (unauthenticated) list with its own page type.
    pub(crate) async fn public_get<T: DeserializeOwned>(
        &self,
        url: Url,
        operation: &'static str,
    ) -> Result<T> {
        let a = self.send(Method::Get, url, None, operation, false).await?;
        a.checked(operation)?.json(operation)
    }

    /// The most pages a list follows.
    pub(crate) fn max_pages(&self) -> usize {
        self.max_pages
    }

    /// Sends a request that may start a long-running operation and follows
    /// it to the end: `Ok(())` when it succeeded.
    pub(crate) async fn run(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
        operation: &'static str,
    ) -> Result<Answer> {
        let first = self
            .send(method, url, encode(body)?, operation, true)
            .await?;
        let first = first.checked(operation)?;
        let (poll_url, via_async) = match (&first.async_operation, &first.location) {
            (Some(u), _) => (u.clone(), true),
            (None, Some(u)) if first.status == 202 => (u.clone(), false),
            _ => return Ok(first),
        };
        let poll_url = Url::parse(&poll_url).map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("bad operation URL '{poll_url}': {e}"),
            )
            .with_provider(Cloud::Azure)
            .with_operation(operation)
        })?;
        let deadline = Instant::now() + self.timeout;
        let mut wait = first.retry_after.unwrap_or(self.poll).max(self.poll);
        loop {
            if Instant::now() + wait > deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("the operation did not finish within {:?}", self.timeout),
                )
                .with_provider(Cloud::Azure)
                .with_operation(operation)
                .with_context("operation_url", poll_url.to_string()));
            }
            tokio::time::sleep(wait).await;
            let a = self
                .send(Method::Get, poll_url.clone(), None, operation, true)
                .await?
                .checked(operation)?;
            wait = a
                .retry_after
                .unwrap_or(self.poll)
                .clamp(self.poll, Duration::from_secs(60).max(self.poll));
            if via_async {
                let op: AsyncOperation = a.json(operation)?;
                match op.status.as_str() {
                    "Succeeded" => return Ok(first),
                    "Failed" | "Canceled" => {
                        let detail = op.error.unwrap_or(ErrorDetail {
                            code: op.status.clone(),
                            message: "the operation ended without success".into(),
                            details: Vec::new(),
                        });
                        return Err(detail_error(&detail, None, operation));
                    }
                    _ => continue,
                }
            } else if a.status != 202 {
                return Ok(a);
            }
        }
    }
}

/// The URL of the next page of an ARM-style listing (`nextLink`,
/// `NextPageLink`): `None` at the end, an error when the link repeats, the
/// listing passes its page bound, or the link is not a URL.
pub(crate) fn next_page(
    pages: &mut PageTokens,
    link: Option<&str>,
    operation: &'static str,
) -> Result<Option<Url>> {
    pages
        .next(link)?
        .map(|l| {
            Url::parse(&l).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("bad next-page link '{l}': {e}"),
                )
                .with_provider(Cloud::Azure)
                .with_operation(operation)
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AzureBuilder;

    /// A service principal signs in where its Resource Manager is: Azure
    /// Government's or China's Entra ID for theirs, the variable when set,
    /// the public cloud otherwise (a stand-in included).
    #[test]
    fn sovereign_endpoints_sign_in_to_their_own_cloud() {
        let cloud = |arm: &str, env: bool| sign_in_cloud(arm, env).map(|c| (*c).clone());
        assert_eq!(
            cloud("https://management.usgovcloudapi.net", false),
            Some(CloudConfiguration::AzureGovernment)
        );
        assert_eq!(
            cloud("https://MANAGEMENT.chinacloudapi.cn/", false),
            Some(CloudConfiguration::AzureChina)
        );
        assert_eq!(cloud("https://management.usgovcloudapi.net", true), None);
        assert_eq!(cloud(crate::builder::DEFAULT_ARM_ENDPOINT, false), None);
        assert_eq!(cloud("http://127.0.0.1:9", false), None);
        assert_eq!(
            cloud("https://management.usgovcloudapi.net.evil.example", false),
            None
        );
    }

    #[tokio::test]
    async fn an_injected_credential_is_the_one_asked_for_tokens() {
        let mine: Arc<dyn TokenCredential> =
            Arc::new(StaticToken(AzSecret::new("injected-token".to_string())));
        let config = AzureBuilder::new()
            .with_subscription_id("sub")
            .with_credential(mine.clone())
            .build()
            .expect("config");
        assert_eq!(config, config.clone());
        assert!(!format!("{config:?}").contains("injected-token"));
        let used = credential(&config).expect("credential");
        assert!(Arc::ptr_eq(&used, &mine));
        let token = used
            .get_token(&["https://management.azure.com/.default"], None)
            .await
            .expect("token");
        assert_eq!(token.token.secret(), "injected-token");
        // A static token and an injected credential exclude each other.
        let e = AzureBuilder::new()
            .with_subscription_id("sub")
            .with_arm_endpoint("http://127.0.0.1:9")
            .with_static_token("t")
            .with_credential(mine)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("exclude each other"), "{e}");
    }
}
