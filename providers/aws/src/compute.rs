//! Launch, describe, list and terminate EC2 instances. Ids are
//! `region/i-0abc…`.

use async_trait::async_trait;
use gpufleet_model::Compute;

use aws_sdk_ec2::types::{
    Filter, Instance as Ec2Instance, InstanceInterruptionBehavior, InstanceLifecycleType,
    InstanceMarketOptionsRequest, InstanceStateName, InstanceType as Ec2Type, MarketType,
    Placement as Ec2Placement, ResourceType, SpotInstanceType, SpotMarketOptions, TagSpecification,
};
use gpufleet_model::{
    tags, Addresses, Capacity, Cloud, EndCause, EndReason, Error, ErrorKind, Instance, InstanceId,
    InstanceState, LaunchRequest, PlacementGroupId, Pool, Region, Result, TagFilter, Tags, Zone,
};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::error::{all_items, from_sdk};
use crate::tags::{ec2_tags, from_ec2_tags, tag_filters};
use crate::zones::{zones, Zones};
use crate::{join_id, now, split_id, AwsProvider};

/// States in which an instance still exists (and may cost money).
const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

fn state(s: Option<&InstanceStateName>) -> InstanceState {
    match s {
        Some(InstanceStateName::Pending) => InstanceState::Pending,
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(InstanceStateName::Stopping) => InstanceState::Stopping,
        Some(InstanceStateName::Stopped) => InstanceState::Stopped,
        Some(InstanceStateName::ShuttingDown) => InstanceState::ShuttingDown,
        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
        _ => InstanceState::Pending,
    }
}

/// Classifies an EC2 `StateReason` code: `Server.SpotInstanceTermination`
/// and `Server.SpotInstanceShutdown` are the spot service reclaiming
/// capacity; `Client.*` codes (`UserInitiatedShutdown`,
/// `InstanceInitiatedShutdown`, ...) are someone's request; other `Server.*`
/// codes (`InternalError`, `ScheduledStop`, ...) are the cloud's own.
pub(crate) fn end_cause(code: &str) -> EndCause {
    if code.starts_with("Server.Spot") {
        EndCause::Reclaimed
    } else if code.starts_with("Client.") {
        EndCause::Requested
    } else {
        EndCause::Other
    }
}

fn to_instance(
    region: &Region,
    zones: &Zones,
    i: &Ec2Instance,
    fallback: Option<&Tags>,
) -> Option<Instance> {
    let id = i.instance_id()?;
    let placement = i.placement();
    let zone = placement
        .and_then(|p| p.availability_zone())
        .and_then(|name| zones.id_by_name.get(name))
        .map(|id| Zone::new(id.clone()));
    let mut tags = from_ec2_tags(i.tags());
    if tags.is_empty() {
        if let Some(sent) = fallback {
            // RunInstances applies TagSpecifications atomically; some
            // endpoints leave them out of the response.
            tags = sent.clone();
        }
    }
    let expires_at = tags
        .get(tags::EXPIRES_AT)
        .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok());
    Some(Instance {
        id: InstanceId::new(join_id(region, id)),
        pool: Pool {
            cloud: Cloud::Aws,
            region: region.clone(),
            zone,
            instance_type: i.instance_type()?.as_str().to_string(),
            capacity: if i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
                Capacity::Spot
            } else {
                Capacity::OnDemand
            },
        },
        state: state(i.state().and_then(|s| s.name())),
        // EC2 keeps the last reason on running instances too (a start after
        // a stop); only a stopped or ended one has ended for it.
        end_reason: i
            .state_reason()
            .and_then(|r| r.code())
            .filter(|_| {
                !matches!(
                    i.state().and_then(|s| s.name()),
                    Some(InstanceStateName::Pending | InstanceStateName::Running) | None
                )
            })
            .map(|code| EndReason::new(end_cause(code), code)),
        ended_at: i
            .state_transition_reason()
            .filter(|_| {
                matches!(
                    i.state().and_then(|s| s.name()),
                    Some(InstanceStateName::Terminated | InstanceStateName::Stopped)
                )
            })
            .and_then(transition_time),
        tags,
        launched_at: i
            .launch_time()
            .and_then(|t| OffsetDateTime::from_unix_timestamp(t.secs()).ok())
            .unwrap_or_else(now),
        expires_at,
        placement_group: placement
            .and_then(|p| p.group_name())
            .filter(|g| !g.is_empty())
            .map(|g| PlacementGroupId::new(join_id(region, g))),
        addresses: Addresses::parse(i.private_ip_address(), i.public_ip_address()),
    })
}

