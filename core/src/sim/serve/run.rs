//! A service replay minute by minute: replicas launched, made ready,
//! reclaimed and drained, and the hedge of spot with on-demand.

use super::*;

#[derive(Debug, Clone)]
pub(super) struct SimReplica {
    pub(super) view: ReplicaView,
    pub(super) ready_at: usize,
    pub(super) serving_since: Option<OffsetDateTime>,
}

/// SpotHedge's location status: active unless it lost or refused a replica
/// since one was last ready there.
pub(super) struct Hedge {
    pub(super) preempted: HashMap<Pool, bool>,
}

impl Hedge {
    pub(super) fn set_preempted(&mut self, pool: &Pool) {
        match self.preempted.get_mut(pool) {
            Some(p) => *p = true,
            None => return, // not a location of its one type
        }
        if self.preempted.values().filter(|p| !**p).count() < 2 {
            for v in self.preempted.values_mut() {
                *v = false;
            }
        }
    }

    /// The cheapest active location with no spot replica, else the cheapest
    /// active one.
    pub(super) fn next(&self, offers: &[(Offer, f64)], used: &[Pool]) -> Option<Pool> {
        let active: Vec<&Offer> = offers
            .iter()
            .map(|(o, _)| o)
            .filter(|o| !self.preempted.get(&o.pool).copied().unwrap_or(false))
            .collect();
        let fresh: Vec<&Offer> = active
            .iter()
            .copied()
            .filter(|o| !used.contains(&o.pool))
            .collect();
        let from = if fresh.is_empty() { active } else { fresh };
        from.into_iter()
            .min_by(|a, b| a.price.cmp(&b.price).then_with(|| a.pool.cmp(&b.pool)))
            .map(|o| o.pool.clone())
    }
}

pub(super) struct Run<'a> {
    pub(super) p: &'a Prepared<'a>,
    pub(super) policy: ServePolicy,
    pub(super) replicas: Vec<SimReplica>,
    pub(super) next_id: u64,
    pub(super) memory: PoolMemory,
    pub(super) hedge: Hedge,
    pub(super) model: HazardModel,
    pub(super) autoscaler: Autoscaler,
    pub(super) cost: Money,
    pub(super) short: u64,
    pub(super) preemptions: u64,
    pub(super) launches: u64,
    pub(super) refused: u64,
    pub(super) spot_minutes: u64,
    pub(super) on_demand_minutes: u64,
    pub(super) hourly_ready: Vec<f64>,
}

impl<'a> Run<'a> {
    pub(super) fn new(p: &'a Prepared<'a>, policy: ServePolicy) -> Self {
        Run {
            p,
            policy,
            replicas: Vec::new(),
            next_id: 0,
            memory: PoolMemory::new(SET_ASIDE),
            hedge: Hedge {
                preempted: p
                    .hedge_spot
                    .iter()
                    .map(|(o, _)| (o.pool.clone(), false))
                    .collect(),
            },
            model: HazardModel::default(),
            autoscaler: Autoscaler::new(&p.scenario.spec, p.start),
            cost: Money::ZERO,
            short: 0,
            preemptions: 0,
            launches: 0,
            refused: 0,
            spot_minutes: 0,
            on_demand_minutes: 0,
            hourly_ready: Vec::new(),
        }
    }

    pub(super) fn now(&self, minute: usize) -> OffsetDateTime {
        self.p.start + time::Duration::minutes(minute as i64)
    }

    pub(super) fn views(&self) -> Vec<ReplicaView> {
        self.replicas
            .iter()
            .filter(|r| r.view.state != ReplicaState::Ended)
            .map(|r| r.view.clone())
            .collect()
    }

