//! How many replicas on spot and on-demand, and in which pools: the
//! service's share of the placer's per-pool price and hazard. Pure.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::file::{ServiceSpec, SpotSettings};
use crate::placer::{rank, HazardModel, PoolEvidence, RankContext};
use crate::Price;
use crate::{Capacity, Cloud, Offer, Pool, Region, Zone};

/// How many replicas of each capacity type a target needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Mix {
    /// Spot replicas wanted (the spot target and its extra).
    pub spot: u32,
    /// On-demand replicas wanted: the base and the fallback.
    pub on_demand: u32,
    /// Of `on_demand`, those that stand in for spot replicas not ready.
    pub fallback: u32,
}

/// The replicas a target needs: on-demand for the base (`min_on_demand`,
/// and the share not on spot), spot for the rest and `extra` more; and, while
/// fewer spot replicas are ready than the spot target, on-demand for the gap
/// (SpotHedge's dynamic fallback), which drains once spot is ready again.
/// `spot_usable` is false when no spot pool is cheaper than on-demand, or
/// none is open: then the whole target is on-demand.
pub fn mix(target: u32, spot: &SpotSettings, ready_spot: u32, spot_usable: bool) -> Mix {
    if target == 0 {
        return Mix::default();
    }
    let on_spot = if spot_usable {
        (f64::from(target) * spot.share).floor() as u32
    } else {
        0
    };
    let base = spot.min_on_demand.max(target.saturating_sub(on_spot));
    let spot_target = target.saturating_sub(base);
    let fallback = spot_target.saturating_sub(ready_spot);
    Mix {
        spot: if spot_target > 0 {
            spot_target + spot.extra
        } else {
            0
        },
        on_demand: base + fallback,
        fallback,
    }
}

/// A pool a replica can run in, with what a served hour costs there.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaPool {
    /// The offer.
    pub offer: Offer,
    /// Which of the service's GPU options it is.
    pub gpu_option: usize,
    /// Its throughput relative to the first option.
    pub speed: f64,
    /// Its interruptions per hour (0 on-demand), prior and evidence.
    pub hazard_per_hour: f64,
    /// The price of an hour of serving at the first option's throughput:
    /// the price ÷ speed, times (1 + hazard × cold start), the time a
    /// replacement is paid for before it serves.
    pub served_price: Price,
}

/// The pools a replica can use, cheapest served hour first (at an equal
/// price, the lower hazard). `cold_start` is how long a replica takes from
/// launch to ready.
pub fn replica_pools(
    spec: &ServiceSpec,
    offers: &[Offer],
    model: &HazardModel,
    evidence: &HashMap<Pool, PoolEvidence>,
    now: OffsetDateTime,
    cold_start: Duration,
) -> Vec<ReplicaPool> {
    let ctx = RankContext {
        now,
        model,
        evidence,
        limit: offers.len().max(1),
    };
    let ranking = rank(&spec.replica, offers, &ctx);
    let mut pools: Vec<ReplicaPool> = ranking
        .plans
        .into_iter()
        .filter_map(|plan| {
            ReplicaPool::costed(
                plan.offer,
                plan.gpu_option,
                1.0 / plan.work_hours,
                plan.hazard.rate_per_hour,
                cold_start,
            )
        })
        .collect();
    sort_pools(&mut pools);
    pools
}

impl ReplicaPool {
    /// `offer` costed per served hour: its price ÷ `speed`, times (1 +
    /// `hazard` × `cold_start` in hours). `None` when the speed or hazard is
    /// not a usable number or the hour's cost overflows.
    pub fn costed(
        offer: Offer,
        gpu_option: usize,
        speed: f64,
        hazard: f64,
        cold_start: Duration,
    ) -> Option<ReplicaPool> {
        if !(speed.is_finite() && speed > 0.0 && hazard.is_finite() && hazard >= 0.0) {
            return None;
        }
        let cold_h = cold_start.as_secs_f64() / 3600.0;
        let hour = offer
            .price
            .cost_for_hours((1.0 + hazard * cold_h) / speed)
            .ok()?;
        Some(ReplicaPool {
            served_price: Price::from_micros_per_hour(hour.micros()),
            gpu_option,
            speed,
            hazard_per_hour: hazard,
            offer,
        })
    }
}

/// Orders pools cheapest served hour first (at an equal price, the lower
/// hazard, then by pool).
pub fn sort_pools(pools: &mut [ReplicaPool]) {
    pools.sort_by(|a, b| {
        a.served_price
            .cmp(&b.served_price)
            .then(a.hazard_per_hour.total_cmp(&b.hazard_per_hour))
            .then_with(|| a.offer.pool.cmp(&b.offer.pool))
    });
}

