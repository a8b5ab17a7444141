//! What one controller reads of its clouds, shared by every job it drives:
//! one listing of gpufleet's managed instances per cloud and poll (of the
//! regions its jobs run in: one call per region where the cloud lists per
//! region, one for the cloud where it lists them all at once), handed to
//! each job for its own instances; and the expiry of every instance it
//! drives extended with that listing, in as few writes as the cloud allows.
//! The cloud calls per poll grow with regions, not with jobs or instances.

use super::*;
use gpufleet_core::{Provider, Region, TagFilter, Tags};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The live managed instances of one listing of a region.
pub(super) type Listed = Arc<Listing>;

/// One listing of a region: its instances by id, and the ids of each job's
/// (its `job` tag), so that a job finds its own without a scan.
#[derive(Debug, Default)]
pub(super) struct Listing {
    by_id: HashMap<InstanceId, Instance>,
    by_job: HashMap<String, Vec<InstanceId>>,
    /// When it was taken (the controller's clock, before the call): what
    /// it shows alive was alive then, not necessarily since.
    taken_at: Option<OffsetDateTime>,
}

impl Listing {
    /// When it was taken.
    pub fn taken_at(&self) -> Option<OffsetDateTime> {
        self.taken_at
    }

    fn insert(&mut self, i: Instance) {
        if let Some(job) = i.tags.get(tags::JOB) {
            self.by_job
                .entry(job.clone())
                .or_default()
                .push(i.id.clone());
        }
        self.by_id.insert(i.id.clone(), i);
    }

    /// The instance `id`, if listed.
    pub fn get(&self, id: &InstanceId) -> Option<&Instance> {
        self.by_id.get(id)
    }

    /// The listed instances tagged with `job`.
    pub fn of_job<'a>(&'a self, job: &str) -> impl Iterator<Item = &'a Instance> + 'a {
        self.by_job
            .get(job)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }
}

/// The shared reads of one controller (and its clones).
#[derive(Debug, Default)]
pub(super) struct Board {
    clouds: std::sync::Mutex<HashMap<Cloud, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// What one listing call said of one region: when it was taken (on the
/// controller's clock, before the call), and what it found or why it
/// failed (said to every job of the poll: a failed listing is not retried
/// by each of them).
type RegionListing = (
    OffsetDateTime,
    std::result::Result<Listed, (ErrorKind, String)>,
);

/// One cloud's last listings, and what the jobs asked of it.
#[derive(Debug, Default)]
struct Slot {
    /// The last listing of each region.
    listed: HashMap<Region, RegionListing>,
    /// The regions the jobs asked for, when they last did.
    wanted: HashMap<Region, OffsetDateTime>,
    /// The instances the jobs drive: their expiry is extended with each
    /// listing.
    driven: HashMap<InstanceId, Keep>,
}

/// An instance a job drives, as it said at its last poll.
#[derive(Debug, Clone)]
struct Keep {
    job: String,
    /// Never extended past this (its time to live from launch).
    cap: Option<OffsetDateTime>,
    /// The clouds where launches may carry the expiry from the start
    /// ([`LaunchTemplate::expiry_clouds`]): marked on success, unmarked on a
    /// refusal for good.
    proven: Arc<std::sync::Mutex<HashSet<Cloud>>>,
    said_at: OffsetDateTime,
}

/// How a job asks the board for its instances.
pub(super) struct Ask<'a> {
    /// The job.
    pub job: &'a str,
    /// The region its placement runs in.
    pub region: &'a Region,
    /// Its instances, each with the cap of its expiry.
    pub instances: Vec<(InstanceId, Option<OffsetDateTime>)>,
    /// The template's proven expiry clouds.
    pub proven: &'a Arc<std::sync::Mutex<HashSet<Cloud>>>,
    /// A listing taken at or before this is not news to the job (its
    /// previous look, or its placement's launch).
    pub newer_than: OffsetDateTime,
    /// Now, on the controller's clock.
    pub now: OffsetDateTime,
}

