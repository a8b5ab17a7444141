//! The `Ledger` trait on PostgreSQL.

use super::*;

#[async_trait]
impl Ledger for PgLedger {
    async fn record_event(&self, pool: &GpuPool, event: PoolEvent) -> Result<()> {
        let pool = pool_json(pool)?;
        let kind = event.kind.as_str();
        let rid = request_id();
        self.query(
            "record an event",
            "INSERT INTO gpufleet.pool_events(rid, pool, at, kind) VALUES ($1, $2, $3, $4)
             ON CONFLICT (rid) DO NOTHING",
            &[&rid, &pool, &event.at, &kind],
        )
        .await?;
        Ok(())
    }

    async fn record_exposure(&self, pool: &GpuPool, during: Range<OffsetDateTime>) -> Result<()> {
        if during.is_empty() {
            return Ok(());
        }
        let pool = pool_json(pool)?;
        let rid = request_id();
        self.query(
            "record exposure",
            "INSERT INTO gpufleet.exposure(rid, pool, from_at, to_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (rid) DO NOTHING",
            &[&rid, &pool, &during.start, &during.end],
        )
        .await?;
        Ok(())
    }

    async fn evidence(&self, since: OffsetDateTime) -> Result<HashMap<GpuPool, PoolEvidence>> {
        let events =
            "SELECT pool, at, kind FROM gpufleet.pool_events WHERE at >= $1 ORDER BY at, id";
        let events = self.query("read evidence", events, &[&since]).await?;
        let exposure =
            "SELECT pool, from_at, to_at FROM gpufleet.exposure WHERE to_at >= $1 ORDER BY from_at, id";
        let exposure = self.query("read evidence", exposure, &[&since]).await?;
        let mut out: HashMap<GpuPool, PoolEvidence> = HashMap::new();
        for r in events {
            let kind: String = r.get(2);
            let kind = PoolEventKind::parse(&kind).ok_or_else(|| {
                Error::invalid_input(format!(
                    "ledger {} holds an unknown event kind '{kind}'",
                    self.shown
                ))
            })?;
            out.entry(pool_of(&self.shown, r.get(0))?)
                .or_default()
                .record(r.get(1), kind);
        }
        for r in exposure {
            out.entry(pool_of(&self.shown, r.get(0))?)
                .or_default()
                .ran(r.get(1), r.get(2));
        }
        Ok(out)
    }

