//! What a service's replicas should become: one pure step from the
//! replicas there are, the target and the pools to what to launch and what
//! to drain. The service controller carries it out; the simulator can too.

use serde::{Deserialize, Serialize};

use super::file::SpotSettings;
use super::replicas::{mix, open_pools, spot_usable, spread, Mix, ReplicaPool};
use crate::Price;
use crate::{Capacity, Cloud, Pool};

/// Where a replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaState {
    /// Launched, not ready yet.
    Starting,
    /// Answering its readiness check; routed to.
    Ready,
    /// Taking no new request; ended when its last one has finished.
    Draining,
    /// Gone.
    Ended,
}

impl ReplicaState {
    /// `starting`, `ready`, `draining`, `ended`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaState::Starting => "starting",
            ReplicaState::Ready => "ready",
            ReplicaState::Draining => "draining",
            ReplicaState::Ended => "ended",
        }
    }
}

impl std::fmt::Display for ReplicaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A replica as the plan sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaView {
    /// Its id.
    pub id: String,
    /// Its pool (and so its capacity type).
    pub pool: Pool,
    /// Its price per hour.
    pub price: Price,
    /// Where it stands.
    pub state: ReplicaState,
    /// Its throughput relative to the service's first GPU option (1 for
    /// that one): the share of a replica of the target it counts as.
    pub speed: f64,
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Launch a replica in `pool`.
    Launch {
        /// Where.
        pool: Pool,
        /// Its price per hour there.
        price: Price,
        /// Why, in a line.
        why: String,
    },
    /// Stop routing to a replica and end it when its requests have finished.
    Drain {
        /// Which.
        replica: String,
        /// Why, in a line.
        why: String,
    },
}

/// A step's plan: the mix the target needs and the actions that get there.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ReplicaPlan {
    /// What the target needs of each capacity type.
    pub mix: Mix,
    /// What to do, launches and drains.
    pub actions: Vec<Action>,
}

/// Plans one step: the target's [`mix`] (spot only if some spot pool serves
/// an hour for less than on-demand; with `survive_zone_loss`, the extra
/// raised so that spread over the open zones any one zone's loss leaves the
/// spot target, and the spot replicas counted ready the [`secure_spot`]
/// ones) against the replicas starting or ready;
/// missing replicas launched in the pools [`spread`] chooses (none in
/// `avoid`), surplus ones drained, starting before ready and the
/// dearest first. Replicas count by their speed: a replica of a GPU option
/// half as fast as the first is half a replica of the target, so more are
/// launched and fewer drained. `why` is the reason of the scale decision of
/// this step, when there was one.
pub fn plan(
    target: u32,
    spot: &SpotSettings,
    replicas: &[ReplicaView],
    pools: &[ReplicaPool],
    avoid: &[Pool],
    why: Option<&str>,
) -> ReplicaPlan {
    let live = |r: &&ReplicaView, c: Capacity| {
        r.pool.capacity == c && matches!(r.state, ReplicaState::Starting | ReplicaState::Ready)
    };
    let usable = spot_usable(pools);
    let ready_spot = units(
        replicas
            .iter()
            .filter(|r| r.pool.capacity == Capacity::Spot && r.state == ReplicaState::Ready)
            .map(|r| r.speed)
            .sum(),
    );
    let mut wanted = mix(target, spot, ready_spot, usable);
    if spot.survive_zone_loss && wanted.spot > 0 {
        // Enough spot replicas that spread over the open zones, any one
        // zone's loss leaves the spot target; on-demand stands in for what
        // it would take beyond them (all of one zone's, with one zone open).
        let spot_target = wanted.spot - spot.extra;
        let zones = open_zones(pools, avoid);
        let extra = if zones >= 2 {
            spot.extra.max(spot_target.div_ceil(zones - 1))
        } else {
            spot.extra
        };
        let guarded = SpotSettings { extra, ..*spot };
        wanted = mix(target, &guarded, secure_spot(replicas), usable);
    }
    let mut actions = Vec::new();
    for (capacity, want) in [
        (Capacity::Spot, wanted.spot),
        (Capacity::OnDemand, wanted.on_demand),
    ] {
        // Counted in replicas of the first GPU option: a replica half as
        // fast is half a replica of the target.
        let want_units = f64::from(want);
        let mine: Vec<&ReplicaView> = replicas.iter().filter(|r| live(r, capacity)).collect();
        let mut have: f64 = mine.iter().map(|r| r.speed).sum();
        let count_line =
            |have: f64| format!("{capacity} replicas wanted: {want}, live: {}", shown(have));
        if have < want_units - EPSILON {
            let line = count_line(have);
            let mut occupied: Vec<Pool> = mine.iter().map(|r| r.pool.clone()).collect();
            while have < want_units - EPSILON {
                let Some(pool) = spread(pools, capacity, &occupied, avoid, 1).pop() else {
                    break;
                };
                let Some(chosen) = pools.iter().find(|p| p.offer.pool == pool) else {
                    break;
                };
                let why = match (why, capacity, wanted.fallback) {
                    (_, Capacity::OnDemand, f) if f > 0 => {
                        format!("on-demand standing in for {f} spot replica(s) not ready")
                    }
                    (Some(d), _, _) => d.to_string(),
                    _ => line.clone(),
                };
                have += chosen.speed;
                occupied.push(pool.clone());
                actions.push(Action::Launch {
                    pool,
                    price: chosen.offer.price,
                    why,
                });
            }
        } else if have > want_units + EPSILON {
            let why = why.map_or_else(|| count_line(have), str::to_string);
            for r in drain_order(mine) {
                if have - r.speed < want_units - EPSILON {
                    continue;
                }
                have -= r.speed;
                actions.push(Action::Drain {
                    replica: r.id.clone(),
                    why: format!("drained: {why}"),
                });
            }
        }
    }
    ReplicaPlan {
        mix: wanted,
        actions,
    }
}

