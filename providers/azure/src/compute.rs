//! Create, read, list and delete virtual machines. Ids are
//! `resourceGroup/name`.
//!
//! A launch of `n` VMs creates `gf-<key hash>-0` … `-<n-1>` with PUT, which
//! ARM treats as create-or-update: a retried launch addresses the same
//! names and cannot make a second VM. Each PUT is followed to the end of its
//! long-running operation; when one fails (an allocation failure leaves a
//! VM resource in the `Failed` state), every VM of the launch is deleted
//! before the error is returned.

use std::collections::HashMap;

use async_trait::async_trait;
use gpufleet_model::Compute;

use azure_core::http::Method;
use gpufleet_model::{
    tags, Addresses, Capacity, Cloud, Error, ErrorKind, Instance, InstanceId, InstanceState,
    LaunchRequest, PlacementGroupId, Pool, Region, Result, Resume, TagFilter, Tags, Zone,
};
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::catalog::zone_id;
use crate::models::{
    BillingProfile, HardwareProfile, NetworkInterface, SubResource, VirtualMachine, VmProperties,
};
use crate::{split_id, AzureProvider, COMPUTE_API, NETWORK_API, TAGS_API};

fn vm_path(p: &AzureProvider, name: &str) -> String {
    let rg = &p.inner.config.resource_group;
    crate::compute_path(p, rg, "virtualMachines", Some(name))
}

fn state(vm: &VirtualMachine) -> InstanceState {
    let power = vm
        .properties
        .instance_view
        .as_ref()
        .and_then(|v| {
            v.statuses
                .iter()
                .find_map(|s| s.code.strip_prefix("PowerState/"))
        })
        .map(str::to_string);
    match (
        vm.properties.provisioning_state.as_deref(),
        power.as_deref(),
    ) {
        (Some("Deleting"), _) => InstanceState::ShuttingDown,
        (_, Some("running")) => InstanceState::Running,
        (_, Some("stopping" | "deallocating")) => InstanceState::Stopping,
        (_, Some("stopped" | "deallocated")) => InstanceState::Stopped,
        (Some("Succeeded"), None) => InstanceState::Running,
        _ => InstanceState::Pending,
    }
}

pub(crate) fn to_instance(resource_group: &str, vm: &VirtualMachine) -> Option<Instance> {
    let name = vm.name.clone()?;
    let tags: Tags = crate::tags::from_arm(&vm.tags);
    Some(Instance {
        id: InstanceId::new(format!("{resource_group}/{name}")),
        pool: Pool {
            cloud: Cloud::Azure,
            region: Region::new(vm.location.clone()),
            zone: vm
                .zones
                .first()
                .map(|z| Zone::new(zone_id(&vm.location, z))),
            instance_type: vm.properties.hardware_profile.vm_size.clone(),
            capacity: if vm.properties.priority.as_deref() == Some("Spot") {
                Capacity::Spot
            } else {
                Capacity::OnDemand
            },
        },
        state: state(vm),
        // The instance view names the power state, not who caused it: a
        // Spot eviction and a user's deallocate look alike there.
        end_reason: None,
        ended_at: None,
        expires_at: tags
            .get(tags::EXPIRES_AT)
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok()),
        launched_at: vm
            .properties
            .time_created
            .as_deref()
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
            .unwrap_or_else(OffsetDateTime::now_utc),
        placement_group: vm.properties.proximity_placement_group.as_ref().map(|g| {
            let name = g.id.rsplit('/').next().unwrap_or(&g.id);
            PlacementGroupId::new(format!("{resource_group}/{name}"))
        }),
        tags,
        // The VM does not carry its addresses: its network interface does
        // (filled in by `with_addresses`).
        addresses: Addresses::default(),
    })
}

/// The ARM id of a VM's primary network interface, from its
/// `networkProfile` (as the Compute API answers it).
fn primary_nic(vm: &VirtualMachine) -> Option<String> {
    let nics = vm
        .properties
        .network_profile
        .as_ref()?
        .get("networkInterfaces")?
        .as_array()?;
    nics.iter()
        .find(|n| n.pointer("/properties/primary") == Some(&json!(true)))
        .or_else(|| nics.first())?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

/// Every network interface in the resource group (all pages): one call
/// whatever the number of VMs.
async fn nics(p: &AzureProvider) -> Result<Vec<NetworkInterface>> {
    let path = format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces",
        p.inner.arm.subscription, p.inner.config.resource_group
    );
    let url = p.inner.arm.url(&path, NETWORK_API)?;
    p.inner.arm.list(url, "networkInterfaces.list").await
}

