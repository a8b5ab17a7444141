//! Services on SQLite: one row per service, and one log of every
//! service's entries, each write checked against the service's lease in
//! the same transaction.

use gpufleet_core::ledger::{
    service_fence_refused, service_lease, service_write_allowed, ServiceEntry, ServiceEntryKind,
    ServiceRow,
};

use super::*;

impl Db {
    /// Whether a write to `service` under `fence` passes the fencing rules,
    /// read in `conn`'s transaction.
    fn service_allowed(
        &self,
        conn: &Connection,
        service: &str,
        fence: Option<u64>,
        request: bool,
    ) -> Result<bool> {
        let now = self.now_ms(conn)?;
        let lease = self
            .lease_row(conn, &service_lease(service))?
            .map(|l| (l.token, l.expires_at > from_millis(now)));
        Ok(service_write_allowed(fence, request, lease))
    }

    pub(super) fn save_service_now(&self, row: &ServiceRow) -> Result<()> {
        self.in_tx(|conn| {
            if !self.service_allowed(conn, &row.name, row.fence, false)? {
                return Err(service_fence_refused(&row.name, row.fence));
            }
            conn.execute(
                "INSERT INTO services(name, doc, fence, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(name) DO UPDATE SET doc = excluded.doc, fence = excluded.fence,
                                                 updated_at = excluded.updated_at",
                params![
                    row.name,
                    row.doc,
                    row.fence.map(|t| t as i64),
                    nanos(row.updated_at)
                ],
            )
            .map_err(|e| db_err(&self.path, "cannot write a service", e))?;
            Ok(())
        })
    }

    pub(super) fn services_now(&self) -> Result<Vec<ServiceRow>> {
        let conn = self.conn();
        let failed = |e| db_err(&self.path, "cannot read the services", e);
        let mut stmt = conn
            .prepare("SELECT name, doc, fence, updated_at FROM services ORDER BY name")
            .map_err(failed)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ServiceRow {
                    name: r.get(0)?,
                    doc: r.get(1)?,
                    fence: r.get::<_, Option<i64>>(2)?.map(|t| t as u64),
                    updated_at: from_nanos(r.get(3)?),
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(failed)?;
        Ok(rows)
    }

    pub(super) fn append_service_entry_now(&self, e: &ServiceEntry) -> Result<u64> {
        self.in_tx(|conn| {
            let request = e.kind == ServiceEntryKind::Request;
            if !self.service_allowed(conn, &e.service, e.fence, request)? {
                return Err(service_fence_refused(&e.service, e.fence));
            }
            conn.execute(
                "INSERT INTO service_log(service, at, kind, doc, fence) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    e.service,
                    nanos(e.at),
                    e.kind.as_str(),
                    e.doc,
                    e.fence.map(|t| t as i64)
                ],
            )
            .map_err(|err| db_err(&self.path, "cannot append to a service's log", err))?;
            Ok(conn.last_insert_rowid() as u64)
        })
    }

    pub(super) fn service_entries_now(
        &self,
        service: &str,
        after: u64,
        kind: Option<ServiceEntryKind>,
    ) -> Result<Vec<ServiceEntry>> {
        let conn = self.conn();
        let failed = |e| db_err(&self.path, "cannot read a service's log", e);
        let mut stmt = conn
            .prepare(
                "SELECT seq, service, at, kind, doc, fence FROM service_log
                 WHERE service = ?1 AND seq > ?2 AND (?3 IS NULL OR kind = ?3) ORDER BY seq",
            )
            .map_err(failed)?;
        let rows = stmt
            .query_map(
                params![service, after as i64, kind.map(ServiceEntryKind::as_str)],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                    ))
                },
            )
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(failed)?;
        rows.into_iter()
            .map(|(seq, service, at, kind, doc, fence)| {
                let kind = ServiceEntryKind::parse(&kind).ok_or_else(|| {
                    Error::invalid_input(format!(
                        "ledger {} holds a service entry of an unknown kind '{kind}'",
                        self.path.display()
                    ))
                })?;
                Ok(ServiceEntry {
                    seq: seq as u64,
                    service,
                    at: from_nanos(at),
                    kind,
                    doc,
                    fence: fence.map(|t| t as u64),
                })
            })
            .collect()
    }
}
