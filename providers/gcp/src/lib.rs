//! gpufleet's GCP provider on `google-cloud-compute-v1` and
//! `google-cloud-billing-v1`.
//!
//! [`GcpProvider`] implements every gpufleet capability against Compute
//! Engine in one project:
//!
//! - catalog: `machineTypes.aggregatedList` (accelerator-optimized a2, a3, a4,
//!   g2 and g4 types, GPUs bundled; N1 hosts) and
//!   `acceleratorTypes.aggregatedList` (GPUs attachable to N1, offered as
//!   shapes such as `n1-standard-8+nvidia-tesla-t4x1`), per zone, all pages;
//! - prices: Cloud Billing Catalog SKUs of Compute Engine
//!   (`services/6F81-5844-456A/skus`), cores + RAM + GPUs combined into the
//!   whole-VM price the user pays, on-demand and Spot; the embedded snapshot
//!   where a shape has no live price (the offer says so in its source);
//! - placement groups: resource policies with
//!   `groupPlacementPolicy.collocation = COLLOCATED` (cluster) or an
//!   `availabilityDomainCount` (spread);
//! - compute: `instances.insert` (Spot or standard, GPUs terminate on host
//!   maintenance) with a `requestId` derived from the idempotency key, labels
//!   for cost attribution, zone operations followed to the end;
//! - interruption notices from the metadata server (`instance/preempted`,
//!   `instance/maintenance-event`).
//!
//! Ids of instances are `zone/name` (`us-central1-a/gf-…`), of placement
//! groups `region/name`. The client library's own retries are off, so that
//! gpufleet's `RetryLayer` is the one place that retries.

/// One Compute Engine call on one resource in the provider's project:
/// `$client.$method()` scoped by `$scope($in)` (`set_zone` or `set_region`),
/// naming the resource with `$resource($name)`, any further setters, sent;
/// its error mapped as `$operation`.
macro_rules! send_scoped {
    (
        $p:expr, $client:ident.$method:ident, $scope:ident($in:expr),
        $resource:ident($name:expr) $(, $extra:ident($arg:expr))*; $operation:literal
    ) => {
        $p.inner
            .$client
            .$method()
            .set_project($p.project())
            .$scope($in)
            .$resource($name)
            $(.$extra($arg))*
            .send()
            .await
            .map_err(|e| $crate::error::from_gax($operation, e))
    };
}

/// Every page of one Compute Engine `aggregatedList` in the provider's
/// project (500 items a page, an optional trailing `filter = ` expression),
/// each handed to `$each`, through [`all_pages`].
macro_rules! each_aggregated_page {
    ($p:expr, $client:ident, $operation:literal, $each:expr $(, filter = $filter:expr)?) => {{
        let p: &$crate::GcpProvider = $p;
        let list = |token: String| {
            #[allow(unused_mut)]
            let mut req = p
                .inner
                .$client
                .aggregated_list()
                .set_project(p.project())
                .set_max_results(500u32)
                .set_page_token(token);
            $(
                let filter: &str = $filter;
                if !filter.is_empty() {
                    req = req.set_filter(filter);
                }
            )?
            async move {
                let page = req.send().await?;
                let next = page.next_page_token.clone().unwrap_or_default();
                Ok((page, next))
            }
        };
        $crate::all_pages(p, $operation, list, $each)
    }};
}

mod builder;
mod catalog;
pub mod check;
mod compute;
mod error;
pub mod interruption;
mod operation;
mod placement;
mod pricing;
mod tags;

use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_billing_v1::client::CloudCatalog;
use google_cloud_compute_v1::client::{
    AcceleratorTypes, Instances, MachineTypes, RegionOperations, ResourcePolicies, ZoneOperations,
};
use google_cloud_gax::retry_policy::NeverRetry;
use gpufleet_model::{
    Capabilities, Cloud, Error, ErrorKind, NoticeStream, Provider, Result, Snapshot,
};
use time::OffsetDateTime;
use tokio::sync::Mutex;

pub use builder::{GcpBuilder, GcpConfig};
pub use error::error_kind_for_reason;