/// Fills in the private address of each of `vms`' instances from its
/// primary network interface. Addresses are an extra: a resource group's
/// interfaces that cannot be read (an identity without
/// `Microsoft.Network/networkInterfaces/read`) leave them unknown, with a
/// warning, rather than fail the listing.
async fn with_addresses(p: &AzureProvider, vms: &[VirtualMachine], out: &mut [Instance]) {
    if out.is_empty() {
        return;
    }
    let listed = match nics(p).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the network interfaces: instances' addresses unknown");
            return;
        }
    };
    let by_vm: HashMap<String, std::net::IpAddr> = listed
        .iter()
        .filter(|n| n.properties.primary != Some(false))
        .filter_map(|n| {
            let vm = n
                .properties
                .virtual_machine
                .as_ref()?
                .id
                .to_ascii_lowercase();
            Some((vm, n.private_address()?))
        })
        .collect();
    let rg = &p.inner.config.resource_group;
    for vm in vms {
        let (Some(id), Some(name)) = (vm.id.as_deref(), vm.name.as_deref()) else {
            continue;
        };
        let instance_id = format!("{rg}/{name}");
        if let (Some(i), Some(ip)) = (
            out.iter_mut().find(|i| i.id.as_str() == instance_id),
            by_vm.get(&id.to_ascii_lowercase()),
        ) {
            i.addresses.private = Some(*ip);
        }
    }
}

/// `Publisher:Offer:Sku:Version` (as the Azure CLI takes it) or an image
/// resource id.
pub(crate) fn image_reference(image: &str) -> Result<serde_json::Value> {
    if image.starts_with("/subscriptions/") {
        return Ok(json!({ "id": image }));
    }
    let parts: Vec<&str> = image.split(':').collect();
    match parts.as_slice() {
        [publisher, offer, sku, version] if parts.iter().all(|p| !p.is_empty()) => Ok(json!({
            "publisher": publisher, "offer": offer, "sku": sku, "version": version
        })),
        _ => Err(Error::invalid_input(format!(
            "invalid Azure image '{image}': give Publisher:Offer:Sku:Version (for example Canonical:ubuntu-24_04-lts:server:latest) or an image resource id (/subscriptions/…)"
        ))
        .with_provider(Cloud::Azure)),
    }
}

