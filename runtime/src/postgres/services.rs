//! Services on PostgreSQL: one row per service, and one log of every
//! service's entries; each write checks the service's lease in the same
//! statement, by the database's clock.

use gpufleet_core::ledger::{
    service_fence_refused, service_lease, ServiceEntry, ServiceEntryKind, ServiceRow,
};

use super::*;

/// The condition a write to a service passes (`$L`: the lease's name, `$F`:
/// the write's fence, `$R`: whether it is a request): the rules of the
/// ledger module's docs.
fn allowed(lease: u8, fence: u8, request: u8) -> String {
    format!(
        "CASE WHEN ${fence}::bigint IS NULL
           THEN ${request}::boolean OR NOT EXISTS (
             SELECT 1 FROM gpufleet.job_leases WHERE job_id = ${lease} AND expires_at > now())
           ELSE EXISTS (
             SELECT 1 FROM gpufleet.job_leases
             WHERE job_id = ${lease} AND token = ${fence}::bigint AND expires_at > now())
         END"
    )
}

fn fence_of(service: &str, fence: Option<u64>) -> Result<Option<i64>> {
    match fence.map(i64::try_from) {
        Some(Ok(t)) => Ok(Some(t)),
        Some(Err(_)) => Err(service_fence_refused(service, fence)),
        None => Ok(None),
    }
}

impl PgLedger {
    pub(super) async fn save_service_now(&self, row: &ServiceRow) -> Result<()> {
        let fence = fence_of(&row.name, row.fence)?;
        let lease = service_lease(&row.name);
        let sql = format!(
            "INSERT INTO gpufleet.services(name, doc, fence, updated_at)
             SELECT $1, $2, $3, $4 WHERE {}
             ON CONFLICT (name) DO UPDATE SET doc = excluded.doc, fence = excluded.fence,
                                              updated_at = excluded.updated_at
             RETURNING 1",
            allowed(5, 3, 6)
        );
        let done = self
            .query(
                "write a service",
                &sql,
                &[&row.name, &row.doc, &fence, &row.updated_at, &lease, &false],
            )
            .await?;
        if done.is_empty() {
            return Err(service_fence_refused(&row.name, row.fence));
        }
        Ok(())
    }

    pub(super) async fn services_now(&self) -> Result<Vec<ServiceRow>> {
        let rows = self
            .query(
                "read the services",
                "SELECT name, doc, fence, updated_at FROM gpufleet.services ORDER BY name",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| ServiceRow {
                name: r.get(0),
                doc: r.get(1),
                fence: r.get::<_, Option<i64>>(2).map(|t| t as u64),
                updated_at: r.get(3),
            })
            .collect())
    }

    pub(super) async fn append_service_entry_now(&self, e: &ServiceEntry) -> Result<u64> {
        let fence = fence_of(&e.service, e.fence)?;
        let lease = service_lease(&e.service);
        let request = e.kind == ServiceEntryKind::Request;
        // A request id makes a retried append land once: a retry after a
        // lost answer finds the entry the first attempt wrote.
        let rid = request_id();
        let sql = format!(
            "WITH ins AS (
               INSERT INTO gpufleet.service_log(rid, service, at, kind, doc, fence)
               SELECT $1, $2, $3, $4, $5, $6 WHERE {}
               ON CONFLICT (rid) DO NOTHING
               RETURNING seq)
             SELECT seq FROM ins
             UNION ALL SELECT seq FROM gpufleet.service_log WHERE rid = $1
             LIMIT 1",
            allowed(7, 6, 8)
        );
        let rows = self
            .query(
                "append to a service's log",
                &sql,
                &[
                    &rid,
                    &e.service,
                    &e.at,
                    &e.kind.as_str(),
                    &e.doc,
                    &fence,
                    &lease,
                    &request,
                ],
            )
            .await?;
        match rows.first() {
            Some(r) => Ok(r.get::<_, i64>(0) as u64),
            None => Err(service_fence_refused(&e.service, e.fence)),
        }
    }

    pub(super) async fn service_entries_now(
        &self,
        service: &str,
        after: u64,
        kind: Option<ServiceEntryKind>,
    ) -> Result<Vec<ServiceEntry>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let kind = kind.map(ServiceEntryKind::as_str);
        let rows = self
            .query(
                "read a service's log",
                "SELECT seq, service, at, kind, doc, fence FROM gpufleet.service_log
                 WHERE service = $1 AND seq > $2 AND ($3::text IS NULL OR kind = $3)
                 ORDER BY seq",
                &[&service, &after, &kind],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.get(3);
                let kind = ServiceEntryKind::parse(&kind).ok_or_else(|| {
                    Error::invalid_input(format!(
                        "ledger {} holds a service entry of an unknown kind '{kind}'",
                        self.shown
                    ))
                })?;
                Ok(ServiceEntry {
                    seq: r.get::<_, i64>(0) as u64,
                    service: r.get(1),
                    at: r.get(2),
                    kind,
                    doc: r.get(4),
                    fence: r.get::<_, Option<i64>>(5).map(|t| t as u64),
                })
            })
            .collect()
    }
}
