//! The fake cloud as a provider: every capability trait, each call first
//! checked against the declared capabilities and the faults queued for it.

use super::*;
use crate::Region;

/// The live instances whose tags match `filter`: what a listing holds.
fn live_matching<'a>(st: &'a State, filter: &'a TagFilter) -> impl Iterator<Item = &'a Instance> {
    st.instances
        .values()
        .filter(move |i| i.state.is_live() && filter.matches(&i.tags))
}

/// Returns the result of the work, or the after-effect fault if one was taken.
pub(super) fn finish<T>(result: Result<T>, fault: Option<Error>) -> Result<T> {
    match fault {
        Some(e) => result.and(Err(e)),
        None => result,
    }
}

#[async_trait]
impl Catalog for FakeCloud {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        self.read(Operation::InstanceTypes, String::new(), |st| {
            Ok(st.types.clone())
        })
        .await
    }

    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        self.read(Operation::Offers, String::new(), |st| {
            Ok(st
                .offers
                .iter()
                .filter(|o| query.matches(o))
                .cloned()
                .collect())
        })
        .await
    }
}

#[async_trait]
impl SpotMarket for FakeCloud {
    async fn spot_price_history(
        &self,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Result<Vec<PricePoint>> {
        let fault = self
            .begin(Operation::SpotPriceHistory, pool.to_string())
            .await?;
        let st = self.state();
        let offer = st
            .offers
            .iter()
            .find(|o| o.pool == *pool)
            .ok_or_else(|| self.not_found("pool", &pool.to_string()))?;
        if pool.capacity != crate::Capacity::Spot {
            return Err(Error::invalid_input(format!(
                "{pool} is not a spot pool: only spot pools have a price history"
            )));
        }
        let points = st
            .price_history
            .get(pool)
            .cloned()
            .unwrap_or_else(|| vec![(offer.observed_at, offer.price)]);
        let first = points.iter().rposition(|(at, _)| *at <= since).unwrap_or(0);
        let source = PriceSource::new(SourceKind::Fake, "fake-spot-price-history");
        let history = points[first..]
            .iter()
            .map(|(at, price)| PricePoint {
                pool: pool.clone(),
                price: *price,
                at: *at,
                source: source.clone(),
            })
            .collect();
        finish(Ok(history), fault)
    }

    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        let fault = self.begin(Operation::Stability, String::new()).await?;
        let st = self.state();
        let out = pools
            .iter()
            .map(|p| {
                st.stability.get(p).cloned().unwrap_or_else(|| {
                    st.offers
                        .iter()
                        .find(|o| o.pool == *p)
                        .map(|o| o.stability.clone())
                        .unwrap_or_default()
                })
            })
            .collect();
        finish(Ok(out), fault)
    }
}

#[async_trait]
impl Placement for FakeCloud {
    async fn create_placement_group(
        &self,
        request: &PlacementGroupRequest,
    ) -> Result<PlacementGroup> {
        self.require(
            Capabilities::for_strategy(request.strategy),
            Operation::CreatePlacementGroup,
        )?;
        let fault = self
            .begin(Operation::CreatePlacementGroup, request.name.clone())
            .await?;
        request.validate()?;
        let mut st = self.state();
        if st.groups.values().any(|g| g.name == request.name) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("placement group '{}' already exists", request.name),
            ));
        }
        if !st.offers.iter().any(|o| o.pool.region == request.region) {
            return Err(Error::invalid_input(format!(
                "region '{}' has no offers in this cloud",
                request.region
            )));
        }
        let id = PlacementGroupId::new(Self::next_id(&mut st, "pg-fake"));
        let group = PlacementGroup {
            id: id.clone(),
            name: request.name.clone(),
            cloud: self.cloud,
            strategy: request.strategy,
            region: request.region.clone(),
            zone: request.zone.clone(),
            tags: request.tags.clone(),
        };
        st.groups.insert(id, group.clone());
        drop(st);
        finish(Ok(group), fault)
    }

    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        self.read(Operation::PlacementGroup, id.to_string(), |st| {
            self.found("placement group", id.as_str(), st.groups.get(id))
        })
        .await
    }

    async fn list_placement_groups(&self, filter: &TagFilter) -> Result<Vec<PlacementGroup>> {
        self.read(Operation::ListPlacementGroups, String::new(), |st| {
            Ok(st
                .groups
                .values()
                .filter(|g| filter.matches(&g.tags))
                .cloned()
                .collect())
        })
        .await
    }

    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        let fault = self
            .begin(Operation::DeletePlacementGroup, id.to_string())
            .await?;
        let mut st = self.state();
        if !st.groups.contains_key(id) {
            return Err(self.not_found("placement group", id.as_str()));
        }
        if st
            .instances
            .values()
            .any(|i| i.state.is_live() && i.placement_group.as_ref() == Some(id))
        {
            return Err(Error::invalid_input(format!(
                "placement group '{id}' still has running instances; terminate them first"
            ))
            .with_context("code", "InvalidPlacementGroup.InUse"));
        }
        st.groups.remove(id);
        drop(st);
        finish(Ok(()), fault)
    }
}

