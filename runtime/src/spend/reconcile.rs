//! `gpufleet reconcile`: the ends the clouds caused, the managed instances
//! the ledger does not know, the launch-only jobs left with nothing alive.

use super::*;

/// A managed instance of this ledger's owner that the ledger does not know
/// (launched by a process whose record was lost, or before the ledger of
/// spend existed).
#[derive(Debug, Clone, Serialize)]
pub struct UnknownInstance {
    /// Cloud.
    pub cloud: Cloud,
    /// Its id.
    pub id: String,
    /// Its pool.
    pub pool: String,
    /// Its job tag.
    pub job: Option<String>,
    /// Hours since its launch.
    pub age_hours: f64,
    /// Its pool's price now, USD per hour (what it is recorded at when
    /// adopted), if known.
    pub price_per_hour_usd: Option<f64>,
}

/// A launch-only job left placing or launching with nothing alive.
#[derive(Debug, Clone, Serialize)]
pub struct StuckJob {
    /// The job.
    pub job: String,
    /// Its state.
    pub state: JobState,
    /// Since when (RFC 3339).
    pub since: String,
}

/// What `gpufleet reconcile` found, and did with `--yes`.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// Whether it was carried out (`--yes`) or only reported.
    pub applied: bool,
    /// Instances the ledger held as alive that the cloud has ended.
    pub ended: Vec<EndedInstance>,
    /// Launch-only jobs closed because their last instance ended.
    pub jobs_closed: Vec<String>,
    /// Managed instances of this owner unknown to the ledger (adopted when
    /// applied).
    pub unknown: Vec<UnknownInstance>,
    /// Launch-only jobs left placing or launching with no instance and no
    /// live lease (failed when applied).
    pub stuck: Vec<StuckJob>,
    /// Instances left running with nothing to drive them: those of a job
    /// that was cancelled (a launch that answered after the cancel, its
    /// controller gone), because a cancel is final; and this owner's of
    /// managed jobs past their expiry whose job no controller holds (a
    /// controller extends the expiry of what it drives; a `launch`'s time to
    /// live is `reap`'s). Terminated when applied.
    pub leftovers: Vec<Leftover>,
}

/// An instance a reconciliation terminates (see
/// [`Reconciliation::leftovers`]).
#[derive(Debug, Clone, Serialize)]
pub struct Leftover {
    /// `cloud:id`.
    pub instance: String,
    /// Its job (empty when untagged).
    pub job: String,
    /// Why it is terminated.
    pub why: String,
}

impl Reconciliation {
    /// Whether the ledger and the clouds already agreed.
    pub fn is_clean(&self) -> bool {
        self.ended.is_empty()
            && self.unknown.is_empty()
            && self.stuck.is_empty()
            && self.leftovers.is_empty()
    }
}

/// What the clouds showed a reconciliation: the providers of the clouds
/// read, those clouds, every managed instance they listed, and when.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The providers (to ask after an instance the listing did not show).
    pub providers: &'a [Arc<dyn Provider>],
    /// The clouds read: ledger records of other clouds are left as they are.
    pub read: Vec<Cloud>,
    /// Every managed instance listed there.
    pub listed: &'a [Instance],
    /// Now.
    pub now: OffsetDateTime,
}

/// What a reconciliation carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apply {
    /// Record the ends the clouds caused (and close launch-only jobs).
    pub ends: bool,
    /// Record the unknown managed instances of the owner as started.
    pub adopt: bool,
    /// Fail the launch-only jobs left placing or launching.
    pub fail_stuck: bool,
}

impl Apply {
    /// Only report.
    pub const NOTHING: Apply = Apply {
        ends: false,
        adopt: false,
        fail_stuck: false,
    };
    /// Everything (`reconcile --yes`).
    pub const ALL: Apply = Apply {
        ends: true,
        adopt: true,
        fail_stuck: true,
    };
    /// What `jobs serve` does on its own: the ends and the stuck launches,
    /// no adoption (unknown instances are reported for a person to adopt).
    pub const SERVE: Apply = Apply {
        ends: true,
        adopt: false,
        fail_stuck: true,
    };
}

/// A launch-only job older than this in placing or launching is left over
/// (a `launch` that died), not in flight.
pub const STUCK_AFTER: time::Duration = time::Duration::minutes(30);

