//! gpufleet's Azure provider on `azure_core` 1.x and `azure_identity` 1.x.
//!
//! There is no maintained Azure compute management crate on `azure_core`
//! 1.x (`azure_mgmt_compute` 0.21 is frozen on the legacy core and brings
//! crates with RustSec notices), so [`AzureProvider`] talks to Azure
//! Resource Manager through a small typed client (`arm`) on `azure_core`'s
//! HTTP pipeline, with `serde` models that mirror the REST reference in one
//! module (`models`), ready to be swapped for an official crate:
//!
//! - catalog: `Microsoft.Compute/skus` per region (GPU sizes, `GPUs`,
//!   `vCPUs`, `MemoryGB`; restricted regions and zones left out), prices from
//!   the public Retail Prices API (Linux consumption, on-demand and Spot;
//!   Low Priority and Windows meters excluded), Spot eviction rates from
//!   Azure Resource Graph attached to spot offers; the embedded snapshot's
//!   prices where the Retail Prices API does not answer;
//! - placement groups: proximity placement groups;
//! - compute: VMs (Spot with `evictionPolicy: Delete` and `maxPrice: -1`, or
//!   regular), named from the idempotency key, followed through
//!   `Azure-AsyncOperation` / `Location` to the end;
//! - interruption notices from Scheduled Events, with
//!   [`interruption::acknowledge`] to let an eviction start once the
//!   checkpoint is done.
//!
//! Instances and placement groups live in one resource group
//! (`GPUFLEET_AZURE_RESOURCE_GROUP`); their ids are `resourceGroup/name`.

mod arm;
mod builder;
mod catalog;
pub mod check;
mod compute;
mod error;
pub mod interruption;
pub mod models;
mod placement;
mod pricing;
mod tags;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufleet_model::{
    Capabilities, Cloud, Error, ErrorKind, NoticeStream, Provider, Result, Snapshot,
};
use tokio::sync::Mutex;

pub use builder::{AzureBuilder, AzureConfig, DEFAULT_RESOURCE_GROUP};
pub use error::error_kind_for_code;

/// The Compute API version used for VMs and proximity placement groups.
pub(crate) const COMPUTE_API: &str = "2024-07-01";
/// The Network API version, for reading VMs' network interfaces.
pub(crate) const NETWORK_API: &str = "2024-05-01";
/// The Resource Manager tags API version (`Microsoft.Resources/tags`).
pub(crate) const TAGS_API: &str = "2021-04-01";

/// The Azure provider. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct AzureProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: AzureConfig,
    arm: arm::Arm,
    snapshot: Snapshot,
    catalog: Mutex<Option<(Instant, Arc<catalog::Live>)>>,
}

impl std::fmt::Debug for AzureProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl AzureProvider {
    /// Connects with the given settings. Credentials: the injected one, else
    /// the static token for a stand-in, else a service principal secret, workload identity, managed
    /// identity or the Azure CLI (`azure_identity`).
    pub async fn new(config: AzureConfig) -> Result<AzureProvider> {
        Ok(AzureProvider {
            inner: Arc::new(Inner {
                arm: arm::Arm::new(&config)?,
                snapshot: Snapshot::embedded().for_cloud(Cloud::Azure),
                catalog: Mutex::new(None),
                config,
            }),
        })
    }

    /// Connects with settings from the environment ([`AzureBuilder::from_env`]).
    pub async fn from_env() -> Result<AzureProvider> {
        AzureProvider::new(AzureBuilder::from_env().build()?).await
    }

    /// The settings in use.
    pub fn config(&self) -> &AzureConfig {
        &self.inner.config
    }
}

/// Entry points for the fuzz targets in `fuzz/` (not a stable API): every
/// Azure response body gpufleet turns into its model.
#[doc(hidden)]
pub mod fuzzing {
    use crate::models::{
        AsyncOperation, CloudError, GraphResponse, Page, ResourceSku, RetailPage, VirtualMachine,
    };

    /// Feeds `data` to each response conversion; none may panic.
    pub fn responses(data: &[u8]) {
        let snapshot = gpufleet_model::Snapshot::embedded();
        if let Ok(page) = serde_json::from_slice::<Page<ResourceSku>>(data) {
            for sku in &page.value {
                let _ = crate::catalog::to_instance_type(snapshot, sku);
                for region in &sku.locations {
                    let _ = crate::catalog::usable_zones(sku, region);
                }
            }
        }
        if let Ok(page) = serde_json::from_slice::<RetailPage>(data) {
            for item in &page.items {
                let _ = crate::catalog::price_kind(item);
                let _ = crate::catalog::to_price(&item.retail_price);
            }
        }
        if let Ok(vm) = serde_json::from_slice::<VirtualMachine>(data) {
            let _ = crate::compute::to_instance("rg", &vm);
        }
        if let Ok(g) = serde_json::from_slice::<GraphResponse>(data) {
            for row in &g.data {
                if let Some(r) = row["evictionRate"].as_str() {
                    let _ = crate::catalog::eviction_bucket(r);
                }
            }
        }
        if let Ok(e) = serde_json::from_slice::<CloudError>(data) {
            let _ = crate::arm::detail_error(&e.error, Some(409), "fuzz");
        }
        let _ = serde_json::from_slice::<AsyncOperation>(data);
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = crate::compute::image_reference(text);
        }
    }
}

/// `resourceGroup/name`.
pub(crate) fn split_id<'a>(id: &'a str, what: &str) -> Result<(&'a str, &'a str)> {
    match id.split_once('/') {
        Some((rg, name)) if !rg.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((rg, name))
        }
        _ => Err(Error::new(
            ErrorKind::NotFound,
            format!("no {what} '{id}': gpufleet's Azure ids look like gpufleet/gf-0123abcd-0"),
        )
        .with_provider(Cloud::Azure)),
    }
}

/// The ARM path of a `Microsoft.Compute` collection (`kind`:
/// `virtualMachines`, `proximityPlacementGroups`) in resource group `rg`,
/// or of one resource in it when `name` is given.
pub(crate) fn compute_path(p: &AzureProvider, rg: &str, kind: &str, name: Option<&str>) -> String {
    let collection = format!(
        "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Compute/{kind}",
        p.inner.arm.subscription
    );
    match name {
        Some(name) => format!("{collection}/{name}"),
        None => collection,
    }
}

/// The name in a `resourceGroup/name` id of one of this provider's
/// resources (`what`: "instance", "placement group"); an id in another
/// resource group is `NotFound`, since this provider manages only its own.
pub(crate) fn own_name<'a>(p: &AzureProvider, id: &'a str, what: &str) -> Result<&'a str> {
    let (rg, name) = split_id(id, what)?;
    let ours = &p.inner.config.resource_group;
    if !rg.eq_ignore_ascii_case(ours) {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("{what} {id} is in resource group '{rg}'; this provider manages '{ours}'"),
        )
        .with_provider(Cloud::Azure));
    }
    Ok(name)
}

/// The eviction and maintenance notices of the VM this runs on, from
/// Scheduled Events at the configured IMDS endpoint.
pub fn scheduled_event_notices(config: &AzureConfig) -> Result<NoticeStream> {
    interruption::notices_in(
        config.imds_endpoint.clone(),
        Duration::from_secs(1),
        Some(config.resource_group.clone()),
    )
}

impl Provider for AzureProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Azure
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL.without_partition().without_spread()
    }
}