#[async_trait]
impl Compute for FakeCloud {
    async fn launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
        self.require(
            Capabilities::for_capacity(request.pool.capacity),
            Operation::Launch,
        )?;
        let fault = self
            .begin(Operation::Launch, request.pool.to_string())
            .await?;
        finish(self.do_launch(request), fault)
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        self.read(Operation::Instance, id.to_string(), |st| {
            self.found("instance", id.as_str(), st.instances.get(id))
        })
        .await
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        self.read(Operation::ListInstances, String::new(), |st| {
            Ok(live_matching(st, filter).cloned().collect())
        })
        .await
    }

    /// One call per region, as EC2's `DescribeInstances` is (each recorded
    /// with the region as its target), so tests count what a controller
    /// would cost a cloud that lists per region.
    async fn list_instances_in(
        &self,
        regions: &[Region],
        filter: &TagFilter,
    ) -> Result<Vec<Instance>> {
        let mut out = Vec::new();
        for region in regions {
            out.extend(
                self.read(Operation::ListInstances, region.to_string(), |st| {
                    Ok(live_matching(st, filter)
                        .filter(|i| i.pool.region == *region)
                        .cloned()
                        .collect::<Vec<_>>())
                })
                .await?,
            );
        }
        Ok(out)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        let fault = self.begin(Operation::Terminate, id.to_string()).await?;
        let why = EndReason::new(EndCause::Requested, "fake:terminate");
        finish(self.do_terminate(id, why), fault)
    }

    async fn tag_instances(&self, ids: &[InstanceId], tags: &crate::Tags) -> Result<()> {
        let target = ids.first().map(|i| i.to_string()).unwrap_or_default();
        let fault = self.begin(Operation::TagInstances, target).await?;
        // As EC2's CreateTags: one unknown id and none is tagged.
        let missing = {
            let st = self.state();
            ids.iter()
                .find(|id| !st.instances.get(id).is_some_and(|i| i.state.is_live()))
                .cloned()
        };
        let out = match missing {
            Some(id) => Err(self.not_found("instance", id.as_str())),
            None => ids
                .iter()
                .try_for_each(|id| tags.iter().try_for_each(|(k, v)| self.set_tag(id, k, v))),
        };
        finish(out, fault)
    }

    async fn console_output(&self, id: &InstanceId) -> Result<String> {
        self.read(Operation::ConsoleOutput, id.to_string(), |st| {
            match st.instances.get(id) {
                Some(i) => {
                    let script = st
                        .launches
                        .values()
                        .find(|(_, ids)| ids.contains(id))
                        .and_then(|(r, _)| r.boot_script.clone());
                    let mut text = format!(
                        "[fake console] {} {} in {} since {}\n",
                        i.id,
                        i.pool.instance_type,
                        i.pool.location(),
                        i.launched_at
                    );
                    match script {
                        Some(s) => text.push_str(&format!(
                            "[fake console] boot script, {} bytes:\n{s}\n",
                            s.len()
                        )),
                        None => text.push_str("[fake console] no boot script\n"),
                    }
                    Ok(text)
                }
                None => Err(self.not_found("instance", id.as_str())),
            }
        })
        .await
    }
}

