//! Cross-cutting behaviour that wraps a provider instead of living inside each
//! one: [`CapabilityLayer`], [`RetryLayer`], [`TimeoutLayer`] and
//! [`TracingLayer`].
//!
//! A layer is an [`Interceptor`]: it sees every call as a [`Call`] (operation,
//! whether it is safe to repeat, the pool) and a closure that runs it. One
//! forwarding type, [`Layered`], implements every trait for every layer, so a new
//! layer is one `intercept` function. Compose them on `Arc<dyn Provider>` with
//! [`LayerExt::layer`]; the last one added is the outermost:
//!
//! ```
//! # use std::{sync::Arc, time::Duration};
//! use gpufleet_model::{layers::*, Provider};
//! fn layered(provider: Arc<dyn Provider>) -> Arc<dyn Provider> {
//!     provider
//!         .layer(TimeoutLayer::new(Duration::from_secs(30))) // bounds each attempt
//!         .layer(RetryLayer::default())                      // retries attempts
//!         .layer(TracingLayer)                               // one span per call
//! }
//! ```

mod capability;
mod count;
mod retry;
mod timeout;
mod trace;

pub use capability::CapabilityLayer;
pub use count::CallCounter;
pub use retry::{RetryBudget, RetryLayer};
pub use timeout::TimeoutLayer;
pub use trace::TracingLayer;

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use time::OffsetDateTime;

use crate::catalog::OfferQuery;
use crate::error::Result;
use crate::model::{
    Cloud, Instance, InstanceId, InstanceType, LaunchRequest, Offer, PlacementGroup,
    PlacementGroupId, PlacementGroupRequest, Pool, PricePoint, Region, Stability, TagFilter,
};
use crate::provider::{
    Capabilities, Capability, Catalog, Compute, InterruptionSource, NoticeStream, Operation,
    Placement, Provider, SpotMarket,
};

/// One call through a layer.
#[derive(Debug, Clone)]
pub struct Call {
    /// The provider's cloud.
    pub cloud: Cloud,
    /// The provider's name.
    pub provider: String,
    /// The operation.
    pub operation: Operation,
    /// Whether repeating the call cannot do anything twice. Launches are (they
    /// carry an idempotency key); creating a placement group is not.
    pub idempotent: bool,
    /// The pool or resource the call is about, for logs.
    pub target: Option<String>,
    /// What the provider declares it can do.
    pub capabilities: Capabilities,
    /// The capability the call needs.
    pub requires: Capability,
}

/// What an interceptor answers: the call's result, when it is done.
pub type Reply<'a, T> = BoxFuture<'a, Result<T>>;

/// The closure a layer calls to run (or re-run) the inner call.
pub type Next<'a, T> = &'a (dyn Fn() -> Reply<'a, T> + Send + Sync);

/// Behaviour around every call of a provider.
pub trait Interceptor: Send + Sync + Debug + 'static {
    /// Runs the call, as often as the layer decides.
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T>;
}

/// A provider wrapped in an interceptor.
#[derive(Debug)]
pub struct Layered<I> {
    inner: Arc<dyn Provider>,
    interceptor: I,
    provider_name: String,
}

impl<I: Interceptor> Layered<I> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>, interceptor: I) -> Self {
        let provider_name = inner.name().to_string();
        Layered {
            inner,
            interceptor,
            provider_name,
        }
    }

    /// The call `operation` on `target`, needing `requires`.
    fn call(
        &self,
        operation: Operation,
        requires: Capability,
        idempotent: bool,
        target: Option<String>,
    ) -> Call {
        Call {
            cloud: self.inner.cloud(),
            provider: self.provider_name.clone(),
            operation,
            idempotent,
            target,
            capabilities: self.inner.capabilities(),
            requires,
        }
    }
}

/// Adds layers to a shared provider.
pub trait LayerExt {
    /// Wraps the provider in `interceptor`.
    fn layer<I: Interceptor>(self, interceptor: I) -> Arc<dyn Provider>;
}

