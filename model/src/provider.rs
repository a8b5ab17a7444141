//! The capability traits every cloud implements, bundled by [`Provider`].

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::Serialize;
use time::OffsetDateTime;

use crate::catalog::OfferQuery;
use crate::error::Result;
use crate::model::{
    Cloud, Instance, InstanceId, InstanceType, InterruptionNotice, LaunchRequest, Offer,
    PlacementGroup, PlacementGroupId, PlacementGroupRequest, Pool, PricePoint, Region, Stability,
    TagFilter,
};

/// A stream of interruption notices for the node gpufleet runs on.
pub type NoticeStream = BoxStream<'static, Result<InterruptionNotice>>;

/// Instance types and their prices.
#[async_trait]
pub trait Catalog: Send + Sync + Debug {
    /// Every GPU instance type the provider sells in its configured regions.
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>>;

    /// Offers matching `query` (a provider may use it to limit what it fetches,
    /// and must return only matching offers). Order is unspecified; sort with
    /// [`crate::catalog::sort_offers`].
    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>>;
}

/// Spot prices over time, and signals of how stable spot pools are.
///
/// Both methods have a default for a cloud that publishes neither: the price
/// history is the catalog's current price from when it took effect
/// ([`current_price_history`]), and every pool's stability is unknown.
#[async_trait]
pub trait SpotMarket: Catalog {
    /// Spot prices of `pool` since `since`, oldest first. The first point may be
    /// older than `since`: it is the price in force at `since`.
    async fn spot_price_history(
        &self,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Result<Vec<PricePoint>> {
        current_price_history(self, pool, since).await
    }

    /// Stability signals for each pool, in the order given.
    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        Ok(vec![Stability::default(); pools.len()])
    }
}

/// Placement groups: AWS cluster/spread/partition groups, GCP compact resource
/// policies, Azure proximity placement groups.
#[async_trait]
pub trait Placement: Send + Sync + Debug {
    /// Creates a group; a name already in use is [`crate::ErrorKind::AlreadyExists`].
    async fn create_placement_group(
        &self,
        request: &PlacementGroupRequest,
    ) -> Result<PlacementGroup>;

    /// Looks a group up; an unknown id is [`crate::ErrorKind::NotFound`].
    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup>;

    /// Groups whose tags match.
    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>>;

    /// Deletes a group; an unknown id is [`crate::ErrorKind::NotFound`].
    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()>;
}

/// Launching and terminating instances.
#[async_trait]
pub trait Compute: Send + Sync + Debug {
    /// Launches `request.count` instances. Idempotent per
    /// [`LaunchRequest::idempotency_key`]: the same key returns the same
    /// instances; the same key with a different request is
    /// [`crate::ErrorKind::InvalidInput`].
    async fn launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>>;

    /// Looks an instance up; an unknown id is [`crate::ErrorKind::NotFound`]
    /// (a recently terminated one may still be returned as terminated).
    async fn instance(&self, id: &InstanceId) -> Result<Instance>;

    /// Instances that are not terminated and whose tags match.
    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>>;

    /// [`Compute::list_instances`] in `regions` only: how a controller reads
    /// every instance it drives with one call per region (or one for the
    /// cloud, where the cloud lists every region at once), whatever the
    /// number of instances. The default lists everything and keeps those
    /// regions; a provider whose cloud lists per region asks only those.
    async fn list_instances_in(
        &self,
        regions: &[Region],
        filter: &TagFilter,
    ) -> Result<Vec<Instance>> {
        let mut all = self.list_instances(filter).await?;
        all.retain(|i| regions.contains(&i.pool.region));
        Ok(all)
    }

    /// Terminates an instance; an unknown or already terminated one is
    /// [`crate::ErrorKind::NotFound`].
    async fn terminate(&self, id: &InstanceId) -> Result<()>;

    /// The instance's console (serial port) output, where the cloud exposes
    /// it: what its boot script printed. [`crate::ErrorKind::Unsupported`]
    /// where it does not.
    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            format!("this provider cannot read the console of {id}"),
        ))
    }

    /// Why an instance that is gone (NotFound) ended, where the cloud keeps
    /// a record after the instance itself (Compute Engine's zone
    /// operations: a spot VM preempted under the `DELETE` action is deleted
    /// with it). `None` where the cloud says nothing.
    async fn end_reason(&self, id: &InstanceId) -> Result<Option<crate::model::EndReason>> {
        let _ = id;
        Ok(None)
    }

    /// Sets `tags` on each of `ids` (merged over the tags they have; the
    /// cloud's own form, as at launch), in as few calls as the cloud allows
    /// (EC2's `CreateTags` takes many instances of a region at once). What a
    /// controller uses to extend [`crate::tags::EXPIRES_AT`] while it drives
    /// an instance. An unknown id is [`crate::ErrorKind::NotFound`].
    async fn tag_instances(&self, ids: &[InstanceId], tags: &crate::model::Tags) -> Result<()>;
}