fn body(p: &AzureProvider, req: &LaunchRequest, name: &str, sent: &Tags) -> Result<VirtualMachine> {
    let c = &p.inner.config;
    let subnet = req.access.subnet.as_deref().or(c.subnet_id.as_deref()).ok_or_else(|| {
        Error::invalid_input("no subnet for the VM's network interface: set GPUFLEET_AZURE_SUBNET_ID to a subnet's ARM id")
            .with_provider(Cloud::Azure)
    })?;
    let key = req
        .access
        .ssh_public_key
        .as_deref()
        .or(c.ssh_public_key.as_deref())
        .ok_or_else(|| {
            Error::invalid_input(
                "no SSH public key for the admin user: set GPUFLEET_AZURE_SSH_PUBLIC_KEY",
            )
            .with_provider(Cloud::Azure)
        })?;
    let spot = req.pool.capacity == Capacity::Spot;
    let zones = match &req.pool.zone {
        Some(z) => {
            let (region, n) = z.as_str().rsplit_once('-').ok_or_else(|| {
                Error::invalid_input(format!(
                    "invalid Azure zone '{z}': gpufleet's Azure zones look like eastus-1"
                ))
            })?;
            if region != req.pool.region.as_str() {
                return Err(Error::invalid_input(format!(
                    "zone {z} is not in region {}",
                    req.pool.region
                )));
            }
            vec![n.to_string()]
        }
        None => Vec::new(),
    };
    let ppg = match &req.placement_group {
        Some(id) => {
            let (rg, group) = split_id(id.as_str(), "placement group")?;
            Some(SubResource {
                id: crate::compute_path(p, rg, "proximityPlacementGroups", Some(group)),
            })
        }
        None => None,
    };
    let mut storage = json!({
        "imageReference": image_reference(&req.image)?,
        "osDisk": {"createOption": "FromImage", "deleteOption": "Delete",
                   "managedDisk": {"storageAccountType": "Premium_LRS"}}
    });
    if let Some(gb) = req.access.disk_gb {
        storage["osDisk"]["diskSizeGB"] = json!(gb);
    }
    let mut os = json!({
        "computerName": name,
        "adminUsername": c.admin_username,
        "linuxConfiguration": {"disablePasswordAuthentication": true,
            "ssh": {"publicKeys": [{"path": format!("/home/{}/.ssh/authorized_keys", c.admin_username), "keyData": key}]}}
    });
    if let Some(script) = &req.boot_script {
        // customData: base64, run by cloud-init at first boot.
        os["customData"] = json!(base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            script.as_bytes()
        ));
    }
    let mut nic = json!({"name": format!("{name}-nic"), "properties": {
        "primary": true, "deleteOption": "Delete",
        "ipConfigurations": [{"name": "ipconfig1", "properties": {"subnet": {"id": subnet}}}]
    }});
    if let Some(nsg) = req.access.security_groups.first() {
        nic["properties"]["networkSecurityGroup"] = json!({"id": nsg});
    }
    let network = json!({
        "networkApiVersion": "2020-11-01",
        "networkInterfaceConfigurations": [nic]
    });
    let identity = req
        .access
        .identity
        .as_ref()
        .map(|id| json!({"type": "UserAssigned", "userAssignedIdentities": {id.clone(): {}}}));
    Ok(VirtualMachine {
        identity,
        location: req.pool.region.to_string(),
        zones,
        tags: crate::tags::to_arm(sent)?,
        properties: VmProperties {
            hardware_profile: HardwareProfile {
                vm_size: req.pool.instance_type.clone(),
            },
            priority: Some(if spot { "Spot" } else { "Regular" }.into()),
            eviction_policy: spot.then(|| "Delete".into()),
            // -1: pay up to the on-demand price; evicted for capacity only.
            billing_profile: spot.then_some(BillingProfile { max_price: -1.0 }),
            storage_profile: Some(storage),
            os_profile: Some(os),
            network_profile: Some(network),
            proximity_placement_group: ppg,
            diagnostics_profile: Some(json!({"bootDiagnostics": {"enabled": true}})),
            ..VmProperties::default()
        },
        ..VirtualMachine::default()
    })
}

/// Every VM in the resource group (all pages).
async fn all(p: &AzureProvider) -> Result<Vec<VirtualMachine>> {
    let rg = &p.inner.config.resource_group;
    let url = p.inner.arm.url(
        &crate::compute_path(p, rg, "virtualMachines", None),
        COMPUTE_API,
    )?;
    p.inner.arm.list(url, "virtualMachines.list").await
}

/// Deletes every VM of a failed launch: those tagged with its key and those
/// with its names (already-gone is fine).
async fn clean_up(p: &AzureProvider, req: &LaunchRequest, by_key: &TagFilter) {
    let listed = p.list_instances(by_key).await;
    let rg = &p.inner.config.resource_group;
    gpufleet_model::clean_up_launch(req, rg, listed, |id| async move { p.terminate(&id).await })
        .await;
}

fn own_name<'a>(p: &AzureProvider, id: &'a InstanceId) -> Result<&'a str> {
    crate::own_name(p, id.as_str(), "instance")
}

/// The most of a serial console log `console_output` returns (its end).
const MAX_CONSOLE_BYTES: usize = 1 << 20;