impl LayerExt for Arc<dyn Provider> {
    fn layer<I: Interceptor>(self, interceptor: I) -> Arc<dyn Provider> {
        Arc::new(Layered::new(self, interceptor))
    }
}

/// Runs `inner.method(args)` through the interceptor as the [`Operation`]
/// `op`: idempotent and needing the operation's capability unless told
/// otherwise.
macro_rules! forward {
    ($layer:ident, $op:ident => $method:ident($($arg:expr),*), $target:expr) => {
        forward!(
            $layer,
            $op => $method($($arg),*),
            $target,
            Operation::$op.capability(),
            true
        )
    };
    (
        $layer:ident,
        $op:ident => $method:ident($($arg:expr),*),
        $target:expr,
        $requires:expr,
        $idempotent:expr
    ) => {{
        let call = $layer.call(Operation::$op, $requires, $idempotent, $target);
        $layer
            .interceptor
            .intercept(&call, &|| $layer.inner.$method($($arg),*))
            .await
    }};
}

#[async_trait]
impl<I: Interceptor> Catalog for Layered<I> {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        forward!(self, InstanceTypes => instance_types(), None)
    }

    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        forward!(self, Offers => offers(query), None)
    }
}

#[async_trait]
impl<I: Interceptor> SpotMarket for Layered<I> {
    async fn spot_price_history(
        &self,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Result<Vec<PricePoint>> {
        forward!(
            self,
            SpotPriceHistory => spot_price_history(pool, since),
            Some(pool.to_string())
        )
    }

    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        forward!(self, Stability => stability(pools), None)
    }
}

#[async_trait]
impl<I: Interceptor> Placement for Layered<I> {
    async fn create_placement_group(
        &self,
        request: &PlacementGroupRequest,
    ) -> Result<PlacementGroup> {
        // Not idempotent: a retry after a lost response would find the name taken.
        forward!(
            self,
            CreatePlacementGroup => create_placement_group(request),
            Some(request.name.clone()),
            Capabilities::for_strategy(request.strategy),
            false
        )
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        forward!(self, PlacementGroup => placement_group(id), Some(id.to_string()))
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        forward!(self, ListPlacementGroups => list_placement_groups(filter), None)
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        forward!(self, DeletePlacementGroup => delete_placement_group(id), Some(id.to_string()))
    }
}

#[async_trait]
impl<I: Interceptor> Compute for Layered<I> {
    async fn launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
        // Idempotent through the request's idempotency key.
        forward!(
            self,
            Launch => launch(request),
            Some(request.pool.to_string()),
            Capabilities::for_capacity(request.pool.capacity),
            true
        )
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        forward!(self, Instance => instance(id), Some(id.to_string()))
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        forward!(self, ListInstances => list_instances(filter), None)
    }

    async fn list_instances_in(
        &self,
        regions: &[Region],
        filter: &TagFilter,
    ) -> Result<Vec<Instance>> {
        forward!(self, ListInstances => list_instances_in(regions, filter), Some(regions.iter().map(Region::as_str).collect::<Vec<_>>().join(",")))
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        forward!(self, Terminate => terminate(id), Some(id.to_string()))
    }

    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        forward!(self, ConsoleOutput => console_output(id), Some(id.to_string()))
    }

    async fn end_reason(&self, id: &InstanceId) -> Result<Option<crate::model::EndReason>> {
        forward!(self, EndReason => end_reason(id), Some(id.to_string()))
    }

    async fn tag_instances(&self, ids: &[InstanceId], tags: &crate::model::Tags) -> Result<()> {
        // Setting the same tags twice leaves them as once.
        forward!(
            self,
            TagInstances => tag_instances(ids, tags),
            ids.first().map(|i| i.to_string())
        )
    }
}

#[async_trait]
impl<I: Interceptor> InterruptionSource for Layered<I> {
    async fn interruptions(&self) -> Result<NoticeStream> {
        forward!(self, Interruptions => interruptions(), None)
    }
}

impl<I: Interceptor> Provider for Layered<I> {
    fn cloud(&self) -> Cloud {
        self.inner.cloud()
    }

    fn name(&self) -> &str {
        &self.provider_name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
