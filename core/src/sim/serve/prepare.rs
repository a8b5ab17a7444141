//! A service replay made ready: each pool's trace and price at every
//! minute, the demand and the offers the planner sees.

use super::*;

/// The pools of a run, as offers and as the plan's costed pools.
pub(super) struct Prepared<'a> {
    pub(super) scenario: &'a ServeScenario,
    pub(super) sim: &'a [SimPool],
    pub(super) start: OffsetDateTime,
    pub(super) tick_seconds: u64,
    pub(super) minutes: usize,
    /// Spot offers (index = the sim pool's) and on-demand offers (one per
    /// zone), with their speed.
    pub(super) spot: Vec<(Offer, f64)>,
    pub(super) on_demand: Vec<(Offer, f64)>,
    /// Both, spot first (what gpufleet's policy chooses from).
    pub(super) all: Vec<(Offer, f64)>,
    /// The spot and on-demand offers of the first instance type: SpotHedge
    /// places one resource type (SkyServe refuses several for its spot
    /// placer).
    pub(super) hedge_spot: Vec<(Offer, f64)>,
    pub(super) hedge_on_demand: Vec<(Offer, f64)>,
    /// One replica's capacity in requests in flight at speed 1.
    pub(super) per_replica: f64,
}

impl Prepared<'_> {
    pub(super) fn available(&self, pool: &Pool, minute: usize) -> bool {
        if pool.capacity == Capacity::OnDemand {
            return true;
        }
        let tick = (minute as u64 * 60 / self.tick_seconds) as usize;
        self.sim
            .iter()
            .find(|p| &p.pool == pool)
            .is_some_and(|p| p.trace.available.get(tick).copied().unwrap_or(false))
    }

    pub(super) fn in_flight(&self, minute: usize) -> f64 {
        self.scenario.demand.at(self.start, minute) / 60.0 * self.scenario.request_seconds
    }

    /// The offer of `pool` (spot or on-demand) and its speed.
    pub(super) fn offer_of(&self, pool: &Pool) -> Option<&(Offer, f64)> {
        self.all.iter().find(|(o, _)| &o.pool == pool)
    }

    pub(super) fn speed(&self, pool: &Pool) -> f64 {
        self.offer_of(pool).map_or(1.0, |(_, s)| *s)
    }

    /// What the proxy would measure in minute `t` with the autoscaler at
    /// `target`: the requests in flight, and those arriving held while at
    /// zero.
    pub(super) fn sample(&self, t: usize, target: u32) -> LoadSample {
        let arrived = self.scenario.demand.at(self.start, t);
        LoadSample {
            at: self.start + time::Duration::minutes(t as i64),
            in_flight: self.in_flight(t),
            queued: if target == 0 && arrived > 0.0 {
                arrived.ceil().min(f64::from(u32::MAX)) as u32
            } else {
                0
            },
            arrived: arrived.round() as u64,
        }
    }

    /// The pools costed per served hour, as `gpufleet serve` costs them.
    pub(super) fn costed(
        &self,
        offers: &[(Offer, f64)],
        model: &HazardModel,
        memory: &PoolMemory,
        now: OffsetDateTime,
    ) -> Vec<ReplicaPool> {
        let cold = Duration::from_secs(u64::from(self.scenario.cold_start_minutes) * 60);
        let mut pools: Vec<ReplicaPool> = offers
            .iter()
            .filter_map(|(offer, speed)| {
                let hazard = model.rate(offer, memory.evidence().get(&offer.pool), now);
                ReplicaPool::costed(offer.clone(), 0, *speed, hazard, cold)
            })
            .collect();
        crate::serve::sort_pools(&mut pools);
        pools
    }
}

pub(super) fn offer(pool: Pool, price: Price, at: OffsetDateTime) -> Offer {
    let known = crate::Snapshot::embedded()
        .instance_types()
        .iter()
        .find(|t| t.cloud == pool.cloud && t.name == pool.instance_type)
        .cloned();
    let instance_type = known.unwrap_or_else(|| {
        Arc::new(InstanceType {
            cloud: pool.cloud,
            name: pool.instance_type.clone(),
            gpu: None,
            vcpus: 0,
            memory_mib: 0,
            interconnect: Interconnect::BASIC,
        })
    });
    Offer {
        pool,
        instance_type,
        zone_name: None,
        price,
        observed_at: at,
        effective_at: None,
        source: PriceSource::new(SourceKind::User, "pools manifest"),
        stability: Stability::default(),
    }
}

pub(super) fn prepare<'a>(
    pools: &'a [SimPool],
    scenario: &'a ServeScenario,
) -> Result<Prepared<'a>> {
    let first = pools
        .first()
        .ok_or_else(|| Error::invalid_input("a simulation needs at least one pool"))?;
    let tick_seconds = first.trace.tick_seconds;
    if let Some(p) = pools.iter().find(|p| p.trace.tick_seconds != tick_seconds) {
        return Err(Error::invalid_input(format!(
            "trace {} has {} s between ticks, {} has {tick_seconds} s: a service replays traces of one tick length",
            p.trace.name, p.trace.tick_seconds, first.trace.name
        )));
    }
    if tick_seconds == 0 {
        return Err(Error::invalid_input(format!(
            "trace {} has no time between ticks",
            first.trace.name
        )));
    }
    let ticks = pools
        .iter()
        .map(|p| p.trace.available.len())
        .min()
        .unwrap_or(0);
    let minutes = (ticks as u64 * tick_seconds / 60) as usize;
    if minutes < 60 {
        return Err(Error::invalid_input(format!(
            "the traces span {minutes} minutes: a service needs at least an hour"
        )));
    }
    let s = scenario;
    if !(s.request_seconds.is_finite() && s.request_seconds > 0.0 && s.request_seconds <= 3600.0) {
        return Err(Error::invalid_input(format!(
            "invalid request time {} s: expected more than 0 and at most 3600",
            s.request_seconds
        )));
    }
    if !(s.utilization.is_finite() && s.utilization > 0.0 && s.utilization <= 1.0) {
        return Err(Error::invalid_input(format!(
            "invalid utilization {}: expected more than 0 and at most 1",
            s.utilization
        )));
    }
    if s.cold_start_minutes > 24 * 60 {
        return Err(Error::invalid_input(format!(
            "invalid cold start {} minutes: expected 0 to 1440",
            s.cold_start_minutes
        )));
    }
    let start = first.trace.start;
    let reference = first.throughput;
    let mut spot = Vec::new();
    let mut on_demand: Vec<(Offer, f64)> = Vec::new();
    for p in pools {
        let speed = p.throughput / reference;
        spot.push((offer(p.pool.clone(), p.spot, start), speed));
        let od = Pool {
            capacity: Capacity::OnDemand,
            ..p.pool.clone()
        };
        if !on_demand.iter().any(|(o, _)| o.pool == od) {
            on_demand.push((offer(od, p.on_demand, start), speed));
        }
    }
    let first_type = &first.pool.instance_type;
    let of_first = |offers: &[(Offer, f64)]| -> Vec<(Offer, f64)> {
        offers
            .iter()
            .filter(|(o, _)| &o.pool.instance_type == first_type)
            .cloned()
            .collect()
    };
    let (hedge_spot, hedge_on_demand) = (of_first(&spot), of_first(&on_demand));
    let all = spot.iter().chain(&on_demand).cloned().collect();
    Ok(Prepared {
        scenario,
        sim: pools,
        start,
        tick_seconds,
        minutes,
        spot,
        on_demand,
        all,
        hedge_spot,
        hedge_on_demand,
        per_replica: s.spec.autoscale.target_in_flight / s.utilization,
    })
}
