//! Pool evidence, job records, job files and usage: the statements.

use super::*;

impl Db {
    pub(super) fn record_event_now(&self, pool: &Pool, event: PoolEvent) -> Result<()> {
        let pool = self.pool_json(pool)?;
        self.conn()
            .execute(
                "INSERT INTO pool_events(pool, at, kind) VALUES (?1, ?2, ?3)",
                params![pool, nanos(event.at), event.kind.as_str()],
            )
            .map_err(|e| db_err(&self.path, "cannot record an event", e))?;
        Ok(())
    }

    pub(super) fn record_exposure_now(
        &self,
        pool: &Pool,
        during: Range<OffsetDateTime>,
    ) -> Result<()> {
        if during.is_empty() {
            return Ok(());
        }
        let pool = self.pool_json(pool)?;
        self.conn()
            .execute(
                "INSERT INTO exposure(pool, from_at, to_at) VALUES (?1, ?2, ?3)",
                params![pool, nanos(during.start), nanos(during.end)],
            )
            .map_err(|e| db_err(&self.path, "cannot record exposure", e))?;
        Ok(())
    }

    pub(super) fn evidence_now(
        &self,
        since: OffsetDateTime,
    ) -> Result<HashMap<Pool, PoolEvidence>> {
        let mut out: HashMap<Pool, PoolEvidence> = HashMap::new();
        let events = self.rows(
            "SELECT pool, at, kind FROM pool_events WHERE at >= ?1 ORDER BY at",
            since,
            |r| r.get::<_, String>(2),
        )?;
        for (pool, at, kind) in events {
            let kind = PoolEventKind::parse(&kind).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown event kind '{kind}'",
                    self.path.display()
                ))
            })?;
            out.entry(self.parse_pool(&pool)?)
                .or_default()
                .record(from_nanos(at), kind);
        }
        let exposure = self.rows(
            "SELECT pool, from_at, to_at FROM exposure WHERE to_at >= ?1 ORDER BY from_at",
            since,
            |r| r.get::<_, i64>(2),
        )?;
        for (pool, from, to) in exposure {
            out.entry(self.parse_pool(&pool)?)
                .or_default()
                .ran(from_nanos(from), from_nanos(to));
        }
        Ok(out)
    }

    pub(super) fn record_job_now(&self, record: &JobRecord) -> Result<()> {
        let pool = match &record.pool {
            Some(p) => self.pool_json(p)?,
            None => String::new(),
        };
        let instances = serde_json::to_string(&record.instances).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "cannot encode instances").with_source(e)
        })?;
        self.conn()
            .execute(
                "INSERT INTO jobs(job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    record.job_id,
                    record.name,
                    pool,
                    instances,
                    record.state.as_str(),
                    nanos(record.at),
                    record.attempt,
                    record.progress_hours,
                    record.price.map(Price::micros_per_hour),
                    record.detail,
                    record.fence.map(|t| t as i64)
                ],
            )
            .map_err(|e| match &e {
                rusqlite::Error::SqliteFailure(_, Some(msg)) if msg.contains(FENCE_REFUSED) => {
                    fence_refused(record)
                }
                rusqlite::Error::SqliteFailure(_, Some(msg))
                    if msg.contains("gpufleet: a cancel is final") =>
                {
                    gpufleet_core::ledger::cancelled_refused(record)
                }
                _ => db_err(&self.path, "cannot record a job", e),
            })?;
        Ok(())
    }

    pub(super) fn jobs_now(&self) -> Result<Vec<JobRecord>> {
        self.job_rows("", None)
    }

    pub(super) fn job_history_now(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        self.job_rows("WHERE job_id = ?1", Some(job_id))
    }

    pub(super) fn job_latest_now(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self
            .job_rows(
                "WHERE id = (SELECT MAX(id) FROM jobs WHERE job_id = ?1)",
                Some(job_id),
            )?
            .pop())
    }

    pub(super) fn save_job_spec_now(&self, job_id: &str, spec: &str) -> Result<()> {
        let conn = self.conn();
        let inserted = conn
            .execute(
                "INSERT OR IGNORE INTO job_specs(job_id, spec) VALUES (?1, ?2)",
                params![job_id, spec],
            )
            .map_err(|e| db_err(&self.path, "cannot record a job definition", e))?;
        if inserted == 1 {
            return Ok(());
        }
        let existing: String = conn
            .query_row(
                "SELECT spec FROM job_specs WHERE job_id = ?1",
                params![job_id],
                |r| r.get(0),
            )
            .map_err(|e| db_err(&self.path, "cannot read a job definition", e))?;
        gpufleet_core::ledger::same_job_spec(job_id, &existing, spec)
    }

    pub(super) fn record_usage_now(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        let doc = gpufleet_core::ledger::usage_document(usage)?.to_string();
        self.conn()
            .execute(
                "INSERT INTO job_usage(job_id, usage) VALUES (?1, ?2)
                 ON CONFLICT(job_id) DO UPDATE SET usage = excluded.usage",
                params![job_id, doc],
            )
            .map_err(|e| db_err(&self.path, "cannot record a job's GPU use", e))?;
        Ok(())
    }

    pub(super) fn job_usage_now(&self, job_id: &str) -> Result<Option<JobUsage>> {
        let doc: Option<String> = self
            .conn()
            .query_row(
                "SELECT usage FROM job_usage WHERE job_id = ?1",
                params![job_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, "cannot read a job's GPU use", e))?;
        doc.map(|d| {
            serde_json::from_str(&d).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "ledger {}: job {job_id}'s GPU use is unreadable",
                        self.path.display()
                    ),
                )
                .with_source(e)
            })
        })
        .transpose()
    }

    pub(super) fn job_spec_now(&self, job_id: &str) -> Result<Option<String>> {
        self.conn()
            .query_row(
                "SELECT spec FROM job_specs WHERE job_id = ?1",
                params![job_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, "cannot read a job definition", e))
    }

    pub(super) fn job_rows(&self, filter: &str, job_id: Option<&str>) -> Result<Vec<JobRecord>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read jobs", e);
        let mut stmt = conn
            .prepare(&format!(
                "SELECT job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence
                 FROM jobs {filter} ORDER BY id"
            ))
            .map_err(read)?;
        let map = |r: &rusqlite::Row<'_>| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ),
                (
                    r.get::<_, i64>(5)?,
                    r.get::<_, u32>(6)?,
                    r.get::<_, f64>(7)?,
                    r.get::<_, Option<i64>>(8)?,
                    r.get::<_, String>(9)?,
                    r.get::<_, Option<i64>>(10)?,
                ),
            ))
        };
        let rows = match job_id {
            Some(id) => stmt.query_map(params![id], map),
            None => stmt.query_map([], map),
        }
        .map_err(read)?;
        let mut out = Vec::new();
        for row in rows {
            let (
                (job_id, name, pool, instances, state),
                (at, attempt, progress, price, detail, fence),
            ) = row.map_err(read)?;
            let instances: Vec<InstanceId> = serde_json::from_str(&instances).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("ledger {} holds unreadable instances", self.path.display()),
                )
                .with_source(e)
            })?;
            let state = JobState::parse(&state).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown job state '{state}'",
                    self.path.display()
                ))
            })?;
            out.push(JobRecord {
                job_id,
                name,
                pool: if pool.is_empty() {
                    None
                } else {
                    Some(self.parse_pool(&pool)?)
                },
                instances,
                state,
                at: from_nanos(at),
                attempt,
                progress_hours: progress,
                price: price.map(Price::from_micros_per_hour),
                detail,
                fence: fence.and_then(|t| u64::try_from(t).ok()),
            });
        }
        Ok(out)
    }
}