/// Slack in counting replicas weighted by speed.
const EPSILON: f64 = 1e-9;

/// Whole replicas of the target in `sum` of speeds (a replica short of one
/// is not one).
fn units(sum: f64) -> u32 {
    let n = (sum + EPSILON).floor();
    if n.is_finite() && n > 0.0 {
        n.min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

/// A count of replicas for a message: whole, or to a tenth.
fn shown(n: f64) -> String {
    // An empty sum is -0.0: adding 0.0 makes it 0, never "-0".
    let n = n + 0.0;
    if (n - n.round()).abs() < EPSILON {
        format!("{}", n.round())
    } else {
        format!("{n:.1}")
    }
}

/// Zones with a spot pool that may be launched in now: cheaper per served
/// hour than on-demand and not set aside.
fn open_zones(pools: &[ReplicaPool], avoid: &[Pool]) -> u32 {
    let mut zones: Vec<(Cloud, &str, Option<&str>)> = open_pools(pools, Capacity::Spot, avoid)
        .into_iter()
        .map(|p| zone_of(&p.offer.pool))
        .collect();
    zones.sort();
    zones.dedup();
    zones.len() as u32
}

fn zone_of(p: &Pool) -> (Cloud, &str, Option<&str>) {
    (
        p.cloud,
        p.region.as_str(),
        p.zone.as_ref().map(|z| z.as_str()),
    )
}

/// The ready spot replicas that would still be ready after the loss of any
/// one zone: all of them but those of the zone that holds the most. A zone's
/// spot capacity goes at once (the 2022 traces lose a pool's instances
/// together), so on-demand stands in for what one zone's loss would take
/// beyond the extra replicas, as it does for spot replicas not ready
/// (with `[spot] survive_zone_loss`).
pub fn secure_spot(replicas: &[ReplicaView]) -> u32 {
    let mut zones: std::collections::HashMap<(Cloud, &str, Option<&str>), f64> =
        std::collections::HashMap::new();
    for r in replicas
        .iter()
        .filter(|r| r.pool.capacity == Capacity::Spot && r.state == ReplicaState::Ready)
    {
        *zones.entry(zone_of(&r.pool)).or_default() += r.speed;
    }
    let all: f64 = zones.values().sum();
    let most = zones.values().copied().fold(0.0, f64::max);
    units(all - most)
}

/// Replicas in the order surplus ones are drained: those still starting
/// before those ready (no request is lost, no warm replica wasted), the
/// dearest first.
pub fn drain_order(mut replicas: Vec<&ReplicaView>) -> Vec<&ReplicaView> {
    replicas.sort_by(|a, b| {
        (a.state == ReplicaState::Ready)
            .cmp(&(b.state == ReplicaState::Ready))
            .then(b.price.cmp(&a.price))
            .then(a.id.cmp(&b.id))
    });
    replicas
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Snapshot;
    use crate::{Cloud, Offer, Region, Stability, Zone};

    /// Counts read as people write them: an empty sum (-0.0) is 0.
    #[test]
    fn counts_are_shown_without_a_negative_zero() {
        let none: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(shown(none), "0");
        assert_eq!(shown(2.0), "2");
        assert_eq!(shown(1.48), "1.5");
    }

    fn pool(zone: &str, capacity: Capacity, usd: f64) -> ReplicaPool {
        let mut o: Offer = Snapshot::embedded().offers()[0].clone();
        o.pool = Pool {
            cloud: Cloud::Aws,
            region: Region::new("us-east-1"),
            zone: Some(Zone::new(zone)),
            instance_type: o.instance_type.name.clone(),
            capacity,
        };
        o.price = Price::from_usd_per_hour_f64(usd);
        o.stability = Stability::default();
        ReplicaPool {
            served_price: o.price,
            offer: o,
            gpu_option: 0,
            speed: 1.0,
            hazard_per_hour: 0.0,
        }
    }

    fn view(id: &str, p: &ReplicaPool, state: ReplicaState) -> ReplicaView {
        ReplicaView {
            id: id.into(),
            pool: p.offer.pool.clone(),
            price: p.offer.price,
            state,
            speed: p.speed,
        }
    }

    #[test]
    fn launches_what_is_missing_and_stands_in_for_spot_not_ready() {
        let pools = vec![
            pool("a", Capacity::Spot, 0.3),
            pool("b", Capacity::Spot, 0.35),
            pool("a", Capacity::OnDemand, 1.0),
        ];
        let spot = SpotSettings {
            share: 1.0,
            min_on_demand: 0,
            extra: 1,
            survive_zone_loss: false,
        };
        // From nothing to a target of 2: three spot (2 + 1) and two on-demand
        // standing in while they start.
        let p = plan(2, &spot, &[], &pools, &[], Some("up"));
        let launches: Vec<(Capacity, String)> = p
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Launch { pool, why, .. } => Some((pool.capacity, why.clone())),
                Action::Drain { .. } => None,
            })
            .collect();
        assert_eq!(
            launches
                .iter()
                .filter(|(c, _)| *c == Capacity::Spot)
                .count(),
            3
        );
        assert_eq!(
            launches
                .iter()
                .filter(|(c, _)| *c == Capacity::OnDemand)
                .count(),
            2
        );
        assert!(launches
            .iter()
            .any(|(_, w)| w.contains("standing in for 2")));
        // Spot ready: the on-demand stand-ins drain.
        let replicas = vec![
            view("s1", &pools[0], ReplicaState::Ready),
            view("s2", &pools[1], ReplicaState::Ready),
            view("s3", &pools[0], ReplicaState::Starting),
            view("o1", &pools[2], ReplicaState::Ready),
            view("o2", &pools[2], ReplicaState::Ready),
        ];
        let p = plan(2, &spot, &replicas, &pools, &[], None);
        let drained: Vec<&str> = p
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Drain { replica, .. } => Some(replica.as_str()),
                Action::Launch { .. } => None,
            })
            .collect();
        assert_eq!(drained, ["o1", "o2"]);
        // Down to 1: a starting spot replica drains before a ready one.
        let p = plan(1, &spot, &replicas[..3], &pools, &[], Some("down"));
        assert_eq!(
            p.actions,
            [Action::Drain {
                replica: "s3".into(),
                why: "drained: down".into()
            }]
        );
        // Zero: everything drains.
        let p = plan(0, &spot, &replicas, &pools, &[], None);
        assert_eq!(p.actions.len(), 5);
    }

    #[test]
    fn surviving_a_zone_loss_spreads_more_spot_and_covers_the_rest() {
        let pools = vec![
            pool("a", Capacity::Spot, 0.3),
            pool("b", Capacity::Spot, 0.3),
            pool("c", Capacity::Spot, 0.3),
            pool("a", Capacity::OnDemand, 1.0),
        ];
        let spot = SpotSettings {
            share: 1.0,
            min_on_demand: 0,
            extra: 1,
            survive_zone_loss: true,
        };
        let launched = |p: &ReplicaPlan, c: Capacity| {
            p.actions
                .iter()
                .filter(|a| matches!(a, Action::Launch { pool, .. } if pool.capacity == c))
                .count()
        };
        // Target 4 over 3 open zones: extra ⌈4 / 2⌉ = 2, 6 spot replicas,
        // two a zone; while none is ready, 4 on-demand stand in.
        let p = plan(4, &spot, &[], &pools, &[], None);
        assert_eq!((p.mix.spot, p.mix.on_demand), (6, 4));
        assert_eq!(launched(&p, Capacity::Spot), 6);
        // All six ready, two a zone: losing any zone leaves 4, no on-demand.
        let ready: Vec<ReplicaView> = (0..6)
            .map(|i| view(&format!("s{i}"), &pools[i % 3], ReplicaState::Ready))
            .collect();
        assert_eq!(secure_spot(&ready), 4);
        let p = plan(4, &spot, &ready, &pools, &[], None);
        assert_eq!(p.mix.on_demand, 0);
        // Two zones set aside: one open, the extra stays 1, and the five
        // spot replicas all in zone a would all go with it: on-demand
        // stands in for the whole target.
        let one_zone: Vec<ReplicaView> = (0..5)
            .map(|i| view(&format!("s{i}"), &pools[0], ReplicaState::Ready))
            .collect();
        let aside = [pools[1].offer.pool.clone(), pools[2].offer.pool.clone()];
        let p = plan(4, &spot, &one_zone, &pools, &aside, None);
        assert_eq!((p.mix.spot, p.mix.on_demand, p.mix.fallback), (5, 4, 4));
        // Without the setting the same replicas need no on-demand.
        let hedged = SpotSettings {
            survive_zone_loss: false,
            ..spot
        };
        assert_eq!(
            plan(4, &hedged, &one_zone, &pools, &aside, None)
                .mix
                .on_demand,
            0
        );
    }

    #[test]
    fn replicas_count_by_their_speed() {
        let mut slow = pool("a", Capacity::Spot, 0.1);
        slow.speed = 0.5;
        let pools = vec![slow, pool("a", Capacity::OnDemand, 1.0)];
        let spot = SpotSettings {
            share: 1.0,
            min_on_demand: 0,
            extra: 0,
            survive_zone_loss: false,
        };
        // Two replicas of the target at half speed each: four launched.
        let p = plan(2, &spot, &[], &pools, &[], None);
        let launches = p
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Launch { pool, .. } if pool.capacity == Capacity::Spot))
            .count();
        assert_eq!(launches, 4);
        // Four ready at half speed are two replicas: nothing to do, and no
        // on-demand standing in.
        let ready: Vec<ReplicaView> = (0..4)
            .map(|i| view(&format!("s{i}"), &pools[0], ReplicaState::Ready))
            .collect();
        let p = plan(2, &spot, &ready, &pools, &[], None);
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        // Down to one: two of the four drain.
        let p = plan(1, &spot, &ready, &pools, &[], Some("down"));
        assert_eq!(p.actions.len(), 2, "{:?}", p.actions);
        // Three ready at half speed are one and a half: one more launched,
        // and on-demand stands in for the one replica not ready.
        let p = plan(2, &spot, &ready[..3], &pools, &[], None);
        assert_eq!((p.mix.spot, p.mix.on_demand), (2, 1));
    }
}