/// Interruption notices for the node this process runs on (instance metadata
/// services), or injected ones in the fake cloud.
#[async_trait]
pub trait InterruptionSource: Send + Sync + Debug {
    /// A stream of notices, each delivered once.
    async fn interruptions(&self) -> Result<NoticeStream>;
}

/// A cloud's feed of instance events for the controllers (AWS: EventBridge
/// rules delivering to an SQS queue): interruption warnings and state
/// changes heard within seconds instead of at the next poll.
#[async_trait]
pub trait CloudEvents: Send + Sync + Debug {
    /// The cloud whose instances the events are about.
    fn cloud(&self) -> crate::Cloud;

    /// Where the events come from, for logs (a queue's URL; no secrets).
    fn describe(&self) -> String;

    /// Waits for events (a long poll: returns after at most the feed's wait,
    /// possibly with none) and returns those `mine` claims (an event about
    /// an instance this reader drives), taking them off the feed. The
    /// others are left on it for the other controllers that read the same
    /// feed (they come back after a few seconds), until no reader has
    /// claimed one for a while (then it is taken off: its instance is no
    /// reader's). Events the feed holds that are not about instances, or
    /// that it cannot read, are taken off and logged, not returned.
    async fn receive(
        &self,
        mine: &(dyn for<'e> Fn(&'e crate::CloudEvent) -> bool + Send + Sync),
    ) -> Result<Vec<crate::CloudEvent>>;

    /// Checks that the feed can be read (for `gpufleet check`), without
    /// taking anything off it.
    async fn check(&self) -> Result<()>;
}

/// What a provider can do, declared so that callers and the conformance suite
/// read it instead of probing for [`crate::ErrorKind::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Lists instance types and offers.
    pub catalog: bool,
    /// Prices come from the cloud's API now (not a snapshot).
    pub live_prices: bool,
    /// Returns spot price histories.
    pub spot_price_history: bool,
    /// Returns stability signals.
    pub stability: bool,
    /// Manages placement groups.
    pub placement_groups: bool,
    /// Supports the spread strategy.
    pub placement_spread: bool,
    /// Supports the partition strategy.
    pub placement_partition: bool,
    /// Launches, lists and terminates instances.
    pub compute: bool,
    /// Launches spot capacity.
    pub spot: bool,
    /// Streams interruption notices.
    pub interruptions: bool,
    /// Runs a launch's boot script on the instance (EC2 user data, Compute
    /// Engine's `startup-script`, Azure custom data), so that a node started
    /// with a workload reports its heartbeat, progress and exit through its
    /// own tags. The job controller then expects a heartbeat within its boot
    /// grace. A provider that keeps the script without running it (the fake
    /// cloud) says `false`, and the controller estimates a job's progress
    /// from run time instead. Not an operation: nothing is refused for it.
    pub runs_boot_script: bool,
}

impl Capabilities {
    /// Everything.
    pub const ALL: Capabilities = Capabilities {
        catalog: true,
        live_prices: true,
        spot_price_history: true,
        stability: true,
        placement_groups: true,
        placement_spread: true,
        placement_partition: true,
        compute: true,
        spot: true,
        interruptions: true,
        runs_boot_script: true,
    };

    /// These capabilities without partition placement groups (clouds whose
    /// placement is cluster and spread only).
    pub const fn without_partition(mut self) -> Capabilities {
        self.placement_partition = false;
        self
    }

    /// These capabilities without spread placement groups.
    pub const fn without_spread(mut self) -> Capabilities {
        self.placement_spread = false;
        self
    }

    /// These capabilities on a provider that keeps a launch's boot script
    /// without running it (see [`Capabilities::runs_boot_script`]).
    pub const fn without_boot_script(mut self) -> Capabilities {
        self.runs_boot_script = false;
        self
    }

    /// These capabilities without live prices (a catalog's prices only).
    pub const fn without_live_prices(mut self) -> Capabilities {
        self.live_prices = false;
        self
    }

    /// These capabilities without spot launches (on-demand only).
    pub const fn without_spot(mut self) -> Capabilities {
        self.spot = false;
        self
    }

