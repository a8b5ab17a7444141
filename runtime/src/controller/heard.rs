//! What the clouds' event feeds said (AWS: the interruption queue), shared by
//! every job one controller drives: an interruption warning or a state change
//! that ends an instance is kept by instance, and the job that drives the
//! instance is woken from its pause at once, so that it acts in seconds
//! instead of at its next poll. One listener per feed and controller
//! ([`Controller::listen`]); its events are about any instance of the
//! account, so only the newest are kept, for a while.

use super::*;
use gpufleet_core::{CloudEvent, CloudEvents};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Events kept at most (the oldest go first).
const KEPT: usize = 20_000;

/// What the feeds said, and how to wake the jobs.
#[derive(Debug, Default)]
pub(super) struct Heard {
    events: Mutex<Kept>,
    jobs: Mutex<Jobs>,
    listening: AtomicBool,
}

/// The jobs driven here: each one's waker and instances (with their
/// capacity types).
#[derive(Debug, Default)]
struct Jobs {
    wakers: HashMap<String, Arc<Notify>>,
    instances: HashMap<String, Vec<InstanceId>>,
    owner: HashMap<InstanceId, (String, Capacity)>,
}

#[derive(Debug, Default)]
struct Kept {
    by_instance: HashMap<InstanceId, CloudEvent>,
    order: VecDeque<InstanceId>,
}

impl Heard {
    /// The job's waker: notified when an event ends one of its instances.
    pub(super) fn waker(&self, job: &str) -> Arc<Notify> {
        let mut j = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        j.wakers.entry(job.to_string()).or_default().clone()
    }

    /// The job's instances now (its placement's, of `capacity`; none while
    /// it waits), so that an event about one wakes it. An ending event
    /// heard before wakes it at once.
    pub(super) fn watch(&self, job: &str, instances: Vec<InstanceId>, capacity: Capacity) {
        let ended = {
            let k = self.events.lock().unwrap_or_else(|p| p.into_inner());
            instances
                .iter()
                .any(|id| k.by_instance.get(id).is_some_and(CloudEvent::ends_instance))
        };
        let mut j = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if j.instances.get(job) != Some(&instances) {
            if let Some(old) = j.instances.remove(job) {
                for id in old {
                    j.owner.remove(&id);
                }
            }
            for id in &instances {
                j.owner.insert(id.clone(), (job.to_string(), capacity));
            }
            j.instances.insert(job.to_string(), instances);
        }
        if ended {
            if let Some(n) = j.wakers.get(job) {
                n.notify_one();
            }
        }
    }

    /// The job is no longer driven here.
    pub(super) fn forget(&self, job: &str) {
        let mut j = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        j.wakers.remove(job);
        if let Some(old) = j.instances.remove(job) {
            for id in old {
                j.owner.remove(&id);
            }
        }
    }

    /// Whether the event is about an instance a job driven here holds (the
    /// others are left on a shared feed for the controllers that drive
    /// them).
    pub(super) fn drives(&self, event: &CloudEvent) -> bool {
        let j = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        j.owner.contains_key(&event.instance)
    }

    /// Keeps `event` and, when it ends its instance, wakes the job that
    /// drives it here; returns that job. An event that cannot be about its
    /// instance (a spot interruption warning for an on-demand instance) is
    /// logged and dropped, not obeyed.
    pub(super) fn record(&self, event: CloudEvent) -> Option<String> {
        let capacity = {
            let j = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            j.owner.get(&event.instance).map(|(_, c)| *c)
        };
        if let Some(why) = capacity.and_then(|c| event.mismatch(c)) {
            tracing::warn!(instance = %event.instance, why, "an instance event not obeyed");
            return None;
        }
        let ends = event.ends_instance();
        let id = event.instance.clone();
        {
            let mut k = self.events.lock().unwrap_or_else(|p| p.into_inner());
            // An instance's ending event is not replaced by a later
            // rebalance recommendation.
            let keep_old = !ends
                && k.by_instance
                    .get(&id)
                    .is_some_and(CloudEvent::ends_instance);
            if !keep_old {
                if k.by_instance.insert(id.clone(), event).is_none() {
                    k.order.push_back(id.clone());
                }
                while k.order.len() > KEPT {
                    if let Some(old) = k.order.pop_front() {
                        k.by_instance.remove(&old);
                    }
                }
            }
        }
        let j = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let job = j.owner.get(&id).map(|(job, _)| job.clone());
        if let (true, Some(job)) = (ends, &job) {
            if let Some(n) = j.wakers.get(job) {
                n.notify_one();
            }
        }
        job
    }

    /// The first event that ends one of `instances`, from `since` on.
    pub(super) fn ending<'a>(
        &self,
        instances: impl IntoIterator<Item = &'a InstanceId>,
        since: OffsetDateTime,
    ) -> Option<CloudEvent> {
        let k = self.events.lock().unwrap_or_else(|p| p.into_inner());
        instances.into_iter().find_map(|id| {
            k.by_instance
                .get(id)
                .filter(|e| e.ends_instance() && e.at >= since)
                .cloned()
        })
    }
}

