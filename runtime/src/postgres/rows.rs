//! Rows to gpufleet's types and back.

use super::*;

pub(super) fn pool_json(pool: &GpuPool) -> Result<serde_json::Value> {
    serde_json::to_value(pool)
        .map_err(|e| Error::new(ErrorKind::Unexpected, "cannot encode a pool").with_source(e))
}

pub(super) fn pool_of(at: &str, v: serde_json::Value) -> Result<GpuPool> {
    serde_json::from_value(v).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("ledger {at} holds an unreadable pool"),
        )
        .with_source(e)
    })
}

pub(super) fn lease_of(r: &Row) -> Lease {
    Lease {
        job_id: r.get(0),
        holder: r.get(1),
        token: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
        acquired_at: r.get(3),
        expires_at: r.get(4),
    }
}

pub(super) const LEASE_COLUMNS: &str = "job_id, holder, token, acquired_at, expires_at";

pub(super) const JOB_COLUMNS: &str =
    "job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence";

impl PgLedger {
    pub(super) fn job_of(&self, r: &Row) -> Result<JobRecord> {
        let state: String = r.get(4);
        let instances: serde_json::Value = r.get(3);
        let instances: Vec<InstanceId> = serde_json::from_value(instances).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("ledger {} holds unreadable instances", self.shown),
            )
            .with_source(e)
        })?;
        Ok(JobRecord {
            job_id: r.get(0),
            name: r.get(1),
            pool: r
                .get::<_, Option<serde_json::Value>>(2)
                .map(|v| pool_of(&self.shown, v))
                .transpose()?,
            instances,
            state: JobState::parse(&state).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown job state '{state}'",
                    self.shown
                ))
            })?,
            at: r.get(5),
            attempt: u32::try_from(r.get::<_, i64>(6)).unwrap_or(u32::MAX),
            progress_hours: r.get(7),
            price: r.get::<_, Option<i64>>(8).map(Price::from_micros_per_hour),
            detail: r.get(9),
            fence: r
                .get::<_, Option<i64>>(10)
                .and_then(|t| u64::try_from(t).ok()),
        })
    }

    pub(super) async fn job_rows(
        &self,
        filter: &'static str,
        job_id: Option<&str>,
    ) -> Result<Vec<JobRecord>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM gpufleet.jobs {filter} ORDER BY id");
        let rows = match job_id {
            Some(id) => self.query("read jobs", &sql, &[&id]).await?,
            None => self.query("read jobs", &sql, &[]).await?,
        };
        rows.iter().map(|r| self.job_of(r)).collect()
    }

    pub(super) fn secs(ttl: Duration) -> f64 {
        ttl.as_secs_f64()
    }
}