    /// A read-only catalog and nothing else.
    pub const CATALOG_ONLY: Capabilities = Capabilities {
        catalog: true,
        live_prices: false,
        spot_price_history: false,
        stability: false,
        placement_groups: false,
        placement_spread: false,
        placement_partition: false,
        compute: false,
        spot: false,
        interruptions: false,
        runs_boot_script: false,
    };
}

/// One operation of the provider traits: what the layers, the fake cloud's
/// fault injection and latency, the capability check and the metrics name
/// (`offers`, `launch`, … in logs and settings, by [`Operation::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum Operation {
    /// [`Catalog::instance_types`].
    InstanceTypes,
    /// [`Catalog::offers`].
    Offers,
    /// [`SpotMarket::spot_price_history`].
    SpotPriceHistory,
    /// [`SpotMarket::stability`].
    Stability,
    /// [`Placement::create_placement_group`].
    CreatePlacementGroup,
    /// [`Placement::placement_group`].
    PlacementGroup,
    /// [`Placement::list_placement_groups`].
    ListPlacementGroups,
    /// [`Placement::delete_placement_group`].
    DeletePlacementGroup,
    /// [`Compute::launch`].
    Launch,
    /// [`Compute::instance`].
    Instance,
    /// [`Compute::list_instances`].
    ListInstances,
    /// [`Compute::terminate`].
    Terminate,
    /// [`Compute::console_output`].
    ConsoleOutput,
    /// [`Compute::end_reason`].
    EndReason,
    /// [`Compute::tag_instances`].
    TagInstances,
    /// [`InterruptionSource::interruptions`].
    Interruptions,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 16] = [
        Operation::InstanceTypes,
        Operation::Offers,
        Operation::SpotPriceHistory,
        Operation::Stability,
        Operation::CreatePlacementGroup,
        Operation::PlacementGroup,
        Operation::ListPlacementGroups,
        Operation::DeletePlacementGroup,
        Operation::Launch,
        Operation::Instance,
        Operation::ListInstances,
        Operation::Terminate,
        Operation::ConsoleOutput,
        Operation::EndReason,
        Operation::TagInstances,
        Operation::Interruptions,
    ];

    /// Its name (`list_instances`): the trait method's.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// What it needs ([`Capability::of_operation`]).
    pub fn capability(self) -> Capability {
        Capability::of_operation(self)
    }

    /// The operation named `name`, or an invalid-input error naming the
    /// valid ones (for settings such as `GPUFLEET_FAKE_LATENCY`).
    pub fn parse(name: &str) -> crate::error::Result<Operation> {
        name.trim().parse().map_err(|_| {
            let valid: Vec<&str> = Operation::ALL.iter().map(|o| o.as_str()).collect();
            crate::error::Error::invalid_input(format!(
                "unknown operation '{}'; valid: {}",
                name.trim(),
                valid.join(", ")
            ))
        })
    }
}

/// One capability of [`Capabilities`]: what an operation needs, so that a
/// call the provider declares unsupported is refused before it is sent (see
/// [`crate::layers::CapabilityLayer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum Capability {
    /// Instance types and offers.
    Catalog,
    /// Spot price histories.
    SpotPriceHistory,
    /// Stability signals.
    Stability,
    /// Placement groups (cluster strategy).
    PlacementGroups,
    /// Spread placement groups.
    PlacementSpread,
    /// Partition placement groups.
    PlacementPartition,
    /// Launch, list and terminate instances.
    Compute,
    /// Launch spot capacity.
    Spot,
    /// Interruption notices.
    Interruptions,
}

impl Capability {
    /// Every capability an operation can need.
    pub const ALL: [Capability; 9] = [
        Capability::Catalog,
        Capability::SpotPriceHistory,
        Capability::Stability,
        Capability::PlacementGroups,
        Capability::PlacementSpread,
        Capability::PlacementPartition,
        Capability::Compute,
        Capability::Spot,
        Capability::Interruptions,
    ];

    /// What `operation` needs. A launch needs [`Capability::Spot`] for spot
    /// capacity and a group creation its strategy's capability (see
    /// [`Capabilities::for_capacity`] and [`Capabilities::for_strategy`]);
    /// by the operation alone they need compute and placement groups.
    pub fn of_operation(operation: Operation) -> Capability {
        match operation {
            Operation::InstanceTypes | Operation::Offers => Capability::Catalog,
            Operation::SpotPriceHistory => Capability::SpotPriceHistory,
            Operation::Stability => Capability::Stability,
            Operation::CreatePlacementGroup
            | Operation::PlacementGroup
            | Operation::ListPlacementGroups
            | Operation::DeletePlacementGroup => Capability::PlacementGroups,
            Operation::Launch
            | Operation::Instance
            | Operation::ListInstances
            | Operation::Terminate
            | Operation::ConsoleOutput
            | Operation::EndReason
            | Operation::TagInstances => Capability::Compute,
            Operation::Interruptions => Capability::Interruptions,
        }
    }