/// Whether spot is worth using: some spot pool serves an hour for less than
/// the cheapest on-demand pool (or there is no on-demand pool).
pub fn spot_usable(pools: &[ReplicaPool]) -> bool {
    let cheapest = |c: Capacity| {
        pools
            .iter()
            .filter(|p| p.offer.pool.capacity == c)
            .map(|p| p.served_price)
            .min()
    };
    match (cheapest(Capacity::Spot), cheapest(Capacity::OnDemand)) {
        (Some(s), Some(o)) => s < o,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Replicas per zone, region and cloud.
#[derive(Default)]
struct Occupancy {
    zones: BTreeMap<(Cloud, Region, Option<Zone>), u32>,
    regions: BTreeMap<(Cloud, Region), u32>,
    clouds: BTreeMap<Cloud, u32>,
}

impl Occupancy {
    fn add(&mut self, p: &Pool) {
        *self
            .zones
            .entry((p.cloud, p.region.clone(), p.zone.clone()))
            .or_default() += 1;
        *self.regions.entry((p.cloud, p.region.clone())).or_default() += 1;
        *self.clouds.entry(p.cloud).or_default() += 1;
    }

    /// How crowded a pool's zone, region and cloud are, in that order.
    fn count(&self, p: &Pool) -> (u32, u32, u32) {
        (
            self.zones
                .get(&(p.cloud, p.region.clone(), p.zone.clone()))
                .copied()
                .unwrap_or(0),
            self.regions
                .get(&(p.cloud, p.region.clone()))
                .copied()
                .unwrap_or(0),
            self.clouds.get(&p.cloud).copied().unwrap_or(0),
        )
    }
}

/// The pools of `capacity` a replica may be launched in now: not set aside
/// (`avoid`), and for spot, serving an hour for less than the cheapest
/// on-demand pool. In `pools`' order.
pub(super) fn open_pools<'a>(
    pools: &'a [ReplicaPool],
    capacity: Capacity,
    avoid: &[Pool],
) -> Vec<&'a ReplicaPool> {
    let ceiling = match capacity {
        Capacity::Spot => pools
            .iter()
            .filter(|p| p.offer.pool.capacity == Capacity::OnDemand)
            .map(|p| p.served_price)
            .min(),
        Capacity::OnDemand => None,
    };
    pools
        .iter()
        .filter(|p| p.offer.pool.capacity == capacity)
        .filter(|p| ceiling.is_none_or(|c| p.served_price < c))
        .filter(|p| !avoid.contains(&p.offer.pool))
        .collect()
}

