//! What a service's replicas should become: one pure step from the
//! replicas there are, the target and the pools to what to launch and what
//! to drain. The service controller carries it out; the simulator can too.

use serde::{Deserialize, Serialize};

use super::file::SpotSettings;
use super::replicas::{mix, spot_usable, spread, Mix, ReplicaPool};
use crate::model::{Capacity, Pool};
use crate::money::Price;

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
/// an hour for less than on-demand) against the replicas starting or ready;
/// missing replicas launched in the pools [`spread`] chooses (a pool in
/// `avoid` last), surplus ones drained, starting before ready and the
/// dearest first. `why` is the reason of the scale decision of this step,
/// when there was one.
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
    let ready_spot = replicas
        .iter()
        .filter(|r| r.pool.capacity == Capacity::Spot && r.state == ReplicaState::Ready)
        .count() as u32;
    let wanted = mix(target, spot, ready_spot, spot_usable(pools));
    let mut actions = Vec::new();
    for (capacity, want) in [
        (Capacity::Spot, wanted.spot),
        (Capacity::OnDemand, wanted.on_demand),
    ] {
        let mine: Vec<&ReplicaView> = replicas.iter().filter(|r| live(r, capacity)).collect();
        let have = mine.len() as u32;
        let count_line = || format!("{capacity} replicas wanted: {want}, live: {have}");
        if have < want {
            let occupied: Vec<Pool> = mine.iter().map(|r| r.pool.clone()).collect();
            for pool in spread(pools, capacity, &occupied, avoid, want - have) {
                let why = match (why, capacity, wanted.fallback) {
                    (_, Capacity::OnDemand, f) if f > 0 => {
                        format!("on-demand standing in for {f} spot replica(s) not ready")
                    }
                    (Some(d), _, _) => d.to_string(),
                    _ => count_line(),
                };
                let price = pools
                    .iter()
                    .find(|p| p.offer.pool == pool)
                    .map_or(Price::ZERO, |p| p.offer.price);
                actions.push(Action::Launch { pool, price, why });
            }
        } else if have > want {
            let mut surplus = mine;
            surplus.sort_by(|a, b| {
                (a.state == ReplicaState::Ready)
                    .cmp(&(b.state == ReplicaState::Ready))
                    .then(b.price.cmp(&a.price))
                    .then(a.id.cmp(&b.id))
            });
            let why = why.map_or_else(count_line, str::to_string);
            for r in surplus.into_iter().take((have - want) as usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cloud, Offer, Region, Stability, Zone};
    use crate::Snapshot;

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
}