    /// Its field name in [`Capabilities`].
    pub fn name(self) -> &'static str {
        self.into()
    }
}

impl Capabilities {
    /// Whether `capability` is declared. Spread and partition groups need
    /// placement groups too, and spot launches need compute.
    pub fn has(&self, capability: Capability) -> bool {
        match capability {
            Capability::Catalog => self.catalog,
            Capability::SpotPriceHistory => self.spot_price_history,
            Capability::Stability => self.stability,
            Capability::PlacementGroups => self.placement_groups,
            Capability::PlacementSpread => self.placement_groups && self.placement_spread,
            Capability::PlacementPartition => self.placement_groups && self.placement_partition,
            Capability::Compute => self.compute,
            Capability::Spot => self.compute && self.spot,
            Capability::Interruptions => self.interruptions,
        }
    }

    /// What a placement group of this strategy needs.
    pub fn for_strategy(strategy: crate::model::PlacementStrategy) -> Capability {
        match strategy {
            crate::model::PlacementStrategy::Cluster => Capability::PlacementGroups,
            crate::model::PlacementStrategy::Spread => Capability::PlacementSpread,
            crate::model::PlacementStrategy::Partition(_) => Capability::PlacementPartition,
        }
    }

    /// What a launch of this capacity type needs.
    pub fn for_capacity(capacity: crate::model::Capacity) -> Capability {
        match capacity {
            crate::model::Capacity::Spot => Capability::Spot,
            _ => Capability::Compute,
        }
    }
}

/// A cloud: every capability, plus what it is and what it supports. Callers hold
/// `Arc<dyn Provider>`.
pub trait Provider: Catalog + SpotMarket + Placement + Compute + InterruptionSource {
    /// The cloud.
    fn cloud(&self) -> Cloud;

    /// A name for logs and errors (`aws`, `fake-gcp`); the cloud's name
    /// unless the provider says otherwise.
    fn name(&self) -> &str {
        self.cloud().as_str()
    }

    /// What it supports.
    fn capabilities(&self) -> Capabilities;
}

/// Forwards every trait through a smart pointer, so `Arc<FakeCloud>` and
/// `Box<dyn Provider>` are providers too.
macro_rules! forward_provider {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<T: Provider + ?Sized> Catalog for $ptr<T> {
            async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
                (**self).instance_types().await
            }
            async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
                (**self).offers(query).await
            }
        }

        #[async_trait]
        impl<T: Provider + ?Sized> SpotMarket for $ptr<T> {
            async fn spot_price_history(&self, pool: &Pool, since: OffsetDateTime) -> Result<Vec<PricePoint>> {
                (**self).spot_price_history(pool, since).await
            }
            async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
                (**self).stability(pools).await
            }
        }

        #[async_trait]
        impl<T: Provider + ?Sized> Placement for $ptr<T> {
            async fn create_placement_group(&self, request: &PlacementGroupRequest) -> Result<PlacementGroup> {
                (**self).create_placement_group(request).await
            }
            async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
                (**self).placement_group(id).await
            }
            async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
                (**self).list_placement_groups(filter).await
            }
            async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
                (**self).delete_placement_group(id).await
            }
        }

        #[async_trait]
        impl<T: Provider + ?Sized> Compute for $ptr<T> {
            async fn launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
                (**self).launch(request).await
            }
            async fn instance(&self, id: &InstanceId) -> Result<Instance> {
                (**self).instance(id).await
            }
            async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
                (**self).list_instances(filter).await
            }
            async fn list_instances_in(&self, regions: &[Region], filter: &TagFilter) -> Result<Vec<Instance>> {
                (**self).list_instances_in(regions, filter).await
            }
            async fn terminate(&self, id: &InstanceId) -> Result<()> {
                (**self).terminate(id).await
            }
            async fn console_output(&self, id: &InstanceId) -> Result<String> {
                (**self).console_output(id).await
            }
            async fn end_reason(
                &self,
                id: &InstanceId,
            ) -> Result<Option<crate::model::EndReason>> {
                (**self).end_reason(id).await
            }
            async fn tag_instances(
                &self,
                ids: &[InstanceId],
                tags: &crate::model::Tags,
            ) -> Result<()> {
                (**self).tag_instances(ids, tags).await
            }
        }

        #[async_trait]
        impl<T: Provider + ?Sized> InterruptionSource for $ptr<T> {
            async fn interruptions(&self) -> Result<NoticeStream> {
                (**self).interruptions().await
            }
        }

        impl<T: Provider + ?Sized> Provider for $ptr<T> {
            fn cloud(&self) -> Cloud {
                (**self).cloud()
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
        }
    )*};
}