/// Live instances in one region whose tags match.
async fn list_region(
    p: &AwsProvider,
    region: &Region,
    filter: &TagFilter,
) -> Result<Vec<Instance>> {
    let zones = zones(p, region).await?;
    let mut filters = tag_filters(filter);
    filters.push(
        Filter::builder()
            .name("instance-state-name")
            .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
            .build(),
    );
    let reservations = all_items(
        p.client(region)?
            .describe_instances()
            .set_filters(Some(filters))
            .into_paginator()
            .send(),
        "DescribeInstances",
        |page| page.reservations,
    )
    .await?;
    Ok(reservations
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| to_instance(region, &zones, i, None))
        .filter(|i| i.state.is_live() && filter.matches(&i.tags))
        .collect())
}

/// The error for a key whose launch has ended: AlreadyExists, so that a
/// caller launches under a new key.
fn stale_key(key: &str, n: usize) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!(
            "idempotency key '{key}' belongs to an earlier launch whose {n} instance(s) have ended; launch under a new key"
        ),
    )
    .with_provider(Cloud::Aws)
    .with_operation("RunInstances")
    .with_context("idempotency_key", key.to_string())
}

fn not_found(id: &InstanceId) -> Error {
    Error::new(ErrorKind::NotFound, format!("no instance {id}"))
        .with_provider(Cloud::Aws)
        .with_operation("DescribeInstances")
}

/// The root device name of the Deep Learning and Amazon Linux / Ubuntu AMIs,
/// whose size `disk_gb` sets.
const ROOT_DEVICE: &str = "/dev/sda1";