/// Stops the listener it names when dropped (the one that started it).
pub(super) struct Listening {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    heard: Arc<Heard>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.heard.listening.store(false, Ordering::SeqCst);
    }
}

impl Controller {
    /// Listens to the controller's event feeds (set with
    /// [`Controller::with_events`]) until the returned guard is dropped; `None`
    /// when there are none, or when this controller already listens (the
    /// jobs of one controller share its listeners).
    pub(super) fn listen(&self) -> Option<Listening> {
        if self.events.is_empty() || self.heard.listening.swap(true, Ordering::SeqCst) {
            return None;
        }
        let tasks = self
            .events
            .iter()
            .map(|feed| {
                let (feed, heard) = (feed.clone(), self.heard.clone());
                tokio::spawn(async move { listen(feed, heard).await })
            })
            .collect();
        Some(Listening {
            tasks,
            heard: self.heard.clone(),
        })
    }
}

/// Receives from `feed` for ever: each event is kept and wakes the job that
/// drives its instance.
async fn listen(feed: Arc<dyn CloudEvents>, heard: Arc<Heard>) {
    let claims = heard.clone();
    follow_feed(
        feed,
        move |e: &CloudEvent| claims.drives(e),
        |e| {
            let (instance, source) = (e.instance.clone(), e.source.clone());
            let job = heard.record(e);
            tracing::info!(%instance, event = %source, job = ?job, "instance event");
            true
        },
    )
    .await;
}

/// Receives from `feed` the events `mine` claims (the others are left on
/// it for its other readers) and hands each to `each` until it returns
/// false. A failed receive is logged and tried again after a back-off (1 s
/// doubling to 60 s); the callers' polls go on meanwhile. The job and the
/// service controllers both follow their feeds through this.
pub(crate) async fn follow_feed(
    feed: Arc<dyn CloudEvents>,
    mine: impl Fn(&CloudEvent) -> bool + Send + Sync,
    mut each: impl FnMut(CloudEvent) -> bool + Send,
) {
    let mut backoff = Duration::from_secs(1);
    tracing::info!(feed = %feed.describe(), "listening for instance events");
    loop {
        match feed.receive(&mine).await {
            Ok(events) => {
                backoff = Duration::from_secs(1);
                for e in events {
                    if !each(e) {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(feed = %feed.describe(), error = %e, retry_in = ?backoff, "cannot read instance events; the polls go on");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_core::CloudEventKind;

    fn event(id: &str, kind: CloudEventKind, at: OffsetDateTime) -> CloudEvent {
        CloudEvent {
            instance: InstanceId::new(id),
            kind,
            at,
            source: "test".into(),
            account: None,
        }
    }

    #[tokio::test]
    async fn an_ending_event_wakes_its_job_and_is_kept_for_it() {
        let heard = Heard::default();
        let waker = heard.waker("job-1");
        heard.watch("job-1", vec![InstanceId::new("r/i-1")], Capacity::Spot);
        let t0 = gpufleet_core::fake::FAKE_EPOCH;
        heard.record(event("r/i-1", CloudEventKind::Rebalance, t0));
        // A rebalance recommendation wakes nobody.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), waker.notified())
                .await
                .is_err()
        );
        let job = heard.record(event(
            "r/i-1",
            CloudEventKind::Interruption { deadline: None },
            t0,
        ));
        assert_eq!(job.as_deref(), Some("job-1"));
        tokio::time::timeout(Duration::from_secs(1), waker.notified())
            .await
            .expect("woken");
        // A later rebalance does not hide the warning.
        heard.record(event("r/i-1", CloudEventKind::Rebalance, t0));
        let i = |id: &str| [InstanceId::new(id)];
        assert!(heard.ending(&i("r/i-1"), t0).is_some());
        // Not for another instance, nor one from before the placement.
        assert!(heard.ending(&i("r/i-2"), t0).is_none());
        assert!(heard
            .ending(&i("r/i-1"), t0 + time::Duration::SECOND)
            .is_none());
    }

    /// A spot interruption warning naming an on-demand instance (EC2 sends
    /// none for those; a forged or misrouted message) wakes nobody and is
    /// not kept; a state change of the same instance is obeyed; an event
    /// about an instance no job here drives is not this controller's.
    #[tokio::test]
    async fn a_spot_warning_for_an_on_demand_instance_is_not_obeyed() {
        let heard = Heard::default();
        let waker = heard.waker("job-1");
        heard.watch("job-1", vec![InstanceId::new("r/i-1")], Capacity::OnDemand);
        let t0 = gpufleet_core::fake::FAKE_EPOCH;
        let warning = event("r/i-1", CloudEventKind::Interruption { deadline: None }, t0);
        assert!(heard.drives(&warning));
        assert_eq!(heard.record(warning), None);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), waker.notified())
                .await
                .is_err()
        );
        assert!(heard.ending(&[InstanceId::new("r/i-1")], t0).is_none());
        let gone = event(
            "r/i-1",
            CloudEventKind::StateChange {
                state: gpufleet_core::InstanceState::ShuttingDown,
            },
            t0,
        );
        assert_eq!(heard.record(gone).as_deref(), Some("job-1"));
        assert!(!heard.drives(&event("r/i-9", CloudEventKind::Rebalance, t0)));
    }
}
