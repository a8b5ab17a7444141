//! What a test does to the fake cloud: its clock, faults (before or after
//! the effect), latency, capacity, prices, interruptions, out-of-band
//! changes, and the state and calls it reads back.

use super::*;
use crate::Money;

impl FakeCloud {
    /// Moves the clock forward and carries out interruptions whose deadline has
    /// passed (the instances become terminated).
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
        self.settle();
    }

    /// Carries out interruptions whose deadline has passed on the clock (for
    /// fakes sharing one clock that another advanced).
    pub fn settle(&self) {
        let now = self.clock.now();
        let mut st = self.state();
        let due: Vec<InstanceId> = st
            .pending_preemptions
            .iter()
            .filter(|(_, at)| *at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let due_at: HashMap<InstanceId, OffsetDateTime> = st
            .pending_preemptions
            .iter()
            .filter(|(_, at)| *at <= now)
            .cloned()
            .collect();
        st.pending_preemptions.retain(|(_, at)| *at > now);
        for id in due {
            let at = due_at.get(&id).copied().unwrap_or(now);
            if let Some(i) = st.instances.get_mut(&id) {
                i.state = InstanceState::Terminated;
                i.end_reason = Some(EndReason::new(EndCause::Reclaimed, "fake:preempted"));
                i.ended_at = Some(at);
            }
        }
    }

    /// The next call of `operation` fails with `error` before doing
    /// anything. Faults queue up in order.
    pub fn fail_next(&self, operation: Operation, error: Error) {
        self.state().faults.push_back(Fault {
            operation,
            error,
            after_effect: false,
        });
    }

    /// The next call of `operation` does its work and then fails with `error`, as
    /// when a response is lost: a retry must not do the work twice.
    pub fn fail_next_after_effect(&self, operation: Operation, error: Error) {
        self.state().faults.push_back(Fault {
            operation,
            error,
            after_effect: true,
        });
    }

    /// Every call of `operation` takes `delay` (of the tokio clock) before it
    /// answers; `Duration::ZERO` removes the delay.
    pub fn set_latency(&self, operation: Operation, delay: Duration) {
        let mut st = self.state();
        if delay.is_zero() {
            st.latency.remove(&operation);
        } else {
            st.latency.insert(operation, delay);
        }
    }

    /// Limits the rate of its compute API's calls as `limits` say (a token
    /// bucket for reads and one for writes, refilled as time passes, on its
    /// clock or tokio's, whichever moved more; full at first), or lifts the
    /// limits (`None`). [`RateLimits::EC2`] is EC2's
    /// published model. A call over the limit is refused with
    /// [`ErrorKind::RateLimited`] in the cloud's own words, before it does
    /// anything.
    pub fn set_rate_limits(&self, limits: Option<RateLimits>) {
        let now = (tokio::time::Instant::now(), self.clock.now());
        self.state().throttle = limits.map(|l| throttle::Throttle::new(l, now));
    }

    /// How many calls its rate limits refused so far.
    pub fn throttled(&self) -> u64 {
        self.state().throttle.as_ref().map_or(0, |t| t.refused)
    }

    /// Makes launches into `pool` fail with [`ErrorKind::InsufficientCapacity`]
    /// (or succeed again).
    pub fn set_out_of_capacity(&self, pool: &Pool, out: bool) {
        let mut st = self.state();
        if out {
            st.out_of_capacity.insert(pool.clone());
        } else {
            st.out_of_capacity.remove(pool);
        }
    }

    /// Limits how many live instances `pool` can hold (`None`: no limit).
    pub fn set_capacity_limit(&self, pool: &Pool, limit: Option<u32>) {
        let mut st = self.state();
        match limit {
            Some(n) => st.capacity_limits.insert(pool.clone(), n),
            None => st.capacity_limits.remove(pool),
        };
    }

    /// Changes the price of `pool` in the catalog (as a live price would move).
    pub fn set_price(&self, pool: &Pool, price: Price) {
        let now = self.clock.now();
        for o in self.state().offers.iter_mut().filter(|o| o.pool == *pool) {
            o.price = price;
            o.observed_at = now;
            o.source = PriceSource::new(SourceKind::Fake, "fake-set-price");
        }
    }

    /// Sets the stability signals returned for `pool`.
    pub fn set_stability(&self, pool: &Pool, stability: Stability) {
        self.state().stability.insert(pool.clone(), stability);
    }

    /// Sets the spot price history of `pool` (price changes, any order).
    pub fn set_spot_price_history(&self, pool: &Pool, mut points: Vec<(OffsetDateTime, Price)>) {
        points.sort_by_key(|(at, _)| *at);
        self.state().price_history.insert(pool.clone(), points);
    }

    /// Sends an interruption notice for a live instance with `lead` time before
    /// its deadline. A preemption also terminates the instance when the clock
    /// passes the deadline.
    pub fn inject_interruption(
        &self,
        id: &InstanceId,
        kind: NoticeKind,
        lead: Duration,
    ) -> Result<InterruptionNotice> {
        let now = self.clock.now();
        let deadline =
            now.saturating_add(time::Duration::try_from(lead).unwrap_or(time::Duration::MAX));
        {
            let mut st = self.state();
            match st.instances.get(id) {
                Some(i) if i.state.is_live() => {}
                _ => return Err(self.not_found("instance", id.as_str())),
            }
            if kind == NoticeKind::Preemption {
                st.pending_preemptions.push((id.clone(), deadline));
            }
        }
        let notice = InterruptionNotice {
            instance: Some(id.clone()),
            kind,
            deadline: Some(deadline),
            source: format!("{}:injected", self.name),
            received_at: now,
        };
        // No receivers is fine: nobody is watching.
        let _ = self.notices.send(notice.clone());
        Ok(notice)
    }

    /// The instances given a preemption notice that are not ended yet, each
    /// with its deadline (what a node's metadata service would tell it).
    pub fn pending_preemptions(&self) -> Vec<(InstanceId, OffsetDateTime)> {
        let st = self.state();
        st.pending_preemptions
            .iter()
            .filter(|(id, _)| st.instances.get(id).is_some_and(|i| i.state.is_live()))
            .cloned()
            .collect()
    }

    /// Ends a live instance now, out of band, as a spot reclaim without
    /// notice does: its state becomes terminated, reclaimed by the cloud.
    pub fn preempt(&self, id: &InstanceId) -> Result<()> {
        self.do_terminate(id, EndReason::new(EndCause::Reclaimed, "fake:preempted"))
    }

    /// Ends a live instance now, out of band, as a person in the console
    /// does: its state becomes terminated, at someone's request.
    pub fn terminate_out_of_band(&self, id: &InstanceId) -> Result<()> {
        self.do_terminate(id, EndReason::new(EndCause::Requested, "fake:console"))
    }

    /// Writes a tag on a live instance, as a node's agent does with its own
    /// identity (heartbeat, progress, exit status).
    pub fn set_tag(&self, id: &InstanceId, key: &str, value: &str) -> Result<()> {
        let mut st = self.state();
        match st.instances.get_mut(id) {
            Some(i) if i.state.is_live() => {
                i.tags.insert(key.to_string(), value.to_string());
                if key == crate::tags::EXPIRES_AT {
                    i.expires_at = crate::tags::parse_time(value);
                }
                Ok(())
            }
            _ => Err(self.not_found("instance", id.as_str())),
        }
    }

    /// Gives a live instance its addresses, as a cloud does some time
    /// after the launch (Compute Engine and Azure name them once the
    /// instance exists; EC2 a public one once it runs).
    pub fn set_addresses(&self, id: &InstanceId, addresses: crate::Addresses) -> Result<()> {
        let mut st = self.state();
        match st.instances.get_mut(id) {
            Some(i) if i.state.is_live() => {
                i.addresses = addresses;
                Ok(())
            }
            _ => Err(self.not_found("instance", id.as_str())),
        }
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.state().calls.clone()
    }

    /// How many calls of `operation` it received so far (all of them, not
    /// only those the call log keeps): what a test counts per poll.
    pub fn call_count(&self, operation: Operation) -> u64 {
        self.state().counts.get(&operation).copied().unwrap_or(0)
    }

    /// The instances that are not terminated.
    pub fn live_instances(&self) -> Vec<Instance> {
        self.state()
            .instances
            .values()
            .filter(|i| i.state.is_live())
            .cloned()
            .collect()
    }

    /// The live instances, each with the boot script of the launch that made
    /// it (what the `local` provider runs as a process).
    pub fn live_with_boot_scripts(&self) -> Vec<(Instance, Option<String>)> {
        let st = self.state();
        st.instances
            .values()
            .filter(|i| i.state.is_live())
            .map(|i| {
                let script = st
                    .launches
                    .values()
                    .find(|(_, ids)| ids.contains(&i.id))
                    .and_then(|(r, _)| r.boot_script.clone());
                (i.clone(), script)
            })
            .collect()
    }

    /// The live instances a job launched (those tagged with a job id).
    pub fn live_job_instances(&self) -> Vec<Instance> {
        let mut live = self.live_instances();
        live.retain(|i| i.tags.contains_key(crate::tags::JOB));
        live
    }

    /// Every placement group.
    pub fn placement_groups(&self) -> Vec<PlacementGroup> {
        self.state().groups.values().cloned().collect()
    }

    /// The resources it holds, to save.
    pub fn export_state(&self) -> FakeState {
        let st = self.state();
        let mut launches: Vec<(String, LaunchRequest, Vec<InstanceId>)> = st
            .launches
            .iter()
            .map(|(k, (r, ids))| (k.clone(), r.clone(), ids.clone()))
            .collect();
        launches.sort_by(|a, b| a.0.cmp(&b.0));
        let mut billing: Vec<(InstanceId, Price)> =
            st.billing.iter().map(|(i, p)| (i.clone(), *p)).collect();
        billing.sort_by(|a, b| a.0.cmp(&b.0));
        FakeState {
            instances: st.instances.values().cloned().collect(),
            launches,
            groups: st.groups.values().cloned().collect(),
            seq: st.seq,
            billing,
        }
    }

    /// Replaces the resources it holds with saved ones.
    pub fn import_state(&self, saved: FakeState) {
        let mut st = self.state();
        st.instances = saved
            .instances
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        st.launches = saved
            .launches
            .into_iter()
            .map(|(k, r, ids)| (k, (r, ids)))
            .collect();
        st.groups = saved
            .groups
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect();
        st.seq = saved.seq;
        st.billing = saved.billing.into_iter().collect();
    }

    /// What this cloud has billed up to `now`: every instance it launched,
    /// at its pool's price when launched, from its launch to its end (or
    /// `now` while it runs), each priced to the second as the clouds bill
    /// GPU instances. The figure the ledger's spend must match.
    pub fn billed(&self, now: OffsetDateTime) -> Result<Money> {
        let st = self.state();
        let mut total = Money::ZERO;
        for (id, price) in &st.billing {
            let Some(i) = st.instances.get(id) else {
                continue;
            };
            let end = match (i.state.is_live(), i.ended_at) {
                (true, _) | (false, None) => now,
                (false, Some(at)) => at,
            };
            let secs = (end - i.launched_at).whole_seconds().max(0) as u64;
            total = Money::try_sum([total, price.cost_for_seconds(secs)?])?;
        }
        Ok(total)
    }

    /// The price instance `id` is billed at (its pool's when it launched),
    /// if this cloud launched it.
    pub fn billed_price(&self, id: &InstanceId) -> Option<Price> {
        self.state().billing.get(id).copied()
    }

    /// Adds an instance that was not launched through gpufleet (tests use it
    /// for unmanaged neighbours that must survive clean-ups).
    pub fn insert_instance(&self, instance: Instance) {
        self.state().instances.insert(instance.id.clone(), instance);
    }
}
