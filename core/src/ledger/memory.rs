//! [`MemoryLedger`]: the ledger in memory, for tests and the simulator.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{
    check_lease_request, fence_refused, lease_lost, service_fence_refused, service_lease,
    service_write_allowed, Claim, InstanceEnd, InstanceSpend, JobRecord, JobState, Lease, Ledger,
    ServiceEntry, ServiceEntryKind, ServiceRow,
};
use crate::placer::{PoolEvent, PoolEvidence};
use crate::Result;
use crate::{Cloud, InstanceId, Pool};

/// A ledger in memory. Leases expire by the system clock, as a database's do.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pools: HashMap<Pool, PoolEvidence>,
    jobs: Vec<JobRecord>,
    specs: HashMap<String, String>,
    usage: HashMap<String, crate::usage::JobUsage>,
    leases: HashMap<String, Lease>,
    spend: Vec<InstanceSpend>,
    services: std::collections::BTreeMap<String, ServiceRow>,
    service_log: Vec<ServiceEntry>,
}

impl Inner {
    /// Whether a write to `service` under `fence` passes the fencing rules.
    fn service_write_allowed(&self, service: &str, fence: Option<u64>, request: bool) -> bool {
        let lease = self
            .leases
            .get(&service_lease(service))
            .map(|l| (l.token, l.is_live(now())));
        service_write_allowed(fence, request, lease)
    }
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn after(at: OffsetDateTime, ttl: Duration) -> OffsetDateTime {
    at + time::Duration::try_from(ttl).unwrap_or(time::Duration::DAY)
}

#[async_trait]
impl Ledger for MemoryLedger {
    async fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        self.lock()
            .pools
            .entry(pool.clone())
            .or_default()
            .events
            .push(event);
        Ok(())
    }

