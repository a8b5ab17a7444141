//! The ledger's word on every job one controller drives, read once a poll
//! for all of them (one query where the ledger can: PostgreSQL's `DISTINCT
//! ON`), as the board reads the clouds. A job's poll asks whether someone
//! else ended it (a cancel); with this, the ledger reads a poll makes for
//! that grow with controllers, not with jobs. A cancel recorded while a
//! poll is under way is seen at the job's next poll at the latest.

use super::*;
use gpufleet_core::ledger::Ledger;
use std::collections::HashSet;

/// The shared ledger reads of one controller (and its clones).
#[derive(Debug, Default)]
pub(super) struct States {
    inner: tokio::sync::Mutex<Inner>,
}

/// One read of the newest records: when it was taken (on the controller's
/// clock, before the call), the jobs it asked about, and what it found.
type Read = (
    OffsetDateTime,
    HashSet<String>,
    Arc<HashMap<String, JobRecord>>,
);

#[derive(Debug, Default)]
struct Inner {
    /// The jobs asked about lately, when they last asked.
    wanted: HashMap<String, OffsetDateTime>,
    /// The last read.
    last: Option<Read>,
}

impl States {
    /// The newest record of `job_id`, from a read of the ledger taken after
    /// `newer_than` (the job's previous poll): the last read if it is that
    /// new and asked about the job, else a new one of every job asked about
    /// within `config`'s [`ControllerConfig::forget_after`], which the other
    /// jobs of the poll then use. A job's first poll (`newer_than` none)
    /// reads its own.
    pub(super) async fn latest(
        &self,
        ledger: &dyn Ledger,
        config: &ControllerConfig,
        job_id: &str,
        newer_than: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> Result<Option<JobRecord>> {
        let mut s = self.inner.lock().await;
        s.wanted.insert(job_id.to_string(), now);
        let Some(newer_than) = newer_than else {
            drop(s);
            return ledger.job_latest(job_id).await;
        };
        if let Some((at, asked, found)) = &s.last {
            if *at > newer_than && asked.contains(job_id) {
                return Ok(found.get(job_id).cloned());
            }
        }
        let forget = config.forget_after();
        s.wanted.retain(|_, t| now - *t <= forget);
        let ids: Vec<String> = s.wanted.keys().cloned().collect();
        let found = ledger.jobs_latest(&ids).await?;
        let mine = found.get(job_id).cloned();
        s.last = Some((now, ids.into_iter().collect(), Arc::new(found)));
        Ok(mine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_core::ledger::MemoryLedger;

    fn rec(job: &str, state: JobState, at: OffsetDateTime) -> JobRecord {
        JobRecord::new(job, job, state, at)
    }

    #[tokio::test]
    async fn one_read_a_poll_serves_every_job_and_a_cancel_is_seen_by_the_next_poll() {
        let ledger = MemoryLedger::new();
        let t0 = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let poll = time::Duration::minutes(1);
        let config = ControllerConfig {
            poll: Duration::from_secs(60),
            ..ControllerConfig::default()
        };
        let forget = config.forget_after();
        assert_eq!(forget, poll * 3);
        let jobs: Vec<String> = (0..5).map(|i| format!("job-{i}")).collect();
        for j in &jobs {
            ledger
                .record_job(&rec(j, JobState::Running, t0))
                .await
                .unwrap();
        }
        let states = States::default();
        // First polls: each job reads its own.
        for j in &jobs {
            let r = states.latest(&ledger, &config, j, None, t0).await.unwrap();
            assert_eq!(r.map(|r| r.state), Some(JobState::Running));
        }
        // The next poll: the first job's read serves the others.
        let t1 = t0 + poll;
        let mut read = None;
        for j in &jobs {
            states
                .latest(&ledger, &config, j, Some(t0), t1)
                .await
                .unwrap();
            let (at, asked, found) = states.inner.lock().await.last.clone().unwrap();
            assert_eq!((at, asked.len()), (t1, jobs.len()));
            // The same read each time.
            let first = read.get_or_insert_with(|| found.clone());
            assert!(Arc::ptr_eq(first, &found), "{j} read the ledger again");
        }
        // A cancel recorded during the poll: this poll's read does not show
        // it, the next one does.
        ledger
            .record_job(&rec("job-3", JobState::Cancelled, t1))
            .await
            .unwrap();
        let same = states
            .latest(&ledger, &config, "job-3", Some(t0), t1)
            .await
            .unwrap();
        assert_eq!(same.map(|r| r.state), Some(JobState::Running));
        let t2 = t1 + poll;
        let next = states
            .latest(&ledger, &config, "job-3", Some(t1), t2)
            .await
            .unwrap();
        assert_eq!(next.map(|r| r.state), Some(JobState::Cancelled));
        // A job the last read did not ask about reads again, with it.
        let r = states
            .latest(&ledger, &config, "job-new", Some(t1), t2)
            .await
            .unwrap();
        assert!(r.is_none());
        assert!(states
            .inner
            .lock()
            .await
            .last
            .as_ref()
            .unwrap()
            .1
            .contains("job-new"));
        // Jobs that stop asking are forgotten.
        let later = t2 + forget + poll;
        states
            .latest(&ledger, &config, "job-0", Some(t2), later)
            .await
            .unwrap();
        let asked = states.inner.lock().await.last.clone().unwrap().1;
        assert_eq!(asked, HashSet::from(["job-0".to_string()]));
    }
}