/// The Compute Engine service in the Cloud Billing Catalog.
pub const COMPUTE_SERVICE: &str = "services/6F81-5844-456A";

/// The GCP provider. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct GcpProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: GcpConfig,
    machine_types: MachineTypes,
    accelerator_types: AcceleratorTypes,
    instances: Instances,
    zone_operations: ZoneOperations,
    region_operations: RegionOperations,
    resource_policies: ResourcePolicies,
    billing: CloudCatalog,
    snapshot: Snapshot,
    catalog: Mutex<Option<(Instant, Arc<catalog::Live>)>>,
}

impl std::fmt::Debug for GcpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

fn build_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unauthenticated,
        format!("{what} client: {e} (Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, or the metadata server)"),
    )
    .with_provider(Cloud::Gcp)
}

macro_rules! client {
    ($ty:ty, $config:expr, $creds:expr, $endpoint:expr, $what:expr) => {{
        let mut b = <$ty>::builder()
            .with_retry_policy(NeverRetry)
            .with_credentials($creds.clone());
        if let Some(url) = $endpoint {
            b = b.with_endpoint(url.clone());
        }
        b.build().await.map_err(|e| build_error($what, e))?
    }};
}

impl GcpProvider {
    /// Connects with the given settings: the injected credentials, else
    /// Application Default Credentials (or anonymous ones for a stand-in),
    /// the client library's retries off.
    pub async fn new(config: GcpConfig) -> Result<GcpProvider> {
        let creds = if let Some(injected) = &config.credentials {
            injected.get().as_ref().clone()
        } else if config.anonymous {
            google_cloud_auth::credentials::anonymous::Builder::new().build()
        } else {
            google_cloud_auth::credentials::Builder::default()
                .build()
                .map_err(|e| build_error("Google credentials", e))?
        };
        let compute = config.compute_endpoint.as_ref();
        let billing = config.billing_endpoint.as_ref();
        Ok(GcpProvider {
            inner: Arc::new(Inner {
                machine_types: client!(MachineTypes, config, creds, compute, "machineTypes"),
                accelerator_types: client!(
                    AcceleratorTypes,
                    config,
                    creds,
                    compute,
                    "acceleratorTypes"
                ),
                instances: client!(Instances, config, creds, compute, "instances"),
                zone_operations: client!(ZoneOperations, config, creds, compute, "zoneOperations"),
                region_operations: client!(
                    RegionOperations,
                    config,
                    creds,
                    compute,
                    "regionOperations"
                ),
                resource_policies: client!(
                    ResourcePolicies,
                    config,
                    creds,
                    compute,
                    "resourcePolicies"
                ),
                billing: client!(CloudCatalog, config, creds, billing, "Cloud Billing"),
                snapshot: Snapshot::embedded().for_cloud(Cloud::Gcp),
                catalog: Mutex::new(None),
                config,
            }),
        })
    }

    /// Connects with settings from the environment ([`GcpBuilder::from_env`]).
    pub async fn from_env() -> Result<GcpProvider> {
        GcpProvider::new(GcpBuilder::from_env().build()?).await
    }

    /// The settings in use.
    pub fn config(&self) -> &GcpConfig {
        &self.inner.config
    }

    fn project(&self) -> &str {
        &self.inner.config.project
    }
}

/// The preemption and maintenance notices of the VM this runs on, from the
/// metadata server at `GCE_METADATA_HOST` or `metadata.google.internal` (no
/// API calls, no credentials needed).
pub fn metadata_notices(config: &GcpConfig) -> Result<NoticeStream> {
    interruption::notices(
        interruption::metadata_base(config.metadata_host.as_deref()),
        Duration::from_secs(1),
    )
}

/// Entry points for the fuzz targets in `fuzz/` (not a stable API): every
/// Compute Engine and Cloud Billing response gpufleet turns into its model,
/// and the metadata values.
#[doc(hidden)]
pub mod fuzzing {
    use google_cloud_billing_v1::model::ListSkusResponse;
    use google_cloud_compute_v1::model::{Instance, MachineTypeAggregatedList, Operation};
    use gpufleet_model::Capacity;

