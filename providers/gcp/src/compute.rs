//! Launch, describe, list and delete Compute Engine instances. Ids are
//! `zone/name`.
//!
//! A launch of `n` instances creates `gf-<key hash>-0` … `-<n-1>`, each with a
//! `requestId` derived from the idempotency key and its index: a retried
//! insert is recognised by the API, and a retried launch finds the names it
//! already created and creates only the missing ones (a launch cut off by a
//! timeout resumes). The inserts run together. When one fails, every
//! instance of the key (by label and by name) is deleted before the error is
//! returned: a launch ends with all its instances or none.

use async_trait::async_trait;
use gpufleet_model::Compute;

use google_cloud_compute_v1::model::instance::Status;
use google_cloud_compute_v1::model::metadata::Items;
use google_cloud_compute_v1::model::scheduling::{
    InstanceTerminationAction, OnHostMaintenance, ProvisioningModel,
};
use google_cloud_compute_v1::model::{
    AcceleratorConfig, AttachedDisk, AttachedDiskInitializeParams, Instance as GceInstance,
    Metadata, NetworkInterface, Scheduling,
};
use gpufleet_model::{
    tags, Addresses, Capacity, Cloud, EndCause, EndReason, Error, ErrorKind, Instance, InstanceId,
    InstanceState, LaunchRequest, PlacementGroupId, Pool, Region, Result, Resume, TagFilter, Tags,
    Zone,
};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::catalog::{live, Shape};
use crate::error::from_gax;
use crate::operation::{wait, Scope};
use crate::tags::{from_labels, label_filter, request_id, to_labels, KEY_LABEL, TAGS_METADATA_KEY};
use crate::{last_segment, now, region_of, split_id, GcpProvider};

fn state(s: Option<&Status>) -> InstanceState {
    match s {
        Some(Status::Running | Status::Repairing) => InstanceState::Running,
        Some(Status::Stopping | Status::Suspending | Status::PendingStop) => {
            InstanceState::Stopping
        }
        // TERMINATED is Compute Engine's word for stopped: its disks remain.
        Some(Status::Stopped | Status::Suspended | Status::Terminated) => InstanceState::Stopped,
        Some(Status::Deprovisioning) => InstanceState::ShuttingDown,
        _ => InstanceState::Pending,
    }
}

/// An instance's tags: the exact copy gpufleet put in its metadata at
/// launch, with what its node has written since as labels laid over it (the
/// boot script's `gcloud compute instances add-labels`: heartbeat, progress,
/// exit, notice, GPU summary); its labels alone where there is no copy.
fn tags_of(i: &GceInstance) -> Tags {
    let from_metadata = i
        .metadata
        .as_ref()
        .and_then(|m| {
            m.items
                .iter()
                .find(|it| it.key.as_deref() == Some(TAGS_METADATA_KEY))
        })
        .and_then(|it| it.value.as_deref())
        .and_then(|v| serde_json::from_str::<Tags>(v).ok());
    let labelled = from_labels(&i.labels);
    let Some(mut tags) = from_metadata else {
        return labelled;
    };
    // The node's reports, and the expiry a controller extends, are written
    // as labels after launch (both read back exactly).
    for key in tags::NODE_REPORTED.iter().chain([&tags::EXPIRES_AT]) {
        if let Some(v) = labelled.get(*key) {
            tags.insert(key.to_string(), v.clone());
        }
    }
    tags
}