    async fn record_job(&self, record: &JobRecord) -> Result<()> {
        let pool = record.pool.as_ref().map(pool_json).transpose()?;
        let instances = serde_json::to_value(&record.instances).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "cannot encode instances").with_source(e)
        })?;
        let rid = request_id();
        let attempt = i64::from(record.attempt);
        let price = record.price.map(Price::micros_per_hour);
        let fence = match record.fence.map(i64::try_from) {
            Some(Ok(t)) => Some(t),
            Some(Err(_)) => return Err(fence_refused(record)),
            None => None,
        };
        self.run("record a job", |c| {
            let (pool, instances, rid) = (&pool, &instances, &rid);
            Box::pin(async move {
                let statement = c
                    .prepare_cached(
                        "INSERT INTO gpufleet.jobs(rid, job_id, name, pool, instances, state, at, attempt, progress, price, detail, fence)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                         ON CONFLICT (rid) DO NOTHING",
                    )
                    .await
                    .map_err(|e| self.classify("cannot record a job", e))?;
                c.execute(
                    &statement,
                    &[
                        rid,
                        &record.job_id,
                        &record.name,
                        pool,
                        instances,
                        &record.state.as_str(),
                        &record.at,
                        &attempt,
                        &record.progress_hours,
                        &price,
                        &record.detail,
                        &fence,
                    ],
                )
                .await
                .map_err(|e| {
                    if e.code().map(SqlState::code) == Some(FENCE_SQLSTATE) {
                        Attempt::Fail(fence_refused(record))
                    } else if e.code().map(SqlState::code) == Some(FINAL_SQLSTATE) {
                        Attempt::Fail(gpufleet_core::ledger::cancelled_refused(record))
                    } else {
                        self.classify("cannot record a job", e)
                    }
                })?;
                Ok(())
            })
        })
        .await
    }

    async fn jobs(&self) -> Result<Vec<JobRecord>> {
        self.job_rows("", None).await
    }

    async fn job_history(&self, job_id: &str) -> Result<Vec<JobRecord>> {
        self.job_rows("WHERE job_id = $1", Some(job_id)).await
    }

    async fn job_latest(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self
            .job_rows(
                "WHERE id = (SELECT MAX(id) FROM gpufleet.jobs WHERE job_id = $1)",
                Some(job_id),
            )
            .await?
            .pop())
    }

    async fn jobs_latest(
        &self,
        job_ids: &[String],
    ) -> Result<std::collections::HashMap<String, JobRecord>> {
        if job_ids.is_empty() {
            return Ok(std::collections::HashMap::new());
        }
        let sql = format!(
            "SELECT DISTINCT ON (job_id) {JOB_COLUMNS} FROM gpufleet.jobs
             WHERE job_id = ANY($1) ORDER BY job_id, id DESC"
        );
        let rows = self.query("read jobs", &sql, &[&job_ids]).await?;
        rows.iter()
            .map(|r| self.job_of(r).map(|j| (j.job_id.clone(), j)))
            .collect()
    }

    async fn save_job_spec(&self, job_id: &str, spec: &str) -> Result<()> {
        let existing: String = self
            .run("record a job definition", |c| {
                Box::pin(async move {
                    let fail = |e| self.classify("cannot record a job definition", e);
                    c.execute(
                        "INSERT INTO gpufleet.job_specs(job_id, spec) VALUES ($1, $2) ON CONFLICT (job_id) DO NOTHING",
                        &[&job_id, &spec],
                    )
                    .await
                    .map_err(fail)?;
                    let row = c
                        .query_one("SELECT spec FROM gpufleet.job_specs WHERE job_id = $1", &[&job_id])
                        .await
                        .map_err(fail)?;
                    Ok(row.get(0))
                })
            })
            .await?;
        gpufleet_core::ledger::same_job_spec(job_id, &existing, spec)
    }

    async fn record_usage(&self, job_id: &str, usage: &JobUsage) -> Result<()> {
        let doc = gpufleet_core::ledger::usage_document(usage)?;
        self.run("record a job's GPU use", |c| {
            let doc = doc.clone();
            Box::pin(async move {
                c.execute(
                    "INSERT INTO gpufleet.job_usage(job_id, usage) VALUES ($1, $2)
                     ON CONFLICT (job_id) DO UPDATE SET usage = EXCLUDED.usage, written_at = now()",
                    &[&job_id, &doc],
                )
                .await
                .map_err(|e| self.classify("cannot record a job's GPU use", e))?;
                Ok(())
            })
        })
        .await
    }

    async fn job_usage(&self, job_id: &str) -> Result<Option<JobUsage>> {
        let doc: Option<serde_json::Value> = self
            .job_value(
                "read a job's GPU use",
                "SELECT usage FROM gpufleet.job_usage WHERE job_id = $1",
                job_id,
            )
            .await?;
        doc.map(|d| {
            serde_json::from_value(d).map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("job {job_id}'s GPU use in the ledger is unreadable"),
                )
                .with_source(e)
            })
        })
        .transpose()
    }

    async fn job_spec(&self, job_id: &str) -> Result<Option<String>> {
        self.job_value(
            "read a job definition",
            "SELECT spec FROM gpufleet.job_specs WHERE job_id = $1",
            job_id,
        )
        .await
    }

    async fn active_jobs(&self) -> Result<Vec<String>> {
        let rows = self
            .query(
                "read active jobs",
                "SELECT l.job_id FROM
                   (SELECT DISTINCT ON (job_id) job_id, state FROM gpufleet.jobs ORDER BY job_id, id DESC) l
                   JOIN (SELECT job_id, MIN(id) AS first FROM gpufleet.jobs GROUP BY job_id) f USING (job_id)
                 WHERE l.state NOT IN ('succeeded', 'completed', 'failed', 'cancelled')
                   AND EXISTS (SELECT 1 FROM gpufleet.job_specs s WHERE s.job_id = l.job_id)
                 ORDER BY f.first",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn record_instance_start(
        &self,
        spend: &gpufleet_core::ledger::InstanceSpend,
    ) -> Result<()> {
        let doc = spend_doc(&self.shown, spend)?;
        let cloud = spend.pool.cloud.as_str();
        self.query(
            "record an instance's start",
            "INSERT INTO gpufleet.instance_spend(cloud, id, started_at, ended_at, doc)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (cloud, id) DO NOTHING",
            &[
                &cloud,
                &spend.id.as_str(),
                &spend.started_at,
                &spend.ended_at,
                &doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn record_instance_end(
        &self,
        cloud: gpufleet_core::Cloud,
        id: &gpufleet_core::InstanceId,
        end: &gpufleet_core::ledger::InstanceEnd,
    ) -> Result<bool> {
        let cloud = cloud.as_str();
        let rows = self
            .query(
                "read an instance's spend",
                "SELECT doc FROM gpufleet.instance_spend WHERE cloud = $1 AND id = $2 AND ended_at IS NULL",
                &[&cloud, &id.as_str()],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(false);
        };
        let mut spend = spend_of(&self.shown, row.get(0))?;
        let at = end.at.max(spend.started_at);
        spend.ended_at = Some(at);
        spend.ended_by = Some(end.by);
        spend.end_detail = end.detail.clone();
        let doc = spend_doc(&self.shown, &spend)?;
        // Conditional: an end another process wrote meanwhile stands.
        let done = self
            .query(
                "record an instance's end",
                "UPDATE gpufleet.instance_spend SET ended_at = $3, doc = $4
                 WHERE cloud = $1 AND id = $2 AND ended_at IS NULL RETURNING 1",
                &[&cloud, &id.as_str(), &at, &doc],
            )
            .await?;
        Ok(!done.is_empty())
    }

    async fn spend(
        &self,
        since: Option<OffsetDateTime>,
    ) -> Result<Vec<gpufleet_core::ledger::InstanceSpend>> {
        let rows = self
            .query(
                "read the instances' spend",
                "SELECT doc FROM gpufleet.instance_spend
                 WHERE ended_at IS NULL OR $1::timestamptz IS NULL OR ended_at >= $1
                 ORDER BY started_at, cloud, id",
                &[&since],
            )
            .await?;
        rows.iter()
            .map(|r| spend_of(&self.shown, r.get(0)))
            .collect()
    }

    async fn acquire_lease(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        check_lease_request(holder, ttl)?;
        let secs = Self::secs(ttl);
        self.run("acquire a lease", |c| {
            Box::pin(async move {
                let fail = |e| self.classify("cannot acquire a lease", e);
                let won = c
                    .query_opt(
                        &format!(
                            "INSERT INTO gpufleet.job_leases AS l (job_id, holder, token, acquired_at, expires_at)
                             VALUES ($1, $2, 1, now(), now() + $3 * interval '1 second')
                             ON CONFLICT (job_id) DO UPDATE SET
                               token = CASE WHEN l.holder = excluded.holder AND l.expires_at > now()
                                            THEN l.token ELSE l.token + 1 END,
                               acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at > now()
                                            THEN l.acquired_at ELSE now() END,
                               holder = excluded.holder,
                               expires_at = excluded.expires_at
                             WHERE l.expires_at <= now() OR l.holder = excluded.holder
                             RETURNING {LEASE_COLUMNS}"
                        ),
                        &[&job_id, &holder, &secs],
                    )
                    .await
                    .map_err(fail)?;
                if let Some(r) = won {
                    return Ok(Claim::Acquired(lease_of(&r)));
                }
                let r = c
                    .query_one(
                        &format!("SELECT {LEASE_COLUMNS} FROM gpufleet.job_leases WHERE job_id = $1"),
                        &[&job_id],
                    )
                    .await
                    .map_err(fail)?;
                Ok(Claim::Held(lease_of(&r)))
            })
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_lease_request(&lease.holder, ttl)?;
        let secs = Self::secs(ttl);
        let token = i64::try_from(lease.token).map_err(|_| lease_lost(lease))?;
        let row = self
            .run("renew a lease", |c| {
                Box::pin(async move {
                    let fail = |e| self.classify("cannot renew a lease", e);
                    let statement = c
                        .prepare_cached(&format!(
                            "UPDATE gpufleet.job_leases SET expires_at = now() + $4 * interval '1 second'
                             WHERE job_id = $1 AND holder = $2 AND token = $3 AND expires_at > now()
                             RETURNING {LEASE_COLUMNS}"
                        ))
                        .await
                        .map_err(fail)?;
                    c.query_opt(&statement, &[&lease.job_id, &lease.holder, &token, &secs])
                        .await
                        .map_err(fail)
                })
            })
            .await?;
        row.map(|r| lease_of(&r)).ok_or_else(|| lease_lost(lease))
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let Ok(token) = i64::try_from(lease.token) else {
            return Ok(());
        };
        self.query(
            "release a lease",
            "UPDATE gpufleet.job_leases SET expires_at = now()
             WHERE job_id = $1 AND holder = $2 AND token = $3 AND expires_at > now()",
            &[&lease.job_id, &lease.holder, &token],
        )
        .await?;
        Ok(())
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let sql = format!("SELECT {LEASE_COLUMNS} FROM gpufleet.job_leases ORDER BY job_id");
        let rows = self.query("read leases", &sql, &[]).await?;
        Ok(rows.iter().map(lease_of).collect())
    }

    async fn now(&self) -> Result<OffsetDateTime> {
        self.run("read the clock", |c| {
            Box::pin(async move {
                let row = c
                    .query_one("SELECT now()", &[])
                    .await
                    .map_err(|e| self.classify("cannot read the clock", e))?;
                Ok(row.get(0))
            })
        })
        .await
    }

    async fn save_service(&self, row: &gpufleet_core::ledger::ServiceRow) -> Result<()> {
        self.save_service_now(row).await
    }

    async fn services(&self) -> Result<Vec<gpufleet_core::ledger::ServiceRow>> {
        self.services_now().await
    }

    async fn append_service_entry(
        &self,
        entry: &gpufleet_core::ledger::ServiceEntry,
    ) -> Result<u64> {
        self.append_service_entry_now(entry).await
    }

    async fn service_entries(
        &self,
        service: &str,
        after: u64,
        kind: Option<gpufleet_core::ledger::ServiceEntryKind>,
    ) -> Result<Vec<gpufleet_core::ledger::ServiceEntry>> {
        self.service_entries_now(service, after, kind).await
    }

    fn location(&self) -> String {
        self.shown.to_string()
    }
}

fn spend_doc(shown: &str, s: &gpufleet_core::ledger::InstanceSpend) -> Result<serde_json::Value> {
    serde_json::to_value(s).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("ledger {shown}: cannot encode an instance's spend"),
        )
        .with_source(e)
    })
}

fn spend_of(shown: &str, doc: serde_json::Value) -> Result<gpufleet_core::ledger::InstanceSpend> {
    serde_json::from_value(doc).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("ledger {shown} holds an unreadable instance record"),
        )
        .with_source(e)
    })
}