    /// What the policy does this step.
    pub(super) fn actions(&mut self, now: OffsetDateTime, why: Option<&str>) -> Vec<Action> {
        let target = self.autoscaler.target();
        let views = self.views();
        let spec = &self.p.scenario.spec;
        match self.policy {
            ServePolicy::OnDemand => {
                let pools = self
                    .p
                    .costed(&self.p.on_demand, &self.model, &self.memory, now);
                let none = SpotSettings {
                    share: 0.0,
                    min_on_demand: 0,
                    extra: 0,
                    survive_zone_loss: false,
                };
                plan(target, &none, &views, &pools, &[], why).actions
            }
            ServePolicy::SpotOnly => {
                let pools = self.p.costed(&self.p.spot, &self.model, &self.memory, now);
                let avoid = self.memory.avoid(now);
                let all = SpotSettings {
                    share: 1.0,
                    min_on_demand: 0,
                    extra: 0,
                    survive_zone_loss: false,
                };
                plan(target, &all, &views, &pools, &avoid, why).actions
            }
            ServePolicy::Gpufleet | ServePolicy::GpufleetSurvive => {
                let pools = self.p.costed(&self.p.all, &self.model, &self.memory, now);
                let avoid = self.memory.avoid(now);
                let settings = SpotSettings {
                    survive_zone_loss: spec.spot.survive_zone_loss
                        || self.policy == ServePolicy::GpufleetSurvive,
                    ..spec.spot
                };
                plan(target, &settings, &views, &pools, &avoid, why).actions
            }
            ServePolicy::Spothedge => self.hedge_actions(target, &views, why),
        }
    }

    pub(super) fn hedge_actions(
        &self,
        target: u32,
        views: &[ReplicaView],
        why: Option<&str>,
    ) -> Vec<Action> {
        let live = |c: Capacity| -> Vec<&ReplicaView> {
            views
                .iter()
                .filter(|r| {
                    r.pool.capacity == c
                        && matches!(r.state, ReplicaState::Starting | ReplicaState::Ready)
                })
                .collect()
        };
        let ready_spot = live(Capacity::Spot)
            .iter()
            .filter(|r| r.state == ReplicaState::Ready)
            .count() as u32;
        let wanted = mix(target, &self.p.scenario.spec.spot, ready_spot, true);
        let why = why.unwrap_or("SpotHedge").to_string();
        let mut actions = Vec::new();
        for (capacity, want) in [
            (Capacity::Spot, wanted.spot),
            (Capacity::OnDemand, wanted.on_demand),
        ] {
            let mine = live(capacity);
            let have = mine.len() as u32;
            if have < want {
                let mut used: Vec<Pool> = mine.iter().map(|r| r.pool.clone()).collect();
                for _ in have..want {
                    let pool = match capacity {
                        Capacity::Spot => self.hedge.next(&self.p.hedge_spot, &used),
                        Capacity::OnDemand => self
                            .p
                            .hedge_on_demand
                            .iter()
                            .min_by(|a, b| a.0.price.cmp(&b.0.price))
                            .map(|(o, _)| o.pool.clone()),
                    };
                    let Some(pool) = pool else { break };
                    let price = self.p.offer_of(&pool).map_or(Price::ZERO, |(o, _)| o.price);
                    used.push(pool.clone());
                    actions.push(Action::Launch {
                        pool,
                        price,
                        why: why.clone(),
                    });
                }
            } else if have > want {
                for r in drain_order(mine).into_iter().take((have - want) as usize) {
                    actions.push(Action::Drain {
                        replica: r.id.clone(),
                        why: why.clone(),
                    });
                }
            }
        }
        actions
    }

    pub(super) fn lost(&mut self, i: usize, now: OffsetDateTime) {
        let r = &mut self.replicas[i];
        r.view.state = ReplicaState::Ended;
        let pool = r.view.pool.clone();
        if let Some(from) = r.serving_since.take() {
            self.memory.served(&pool, from, now);
        }
    }