    /// Feeds `data` to each response conversion; none may panic.
    pub fn responses(data: &[u8]) {
        if let Ok(page) = serde_json::from_slice::<ListSkusResponse>(data) {
            let mut rates = crate::pricing::Rates::default();
            rates.add(&page.skus);
            let vm = crate::pricing::Vm {
                family: "a2",
                vcpus: 12,
                memory_mib: 87_040,
                gpu: "nvidia-tesla-a100",
                gpus: 1,
            };
            let _ = rates.vm_price("us-central1", &vm, Capacity::Spot);
            for sku in &page.skus {
                if let Some(c) = &sku.category {
                    let _ = crate::pricing::parse_sku(&sku.description, &c.usage_type);
                }
            }
        }
        if let Ok(page) = serde_json::from_slice::<MachineTypeAggregatedList>(data) {
            let mut out = Default::default();
            crate::catalog::read_machine_page(&page, &mut out);
        }
        if let Ok(i) = serde_json::from_slice::<Instance>(data) {
            let _ = crate::compute::to_instance(&i);
        }
        let _ = serde_json::from_slice::<Operation>(data);
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = crate::catalog::split_shape(text);
            let _ = crate::tags::from_labels(
                &[("gpufleet-expires-at".to_string(), text.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
    }

    /// Feeds `body` to the metadata value parsers; none may panic.
    pub fn metadata(body: &str) {
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let _ = crate::interruption::parse_preempted(body, None, now);
        let _ = crate::interruption::parse_maintenance(body, None, now);
    }
}

/// `scope/name` ids (zone or region first).
pub(crate) fn split_id<'a>(id: &'a str, what: &str) -> Result<(&'a str, &'a str)> {
    match id.split_once('/') {
        Some((scope, name)) if !scope.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((scope, name))
        }
        _ => Err(Error::new(
            ErrorKind::NotFound,
            format!("no {what} '{id}': gpufleet's GCP ids look like us-central1-a/gf-0123abcd"),
        )
        .with_provider(Cloud::Gcp)),
    }
}

/// The region of a zone (`us-central1-a` -> `us-central1`).
pub(crate) fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(r, _)| r)
}

/// The last path segment of a resource URL.
pub(crate) fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

pub(crate) fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// The scoped lists of an `aggregatedList` page whose scope is
/// `{kind}/{name}` (`zones/us-central1-a`), with that name; other scopes
/// (the other kind, or a warning-only entry) are passed over.
pub(crate) fn scoped<'a, T: 'a>(
    items: impl IntoIterator<Item = (&'a String, &'a T)>,
    kind: &'static str,
) -> impl Iterator<Item = (&'a str, &'a T)> {
    items.into_iter().filter_map(move |(scope, list)| {
        let name = scope.strip_prefix(kind)?.strip_prefix('/')?;
        Some((name, list))
    })
}

/// Follows one Compute Engine or Billing listing to its last page:
/// `fetch` sends the request for a page token (empty for the first page)
/// and answers the page with its next token; `each` reads every page. A
/// token that repeats, or more pages than `max_pages`, is an error.
pub(crate) async fn all_pages<P, Fut>(
    p: &GcpProvider,
    operation: &'static str,
    mut fetch: impl FnMut(String) -> Fut,
    mut each: impl FnMut(P),
) -> Result<()>
where
    Fut: std::future::Future<
        Output = std::result::Result<(P, String), google_cloud_gax::error::Error>,
    >,
{
    let mut pages =
        gpufleet_model::paging::PageTokens::new(Cloud::Gcp, operation, p.inner.config.max_pages);
    let mut token = String::new();
    loop {
        let (page, next) = fetch(token)
            .await
            .map_err(|e| error::from_gax(operation, e))?;
        each(page);
        match pages.next(Some(next.as_str()))? {
            Some(t) => token = t,
            None => return Ok(()),
        }
    }
}

impl Provider for GcpProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Gcp
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL.without_partition()
    }
}