impl Board {
    fn slot(&self, cloud: Cloud) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut clouds = match self.clouds.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        clouds.entry(cloud).or_default().clone()
    }

    /// The live managed instances of `provider`'s cloud in the job's
    /// region, from a listing of that region newer than `ask.newer_than`:
    /// the last one if it is; else a new one, of every region asked for
    /// lately that has none as new (in one call where the cloud lists every
    /// region at once, one per region where it lists per region), which the
    /// other jobs of the poll then find. A listing also extends the expiry
    /// of every instance the jobs drive there (`config`'s window). An
    /// instance the listing does not hold (ended, or too new to be listed)
    /// is for the caller to read on its own.
    pub(super) async fn read(
        &self,
        provider: &dyn Provider,
        config: &ControllerConfig,
        ask: Ask<'_>,
    ) -> std::result::Result<Listed, (ErrorKind, String)> {
        let cloud = provider.cloud();
        let slot = self.slot(cloud);
        let mut s = slot.lock().await;
        s.wanted.insert(ask.region.clone(), ask.now);
        for (id, cap) in &ask.instances {
            s.driven.insert(
                id.clone(),
                Keep {
                    job: ask.job.to_string(),
                    cap: *cap,
                    proven: ask.proven.clone(),
                    said_at: ask.now,
                },
            );
        }
        if let Some((at, got)) = s.listed.get(ask.region) {
            if *at > ask.newer_than {
                return got.clone();
            }
        }
        // A region, or an instance, nobody asked about for a few polls is
        // no longer driven here.
        let forget = config.forget_after();
        let now = ask.now;
        s.wanted.retain(|_, t| now - *t <= forget);
        s.driven.retain(|_, k| now - k.said_at <= forget);
        let Slot { listed, wanted, .. } = &mut *s;
        listed.retain(|r, _| wanted.contains_key(r));
        let stale: Vec<Region> = wanted
            .keys()
            .filter(|r| listed.get(*r).is_none_or(|(at, _)| *at <= ask.newer_than))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let got = provider
            .list_instances_in(&stale, &TagFilter::managed())
            .await;
        match got {
            Ok(found) => {
                let mut by_region: HashMap<Region, Listing> = stale
                    .iter()
                    .map(|r| {
                        (
                            r.clone(),
                            Listing {
                                taken_at: Some(now),
                                ..Listing::default()
                            },
                        )
                    })
                    .collect();
                for i in found {
                    if let Some(m) = by_region.get_mut(&i.pool.region) {
                        m.insert(i);
                    }
                }
                let fresh: Vec<Listed> = by_region
                    .into_iter()
                    .map(|(r, m)| {
                        let m = Arc::new(m);
                        s.listed.insert(r, (now, Ok(m.clone())));
                        m
                    })
                    .collect();
                extend_expiry(provider, config, &s.driven, &fresh, now).await;
            }
            Err(e) => {
                let failed = (e.kind(), e.to_string());
                for r in stale {
                    s.listed.insert(r, (now, Err(failed.clone())));
                }
            }
        }
        match s.listed.get(ask.region) {
            Some((_, got)) => got.clone(),
            None => Err((
                ErrorKind::Unexpected,
                format!("{cloud}: region {} was not listed", ask.region),
            )),
        }
    }
}

/// Extends the expiry of the driven instances `listed` holds to the
/// window from `now` (never past their cap), when it is due: more than half
/// a poll short of it, or more than a poll beyond (the launch's allowance,
/// once launched). One write per expiry (and per region, where the cloud
/// tags many instances at once); a write refused because an instance ended
/// meanwhile is split until the live ones are written. A success marks the
/// cloud as one where launches may carry the expiry from the start; a
/// refusal for good unmarks it and is logged: the instances then expire,
/// and `reap` leaves an expired instance alone while the ledger shows a
/// live lease on its job.
async fn extend_expiry(
    provider: &dyn Provider,
    config: &ControllerConfig,
    driven: &HashMap<InstanceId, Keep>,
    listed: &[Listed],
    now: OffsetDateTime,
) {
    let poll = time::Duration::try_from(config.poll).unwrap_or(time::Duration::MINUTE);
    let Ok(window) = time::Duration::try_from(config.expiry_window()) else {
        return;
    };
    let mut due: BTreeMap<OffsetDateTime, Vec<(InstanceId, &Keep)>> = BTreeMap::new();
    for (id, keep) in driven {
        let Some(i) = listed
            .iter()
            .find_map(|l| l.get(id))
            .filter(|i| i.state.is_live())
        else {
            continue;
        };
        let want = keep.cap.map_or(now + window, |c| c.min(now + window));
        let stale = match i.expires_at {
            None => true,
            Some(at) => at < want - poll / 2 || at > want + poll,
        };
        if stale {
            due.entry(want).or_default().push((id.clone(), keep));
        }
    }
    let cloud = provider.cloud();
    for (until, batch) in due {
        let mut t = Tags::new();
        t.insert(tags::EXPIRES_AT.into(), tags::format_time(until));
        let mut todo: Vec<Vec<(InstanceId, &Keep)>> = vec![batch];
        while let Some(part) = todo.pop() {
            let ids: Vec<InstanceId> = part.iter().map(|(id, _)| id.clone()).collect();
            let tagged = provider.tag_instances(&ids, &t).await;
            match tagged {
                Ok(()) => mark(&part, |p| {
                    p.insert(cloud);
                }),
                // One instance ended since the listing, and none is tagged
                // (EC2's CreateTags): the halves are tried apart.
                Err(e) if e.kind() == ErrorKind::NotFound && part.len() > 1 => {
                    let mut part = part;
                    let back = part.split_off(part.len() / 2);
                    todo.push(part);
                    todo.push(back);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    // Refused for good (permissions, a provider without it):
                    // later launches there carry no expiry to lapse.
                    if matches!(
                        e.kind(),
                        ErrorKind::PermissionDenied
                            | ErrorKind::Unauthenticated
                            | ErrorKind::Unsupported
                    ) {
                        mark(&part, |p| {
                            p.remove(&cloud);
                        });
                    }
                    let jobs: BTreeSet<&str> = part.iter().map(|(_, k)| k.job.as_str()).collect();
                    tracing::warn!(%cloud, instances = part.len(), jobs = ?jobs, error = %e, "could not extend the expiry of the instances driven");
                }
            }
        }
    }
}

/// Applies `f` to each distinct proven-clouds set of `part` once.
fn mark(part: &[(InstanceId, &Keep)], f: impl Fn(&mut HashSet<Cloud>)) {
    let mut done: Vec<&Arc<std::sync::Mutex<HashSet<Cloud>>>> = Vec::new();
    for (_, k) in part {
        if done.iter().any(|d| Arc::ptr_eq(d, &k.proven)) {
            continue;
        }
        done.push(&k.proven);
        if let Ok(mut p) = k.proven.lock() {
            f(&mut p);
        }
    }
}