/// Reconciles the ledger with what the clouds `fleet` read show (`listed`:
/// every managed instance there): ends the instances they ended, finds the
/// managed instances of `owner` the ledger does not know (priced by
/// `price_of`) and the launch-only jobs left placing or launching; with
/// `apply`, records the ends, adopts the unknown instances and fails the
/// stuck jobs. Instances without gpufleet's managed tag are never touched;
/// with `owner`, neither are another owner's instances, nor a stuck job
/// whose instances the ledger records as another owner's (`None`: every
/// owner's, `reconcile --any-owner` and a shared `jobs serve`).
pub async fn reconcile(
    ledger: &dyn Ledger,
    seen: &Observed<'_>,
    owner: Option<&str>,
    price_of: &HashMap<gpufleet_core::Pool, Option<Price>>,
    apply: Apply,
) -> Result<Reconciliation> {
    let ours_tag =
        |i: &Instance| owner.is_none_or(|o| i.tags.get(tags::OWNER).map(String::as_str) == Some(o));
    let now = seen.now;
    let settled = settle_or_report(
        ledger,
        seen.providers,
        &seen.read,
        seen.listed,
        &TagFilter::managed(),
        now,
        apply.ends,
    )
    .await?;
    // One read of the ledger's instances (after the ends above): which it
    // knows, and the jobs with one alive.
    let spend = ledger.spend(None).await?;
    let known: HashSet<(Cloud, &str)> = spend
        .iter()
        .map(|s| (s.pool.cloud, s.id.as_str()))
        .collect();
    let mut alive: HashSet<String> = spend
        .iter()
        .filter(|s| s.is_alive())
        .map(|s| s.job_id.clone())
        .collect();
    let mut unknown = Vec::new();
    for i in seen.listed {
        let ours = i.tags.get(tags::MANAGED).map(String::as_str) == Some("true") && ours_tag(i);
        if !ours || !i.state.is_live() || known.contains(&(i.pool.cloud, i.id.as_str())) {
            continue;
        }
        let price = price_of.get(&i.pool).copied().flatten();
        if apply.adopt {
            let job = i.tags.get(tags::JOB).cloned().unwrap_or_default();
            let s = InstanceSpend::started(i, &job, price.unwrap_or(Price::ZERO));
            ledger.record_instance_start(&s).await?;
            alive.insert(job);
        }
        unknown.push(UnknownInstance {
            cloud: i.pool.cloud,
            id: i.id.to_string(),
            pool: i.pool.to_string(),
            job: i.tags.get(tags::JOB).cloned(),
            age_hours: round((now - i.launched_at).as_seconds_f64().max(0.0) / 3600.0, 2),
            price_per_hour_usd: price.map(Price::usd_per_hour_f64),
        });
    }
    // Launch-only jobs a dead `launch` left placing or launching.
    let leases = ledger.leases().await?;
    let mut latest: BTreeMap<String, JobRecord> = BTreeMap::new();
    for r in ledger.jobs().await? {
        latest.insert(r.job_id.clone(), r);
    }
    let mut stuck = Vec::new();
    for (job, r) in &latest {
        // Another owner's launch (its instances, when any was recorded, are
        // all theirs) is theirs to reconcile.
        let theirs = owner.is_some_and(|o| {
            let mut owners = spend
                .iter()
                .filter(|s| &s.job_id == job)
                .map(|s| s.owner.as_deref());
            let mut any = false;
            let none_mine = owners.all(|w| {
                any = true;
                w != Some(o)
            });
            any && none_mine
        });
        if theirs
            || !matches!(r.state, JobState::Placing | JobState::Launching)
            || now - r.at < STUCK_AFTER
            || alive.contains(job)
            || leases.iter().any(|l| &l.job_id == job && l.is_live(now))
            || ledger.job_spec(job).await?.is_some()
        {
            continue;
        }
        if apply.fail_stuck {
            let mut failed = r.clone();
            failed.state = JobState::Failed;
            failed.at = now;
            failed.instances.clear();
            failed.fence = None;
            failed.detail = format!(
                "left {} since {} with no instance and no controller (the launch did not finish); failed by reconcile",
                r.state,
                gpufleet_core::report::rfc3339(r.at)
            );
            match ledger.record_job(&failed).await {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
            }
        }
        stuck.push(StuckJob {
            job: job.clone(),
            state: r.state,
            since: gpufleet_core::report::rfc3339(r.at),
        });
    }
    // Instances of cancelled jobs still running (a cancel is final), and
    // instances of this owner past their expiry whose job no controller
    // drives here (their controller died: it extends the expiry while it
    // drives them).
    let mut leftovers = Vec::new();
    // Managed jobs (a saved job file: a controller's) by id; a launch-only
    // job's expiry is its own time to live, `reap`'s to honour.
    let mut managed: HashMap<String, bool> = HashMap::new();
    for i in seen.listed.iter().filter(|i| i.state.is_live()) {
        let job = i.tags.get(tags::JOB).cloned().unwrap_or_default();
        // Only this owner's: another owner's launch under the same job name
        // is not this ledger's job.
        let ours = ours_tag(i);
        let cancelled = ours
            && latest
                .get(&job)
                .is_some_and(|r| r.state == JobState::Cancelled);
        let driven = leases.iter().any(|l| l.job_id == job && l.is_live(now));
        let expired = ours && !driven && i.expires_at.is_some_and(|at| at <= now);
        let controllers = match managed.get(&job) {
            Some(m) => *m,
            None if expired => {
                let m = ledger.job_spec(&job).await?.is_some();
                managed.insert(job.clone(), m);
                m
            }
            None => false,
        };
        let why = match i.expires_at {
            _ if cancelled => format!("job {job} was cancelled: a cancel is final"),
            Some(at) if expired && controllers => format!(
                "expired at {} and no controller drives job {job}",
                gpufleet_core::report::rfc3339(at)
            ),
            _ => continue,
        };
        if apply.ends {
            let Ok(p) = provider_for(seen.providers, i.pool.cloud) else {
                continue;
            };
            let by = if cancelled {
                EndedBy::Controller
            } else {
                EndedBy::Ttl
            };
            match p.terminate(&i.id).await {
                Ok(()) => {
                    record_end(
                        ledger,
                        i.pool.cloud,
                        &i.id,
                        now,
                        by,
                        format!("{why}; terminated by reconcile"),
                    )
                    .await;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(instance = %i.id, error = %e, "could not terminate a leftover instance");
                    continue;
                }
            }
        }
        leftovers.push(Leftover {
            instance: format!("{}:{}", i.pool.cloud, i.id),
            job,
            why,
        });
    }
    Ok(Reconciliation {
        leftovers,
        applied: apply.ends,
        ended: settled.ended,
        jobs_closed: settled.jobs_closed,
        unknown,
        stuck,
    })
}