#[async_trait]
impl Compute for AwsProvider {
    async fn launch(&self, req: &LaunchRequest) -> Result<Vec<Instance>> {
        req.validate_for(Cloud::Aws)?;
        let region = &req.pool.region;
        let client = self.client(region)?;
        let key = req.idempotency_key.as_str();
        // EC2 honours ClientToken; looking the key up first makes a retried launch
        // safe on endpoints that do not, and names a reused key plainly.
        let existing = list_region(
            self,
            region,
            &TagFilter::default().with(tags::IDEMPOTENCY_KEY, key),
        )
        .await?;
        if req
            .replayed(&existing)
            .map_err(|e| e.with_provider(Cloud::Aws).with_operation("RunInstances"))?
        {
            tracing::info!(
                key,
                "launch already done with this idempotency key; returning its instances"
            );
            return Ok(existing);
        }
        let zones = zones(self, region).await?;
        let zone_name = match &req.pool.zone {
            Some(id) => Some(zones.name_by_id.get(id.as_str()).cloned().ok_or_else(|| {
                let known: Vec<&String> = zones.name_by_id.keys().collect();
                Error::invalid_input(format!(
                    "no availability zone {id} in {region}; its AZ IDs are {known:?}"
                ))
            })?),
            None => None,
        };
        let group_name = match &req.placement_group {
            Some(id) => {
                let (pg_region, name) = split_id(id.as_str(), "placement group")?;
                if pg_region != *region {
                    return Err(Error::invalid_input(format!(
                        "placement group {id} is in {pg_region}, the launch in {region}"
                    )));
                }
                Some(name.to_string())
            }
            None => None,
        };
        let market = (req.pool.capacity == Capacity::Spot).then(|| {
            InstanceMarketOptionsRequest::builder()
                .market_type(MarketType::Spot)
                .spot_options(
                    SpotMarketOptions::builder()
                        .spot_instance_type(SpotInstanceType::OneTime)
                        .instance_interruption_behavior(InstanceInterruptionBehavior::Terminate)
                        .build(),
                )
                .build()
        });
        let sent = req.effective_tags(now());
        let count = i32::try_from(req.count).unwrap_or(i32::MAX);
        // UserData goes base64-encoded (the API's format; the CLI does this for
        // its users, the SDKs do not).
        let user_data = req.boot_script.as_ref().map(|s| {
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s.as_bytes())
        });
        let iam_profile = req.access.identity.as_ref().map(|id| {
            let b = aws_sdk_ec2::types::IamInstanceProfileSpecification::builder();
            if id.starts_with("arn:") {
                b.arn(id)
            } else {
                b.name(id)
            }
            .build()
        });
        // The boot volume of the usual Linux AMIs; its size from `disk_gb`.
        let disks = req.access.disk_gb.map(|gb| {
            vec![aws_sdk_ec2::types::BlockDeviceMapping::builder()
                .device_name(ROOT_DEVICE)
                .ebs(
                    aws_sdk_ec2::types::EbsBlockDevice::builder()
                        .volume_size(i32::try_from(gb).unwrap_or(i32::MAX))
                        .volume_type(aws_sdk_ec2::types::VolumeType::Gp3)
                        .delete_on_termination(true)
                        .build(),
                )
                .build()]
        });
        let out = client
            .run_instances()
            .image_id(&req.image)
            .instance_type(Ec2Type::from(req.pool.instance_type.as_str()))
            .min_count(count)
            .max_count(count)
            .client_token(key)
            .placement(
                Ec2Placement::builder()
                    // A subnet is in one zone and decides it: an AZ beside
                    // it is either the same or refused by EC2. The zone the
                    // instance is in is read back from the answer.
                    .set_availability_zone(zone_name.filter(|_| req.access.subnet.is_none()))
                    .set_group_name(group_name)
                    .build(),
            )
            .set_instance_market_options(market)
            .set_user_data(user_data)
            .set_subnet_id(req.access.subnet.clone())
            .set_security_group_ids(
                (!req.access.security_groups.is_empty())
                    .then(|| req.access.security_groups.clone()),
            )
            .set_iam_instance_profile(iam_profile)
            .set_block_device_mappings(disks)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(ec2_tags(&sent)))
                    .build(),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Volume)
                    .set_tags(Some(ec2_tags(&sent)))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| {
                from_sdk("RunInstances", e)
                    .with_context("pool", req.pool.to_string())
                    .with_context("idempotency_key", key.to_string())
            })?;
        let instances: Vec<Instance> = out
            .instances()
            .iter()
            .filter_map(|i| to_instance(region, &zones, i, Some(&sent)))
            .collect();
        if instances.is_empty() {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "RunInstances answered without instances",
            )
            .with_provider(Cloud::Aws)
            .with_operation("RunInstances"));
        }
        // EC2 keeps a ClientToken bound to its launch after the instances end: a
        // reused key answers with the ended instances, which are no launch.
        if instances.iter().all(|i| !i.state.is_live()) {
            return Err(stale_key(key, instances.len()));
        }
        Ok(instances)
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        let (region, raw) = split_id(id.as_str(), "instance")?;
        let zones = zones(self, &region).await?;
        let out = self
            .client(&region)?
            .describe_instances()
            .instance_ids(raw)
            .send()
            .await
            .map_err(|e| from_sdk("DescribeInstances", e));
        let out = match out {
            Ok(o) => o,
            // A malformed id names an instance that cannot exist.
            Err(e)
                if e.kind() == ErrorKind::NotFound
                    || e.context()
                        .iter()
                        .any(|(k, v)| *k == "code" && v == "InvalidInstanceID.Malformed") =>
            {
                return Err(not_found(id))
            }
            Err(e) => return Err(e),
        };
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(raw))
            .and_then(|i| to_instance(&region, &zones, i, None))
            .ok_or_else(|| not_found(id))
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        let mut out = Vec::new();
        for region in &self.inner.config.regions {
            out.extend(list_region(self, region, filter).await?);
        }
        out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(out)
    }

    /// `DescribeInstances` filtered by the tags and the live states, one
    /// call per region asked (pages aside), the regions at once.
    async fn list_instances_in(
        &self,
        regions: &[Region],
        filter: &TagFilter,
    ) -> Result<Vec<Instance>> {
        let lists =
            futures::future::join_all(regions.iter().map(|r| list_region(self, r, filter))).await;
        let mut out = Vec::new();
        for l in lists {
            out.extend(l?);
        }
        out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(out)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        // EC2 answers success for an instance that is already gone; gpufleet's
        // contract is NotFound, so look first.
        let inst = self.instance(id).await?;
        if matches!(
            inst.state,
            InstanceState::Terminated | InstanceState::ShuttingDown
        ) {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("instance {id} is already {:?}", inst.state).to_lowercase(),
            )
            .with_provider(Cloud::Aws)
            .with_operation("TerminateInstances"));
        }
        let (region, raw) = split_id(id.as_str(), "instance")?;
        self.client(&region)?
            .terminate_instances()
            .instance_ids(raw)
            .send()
            .await
            .map_err(|e| from_sdk("TerminateInstances", e))?;
        Ok(())
    }

    /// `CreateTags`, one call per region for up to 1,000 instances.
    async fn tag_instances(&self, ids: &[InstanceId], tags: &Tags) -> Result<()> {
        let mut by_region: Vec<(Region, Vec<String>)> = Vec::new();
        for id in ids {
            let (region, raw) = split_id(id.as_str(), "instance")?;
            match by_region.iter_mut().find(|(r, _)| *r == region) {
                Some((_, raws)) => raws.push(raw.to_string()),
                None => by_region.push((region, vec![raw.to_string()])),
            }
        }
        for (region, raws) in by_region {
            for chunk in raws.chunks(1000) {
                self.client(&region)?
                    .create_tags()
                    .set_resources(Some(chunk.to_vec()))
                    .set_tags(Some(crate::tags::ec2_tags(tags)))
                    .send()
                    .await
                    .map_err(|e| {
                        from_sdk("CreateTags", e).with_context("region", region.to_string())
                    })?;
            }
        }
        Ok(())
    }

    /// `GetConsoleOutput` (the latest output, base64 on the wire).
    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        let (region, raw) = split_id(id.as_str(), "instance")?;
        let out = self
            .client(&region)?
            .get_console_output()
            .instance_id(raw)
            .latest(true)
            .send()
            .await
            .map_err(|e| {
                from_sdk("GetConsoleOutput", e).with_context("instance", id.to_string())
            })?;
        let Some(text) = out.output() else {
            return Ok(String::new());
        };
        let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text.trim())
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("console output of {id} is not base64: {e}"),
                )
                .with_provider(Cloud::Aws)
            })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_reason_codes_are_classified() {
        for (code, cause) in [
            ("Server.SpotInstanceTermination", EndCause::Reclaimed),
            ("Server.SpotInstanceShutdown", EndCause::Reclaimed),
            ("Client.UserInitiatedShutdown", EndCause::Requested),
            ("Client.InstanceInitiatedShutdown", EndCause::Requested),
            ("Server.InternalError", EndCause::Other),
            ("Server.ScheduledStop", EndCause::Other),
        ] {
            assert_eq!(end_cause(code), cause, "{code}");
        }
    }
}

/// The time in EC2's `StateTransitionReason` (`User initiated (2026-11-29
/// 08:00:00 GMT)`), when it gives one.
fn transition_time(reason: &str) -> Option<OffsetDateTime> {
    let inner = reason.rsplit_once('(')?.1.strip_suffix(')')?;
    let text = inner.strip_suffix(" GMT")?;
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::PrimitiveDateTime::parse(text, &format)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

#[cfg(test)]
mod transition_tests {
    use super::*;

    #[test]
    fn the_transition_time_is_read_from_the_reason() {
        let t = transition_time("User initiated (2026-11-29 08:00:05 GMT)");
        assert_eq!(
            t.map(|t| t.unix_timestamp()),
            Some(time::macros::datetime!(2026-11-29 08:00:05 UTC).unix_timestamp())
        );
        assert_eq!(transition_time("Server.SpotInstanceTermination"), None);
        assert_eq!(transition_time("User initiated (soon)"), None);
    }
}