pub(crate) fn to_instance(i: &GceInstance) -> Option<Instance> {
    let name = i.name.as_deref()?;
    let zone = last_segment(i.zone.as_deref()?);
    let machine = last_segment(i.machine_type.as_deref()?);
    let instance_type = match i.guest_accelerators.first() {
        Some(a) => format!(
            "{machine}+{}x{}",
            last_segment(a.accelerator_type.as_deref().unwrap_or("")),
            a.accelerator_count.unwrap_or(0)
        ),
        None => machine.to_string(),
    };
    let scheduling = i.scheduling.as_ref();
    let spot = scheduling.is_some_and(|s| {
        s.provisioning_model == Some(ProvisioningModel::Spot) || s.preemptible == Some(true)
    });
    let tags = tags_of(i);
    let state = state(i.status.as_ref());
    // A stopped or terminated VM says when it stopped (a spot VM preempted
    // under the STOP action, one stopped by hand): the end the ledger of
    // spend records, rather than when a command saw it.
    let ended_at = i
        .last_stop_timestamp
        .as_deref()
        .filter(|_| matches!(state, InstanceState::Stopped | InstanceState::Terminated))
        .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok());
    Some(Instance {
        id: InstanceId::new(format!("{zone}/{name}")),
        pool: Pool {
            cloud: Cloud::Gcp,
            region: Region::new(region_of(zone)),
            zone: Some(Zone::new(zone)),
            instance_type,
            capacity: if spot {
                Capacity::Spot
            } else {
                Capacity::OnDemand
            },
        },
        state,
        end_reason: None,
        ended_at,
        expires_at: tags
            .get(tags::EXPIRES_AT)
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok()),
        launched_at: i
            .creation_timestamp
            .as_deref()
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
            .unwrap_or_else(now),
        placement_group: i.resource_policies.first().map(|rp| {
            // .../regions/us-central1/resourcePolicies/name
            let parts: Vec<&str> = rp.rsplit('/').take(3).collect();
            match parts.as_slice() {
                [name, _, region] => PlacementGroupId::new(format!("{region}/{name}")),
                _ => PlacementGroupId::new(rp.clone()),
            }
        }),
        tags,
        addresses: addresses_of(i),
    })
}

/// The first network interface's `networkIP` and its first access
/// configuration's `natIP` (the external address, where it has one).
fn addresses_of(i: &GceInstance) -> Addresses {
    let nic = i.network_interfaces.first();
    Addresses::parse(
        nic.and_then(|n| n.network_ip.as_deref()),
        nic.and_then(|n| n.access_configs.first())
            .and_then(|a| a.nat_ip.as_deref()),
    )
}

/// Live instances whose labels match, in every zone (all pages).
async fn list_filtered(p: &GcpProvider, filter: &TagFilter) -> Result<Vec<Instance>> {
    let mut out = Vec::new();
    let label_filter = label_filter(filter);
    each_aggregated_page!(
        p,
        instances,
        "instances.aggregatedList",
        |page| {
            for list in page.items.values() {
                out.extend(
                    list.instances
                        .iter()
                        .filter_map(to_instance)
                        .filter(|i| filter.matches(&i.tags)),
                );
            }
        },
        filter = &label_filter
    )
    .await?;
    let regions = &p.inner.config.regions;
    out.retain(|i| regions.is_empty() || regions.contains(&i.pool.region));
    out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    Ok(out)
}

/// The zone to launch a zoneless pool into: the first that offers it.
async fn pick_zone(p: &GcpProvider, pool: &Pool) -> Result<String> {
    if let Some(z) = &pool.zone {
        return Ok(z.to_string());
    }
    let live = live(p).await?;
    live.offers
        .iter()
        .find(|o| {
            o.pool.region == pool.region
                && o.pool.instance_type == pool.instance_type
                && o.pool.capacity == pool.capacity
        })
        .and_then(|o| o.pool.zone.as_ref().map(|z| z.to_string()))
        .ok_or_else(|| {
            Error::invalid_input(format!(
                "no zone of {} offers {} ({})",
                pool.region, pool.instance_type, pool.capacity
            ))
            .with_provider(Cloud::Gcp)
        })
}

