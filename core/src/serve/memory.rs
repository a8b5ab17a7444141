//! What a service controller remembers of its pools between steps: the
//! evidence its hazard estimates read (interruptions, capacity refusals,
//! hours served) and the pools it has set aside for a while after they
//! refused capacity or lost a replica. The runtime's controller and the
//! simulator keep it the same way. Pure: time comes in the calls.

use std::collections::HashMap;
use std::time::Duration;

use time::OffsetDateTime;

use crate::placer::{PoolEventKind, PoolEvidence};
use crate::Pool;

/// Evidence older than this is forgotten: at the hazard model's default
/// 24-hour half-life it weighs under a thousandth, and a service that runs
/// for months would otherwise keep every refusal it ever saw.
pub const FORGET_AFTER: Duration = Duration::from_secs(10 * 24 * 3600);

/// A service's memory of its pools.
#[derive(Debug, Clone)]
pub struct PoolMemory {
    evidence: HashMap<Pool, PoolEvidence>,
    aside: Vec<(Pool, OffsetDateTime)>,
    set_aside: Duration,
}

impl PoolMemory {
    /// Nothing remembered; a pool set aside stays so for `set_aside`.
    pub fn new(set_aside: Duration) -> Self {
        PoolMemory {
            evidence: HashMap::new(),
            aside: Vec::new(),
            set_aside,
        }
    }

    /// A replica in `pool` was interrupted at `at` (a reclaim the pool is
    /// to blame for): counted against the pool's hazard, and the pool set
    /// aside.
    pub fn interrupted(&mut self, pool: &Pool, at: OffsetDateTime) {
        self.pool(pool, at).record(at, PoolEventKind::Interruption);
        self.set_aside(pool, at);
    }

    /// A pool's evidence, what is past [`FORGET_AFTER`] at `now` dropped.
    fn pool(&mut self, pool: &Pool, now: OffsetDateTime) -> &mut PoolEvidence {
        let horizon = now - time::Duration::try_from(FORGET_AFTER).unwrap_or(time::Duration::MAX);
        let ev = self.evidence.entry(pool.clone()).or_default();
        ev.events.retain(|e| e.at >= horizon);
        ev.exposure.retain(|(_, to)| *to >= horizon);
        ev
    }

    /// A launch in `pool` failed at `at`: set aside, and counted against the
    /// pool's hazard when the cloud said it had no capacity.
    pub fn refused(&mut self, pool: &Pool, at: OffsetDateTime, no_capacity: bool) {
        if no_capacity {
            self.pool(pool, at)
                .record(at, PoolEventKind::CapacityFailure);
        }
        self.set_aside(pool, at);
    }

    /// Sets `pool` aside from `at` (a notice, a replica that never became
    /// ready) without counting anything against its hazard.
    pub fn set_aside(&mut self, pool: &Pool, at: OffsetDateTime) {
        self.aside.retain(|(p, _)| p != pool);
        self.aside.push((pool.clone(), at));
    }

    /// A replica served from `pool` between `from` and `to`: hours that
    /// lower the pool's estimated hazard when nothing happened in them.
    pub fn served(&mut self, pool: &Pool, from: OffsetDateTime, to: OffsetDateTime) {
        self.pool(pool, to).ran(from, to);
    }

    /// The pools set aside at `now` (those whose time is up are forgotten).
    pub fn avoid(&mut self, now: OffsetDateTime) -> Vec<Pool> {
        let keep = time::Duration::try_from(self.set_aside).unwrap_or(time::Duration::MAX);
        self.aside.retain(|(_, at)| now - *at < keep);
        self.aside.iter().map(|(p, _)| p.clone()).collect()
    }

    /// What has been observed per pool, for the hazard estimates.
    pub fn evidence(&self) -> &HashMap<Pool, PoolEvidence> {
        &self.evidence
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FAKE_EPOCH;
    use crate::{Capacity, Cloud, Region, Zone};

    fn pool(zone: &str) -> Pool {
        Pool {
            cloud: Cloud::Aws,
            region: Region::new("us-west-2"),
            zone: Some(Zone::new(zone)),
            instance_type: "p3.2xlarge".into(),
            capacity: Capacity::Spot,
        }
    }

    #[test]
    fn set_aside_for_its_time_and_evidence_kept() {
        let mut m = PoolMemory::new(Duration::from_secs(600));
        let t0 = FAKE_EPOCH;
        m.interrupted(&pool("a"), t0);
        m.refused(&pool("b"), t0 + time::Duration::minutes(5), false);
        assert_eq!(
            m.avoid(t0 + time::Duration::minutes(9)),
            vec![pool("a"), pool("b")]
        );
        // a's ten minutes are up, b's are not.
        assert_eq!(m.avoid(t0 + time::Duration::minutes(10)), vec![pool("b")]);
        assert_eq!(
            m.avoid(t0 + time::Duration::minutes(15)),
            Vec::<Pool>::new()
        );
        // The interruption stays in the evidence; a refusal that was not for
        // capacity counts nothing.
        assert_eq!(m.evidence()[&pool("a")].events.len(), 1);
        assert!(!m.evidence().contains_key(&pool("b")));
        m.served(&pool("b"), t0, t0 + time::Duration::hours(1));
        assert_eq!(m.evidence()[&pool("b")].exposure.len(), 1);
        // Eleven days on, a new record of a drops its old interruption.
        m.interrupted(&pool("a"), t0 + time::Duration::days(11));
        assert_eq!(m.evidence()[&pool("a")].events.len(), 1);
        assert_eq!(
            m.evidence()[&pool("a")].events[0].at,
            t0 + time::Duration::days(11)
        );
    }
}