/// Chooses pools of `capacity` for `count` new replicas, beside the replicas
/// already in `occupied` (pool of each live replica of that capacity):
/// each pick goes to the failure domain with the fewest replicas, zone
/// before region before cloud (a new zone before a second replica in one),
/// the cheapest served hour among them. A pool in `avoid` (it just refused
/// capacity or lost a replica) is not chosen at all while it is set aside:
/// with every pool of a capacity type set aside, fewer (or no) replicas are
/// chosen, and a spot shortfall is the on-demand fallback's to cover, where
/// launching again into pools that just failed would be refused again at
/// every step. Spot pools dearer than the cheapest on-demand pool are never
/// chosen.
pub fn spread(
    pools: &[ReplicaPool],
    capacity: Capacity,
    occupied: &[Pool],
    avoid: &[Pool],
    count: u32,
) -> Vec<Pool> {
    let candidates = open_pools(pools, capacity, avoid);
    let mut seen = Occupancy::default();
    for p in occupied {
        seen.add(p);
    }
    let mut chosen = Vec::new();
    for _ in 0..count {
        let best = candidates
            .iter()
            .enumerate()
            .min_by_key(|(i, p)| (seen.count(&p.offer.pool), *i))
            .map(|(_, p)| p.offer.pool.clone());
        let Some(pool) = best else { break };
        seen.add(&pool);
        chosen.push(pool);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stability;
    use crate::{GpuModel, Snapshot};

    fn spot(share: f64, min_on_demand: u32, extra: u32) -> SpotSettings {
        SpotSettings {
            share,
            min_on_demand,
            extra,
            survive_zone_loss: false,
        }
    }

    #[test]
    fn mix_hedges_spot_and_falls_back_to_on_demand() {
        // All spot, N+1, everything ready: 4 spot, no on-demand.
        let all = spot(1.0, 0, 1);
        assert_eq!(
            mix(3, &all, 3, true),
            Mix {
                spot: 4,
                on_demand: 0,
                fallback: 0
            }
        );
        // Two spot replicas lost: two on-demand stand in until spot is back.
        assert_eq!(
            mix(3, &all, 1, true),
            Mix {
                spot: 4,
                on_demand: 2,
                fallback: 2
            }
        );
        // No spot worth having: all on-demand.
        assert_eq!(
            mix(3, &all, 0, false),
            Mix {
                spot: 0,
                on_demand: 3,
                fallback: 0
            }
        );
        // Half on spot (rounded down), one on-demand always.
        assert_eq!(
            mix(3, &spot(0.5, 1, 1), 1, true),
            Mix {
                spot: 2,
                on_demand: 2,
                fallback: 0
            }
        );
        assert_eq!(
            mix(4, &spot(0.5, 1, 0), 0, true),
            Mix {
                spot: 2,
                on_demand: 4,
                fallback: 2
            }
        );
        // min_on_demand beyond the target is kept.
        assert_eq!(
            mix(1, &spot(1.0, 2, 1), 0, true),
            Mix {
                spot: 0,
                on_demand: 2,
                fallback: 0
            }
        );
        assert_eq!(mix(0, &all, 0, true), Mix::default());
    }

    fn offer(
        cloud: Cloud,
        region: &str,
        zone: &str,
        capacity: Capacity,
        usd: f64,
        model: &str,
    ) -> Offer {
        let gpu = GpuModel::parse(model).unwrap();
        let mut o = Snapshot::embedded()
            .offers()
            .iter()
            .find(|o| {
                o.instance_type
                    .gpu
                    .as_ref()
                    .is_some_and(|g| g.model == gpu && g.count == 1)
            })
            .unwrap()
            .clone();
        o.pool = Pool {
            cloud,
            region: Region::new(region),
            zone: Some(Zone::new(zone)),
            instance_type: o.instance_type.name.clone(),
            capacity,
        };
        o.price = Price::from_usd_per_hour_f64(usd);
        o.stability = Stability::default();
        o
    }

    fn service() -> ServiceSpec {
        ServiceSpec::from_toml(
            "name = \"s\"\nrun = \"serve\"\nreadiness = \"/\"\n[[gpu]]\nmodel = \"L4\"\n[[gpu]]\nmodel = \"A10G\"\n",
        )
        .unwrap()
    }

    #[test]
    fn pools_are_costed_per_served_hour_and_spread_over_zones_first() {
        let offers = vec![
            offer(
                Cloud::Aws,
                "us-east-1",
                "us-east-1a",
                Capacity::Spot,
                0.30,
                "L4",
            ),
            offer(
                Cloud::Aws,
                "us-east-1",
                "us-east-1b",
                Capacity::Spot,
                0.32,
                "L4",
            ),
            offer(
                Cloud::Gcp,
                "us-central1",
                "us-central1-a",
                Capacity::Spot,
                0.40,
                "L4",
            ),
            offer(
                Cloud::Aws,
                "us-east-1",
                "us-east-1a",
                Capacity::OnDemand,
                0.80,
                "L4",
            ),
            // Dearer than on-demand once interruptions are counted: never chosen for spot.
            offer(
                Cloud::Aws,
                "us-west-2",
                "us-west-2a",
                Capacity::Spot,
                0.85,
                "L4",
            ),
        ];
        let evidence = HashMap::new();
        let pools = replica_pools(
            &service(),
            &offers,
            &HazardModel::default(),
            &evidence,
            OffsetDateTime::UNIX_EPOCH,
            Duration::from_secs(600),
        );
        assert_eq!(pools.len(), 5);
        assert!(spot_usable(&pools));
        // A spot hour costs its price plus the cold starts its interruptions cause.
        let first = &pools[0];
        assert_eq!(
            first.offer.pool.zone.as_ref().unwrap().as_str(),
            "us-east-1a"
        );
        assert!(first.served_price > first.offer.price);
        let picked = spread(&pools, Capacity::Spot, &[], &[], 4);
        let zones: Vec<&str> = picked
            .iter()
            .map(|p| p.zone.as_ref().unwrap().as_str())
            .collect();
        // A new zone, then a new region of another cloud, before doubling up;
        // the fourth goes where the fewest are (its region and cloud).
        assert_eq!(
            zones,
            ["us-east-1a", "us-central1-a", "us-east-1b", "us-central1-a"]
        );
        // A pool set aside is not taken, even if that means doubling up
        // elsewhere; with every one set aside, none is.
        let avoid = vec![pools[0].offer.pool.clone()];
        let picked = spread(&pools, Capacity::Spot, &[], &avoid, 3);
        let zones: Vec<&str> = picked
            .iter()
            .map(|p| p.zone.as_ref().unwrap().as_str())
            .collect();
        assert_eq!(zones, ["us-east-1b", "us-central1-a", "us-east-1b"]);
        let all: Vec<Pool> = pools
            .iter()
            .filter(|p| p.offer.pool.capacity == Capacity::Spot)
            .map(|p| p.offer.pool.clone())
            .collect();
        assert!(spread(&pools, Capacity::Spot, &[], &all, 2).is_empty());
        // On-demand: the one pool.
        assert_eq!(spread(&pools, Capacity::OnDemand, &[], &[], 2).len(), 2);
    }
}