fn body(
    p: &GcpProvider,
    req: &LaunchRequest,
    zone: &str,
    name: &str,
    sent: &Tags,
) -> Result<GceInstance> {
    let shape = Shape::from_name(&req.pool.instance_type);
    let spot = req.pool.capacity == Capacity::Spot;
    let scheduling = if spot {
        Scheduling::new()
            .set_provisioning_model(ProvisioningModel::Spot)
            .set_instance_termination_action(InstanceTerminationAction::Delete)
            .set_automatic_restart(false)
            .set_on_host_maintenance(OnHostMaintenance::Terminate)
    } else {
        Scheduling::new()
            .set_provisioning_model(ProvisioningModel::Standard)
            .set_automatic_restart(true)
            // GPUs cannot live-migrate.
            .set_on_host_maintenance(OnHostMaintenance::Terminate)
    };
    let tags_json = serde_json::to_string(sent).map_err(|e| {
        Error::invalid_input(format!("tags cannot be stored: {e}")).with_provider(Cloud::Gcp)
    })?;
    let mut labels = to_labels(sent);
    labels.insert(KEY_LABEL.into(), req.idempotency_key.fingerprint());
    let mut items = vec![Items::new().set_key(TAGS_METADATA_KEY).set_value(tags_json)];
    if let Some(script) = &req.boot_script {
        items.push(
            Items::new()
                .set_key("startup-script")
                .set_value(script.clone()),
        );
    }
    if let Some(key) = &req.access.ssh_public_key {
        // The `ssh-keys` item: `USER:KEY`, for the image's guest agent.
        items.push(
            Items::new()
                .set_key("ssh-keys")
                .set_value(format!("gpufleet:{key}")),
        );
    }
    let mut disk = AttachedDiskInitializeParams::new()
        .set_source_image(req.image.clone())
        .set_labels(to_labels(sent));
    if let Some(gb) = req.access.disk_gb {
        disk = disk.set_disk_size_gb(i64::from(gb));
    }
    let mut nic = NetworkInterface::new().set_network("global/networks/default");
    if let Some(subnet) = &req.access.subnet {
        nic = NetworkInterface::new().set_subnetwork(subnet.clone());
    }
    let mut i = GceInstance::new()
        .set_name(name)
        .set_machine_type(format!("zones/{zone}/machineTypes/{}", shape.machine_type))
        .set_labels(labels)
        .set_scheduling(scheduling)
        .set_metadata(Metadata::new().set_items(items))
        .set_disks([AttachedDisk::new()
            .set_boot(true)
            .set_auto_delete(true)
            .set_initialize_params(disk)])
        .set_network_interfaces([nic]);
    if !req.access.security_groups.is_empty() {
        // Network tags select the firewall rules.
        i = i.set_tags(
            google_cloud_compute_v1::model::Tags::new()
                .set_items(req.access.security_groups.clone()),
        );
    }
    if let Some(sa) = &req.access.identity {
        i = i.set_service_accounts([google_cloud_compute_v1::model::ServiceAccount::new()
            .set_email(sa.clone())
            .set_scopes(["https://www.googleapis.com/auth/cloud-platform"])]);
    }
    if let Some((accel, count)) = &shape.attach {
        i = i.set_guest_accelerators([AcceleratorConfig::new()
            .set_accelerator_type(format!("zones/{zone}/acceleratorTypes/{accel}"))
            .set_accelerator_count(i32::try_from(*count).unwrap_or(i32::MAX))]);
    }
    if let Some(pg) = &req.placement_group {
        let (pg_region, pg_name) = split_id(pg.as_str(), "placement group")?;
        if pg_region != region_of(zone) {
            return Err(Error::invalid_input(format!(
                "placement group {pg} is in {pg_region}, the launch in {zone}"
            ))
            .with_provider(Cloud::Gcp));
        }
        i = i.set_resource_policies([format!(
            "projects/{}/regions/{pg_region}/resourcePolicies/{pg_name}",
            p.project()
        )]);
    }
    Ok(i)
}

async fn insert_one(
    p: &GcpProvider,
    req: &LaunchRequest,
    zone: &str,
    index: u32,
    sent: &Tags,
) -> Result<()> {
    let key = req.idempotency_key.as_str();
    let name = req.idempotency_key.resource_name(index);
    let op = p
        .inner
        .instances
        .insert()
        .set_project(p.project())
        .set_zone(zone)
        .set_request_id(request_id(key, index))
        .set_body(body(p, req, zone, &name, sent)?)
        .send()
        .await;
    let op = match op {
        Ok(op) => op,
        Err(e) => {
            let e = from_gax("instances.insert", e)
                .with_context("pool", req.pool.to_string())
                .with_context("idempotency_key", key.to_string());
            // The name is taken: an earlier attempt of this launch made it.
            if e.kind() == ErrorKind::AlreadyExists {
                return Ok(());
            }
            return Err(e);
        }
    };
    wait(p, Scope::Zone(zone), op, "instances.insert")
        .await
        .map_err(|e| e.with_context("pool", req.pool.to_string()))
}

