//! `serde` models of the Azure REST resources gpufleet uses, named and
//! shaped as the REST references give them (Compute `skus` 2021-07-01,
//! `virtualMachines` and `proximityPlacementGroups` 2024-07-01, Resource
//! Graph `resources` 2022-10-01, Retail Prices 2023-01-01-preview, the ARM
//! error and async-operation bodies). Kept in one module so that an official
//! Azure compute crate on `azure_core` 1.x can replace them when one ships.
//! Unknown fields are ignored; fields gpufleet does not read are left out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A page of an ARM list: `value` and `nextLink`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The items.
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
    /// The next page, absolute.
    #[serde(default)]
    pub next_link: Option<String>,
}

/// `{"error": {"code", "message", "details"}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct CloudError {
    /// The error.
    pub error: ErrorDetail,
}

/// An ARM error detail.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorDetail {
    /// The code (`SkuNotAvailable`, …).
    #[serde(default)]
    pub code: String,
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// Nested details (allocation failures put the useful code here).
    #[serde(default)]
    pub details: Vec<ErrorDetail>,
}

/// The body of an `Azure-AsyncOperation` URL.
#[derive(Debug, Clone, Deserialize)]
pub struct AsyncOperation {
    /// `InProgress`, `Succeeded`, `Failed` or `Canceled`.
    pub status: String,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<ErrorDetail>,
}

/// A Compute resource SKU (`Microsoft.Compute/skus`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSku {
    /// `virtualMachines`, `disks`, …
    #[serde(default)]
    pub resource_type: String,
    /// `Standard_NC24ads_A100_v4`.
    #[serde(default)]
    pub name: String,
    /// `StandardNCADSA100v4Family`.
    #[serde(default)]
    pub family: Option<String>,
    /// Regions.
    #[serde(default)]
    pub locations: Vec<String>,
    /// Zones per region.
    #[serde(default)]
    pub location_info: Vec<LocationInfo>,
    /// `vCPUs`, `MemoryGB`, `GPUs`, …
    #[serde(default)]
    pub capabilities: Vec<Capability>,
    /// Where it cannot be used.
    #[serde(default)]
    pub restrictions: Vec<Restriction>,
}

/// Zones of a SKU in one region.
#[derive(Debug, Clone, Deserialize)]
pub struct LocationInfo {
    /// The region.
    pub location: String,
    /// Its zones (`"1"`, `"2"`, `"3"`).
    #[serde(default)]
    pub zones: Vec<String>,
}

/// A name/value capability.
#[derive(Debug, Clone, Deserialize)]
pub struct Capability {
    /// Name.
    pub name: String,
    /// Value, as a string.
    pub value: String,
}

/// A restriction on a SKU.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restriction {
    /// `Location` or `Zone`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Regions it applies to.
    #[serde(default)]
    pub values: Vec<String>,
    /// Which regions and zones.
    #[serde(default)]
    pub restriction_info: Option<RestrictionInfo>,
    /// `QuotaId` or `NotAvailableForSubscription`.
    #[serde(default)]
    pub reason_code: String,
}

/// The regions and zones of a restriction.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RestrictionInfo {
    /// Regions.
    #[serde(default)]
    pub locations: Vec<String>,
    /// Zones.
    #[serde(default)]
    pub zones: Vec<String>,
}

/// A reference to another resource.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SubResource {
    /// Its ARM id.
    pub id: String,
}

/// An ARM tracked resource: the envelope every regional resource shares
/// (`id`, `name`, `location`, `zones`, `tags`, `identity`) around its own
/// `properties`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tracked<P> {
    /// ARM id (read only).
    pub id: Option<String>,
    /// Name (read only).
    pub name: Option<String>,
    /// Region.
    pub location: String,
    /// Zones (at most one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// The managed identities the resource acts as (`{"type":
    /// "UserAssigned", "userAssignedIdentities": {id: {}}}`); only VMs
    /// carry one here.
    pub identity: Option<serde_json::Value>,
    /// Properties.
    #[serde(default)]
    pub properties: P,
}

/// A network interface (`Microsoft.Network/networkInterfaces`), the parts
/// gpufleet reads: which VM it is attached to and its IP configurations.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// ARM id.
    pub id: Option<String>,
    /// Properties.
    #[serde(default)]
    pub properties: NicProperties,
}

/// `properties` of a network interface.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicProperties {
    /// The VM it is attached to.
    pub virtual_machine: Option<SubResource>,
    /// Whether it is its VM's primary interface.
    pub primary: Option<bool>,
    /// Its IP configurations.
    #[serde(default)]
    pub ip_configurations: Vec<IpConfiguration>,
}

/// One IP configuration of a network interface.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpConfiguration {
    /// Properties.
    #[serde(default)]
    pub properties: IpConfigurationProperties,
}

