//! The `Ledger` trait on SQLite: each call on the blocking pool.

use super::*;

#[async_trait]
impl Ledger for SqliteLedger {
    async fn record_event(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        let pool = pool.clone();
        self.call(move |db| db.record_event_now(&pool, event)).await
    }

    async fn record_exposure(&self, pool: &Pool, during: Range<OffsetDateTime>) -> Result<()> {
        let pool = pool.clone();
        self.call(move |db| db.record_exposure_now(&pool, during))
            .await
    }

    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<Pool, PoolEvidence>> {
        self.call(move |db| db.evidence_now(since)).await
    }

    async fn record_job(&self, record: &JobRecord) -> Result<()> {
        let record = record.clone();
        self.call(move |db| db.record_job_now(&record)).await
    }

    async fn jobs(&self) -> Result<Vec<JobRecord>> {
        self.call(|db| db.jobs_now()).await
    }

    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        self.for_job(job_id, |db, id| db.job_history_now(id)).await
    }

    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        self.for_job(job_id, |db, id| db.job_latest_now(id)).await
    }

    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        let spec = spec.to_string();
        self.for_job(job_id, move |db, id| db.save_job_spec_now(id, &spec))
            .await
    }

    async fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        self.for_job(job_id, |db, id| db.job_spec_now(id)).await
    }

    async fn record_usage(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        let usage = usage.clone();
        self.for_job(job_id, move |db, id| db.record_usage_now(id, &usage))
            .await
    }

    async fn job_usage(&self, job_id: &str) -> Result<Option<JobUsage>> {
        self.for_job(job_id, |db, id| db.job_usage_now(id)).await
    }

    async fn active_jobs(&self) -> Result<Vec<String>> {
        self.call(|db| db.active_now()).await
    }

    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        check_lease_request(holder, ttl)?;
        let (job_id, holder) = (job_id.to_string(), holder.to_string());
        self.call(move |db| db.acquire_now(&job_id, &holder, ttl))
            .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_lease_request(&lease.holder, ttl)?;
        let lease = lease.clone();
        self.call(move |db| db.renew_now(&lease, ttl)).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.call(move |db| db.release_now(&lease)).await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        self.call(|db| db.leases_now()).await
    }

    async fn now(&self) -> Result<OffsetDateTime> {
        self.call(|db| {
            let conn = db.conn();
            db.now_ms(&conn).map(from_millis)
        })
        .await
    }

    async fn record_instance_start(
        &self,
        spend: &gpufleet_core::ledger::InstanceSpend,
    ) -> Result<()> {
        let spend = spend.clone();
        self.call(move |db| db.record_instance_start_now(&spend))
            .await
    }

    async fn record_instance_end(
        &self,
        cloud: gpufleet_core::Cloud,
        id: &InstanceId,
        end: &gpufleet_core::ledger::InstanceEnd,
    ) -> Result<bool> {
        let (id, end) = (id.clone(), end.clone());
        self.call(move |db| db.record_instance_end_now(cloud, &id, &end))
            .await
    }

    async fn spend(
        &self,
        since: Option<OffsetDateTime>,
    ) -> Result<Vec<gpufleet_core::ledger::InstanceSpend>> {
        self.call(move |db| db.spend_now(since)).await
    }

    async fn save_service(&self, row: &gpufleet_core::ledger::ServiceRow) -> Result<()> {
        let row = row.clone();
        self.call(move |db| db.save_service_now(&row)).await
    }

    async fn services(&self) -> Result<Vec<gpufleet_core::ledger::ServiceRow>> {
        self.call(|db| db.services_now()).await
    }

    async fn append_service_entry(
        &self,
        entry: &gpufleet_core::ledger::ServiceEntry,
    ) -> Result<u64> {
        let entry = entry.clone();
        self.call(move |db| db.append_service_entry_now(&entry))
            .await
    }

    async fn service_entries(
        &self,
        service: &str,
        after: u64,
        kind: Option<gpufleet_core::ledger::ServiceEntryKind>,
    ) -> Result<Vec<gpufleet_core::ledger::ServiceEntry>> {
        self.for_job(service, move |db, s| db.service_entries_now(s, after, kind))
            .await
    }

    fn location(&self) -> String {
        self.db.path.display().to_string()
    }
}