/// Deletes every instance of a failed launch: those labelled with its key and
/// those with its names in `zone` (already-gone is fine).
async fn clean_up(p: &GcpProvider, req: &LaunchRequest, zone: &str, by_key: &TagFilter) {
    let listed = list_filtered(p, by_key).await;
    gpufleet_model::clean_up_launch(
        req,
        zone,
        listed,
        |id| async move { p.terminate(&id).await },
    )
    .await;
}

/// Why a stopped spot VM ended: the newest `compute.instances.preempted`,
/// `stop` or `delete` operation in its zone that targets it.
async fn end_reason(p: &GcpProvider, zone: &str, name: &str) -> Result<Option<EndReason>> {
    let list = p
        .inner
        .zone_operations
        .list()
        .set_project(p.project())
        .set_zone(zone)
        .set_filter(
            "(operationType = \"compute.instances.preempted\") OR \
             (operationType = \"stop\") OR (operationType = \"delete\")",
        )
        .set_order_by("creationTimestamp desc")
        .set_max_results(100_u32)
        .send()
        .await
        .map_err(|e| {
            from_gax("zoneOperations.list", e).with_context("instance", name.to_string())
        })?;
    let suffix = format!("/instances/{name}");
    let mut ops: Vec<_> = list
        .items
        .iter()
        .filter(|op| {
            op.target_link
                .as_deref()
                .is_some_and(|t| t.ends_with(&suffix))
        })
        .collect();
    // Newest first, whatever order the endpoint kept.
    ops.sort_by(|a, b| b.insert_time.cmp(&a.insert_time));
    Ok(ops
        .first()
        .and_then(|op| op.operation_type.as_deref())
        .map(|kind| EndReason::new(operation_cause(kind), kind)))
}

/// Classifies a zone operation's type: preemption is the cloud reclaiming the
/// VM; `stop` and `delete` are an API caller's request.
pub(crate) fn operation_cause(kind: &str) -> EndCause {
    match kind {
        "compute.instances.preempted" => EndCause::Reclaimed,
        "stop" | "delete" | "suspend" => EndCause::Requested,
        _ => EndCause::Other,
    }
}