#[async_trait]
impl Compute for AzureProvider {
    async fn launch(&self, req: &LaunchRequest) -> Result<Vec<Instance>> {
        req.validate_for(Cloud::Azure)?;
        let key = req.idempotency_key.as_str();
        let sent = req.effective_tags(OffsetDateTime::now_utc());
        // Check the whole request before anything is created.
        let bodies: Vec<(String, VirtualMachine)> = (0..req.count)
            .map(|i| {
                let name = req.idempotency_key.resource_name(i);
                body(self, req, &name, &sent).map(|b| (name, b))
            })
            .collect::<Result<_>>()?;
        let by_key = TagFilter::default().with(tags::IDEMPOTENCY_KEY, key);
        let existing = self.list_instances(&by_key).await?;
        let resume = req.resume(&existing).map_err(|e| {
            e.with_provider(Cloud::Azure)
                .with_operation("virtualMachines.createOrUpdate")
        })?;
        let settled: Vec<&str> = existing
            .iter()
            .filter(|i| i.state != InstanceState::Pending)
            .filter_map(|i| i.id.as_str().rsplit('/').next())
            .collect();
        if resume == Resume::Done && settled.len() == existing.len() {
            tracing::info!(
                key,
                "launch already done with this idempotency key; returning its VMs"
            );
            return Ok(existing);
        }
        if let Resume::Partial(n) = resume {
            tracing::info!(key, have = n, want = req.count, "resuming a partial launch");
        }
        // Created together, each waited for through its own operation: a launch
        // takes one operation's time whatever its count. A VM still being
        // created by an earlier attempt is put again (the same body: ARM treats it
        // as the same request) so that this attempt waits for it too.
        let todo = bodies
            .iter()
            .filter(|(name, _)| !settled.contains(&name.as_str()));
        let results = futures::future::join_all(todo.map(|(name, vm)| async move {
            let url = self.inner.arm.url(&vm_path(self, name), COMPUTE_API)?;
            self.inner
                .arm
                .run(Method::Put, url, Some(vm), "virtualMachines.createOrUpdate")
                .await
                .map(|_| ())
        }))
        .await;
        if let Some(e) = results.into_iter().find_map(std::result::Result::err) {
            let e = e
                .with_context("pool", req.pool.to_string())
                .with_context("idempotency_key", key.to_string());
            // Nothing half-created: a failed allocation leaves the VM resource
            // behind in the Failed state, and a cut-off attempt may have left
            // others; delete every VM of this key, by tag and by name (its NIC
            // and OS disk go with it: `deleteOption: Delete`).
            clean_up(self, req, &by_key).await;
            return Err(e);
        }
        let made = self.list_instances(&by_key).await?;
        if made.len() != req.count as usize {
            clean_up(self, req, &by_key).await;
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "launch {key} found {} VM(s) after creating {}; removed them",
                    made.len(),
                    req.count
                ),
            )
            .with_provider(Cloud::Azure)
            .with_operation("virtualMachines.createOrUpdate"));
        }
        Ok(made)
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        let name = own_name(self, id)?;
        let mut url = self.inner.arm.url(&vm_path(self, name), COMPUTE_API)?;
        url.query_pairs_mut().append_pair("$expand", "instanceView");
        let vm: VirtualMachine = self
            .inner
            .arm
            .call(Method::Get, url, None::<&()>, "virtualMachines.get")
            .await
            .map_err(|e| e.with_context("instance", id.to_string()))?;
        let mut instance =
            to_instance(&self.inner.config.resource_group, &vm).ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("VM {id} came back without a name"),
                )
                .with_provider(Cloud::Azure)
                .with_operation("virtualMachines.get")
            })?;
        // Its address from its primary network interface (unknown, not an
        // error, when that cannot be read).
        if let Some(nic) = primary_nic(&vm).filter(|_| instance.state.is_live()) {
            let got: Result<NetworkInterface> = match self.inner.arm.url(&nic, NETWORK_API) {
                Ok(url) => {
                    self.inner
                        .arm
                        .call(Method::Get, url, None::<&()>, "networkInterfaces.get")
                        .await
                }
                Err(e) => Err(e),
            };
            match got {
                Ok(n) => instance.addresses.private = n.private_address(),
                Err(e) => {
                    tracing::warn!(instance = %id, error = %e, "cannot read the network interface: address unknown")
                }
            }
        }
        Ok(instance)
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        let regions = &self.inner.config.regions;
        let vms = all(self).await?;
        let mut out: Vec<Instance> = vms
            .iter()
            .filter_map(|vm| to_instance(&self.inner.config.resource_group, vm))
            .filter(|i| filter.matches(&i.tags) && i.state.is_live())
            .filter(|i| regions.is_empty() || regions.contains(&i.pool.region))
            .collect();
        with_addresses(self, &vms, &mut out).await;
        out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(out)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        // ARM answers 204 for deleting a VM that is gone; gpufleet's contract is
        // NotFound, so look first.
        let inst = self.instance(id).await?;
        if inst.state == InstanceState::ShuttingDown {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("VM {id} is already being deleted"),
            )
            .with_provider(Cloud::Azure)
            .with_operation("virtualMachines.delete"));
        }
        let name = own_name(self, id)?;
        let url = self.inner.arm.url(&vm_path(self, name), COMPUTE_API)?;
        self.inner
            .arm
            .run(Method::Delete, url, None::<&()>, "virtualMachines.delete")
            .await
            .map(|_| ())
    }

    /// `PATCH {vm}/providers/Microsoft.Resources/tags/default` with the
    /// `Merge` operation (as the node's boot script writes its own tags),
    /// each VM in turn (8 at a time).
    async fn tag_instances(&self, ids: &[InstanceId], tags: &Tags) -> Result<()> {
        use futures::stream::{self, TryStreamExt};
        let body = serde_json::json!({
            "operation": "Merge",
            "properties": { "tags": crate::tags::to_arm(tags)? },
        });
        stream::iter(ids.iter().map(Ok))
            .try_for_each_concurrent(8, |id| {
                let body = &body;
                async move {
                    let name = own_name(self, id)?;
                    let url = self.inner.arm.url(
                        &format!(
                            "{}/providers/Microsoft.Resources/tags/default",
                            vm_path(self, name)
                        ),
                        TAGS_API,
                    )?;
                    self.inner
                        .arm
                        .run(Method::Patch, url, Some(body), "tags.updateAtScope")
                        .await
                        .map(|_| ())
                        .map_err(|e| e.with_context("instance", id.to_string()))
                }
            })
            .await
    }

    /// The VM's serial console log through boot diagnostics: ARM hands back a
    /// short-lived read-only SAS URL of the log blob (`retrieveBootDiagnosticsData`),
    /// which is fetched without the ARM token. The URL is a credential: it
    /// appears in no error or log line.
    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        let name = own_name(self, id)?;
        let mut url = self.inner.arm.url(
            &format!("{}/retrieveBootDiagnosticsData", vm_path(self, name)),
            COMPUTE_API,
        )?;
        url.query_pairs_mut()
            .append_pair("sasUriExpirationTimeInMinutes", "10");
        let diag: crate::models::BootDiagnostics = self
            .inner
            .arm
            .call(
                Method::Post,
                url,
                None::<&()>,
                "virtualMachines.retrieveBootDiagnosticsData",
            )
            .await
            .map_err(|e| e.with_context("instance", id.to_string()))?;
        let Some(sas) = diag.serial_console_log_blob_uri else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("VM {id} has no serial console log yet (boot diagnostics keep it once the VM has booted)"),
            )
            .with_provider(Cloud::Azure));
        };
        let blob = azure_core::http::Url::parse(&sas).map_err(|_| {
            Error::new(
                ErrorKind::Unexpected,
                format!("boot diagnostics of {id} gave a log URL that does not parse"),
            )
            .with_provider(Cloud::Azure)
        })?;
        let text = self
            .inner
            .arm
            .public_text(blob, "bootDiagnostics.serialConsoleLog")
            .await
            .map_err(|e| e.with_context("instance", id.to_string()))?;
        let start = text.len().saturating_sub(MAX_CONSOLE_BYTES);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        Ok(text[start..].to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_and_names() {
        assert_eq!(
            image_reference("Canonical:ubuntu-24_04-lts:server:latest").unwrap()["offer"],
            "ubuntu-24_04-lts"
        );
        assert!(image_reference(
            "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/images/i"
        )
        .unwrap()["id"]
            .is_string());
        let e = image_reference("ami-123").unwrap_err();
        assert!(e.to_string().contains("Publisher:Offer:Sku:Version"), "{e}");
    }
}