    async fn record_exposure(&self, pool: &Pool, during: Range<OffsetDateTime>) -> Result<()> {
        if !during.is_empty() {
            self.lock()
                .pools
                .entry(pool.clone())
                .or_default()
                .ran(during.start, during.end);
        }
        Ok(())
    }

    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        let g = self.lock();
        Ok(g.pools
            .iter()
            .map(|(pool, ev)| {
                let ev = PoolEvidence {
                    events: ev
                        .events
                        .iter()
                        .filter(|e| e.at >= since)
                        .copied()
                        .collect(),
                    exposure: ev
                        .exposure
                        .iter()
                        .filter(|(_, to)| *to >= since)
                        .copied()
                        .collect(),
                };
                (pool.clone(), ev)
            })
            .collect())
    }

    async fn record_job(&self, record: &JobRecord) -> Result<()> {
        let mut g = self.lock();
        let now = now();
        let live = g.leases.get(&record.job_id).filter(|l| l.is_live(now));
        let ok = match record.fence {
            Some(t) => live.is_some_and(|l| l.token == t),
            None => live.is_none() || record.state == JobState::Cancelled,
        };
        if !ok {
            return Err(fence_refused(record));
        }
        let cancelled = g
            .jobs
            .iter()
            .rev()
            .find(|r| r.job_id == record.job_id)
            .is_some_and(|r| r.state == JobState::Cancelled);
        let managed = g.specs.contains_key(&record.job_id);
        if cancelled && managed && record.state != JobState::Cancelled {
            return Err(super::cancelled_refused(record));
        }
        g.jobs.push(record.clone());
        Ok(())
    }

    async fn jobs(&self) -> Result<Vec<JobRecord>> {
        Ok(self.lock().jobs.clone())
    }

    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        Ok(self
            .lock()
            .jobs
            .iter()
            .filter(|r| r.job_id == job_id)
            .cloned()
            .collect())
    }

    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self
            .lock()
            .jobs
            .iter()
            .rev()
            .find(|r| r.job_id == job_id)
            .cloned())
    }

    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        let mut g = self.lock();
        match g.specs.get(job_id) {
            Some(existing) => super::same_job_spec(job_id, existing, spec),
            None => {
                g.specs.insert(job_id.to_string(), spec.to_string());
                Ok(())
            }
        }
    }

    async fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        Ok(self.lock().specs.get(job_id).cloned())
    }

    async fn record_usage(&self, job_id: &str, usage: &crate::usage::JobUsage) -> Result<()> {
        self.lock().usage.insert(job_id.to_string(), usage.clone());
        Ok(())
    }

    async fn job_usage(&self, job_id: &str) -> Result<Option<crate::usage::JobUsage>> {
        Ok(self.lock().usage.get(job_id).cloned())
    }

    async fn active_jobs(&self) -> Result<Vec<String>> {
        let g = self.lock();
        let mut latest: HashMap<&str, (usize, JobState)> = HashMap::new();
        for (i, r) in g.jobs.iter().enumerate() {
            latest
                .entry(r.job_id.as_str())
                .and_modify(|e| e.1 = r.state)
                .or_insert((i, r.state));
        }
        let mut active: Vec<(usize, &str)> = latest
            .into_iter()
            .filter(|(id, (_, st))| !st.is_terminal() && g.specs.contains_key(*id))
            .map(|(id, (first, _))| (first, id))
            .collect();
        active.sort();
        Ok(active.into_iter().map(|(_, id)| id.to_string()).collect())
    }

    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        check_lease_request(holder, ttl)?;
        let mut g = self.lock();
        let now = now();
        let lease = match g.leases.get(job_id) {
            Some(l) if l.is_live(now) && l.holder != holder => return Ok(Claim::Held(l.clone())),
            Some(l) if l.is_live(now) => Lease {
                expires_at: after(now, ttl),
                ..l.clone()
            },
            Some(l) => Lease {
                job_id: job_id.to_string(),
                holder: holder.to_string(),
                token: l.token + 1,
                acquired_at: now,
                expires_at: after(now, ttl),
            },
            None => Lease {
                job_id: job_id.to_string(),
                holder: holder.to_string(),
                token: 1,
                acquired_at: now,
                expires_at: after(now, ttl),
            },
        };
        g.leases.insert(job_id.to_string(), lease.clone());
        Ok(Claim::Acquired(lease))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_lease_request(&lease.holder, ttl)?;
        let mut g = self.lock();
        let now = now();
        match g.leases.get_mut(&lease.job_id) {
            Some(l) if l.token == lease.token && l.holder == lease.holder && l.is_live(now) => {
                l.expires_at = after(now, ttl);
                Ok(l.clone())
            }
            _ => Err(lease_lost(lease)),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let mut g = self.lock();
        let now = now();
        if let Some(l) = g.leases.get_mut(&lease.job_id) {
            if l.token == lease.token && l.holder == lease.holder && l.is_live(now) {
                l.expires_at = now;
            }
        }
        Ok(())
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let mut all: Vec<Lease> = self.lock().leases.values().cloned().collect();
        all.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        Ok(all)
    }

    async fn now(&self) -> Result<OffsetDateTime> {
        Ok(now())
    }

    async fn record_instance_start(&self, spend: &InstanceSpend) -> Result<()> {
        let mut g = self.lock();
        if !g
            .spend
            .iter()
            .any(|s| s.pool.cloud == spend.pool.cloud && s.id == spend.id)
        {
            g.spend.push(spend.clone());
        }
        Ok(())
    }

    async fn record_instance_end(
        &self,
        cloud: Cloud,
        id: &InstanceId,
        end: &InstanceEnd,
    ) -> Result<bool> {
        let mut g = self.lock();
        match g
            .spend
            .iter_mut()
            .find(|s| s.pool.cloud == cloud && &s.id == id && s.ended_at.is_none())
        {
            Some(s) => {
                s.ended_at = Some(end.at.max(s.started_at));
                s.ended_by = Some(end.by);
                s.end_detail = end.detail.clone();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn spend(&self, since: Option<OffsetDateTime>) -> Result<Vec<InstanceSpend>> {
        let mut out: Vec<InstanceSpend> = self
            .lock()
            .spend
            .iter()
            .filter(|s| match (since, s.ended_at) {
                (Some(since), Some(end)) => end >= since,
                _ => true,
            })
            .cloned()
            .collect();
        out.sort_by_key(|s| s.started_at);
        Ok(out)
    }

    async fn save_service(&self, row: &ServiceRow) -> Result<()> {
        let mut g = self.lock();
        if !g.service_write_allowed(&row.name, row.fence, false) {
            return Err(service_fence_refused(&row.name, row.fence));
        }
        g.services.insert(row.name.clone(), row.clone());
        Ok(())
    }

    async fn services(&self) -> Result<Vec<ServiceRow>> {
        Ok(self.lock().services.values().cloned().collect())
    }

    async fn append_service_entry(&self, entry: &ServiceEntry) -> Result<u64> {
        let mut g = self.lock();
        let request = entry.kind == ServiceEntryKind::Request;
        if !g.service_write_allowed(&entry.service, entry.fence, request) {
            return Err(service_fence_refused(&entry.service, entry.fence));
        }
        let seq = g.service_log.len() as u64 + 1;
        let mut e = entry.clone();
        e.seq = seq;
        g.service_log.push(e);
        Ok(seq)
    }

    async fn service_entries(
        &self,
        service: &str,
        after: u64,
        kind: Option<ServiceEntryKind>,
    ) -> Result<Vec<ServiceEntry>> {
        Ok(self
            .lock()
            .service_log
            .iter()
            .filter(|e| e.service == service && e.seq > after)
            .filter(|e| kind.is_none_or(|k| e.kind == k))
            .cloned()
            .collect())
    }

    fn location(&self) -> String {
        "memory".into()
    }
}