#[async_trait]
impl Compute for GcpProvider {
    async fn launch(&self, req: &LaunchRequest) -> Result<Vec<Instance>> {
        req.validate_for(Cloud::Gcp)?;
        let key = req.idempotency_key.as_str();
        let by_key = TagFilter::default().with(tags::IDEMPOTENCY_KEY, key);
        let existing = list_filtered(self, &by_key).await?;
        let resume = req.resume(&existing).map_err(|e| {
            e.with_provider(Cloud::Gcp)
                .with_operation("instances.insert")
        })?;
        if resume == Resume::Done {
            tracing::info!(
                key,
                "launch already done with this idempotency key; returning its instances"
            );
            return Ok(existing);
        }
        // An attempt cut off part-way (a timeout, a dropped future, a crash)
        // left some of the instances: they are progress, in their zone.
        let zone = match existing.first().and_then(|i| i.pool.zone.as_ref()) {
            Some(z) => z.to_string(),
            None => pick_zone(self, &req.pool).await?,
        };
        if let Resume::Partial(n) = resume {
            tracing::info!(key, have = n, want = req.count, "resuming a partial launch");
        }
        let have: Vec<&str> = existing
            .iter()
            .filter_map(|i| i.id.as_str().rsplit('/').next())
            .collect();
        let sent = req.effective_tags(now());
        // Inserted together and waited for together: a launch takes one
        // operation's time, whatever its count, so the caller's bound on a
        // launch stays above the operations it waits for.
        let missing = (0..req.count)
            .filter(|i| !have.contains(&req.idempotency_key.resource_name(*i).as_str()));
        let results = futures::future::join_all(
            missing.map(|index| insert_one(self, req, &zone, index, &sent)),
        )
        .await;
        if let Some(e) = results.into_iter().find_map(std::result::Result::err) {
            // Nothing half-created: remove every instance of this key, found by
            // its label and by its names (an insert whose operation failed to be
            // polled is not in this process's memory).
            clean_up(self, req, &zone, &by_key).await;
            return Err(e);
        }
        let made = list_filtered(self, &by_key).await?;
        if made.len() != req.count as usize {
            clean_up(self, req, &zone, &by_key).await;
            // Every insert succeeded and yet instances are missing: Compute
            // Engine answered a `requestId` it had seen with that request's
            // operation (it remembers them for a while), so this key belongs to
            // an earlier launch that has ended. AlreadyExists: use a new key.
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "idempotency key '{key}' belongs to an earlier launch: {} of {} instance(s) came up under it; removed them; launch under a new key",
                    made.len(),
                    req.count
                ),
            )
            .with_provider(Cloud::Gcp)
            .with_operation("instances.insert"));
        }
        Ok(made)
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        let (zone, name) = split_id(id.as_str(), "instance")?;
        let i =
            send_scoped!(self, instances.get, set_zone(zone), set_instance(name); "instances.get")
                .map_err(|e| e.with_context("instance", id.to_string()))?;
        let mut out = to_instance(&i).ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                format!("instance {id} came back without a name, zone or machine type"),
            )
            .with_provider(Cloud::Gcp)
            .with_operation("instances.get")
        })?;
        // A spot VM on its way down: Compute Engine says why only in the zone's
        // operations (`compute.instances.preempted`), not on the instance.
        if out.pool.capacity == Capacity::Spot
            && !matches!(out.state, InstanceState::Running | InstanceState::Pending)
        {
            out.end_reason = end_reason(self, zone, name).await?;
        }
        Ok(out)
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        list_filtered(self, filter).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        let (zone, name) = split_id(id.as_str(), "instance")?;
        let op = send_scoped!(
            self, instances.delete, set_zone(zone), set_instance(name); "instances.delete"
        )
        .map_err(|e| e.with_context("instance", id.to_string()))?;
        wait(self, Scope::Zone(zone), op, "instances.delete").await
    }

    /// `setLabels` on each instance (8 at a time) over its current labels and
    /// their fingerprint, once more when another writer changed them first.
    /// Labels hold lowercase values: gpufleet uses this for
    /// [`tags::EXPIRES_AT`], which reads back exactly.
    async fn tag_instances(&self, ids: &[InstanceId], tags: &Tags) -> Result<()> {
        use futures::stream::{self, TryStreamExt};
        stream::iter(ids.iter().map(Ok))
            .try_for_each_concurrent(8, |id| set_labels(self, id, tags))
            .await
    }

    /// `instances.getSerialPortOutput` of port 1, the console.
    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        let (zone, name) = split_id(id.as_str(), "instance")?;
        let out = send_scoped!(
            self, instances.get_serial_port_output, set_zone(zone), set_instance(name), set_port(1);
            "instances.getSerialPortOutput"
        )
        .map_err(|e| e.with_context("instance", id.to_string()))?;
        Ok(out.contents.unwrap_or_default())
    }

    /// Why an instance that is gone ended: its zone's newest preempt, stop or
    /// delete operation aimed at it (a spot VM preempted under the `DELETE`
    /// action is deleted with it, and the operation outlives it).
    async fn end_reason(&self, id: &InstanceId) -> Result<Option<EndReason>> {
        let (zone, name) = split_id(id.as_str(), "instance")?;
        end_reason(self, zone, name).await
    }
}

