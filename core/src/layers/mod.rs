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
//! use gpufleet_core::{fake::FakeCloud, layers::*, Cloud, Provider};
//! let provider: Arc<dyn Provider> = Arc::new(FakeCloud::from_snapshot(Cloud::Aws));
//! let provider = provider
//!     .layer(TimeoutLayer::new(Duration::from_secs(30))) // bounds each attempt
//!     .layer(RetryLayer::default())                      // retries attempts
//!     .layer(TracingLayer);                              // one span per call
//! assert_eq!(provider.cloud(), Cloud::Aws);
//! ```

mod capability;
mod count;
mod retry;
mod timeout;
mod trace;

pub use capability::CapabilityLayer;
pub use count::CallCounter;
pub use retry::RetryLayer;
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
    PlacementGroupId, PlacementGroupRequest, Pool, PricePoint, Stability, TagFilter,
};
use crate::provider::{
    Capabilities, Capability, Catalog, Compute, InterruptionSource, NoticeStream, Placement,
    Provider, SpotMarket,
};

/// One call through a layer.
#[derive(Debug, Clone)]
pub struct Call {
    /// The provider's cloud.
    pub cloud: Cloud,
    /// The provider's name.
    pub provider: String,
    /// The operation: `offers`, `launch`, `terminate`, …
    pub operation: &'static str,
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

    fn call(&self, operation: &'static str, idempotent: bool, target: Option<String>) -> Call {
        // Every operation forwarded here is named in `of_operation` (a test
        // checks the fake's list of them).
        let requires = Capability::of_operation(operation).unwrap_or(Capability::Compute);
        self.call_needing(operation, requires, idempotent, target)
    }

    /// A call that needs more than its operation's name says (a spot launch,
    /// a spread or partition group).
    fn call_needing(
        &self,
        operation: &'static str,
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

#[async_trait]
impl<I: Interceptor> Catalog for Layered<I> {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        let call = self.call("instance_types", true, None);
        self.interceptor
            .intercept(&call, &|| self.inner.instance_types())
            .await
    }

    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        let call = self.call("offers", true, None);
        self.interceptor
            .intercept(&call, &|| self.inner.offers(query))
            .await
    }
}

#[async_trait]
impl<I: Interceptor> SpotMarket for Layered<I> {
    async fn spot_price_history(
        &self,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Result<Vec<PricePoint>> {
        let call = self.call("spot_price_history", true, Some(pool.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.spot_price_history(pool, since))
            .await
    }

    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        let call = self.call("stability", true, None);
        self.interceptor
            .intercept(&call, &|| self.inner.stability(pools))
            .await
    }
}

#[async_trait]
impl<I: Interceptor> Placement for Layered<I> {
    async fn create_placement_group(
        &self,
        request: &PlacementGroupRequest,
    ) -> Result<PlacementGroup> {
        // Not idempotent: a retry after a lost response would find the name taken.
        let call = self.call_needing(
            "create_placement_group",
            Capabilities::for_strategy(request.strategy),
            false,
            Some(request.name.clone()),
        );
        self.interceptor
            .intercept(&call, &|| self.inner.create_placement_group(request))
            .await
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        let call = self.call("placement_group", true, Some(id.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.placement_group(id))
            .await
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        let call = self.call("list_placement_groups", true, None);
        self.interceptor
            .intercept(&call, &|| self.inner.list_placement_groups(filter))
            .await
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        let call = self.call("delete_placement_group", true, Some(id.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.delete_placement_group(id))
            .await
    }
}

#[async_trait]
impl<I: Interceptor> Compute for Layered<I> {
    async fn launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
        // Idempotent through the request's idempotency key.
        let call = self.call_needing(
            "launch",
            Capabilities::for_capacity(request.pool.capacity),
            true,
            Some(request.pool.to_string()),
        );
        self.interceptor
            .intercept(&call, &|| self.inner.launch(request))
            .await
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        let call = self.call("instance", true, Some(id.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.instance(id))
            .await
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        let call = self.call("list_instances", true, None);
        self.interceptor
            .intercept(&call, &|| self.inner.list_instances(filter))
            .await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        let call = self.call("terminate", true, Some(id.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.terminate(id))
            .await
    }

    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        let call = self.call("console_output", true, Some(id.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.console_output(id))
            .await
    }

    async fn end_reason(&self, id: &InstanceId) -> Result<Option<crate::model::EndReason>> {
        let call = self.call("end_reason", true, Some(id.to_string()));
        self.interceptor
            .intercept(&call, &|| self.inner.end_reason(id))
            .await
    }
}

#[async_trait]
impl<I: Interceptor> InterruptionSource for Layered<I> {
    async fn interruptions(&self) -> Result<NoticeStream> {
        let call = self.call("interruptions", true, None);
        self.interceptor
            .intercept(&call, &|| self.inner.interruptions())
            .await
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