forward_provider!(Arc, Box);

/// What [`ProviderExt::terminate_all`] did.
#[derive(Debug, Default)]
pub struct TerminateReport {
    /// Terminated now.
    pub terminated: Vec<InstanceId>,
    /// Already gone when asked.
    pub already_gone: Vec<InstanceId>,
    /// Failed, with the error.
    pub failed: Vec<(InstanceId, crate::Error)>,
}

/// Conveniences built on the capability traits, for every provider. Kept out of
/// the traits so implementors cannot get them subtly wrong.
#[async_trait]
pub trait ProviderExt: Provider {
    /// The `n` cheapest matching offers, cheapest first.
    async fn cheapest_offers(&self, query: &OfferQuery, n: usize) -> Result<Vec<Offer>> {
        let mut offers = self.offers(query).await?;
        crate::catalog::sort_offers(&mut offers, crate::catalog::OfferSort::Price);
        offers.truncate(n);
        Ok(offers)
    }

    /// Terminates every live instance matching `filter` that carries the
    /// managed tag; instances without it are never touched.
    async fn terminate_all(&self, filter: &TagFilter) -> Result<TerminateReport> {
        let managed = TagFilter::managed();
        let mut report = TerminateReport::default();
        for instance in self.list_instances(filter).await? {
            if !managed.matches(&instance.tags) {
                continue;
            }
            match self.terminate(&instance.id).await {
                Ok(()) => report.terminated.push(instance.id),
                Err(e) if e.kind() == crate::ErrorKind::NotFound => {
                    report.already_gone.push(instance.id)
                }
                Err(e) => report.failed.push((instance.id, e)),
            }
        }
        Ok(report)
    }
}

impl<P: Provider + ?Sized> ProviderExt for P {}

/// The provider of `cloud` among `providers`; a cloud none serves is
/// `InvalidInput` naming the clouds that are enabled.
pub fn provider_for(providers: &[Arc<dyn Provider>], cloud: Cloud) -> Result<&Arc<dyn Provider>> {
    providers
        .iter()
        .find(|p| p.cloud() == cloud)
        .ok_or_else(|| {
            let enabled: Vec<String> = providers.iter().map(|p| p.cloud().to_string()).collect();
            let enabled = if enabled.is_empty() {
                "none".to_string()
            } else {
                enabled.join(", ")
            };
            crate::Error::invalid_input(format!("{cloud} is not enabled; enabled: {enabled}"))
        })
}

/// The spot price history of a cloud that publishes none (GCP, Azure): the
/// catalog's current offers for `pool` in its region, each in effect since it
/// took effect or `since` (see [`PricePoint::from_current`]).
pub async fn current_price_history(
    catalog: &(impl Catalog + ?Sized),
    pool: &Pool,
    since: OffsetDateTime,
) -> Result<Vec<PricePoint>> {
    let query = OfferQuery::new()
        .cloud(pool.cloud)
        .region(pool.region.clone());
    Ok(PricePoint::from_current(
        catalog.offers(&query).await?,
        pool,
        since,
    ))
}

/// Deletes every instance of a launch that failed, for a provider that
/// creates a launch's instances one by one: those at the names the key
/// derives (`{prefix}/gf-<fingerprint>-<i>`, wherever this process lost
/// track of them) and those `listed` by the key, each once, all together.
/// Already-gone is fine; other failures are logged, since the caller returns
/// the launch's own error.
pub async fn clean_up_launch<F, Fut>(
    request: &LaunchRequest,
    prefix: &str,
    listed: Result<Vec<Instance>>,
    delete: F,
) where
    F: Fn(InstanceId) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut ids: Vec<InstanceId> = (0..request.count)
        .map(|i| {
            InstanceId::new(format!(
                "{prefix}/{}",
                request.idempotency_key.resource_name(i)
            ))
        })
        .collect();
    match listed {
        Ok(found) => ids.extend(found.into_iter().map(|i| i.id)),
        Err(e) => {
            tracing::warn!(error = %e, "could not list a failed launch's instances; deleting them by name")
        }
    }
    ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    ids.dedup();
    let results = futures::future::join_all(ids.iter().cloned().map(&delete)).await;
    for (id, r) in ids.iter().zip(results) {
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == crate::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(instance = %id, error = %e, "could not delete an instance of a failed launch")
            }
        }
    }
}