#[async_trait]
impl InterruptionSource for FakeCloud {
    async fn interruptions(&self) -> Result<NoticeStream> {
        let fault = self.begin(Operation::Interruptions, String::new()).await?;
        let rx = self.notices.subscribe();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(notice) => return Some((Ok(notice), rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        finish(Ok(Box::pin(stream) as NoticeStream), fault)
    }
}

impl Provider for FakeCloud {
    fn cloud(&self) -> Cloud {
        self.cloud
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
}

impl FakeCloud {
    /// Begins `operation`, answers it from one look at the state, and finishes
    /// with the fault taken, if any.
    async fn read<T>(
        &self,
        operation: Operation,
        target: String,
        answer: impl FnOnce(&State) -> Result<T> + Send,
    ) -> Result<T> {
        let fault = self.begin(operation, target).await?;
        let out = answer(&self.state());
        finish(out, fault)
    }

    /// The item, or `NotFound` naming it.
    fn found<T: Clone>(&self, what: &str, id: &str, item: Option<&T>) -> Result<T> {
        item.cloned().ok_or_else(|| self.not_found(what, id))
    }

    pub(super) fn not_found(&self, what: &str, id: &str) -> Error {
        Error::new(ErrorKind::NotFound, format!("{what} '{id}' does not exist"))
            .with_provider(self.cloud)
    }

    /// Records the call, waits its latency, and takes a scripted fault if one is
    /// queued for it.
    pub(super) async fn begin(
        &self,
        operation: Operation,
        target: String,
    ) -> Result<Option<Error>> {
        // Launches and group creations also check what their request needs.
        self.require(operation.capability(), operation)?;
        let (latency, fault) = {
            let mut st = self.state();
            if st.calls.len() >= self.max_calls {
                // Keep the newest: a long-lived fake stays bounded.
                st.calls.drain(..self.max_calls / 2);
            }
            st.calls.push(RecordedCall { operation, target });
            *st.counts.entry(operation).or_default() += 1;
            if let Some(t) = st.throttle.as_mut() {
                let now = (tokio::time::Instant::now(), self.clock.now());
                t.take(self.cloud, operation, now).map_err(|e| {
                    e.with_provider(self.cloud)
                        .with_operation(operation.as_str())
                })?;
            }
            let latency = st.latency.get(&operation).copied();
            let idx = st.faults.iter().position(|f| f.operation == operation);
            (latency, idx.and_then(|i| st.faults.remove(i)))
        };
        if let Some(d) = latency {
            tokio::time::sleep(d).await;
        }
        match fault {
            Some(f) if f.after_effect => Ok(Some(
                f.error
                    .with_provider(self.cloud)
                    .with_operation(operation.as_str()),
            )),
            Some(f) => Err(f
                .error
                .with_provider(self.cloud)
                .with_operation(operation.as_str())),
            None => Ok(None),
        }
    }

    pub(super) fn next_id(st: &mut State, prefix: &str) -> String {
        st.seq += 1;
        format!("{prefix}-{:06}", st.seq)
    }

    pub(super) fn do_launch(&self, request: &LaunchRequest) -> Result<Vec<Instance>> {
        request.validate()?;
        if request.pool.cloud != self.cloud && self.cloud != Cloud::Fake {
            return Err(Error::invalid_input(format!(
                "pool {} is not on {}",
                request.pool, self.cloud
            )));
        }
        let now = self.clock.now();
        let mut st = self.state();
        let key = request.idempotency_key.to_string();
        if let Some((first, ids)) = st.launches.get(&key) {
            if first != request {
                return Err(Error::invalid_input(format!(
                    "idempotency key '{key}' was already used for a different launch request"
                ))
                .with_context("code", "IdempotentParameterMismatch"));
            }
            let ids = ids.clone();
            return Ok(ids
                .iter()
                .filter_map(|id| st.instances.get(id).cloned())
                .collect());
        }
        if !st.offers.iter().any(|o| o.pool == request.pool) {
            return Err(Error::invalid_input(format!(
                "no pool {} in this cloud's catalog",
                request.pool
            )));
        }
        if let Some(pg) = &request.placement_group {
            if !st.groups.contains_key(pg) {
                return Err(self.not_found("placement group", pg.as_str()));
            }
        }
        let live_in_pool = st
            .instances
            .values()
            .filter(|i| i.pool == request.pool && i.state.is_live())
            .count() as u32;
        let over_limit = st
            .capacity_limits
            .get(&request.pool)
            .is_some_and(|limit| live_in_pool + request.count > *limit);
        if st.out_of_capacity.contains(&request.pool) || over_limit {
            return Err(Error::new(
                ErrorKind::InsufficientCapacity,
                format!("no capacity for {} x {}", request.count, request.pool),
            )
            .with_context("pool", request.pool.to_string()));
        }
        let tags = request.effective_tags(now);
        let price = st
            .offers
            .iter()
            .find(|o| o.pool == request.pool)
            .map(|o| o.price);
        let mut out = Vec::new();
        for _ in 0..request.count {
            let id = InstanceId::new(Self::next_id(&mut st, &self.id_prefix));
            let instance = Instance {
                id: id.clone(),
                pool: request.pool.clone(),
                state: InstanceState::Running,
                tags: tags.clone(),
                launched_at: now,
                expires_at: request.expires_at(now),
                placement_group: request.placement_group.clone(),
                end_reason: None,
                ended_at: None,
                addresses: self.addresses,
            };
            if let Some(p) = price {
                st.billing.insert(id.clone(), p);
            }
            st.instances.insert(id, instance.clone());
            out.push(instance);
        }
        st.launches.insert(
            key,
            (request.clone(), out.iter().map(|i| i.id.clone()).collect()),
        );
        Ok(out)
    }

    pub(super) fn do_terminate(&self, id: &InstanceId, why: EndReason) -> Result<()> {
        let mut st = self.state();
        match st.instances.get_mut(id) {
            Some(i) if i.state.is_live() => {
                i.state = InstanceState::Terminated;
                i.end_reason = Some(why);
                i.ended_at = Some(self.clock.now());
                st.pending_preemptions.retain(|(p, _)| p != id);
                Ok(())
            }
            _ => Err(self.not_found("instance", id.as_str())),
        }
    }
}