/// `properties` of an IP configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpConfigurationProperties {
    /// Whether it is the interface's primary configuration.
    pub primary: Option<bool>,
    /// Its private address (`privateIPAddress`).
    #[serde(rename = "privateIPAddress")]
    pub private_ip_address: Option<String>,
}

impl NetworkInterface {
    /// The private address of its primary IP configuration (the first
    /// where none says it is primary).
    pub fn private_address(&self) -> Option<std::net::IpAddr> {
        let configs = &self.properties.ip_configurations;
        configs
            .iter()
            .find(|c| c.properties.primary == Some(true))
            .or_else(|| configs.first())
            .and_then(|c| c.properties.private_ip_address.as_deref())
            .and_then(|a| a.parse().ok())
    }
}

/// A virtual machine (the parts gpufleet sends and reads).
pub type VirtualMachine = Tracked<VmProperties>;

/// `properties` of a VM.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmProperties {
    /// The size.
    #[serde(default)]
    pub hardware_profile: HardwareProfile,
    /// `Regular` or `Spot`.
    pub priority: Option<String>,
    /// `Delete` or `Deallocate` (Spot only).
    pub eviction_policy: Option<String>,
    /// Spot price cap (`-1`: pay up to on-demand, never evicted for price).
    pub billing_profile: Option<BillingProfile>,
    /// Image and disks.
    pub storage_profile: Option<serde_json::Value>,
    /// Admin user and SSH key.
    pub os_profile: Option<serde_json::Value>,
    /// Network interfaces.
    pub network_profile: Option<serde_json::Value>,
    /// A proximity placement group.
    pub proximity_placement_group: Option<SubResource>,
    /// Boot diagnostics (`{"bootDiagnostics": {"enabled": true}}`: managed
    /// storage keeps the serial console log `jobs logs` reads).
    pub diagnostics_profile: Option<serde_json::Value>,
    /// `Creating`, `Succeeded`, `Deleting`, `Failed` (read only).
    pub provisioning_state: Option<String>,
    /// Power state and more (with `$expand=instanceView`).
    pub instance_view: Option<InstanceView>,
    /// When it was created (read only).
    pub time_created: Option<String>,
}

/// The VM size.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HardwareProfile {
    /// `Standard_NC24ads_A100_v4`.
    #[serde(default)]
    pub vm_size: String,
}

/// Spot price cap.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BillingProfile {
    /// USD per hour, or -1.
    pub max_price: f64,
}

/// The instance view.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InstanceView {
    /// `ProvisioningState/succeeded`, `PowerState/running`, …
    #[serde(default)]
    pub statuses: Vec<InstanceViewStatus>,
}

/// One status.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InstanceViewStatus {
    /// The code.
    #[serde(default)]
    pub code: String,
}

/// A proximity placement group.
pub type ProximityPlacementGroup = Tracked<PpgProperties>;

/// `properties` of a proximity placement group.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PpgProperties {
    /// `Standard` or `Ultra`.
    pub proximity_placement_group_type: Option<String>,
}

/// A Retail Prices API page.
#[derive(Debug, Clone, Deserialize)]
pub struct RetailPage {
    /// Prices.
    #[serde(rename = "Items", default)]
    pub items: Vec<RetailPrice>,
    /// The next page, absolute.
    #[serde(rename = "NextPageLink", default)]
    pub next_page_link: Option<String>,
}

/// One Retail Prices item.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetailPrice {
    /// `USD`.
    #[serde(default)]
    pub currency_code: String,
    /// The price per unit.
    pub retail_price: serde_json::Number,
    /// `eastus`.
    #[serde(default)]
    pub arm_region_name: String,
    /// `NC24ads A100 v4 Spot`.
    #[serde(default)]
    pub meter_name: String,
    /// `Virtual Machines NCads A100 v4 Series Windows`.
    #[serde(default)]
    pub product_name: String,
    /// `NC24ads A100 v4 Low Priority`.
    #[serde(default)]
    pub sku_name: String,
    /// `Standard_NC24ads_A100_v4`.
    #[serde(default)]
    pub arm_sku_name: String,
    /// `1 Hour`.
    #[serde(default)]
    pub unit_of_measure: String,
    /// `Consumption`, `Reservation`, `DevTestConsumption`.
    #[serde(rename = "type", default)]
    pub price_type: String,
    /// When the price took effect.
    #[serde(default)]
    pub effective_start_date: Option<String>,
}

/// A Resource Graph query answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphResponse {
    /// Rows (objects, as `resultFormat: objectArray`).
    #[serde(default)]
    pub data: Vec<serde_json::Value>,
    /// Continue from here.
    #[serde(rename = "$skipToken", default)]
    pub skip_token: Option<String>,
}

/// The answer of `virtualMachines/retrieveBootDiagnosticsData`: read-only SAS
/// URLs of the boot screenshot and the serial console log (each a
/// credential: never logged or printed).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootDiagnostics {
    /// The serial console log's blob URL, with its SAS token.
    #[serde(default)]
    pub serial_console_log_blob_uri: Option<String>,
}
