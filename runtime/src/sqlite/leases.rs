//! Leases: acquired, renewed and released in one transaction each against
//! the database's own clock, so that two controllers never hold one job.

use super::*;

pub(super) fn from_millis(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

pub(super) fn lease_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        job_id: r.get(0)?,
        holder: r.get(1)?,
        token: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
        acquired_at: from_millis(r.get(3)?),
        expires_at: from_millis(r.get(4)?),
    })
}

impl Db {
    pub(super) fn lease_err(&self, e: rusqlite::Error) -> Error {
        db_err(&self.path, "cannot update a lease", e)
    }

    pub(super) fn now_ms(&self, conn: &Connection) -> Result<i64> {
        conn.query_row(&format!("SELECT {NOW_MS}"), [], |r| r.get(0))
            .map_err(|e| db_err(&self.path, "cannot read the clock", e))
    }

    pub(super) fn lease_row(&self, conn: &Connection, job_id: &str) -> Result<Option<Lease>> {
        conn.query_row(
            "SELECT job_id, holder, token, acquired_at, expires_at FROM job_leases WHERE job_id = ?1",
            params![job_id],
            lease_of,
        )
        .optional()
        .map_err(|e| db_err(&self.path, "cannot read a lease", e))
    }

    /// Runs `f` in an immediate transaction (rolled back on error).
    pub(super) fn in_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.conn();
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.lease_err(e))?;
        match f(&conn) {
            Ok(v) => {
                conn.execute_batch("COMMIT").map_err(|e| {
                    let _ = conn.execute_batch("ROLLBACK");
                    self.lease_err(e)
                })?;
                Ok(v)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    pub(super) fn acquire_now(&self, job_id: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        let ttl_ms = ttl.as_millis() as i64;
        self.in_tx(|conn| {
            let now = self.now_ms(conn)?;
            let lease = match self.lease_row(conn, job_id)? {
                Some(l) if l.expires_at > from_millis(now) && l.holder != holder => {
                    return Ok(Claim::Held(l))
                }
                Some(l) if l.expires_at > from_millis(now) => {
                    conn.execute(
                        "UPDATE job_leases SET expires_at = ?2 WHERE job_id = ?1",
                        params![job_id, now + ttl_ms],
                    )
                    .map_err(|e| self.lease_err(e))?;
                    Lease {
                        expires_at: from_millis(now + ttl_ms),
                        ..l
                    }
                }
                previous => {
                    let token = previous.map_or(1, |l| l.token + 1);
                    conn.execute(
                        "INSERT INTO job_leases(job_id, holder, token, acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT(job_id) DO UPDATE SET holder = excluded.holder, token = excluded.token,
                             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                        params![job_id, holder, token as i64, now, now + ttl_ms],
                    )
                    .map_err(|e| self.lease_err(e))?;
                    Lease {
                        job_id: job_id.to_string(),
                        holder: holder.to_string(),
                        token,
                        acquired_at: from_millis(now),
                        expires_at: from_millis(now + ttl_ms),
                    }
                }
            };
            Ok(Claim::Acquired(lease))
        })
    }

    pub(super) fn renew_now(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let ttl_ms = ttl.as_millis() as i64;
        self.in_tx(|conn| {
            let now = self.now_ms(conn)?;
            let n = conn
                .execute(
                    "UPDATE job_leases SET expires_at = ?4
                     WHERE job_id = ?1 AND holder = ?2 AND token = ?3 AND expires_at > ?5",
                    params![
                        lease.job_id,
                        lease.holder,
                        lease.token as i64,
                        now + ttl_ms,
                        now
                    ],
                )
                .map_err(|e| self.lease_err(e))?;
            if n == 0 {
                return Err(lease_lost(lease));
            }
            Ok(Lease {
                expires_at: from_millis(now + ttl_ms),
                ..lease.clone()
            })
        })
    }

    pub(super) fn release_now(&self, lease: &Lease) -> Result<()> {
        self.conn()
            .execute(
                &format!(
                    "UPDATE job_leases SET expires_at = {NOW_MS}
                     WHERE job_id = ?1 AND holder = ?2 AND token = ?3 AND expires_at > {NOW_MS}"
                ),
                params![lease.job_id, lease.holder, lease.token as i64],
            )
            .map_err(|e| self.lease_err(e))?;
        Ok(())
    }

    pub(super) fn leases_now(&self) -> Result<Vec<Lease>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read leases", e);
        let mut stmt = conn
            .prepare("SELECT job_id, holder, token, acquired_at, expires_at FROM job_leases ORDER BY job_id")
            .map_err(read)?;
        let rows = stmt.query_map([], lease_of).map_err(read)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(read)
    }

    pub(super) fn active_now(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read jobs", e);
        let mut stmt = conn
            .prepare(
                "SELECT j.job_id FROM jobs j
                 JOIN (SELECT job_id, MIN(id) AS first, MAX(id) AS last FROM jobs GROUP BY job_id) m
                   ON j.id = m.last
                 WHERE j.state NOT IN ('succeeded', 'completed', 'failed', 'cancelled')
                   AND EXISTS (SELECT 1 FROM job_specs s WHERE s.job_id = j.job_id)
                 ORDER BY m.first",
            )
            .map_err(read)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(read)?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .map_err(read)
    }
}