/// Merges `tags` into one instance's labels (see
/// [`Compute::tag_instances`]).
async fn set_labels(p: &GcpProvider, id: &InstanceId, tags: &Tags) -> Result<()> {
    let (zone, name) = split_id(id.as_str(), "instance")?;
    let mut last = None;
    for _ in 0..2 {
        let i = send_scoped!(p, instances.get, set_zone(zone), set_instance(name); "instances.get")
            .map_err(|e| e.with_context("instance", id.to_string()))?;
        let mut labels = i.labels.clone();
        labels.extend(to_labels(tags));
        let mut body =
            google_cloud_compute_v1::model::InstancesSetLabelsRequest::new().set_labels(labels);
        body.label_fingerprint = i.label_fingerprint.clone();
        let sent = send_scoped!(
            p, instances.set_labels, set_zone(zone), set_instance(name), set_body(body);
            "instances.setLabels"
        );
        match sent {
            Ok(op) => return wait(p, Scope::Zone(zone), op, "instances.setLabels").await,
            // 412: another writer (the node) changed the labels since the read.
            Err(e) if e.kind() == ErrorKind::Conflict => last = Some(e),
            Err(e) => return Err(e.with_context("instance", id.to_string())),
        }
    }
    Err(last
        .unwrap_or_else(|| Error::new(ErrorKind::Conflict, "labels changed under setLabels"))
        .with_context("instance", id.to_string()))
}

#[cfg(test)]
mod end_tests {
    use super::*;

    #[test]
    fn operation_types_are_classified() {
        assert_eq!(
            operation_cause("compute.instances.preempted"),
            EndCause::Reclaimed
        );
        assert_eq!(operation_cause("stop"), EndCause::Requested);
        assert_eq!(operation_cause("delete"), EndCause::Requested);
        assert_eq!(
            operation_cause("compute.instances.hostError"),
            EndCause::Other
        );
    }

    /// A stopped VM's `lastStopTimestamp` is its end (the ledger of spend
    /// records it); a running one has none.
    #[test]
    fn a_stopped_vm_ends_when_it_stopped() {
        let body = |status: &str| {
            serde_json::json!({
                "name": "gf-1-0",
                "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
                "machineType": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/machineTypes/g2-standard-4",
                "status": status,
                "creationTimestamp": "2026-11-22T01:00:00.000-08:00",
                "lastStopTimestamp": "2026-11-22T03:30:00.000-08:00"
            })
        };
        let stopped: GceInstance = serde_json::from_value(body("TERMINATED")).unwrap_or_default();
        let i = to_instance(&stopped).unwrap_or_else(|| panic!("no instance"));
        assert_eq!(
            i.ended_at,
            OffsetDateTime::parse("2026-11-22T11:30:00Z", &Rfc3339).ok()
        );
        let running: GceInstance = serde_json::from_value(body("RUNNING")).unwrap_or_default();
        assert_eq!(to_instance(&running).and_then(|i| i.ended_at), None);
    }
}

#[cfg(test)]
mod address_tests {
    use super::*;

    /// An instance as `instances.get` answers it, with an external address
    /// (an access configuration made outside gpufleet) and a second
    /// interface, which is not the one read.
    #[test]
    fn the_first_interface_gives_both_addresses() {
        let i: GceInstance = serde_json::from_value(serde_json::json!({
            "name": "gf-1", "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
            "machineType": "zones/us-central1-a/machineTypes/g2-standard-4", "status": "RUNNING",
            "networkInterfaces": [
                {"name": "nic0", "networkIP": "10.128.0.7",
                 "accessConfigs": [{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT", "name": "External NAT", "natIP": "34.123.4.5", "networkTier": "PREMIUM"}]},
                {"name": "nic1", "networkIP": "10.10.0.2"}
            ]
        }))
        .unwrap();
        let a = to_instance(&i).unwrap().addresses;
        assert_eq!(a.private, Some("10.128.0.7".parse().unwrap()));
        assert_eq!(a.public, Some("34.123.4.5".parse().unwrap()));
        let bare: GceInstance = serde_json::from_value(serde_json::json!({
            "name": "gf-2", "zone": "zones/us-central1-a", "machineType": "zones/us-central1-a/machineTypes/g2-standard-4",
            "status": "PROVISIONING", "networkInterfaces": [{"name": "nic0"}]
        }))
        .unwrap();
        assert!(to_instance(&bare).unwrap().addresses.is_empty());
    }
}
