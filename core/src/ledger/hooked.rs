//! A ledger that sees each job record before it is written: how a
//! controller stamps its fencing token on every record, and how a test makes
//! a ledger refuse some writes, without either forwarding the rest by hand.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Debug;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{
    Claim, InstanceEnd, InstanceSpend, JobRecord, Lease, Ledger, ServiceEntry, ServiceEntryKind,
    ServiceRow,
};
use crate::placer::{PoolEvent, PoolEvidence};
use crate::usage::JobUsage;
use crate::Pool;
use crate::Result;

/// What a [`Hooked`] ledger does with a job record before writing it.
pub trait RecordHook: Debug + Send + Sync {
    /// The record to write: `record` itself, an amended copy, or an error
    /// that refuses it (then nothing is written).
    fn before_record<'a>(&self, record: &'a JobRecord) -> Result<Cow<'a, JobRecord>>;
}

/// A ledger that passes every call to `inner`, job records after `hook` has
/// seen them.
#[derive(Debug)]
pub struct Hooked<H> {
    inner: Arc<dyn Ledger>,
    hook: H,
}

impl<H: RecordHook> Hooked<H> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Ledger>, hook: H) -> Self {
        Hooked { inner, hook }
    }
}

#[async_trait]
impl<H: RecordHook> Ledger for Hooked<H> {
    async fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        self.inner.record_event(pool, event).await
    }
    async fn record_exposure(&self, pool: &Pool, during: Range<OffsetDateTime>) -> Result<()> {
        self.inner.record_exposure(pool, during).await
    }
    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        self.inner.evidence(since).await
    }
    async fn record_job(&self, record: &JobRecord) -> Result<()> {
        let record = self.hook.before_record(record)?;
        self.inner.record_job(&record).await
    }
    async fn jobs(&self) -> Result<Vec<JobRecord>> {
        self.inner.jobs().await
    }
    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        self.inner.job_history(job_id).await
    }
    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        self.inner.job_latest(job_id).await
    }
    async fn jobs_latest(
        &self,
        job_ids: &[String],
    ) -> Result<std::collections::HashMap<String, JobRecord>> {
        self.inner.jobs_latest(job_ids).await
    }
    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        self.inner.save_job_spec(job_id, spec).await
    }
    async fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        self.inner.job_spec(job_id).await
    }
    async fn active_jobs(&self) -> Result<Vec<String>> {
        self.inner.active_jobs().await
    }
    async fn record_usage(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        self.inner.record_usage(job_id, usage).await
    }
    async fn job_usage(&self, job_id: &str) -> Result<Option<JobUsage>> {
        self.inner.job_usage(job_id).await
    }
    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        self.inner.acquire_lease(job_id, holder, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn leases(&self) -> Result<Vec<Lease>> {
        self.inner.leases().await
    }
    async fn now(&self) -> Result<OffsetDateTime> {
        self.inner.now().await
    }
    async fn record_instance_start(&self, spend: &InstanceSpend) -> Result<()> {
        self.inner.record_instance_start(spend).await
    }
    async fn record_instance_end(
        &self,
        cloud: crate::Cloud,
        id: &crate::InstanceId,
        end: &InstanceEnd,
    ) -> Result<bool> {
        self.inner.record_instance_end(cloud, id, end).await
    }
    async fn spend(&self, since: Option<OffsetDateTime>) -> Result<Vec<InstanceSpend>> {
        self.inner.spend(since).await
    }
    async fn save_service(&self, row: &ServiceRow) -> Result<()> {
        self.inner.save_service(row).await
    }
    async fn services(&self) -> Result<Vec<ServiceRow>> {
        self.inner.services().await
    }
    async fn append_service_entry(&self, entry: &ServiceEntry) -> Result<u64> {
        self.inner.append_service_entry(entry).await
    }
    async fn service_entries(
        &self,
        service: &str,
        after: u64,
        kind: Option<ServiceEntryKind>,
    ) -> Result<Vec<ServiceEntry>> {
        self.inner.service_entries(service, after, kind).await
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ledger::{JobState, MemoryLedger};
    use crate::{Error, ErrorKind};

    /// Writes `noted` in each record's detail, and refuses failed records.
    #[derive(Debug)]
    struct Note;

    impl RecordHook for Note {
        fn before_record<'a>(&self, record: &'a JobRecord) -> Result<Cow<'a, JobRecord>> {
            if record.state == JobState::Failed {
                return Err(Error::new(ErrorKind::PermissionDenied, "refused"));
            }
            let mut noted = record.clone();
            noted.detail = "noted".into();
            Ok(Cow::Owned(noted))
        }
    }

    #[tokio::test]
    async fn records_go_through_the_hook_and_the_rest_straight_through() {
        let inner: Arc<dyn Ledger> = Arc::new(MemoryLedger::new());
        let hooked = Hooked::new(inner.clone(), Note);
        let at = OffsetDateTime::UNIX_EPOCH;
        hooked
            .record_job(&JobRecord::new("j", "n", JobState::Running, at))
            .await
            .unwrap();
        let e = hooked
            .record_job(&JobRecord::new("j", "n", JobState::Failed, at))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        // The amended record was written; the refused one was not.
        let latest = inner.job_latest("j").await.unwrap().unwrap();
        assert_eq!(
            (latest.state, latest.detail.as_str()),
            (JobState::Running, "noted")
        );
        assert_eq!(hooked.job_history("j").await.unwrap().len(), 1);
        hooked.save_job_spec("j", "spec").await.unwrap();
        assert_eq!(inner.job_spec("j").await.unwrap().as_deref(), Some("spec"));
        assert_eq!(hooked.location(), inner.location());
    }
}
