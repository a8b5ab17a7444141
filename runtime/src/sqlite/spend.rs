//! The ledger of spend on SQLite: one row per (cloud, instance), its start
//! and end as columns (the end written once, by a conditional update) and
//! the whole record as a JSON document.

use gpufleet_core::ledger::{InstanceEnd, InstanceSpend};
use gpufleet_core::Cloud;

use super::*;

fn encode(path: &Path, s: &InstanceSpend) -> Result<String> {
    serde_json::to_string(s).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!(
                "ledger {}: cannot encode an instance's spend",
                path.display()
            ),
        )
        .with_source(e)
    })
}

fn decode(path: &Path, doc: &str) -> Result<InstanceSpend> {
    serde_json::from_str(doc).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!(
                "ledger {} holds an unreadable instance record",
                path.display()
            ),
        )
        .with_source(e)
    })
}

impl Db {
    pub(super) fn record_instance_start_now(&self, s: &InstanceSpend) -> Result<()> {
        let doc = encode(&self.path, s)?;
        self.conn()
            .execute(
                "INSERT OR IGNORE INTO instance_spend(cloud, id, started_at, ended_at, doc)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    s.pool.cloud.as_str(),
                    s.id.as_str(),
                    nanos(s.started_at),
                    s.ended_at.map(nanos),
                    doc
                ],
            )
            .map_err(|e| db_err(&self.path, "cannot record an instance's start", e))?;
        Ok(())
    }

    pub(super) fn record_instance_end_now(
        &self,
        cloud: Cloud,
        id: &InstanceId,
        end: &InstanceEnd,
    ) -> Result<bool> {
        let conn = self.conn();
        let failed = |e| db_err(&self.path, "cannot record an instance's end", e);
        let doc: Option<String> = conn
            .query_row(
                "SELECT doc FROM instance_spend WHERE cloud = ?1 AND id = ?2 AND ended_at IS NULL",
                params![cloud.as_str(), id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(failed)?;
        let Some(doc) = doc else {
            return Ok(false);
        };
        let mut s = decode(&self.path, &doc)?;
        let at = end.at.max(s.started_at);
        s.ended_at = Some(at);
        s.ended_by = Some(end.by);
        s.end_detail = end.detail.clone();
        let doc = encode(&self.path, &s)?;
        // Conditional: another process's end, written meanwhile, stands.
        let n = conn
            .execute(
                "UPDATE instance_spend SET ended_at = ?3, doc = ?4
                 WHERE cloud = ?1 AND id = ?2 AND ended_at IS NULL",
                params![cloud.as_str(), id.as_str(), nanos(at), doc],
            )
            .map_err(failed)?;
        Ok(n == 1)
    }

    pub(super) fn spend_now(&self, since: Option<OffsetDateTime>) -> Result<Vec<InstanceSpend>> {
        let conn = self.conn();
        let read = |e| db_err(&self.path, "cannot read the instances' spend", e);
        // A ledger opened read-only may predate the table (schema 4 or
        // older): it has recorded no spend.
        let has: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'instance_spend')",
                [],
                |r| r.get(0),
            )
            .map_err(read)?;
        if !has {
            return Ok(Vec::new());
        }
        let mut stmt = conn
            .prepare(
                "SELECT doc FROM instance_spend WHERE ended_at IS NULL OR ended_at >= ?1
                 ORDER BY started_at, cloud, id",
            )
            .map_err(read)?;
        let cut = since.map_or(i64::MIN, nanos);
        let docs = stmt
            .query_map(params![cut], |r| r.get::<_, String>(0))
            .map_err(read)?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(read)?;
        docs.iter().map(|d| decode(&self.path, d)).collect()
    }
}