    pub(super) fn step(&mut self, t: usize) -> Result<()> {
        let now = self.now(t);
        // Spot replicas in a pool without capacity at this tick are lost.
        for i in 0..self.replicas.len() {
            let r = &self.replicas[i];
            if r.view.state != ReplicaState::Ended && !self.p.available(&r.view.pool, t) {
                let pool = r.view.pool.clone();
                self.lost(i, now);
                self.preemptions += 1;
                self.memory.interrupted(&pool, now);
                self.hedge.set_preempted(&pool);
            }
        }
        // Replicas whose cold start is over are ready.
        for r in &mut self.replicas {
            if r.view.state == ReplicaState::Starting && r.ready_at <= t {
                r.view.state = ReplicaState::Ready;
                r.serving_since = Some(now);
                if let Some(p) = self.hedge.preempted.get_mut(&r.view.pool) {
                    *p = false;
                }
            }
        }
        let sample = self.p.sample(t, self.autoscaler.target());
        let in_flight = sample.in_flight;
        let why = self.autoscaler.observe(&sample).map(|d| d.to_string());
        // One plan a minute: a refused launch (a minute or so to be told, on
        // a real cloud) is planned again in the next.
        for action in self.actions(now, why.as_deref()) {
            match action {
                Action::Launch { pool, price, .. } => {
                    self.launches += 1;
                    if !self.p.available(&pool, t) {
                        self.refused += 1;
                        self.memory.refused(&pool, now, true);
                        self.hedge.set_preempted(&pool);
                        continue;
                    }
                    self.next_id += 1;
                    let speed = self.p.speed(&pool);
                    self.replicas.push(SimReplica {
                        view: ReplicaView {
                            id: format!("r{}", self.next_id),
                            pool,
                            price,
                            state: ReplicaState::Starting,
                            speed,
                        },
                        ready_at: t + self.p.scenario.cold_start_minutes as usize,
                        serving_since: None,
                    });
                }
                Action::Drain { replica, .. } => {
                    if let Some(r) = self.replicas.iter_mut().find(|r| r.view.id == replica) {
                        r.view.state = ReplicaState::Draining;
                    }
                }
            }
        }
        // Served: the ready replicas carry the minute's requests in flight.
        let ready: f64 = self
            .replicas
            .iter()
            .filter(|r| r.view.state == ReplicaState::Ready)
            .map(|r| self.p.speed(&r.view.pool))
            .sum();
        if in_flight > ready * self.p.per_replica + 1e-9 {
            self.short += 1;
        }
        let hour = t / 60;
        if self.hourly_ready.len() <= hour {
            self.hourly_ready.push(0.0);
        }
        self.hourly_ready[hour] += ready / 60.0;
        // Every replica not ended pays the minute; drained ones end with it.
        let end = self.now(t + 1);
        for i in 0..self.replicas.len() {
            let r = &self.replicas[i];
            if r.view.state == ReplicaState::Ended {
                continue;
            }
            let minute = r.view.price.cost_for_seconds(60)?;
            self.cost = self.cost.checked_add(minute).ok_or_else(|| {
                Error::invalid_input("the simulated cost overflows what gpufleet can count")
            })?;
            match r.view.pool.capacity {
                Capacity::Spot => self.spot_minutes += 1,
                Capacity::OnDemand => self.on_demand_minutes += 1,
            }
            if r.view.state == ReplicaState::Draining {
                self.lost(i, end);
            }
        }
        self.replicas
            .retain(|r| r.view.state != ReplicaState::Ended);
        Ok(())
    }

    pub(super) fn finish(self) -> ServeResult {
        let minutes = self.p.minutes as f64;
        ServeResult {
            policy: self.policy,
            cost_usd: self.cost,
            cost_vs_on_demand: None,
            served_share: (minutes - self.short as f64) / minutes,
            short_minutes: self.short,
            preemptions: self.preemptions,
            launches: self.launches,
            refused_launches: self.refused,
            spot_hours: self.spot_minutes as f64 / 60.0,
            on_demand_hours: self.on_demand_minutes as f64 / 60.0,
            hourly_ready: self.hourly_ready,
        }
    }
}
