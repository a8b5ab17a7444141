//! `ls`, `terminate` and `reap`: the managed instances of the clouds a
//! caller opened, priced, with the ends the clouds caused recorded on the
//! way; terminating the caller's own (another owner's only when asked), and
//! their placement groups once empty.
//!
//! Each takes the fleet the caller opened (`Site::open`), so the caller
//! says what opening skipped before the listing, and can ask its user
//! between choosing and terminating ([`pick`], then [`Picked::terminate`]).

use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::ledger::{EndedBy, Ledger};
use gpufleet_core::{tags, Error, ErrorKind, Instance, TagFilter};

use super::Site;
use crate::fleet::Fleet;
use crate::report::{InstanceRow, TerminateDoc};

/// The rows of `instances`, each priced by the fleet's prices.
pub async fn rows(fleet: &mut Fleet, instances: &[Instance]) -> Vec<InstanceRow> {
    let mut rows = Vec::new();
    for i in instances {
        let price = fleet.price(&i.pool).await;
        rows.push(InstanceRow::new(i, price, fleet.now));
    }
    rows
}

/// Records in `ledger` (the site's, when there is one: `existing`, as
/// [`Site::existing_ledger`] opened it) the ends the clouds caused among
/// `listed` (under `filter`; see [`crate::spend::settle`]): a warning when
/// it cannot, nothing when there is no ledger yet.
async fn settle(
    existing: &Result<Option<Arc<dyn Ledger>>, Error>,
    fleet: &Fleet,
    listed: &[Instance],
    filter: &TagFilter,
) -> Vec<String> {
    let settled = match existing {
        Ok(None) => Ok(()),
        Ok(Some(ledger)) => crate::spend::settle(
            ledger.as_ref(),
            &fleet.providers,
            &fleet.read_clouds(),
            listed,
            filter,
            fleet.now,
        )
        .await
        .map(|_| ()),
        Err(e) => Err(e.clone()),
    };
    match settled {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!(
            "could not record in the ledger what the clouds ended ({e})"
        )],
    }
}

/// What `ls` found.
#[derive(Debug)]
pub struct Listing {
    /// The managed instances, priced, sorted by id.
    pub rows: Vec<InstanceRow>,
    /// What could not be done beside it (the ledger not written), one line
    /// each.
    pub warnings: Vec<String>,
}

/// `ls`: the managed instances of every cloud `fleet` reads (of `job`
/// only, when given), priced; the ends the clouds caused are recorded in
/// the ledger on the way. A cloud that does not answer is left out
/// ([`Fleet::unread`]).
pub async fn ls(site: &Site, fleet: &mut Fleet, job: Option<&str>) -> Listing {
    let mut filter = TagFilter::default();
    if let Some(j) = job {
        filter = filter.with(tags::JOB, j);
    }
    let instances = fleet.managed(&filter).await;
    let warnings = settle(&site.existing_ledger().await, fleet, &instances, &filter).await;
    Listing {
        rows: rows(fleet, &instances).await,
        warnings,
    }
}

/// What to terminate: ids, a job's instances, instances by tag.
#[derive(Debug, Clone, Default)]
pub struct TerminateRequest {
    /// Instance ids, as `ls` prints them (`us-east-1/i-0abc…`) or as the
    /// cloud shows them (`i-0abc…`).
    pub ids: Vec<String>,
    /// Every managed instance of this job.
    pub job: Option<String>,
    /// Every managed instance with these tags (`KEY=VALUE`; `team`,
    /// `project`, `owner` and `job` name gpufleet's own tags).
    pub tags: Vec<String>,
    /// Other owners' instances too.
    pub any_owner: bool,
}

impl TerminateRequest {
    /// The tag filter it names (the caller's owner added unless
    /// `any_owner` or an owner tag says whose); refused when it names
    /// nothing or a tag is not `KEY=VALUE`.
    fn filter(&self, owner: &str) -> Result<TagFilter, Error> {
        if self.ids.is_empty() && self.job.is_none() && self.tags.is_empty() {
            return Err(Error::invalid_input(
                "say what to terminate: instance ids, --job NAME or --tag KEY=VALUE",
            ));
        }
        let mut filter = TagFilter::default();
        for t in &self.tags {
            let Some((k, v)) = t.split_once('=').filter(|(k, _)| !k.is_empty()) else {
                return Err(Error::invalid_input(format!(
                    "invalid --tag '{t}': expected KEY=VALUE"
                )));
            };
            // `--tag team=research` means the team tag `launch --team` wrote.
            filter = filter.with(tags::named(k).unwrap_or(k), v);
        }
        if let Some(j) = &self.job {
            filter = filter.with(tags::JOB, j.clone());
        }
        if !self.any_owner && !filter.0.contains_key(tags::OWNER) {
            filter = filter.with(tags::OWNER, owner);
        }
        Ok(filter)
    }
}

/// The instances a terminate would end, chosen and priced: the caller
/// shows them, asks, then [`Picked::terminate`]s.
#[derive(Debug)]
pub struct Picked {
    /// The instances, sorted by id.
    pub victims: Vec<Instance>,
    /// Their rows, priced.
    pub rows: Vec<InstanceRow>,
    filter: TagFilter,
    by_id_only: bool,
}

/// Chooses what `req` names among the managed instances `fleet` reads. An
/// id that names no instance, and a request that matches none, are
/// [`ErrorKind::NotFound`]; an id of another owner's (or no one's)
/// instance is refused without `any_owner`, naming whose it is, before
/// anything is terminated.
pub async fn pick(site: &Site, fleet: &mut Fleet, req: &TerminateRequest) -> Result<Picked, Error> {
    let owner = site.config().owner.as_str();
    let filter = req.filter(owner)?;
    let mut victims: Vec<Instance> = Vec::new();
    // Every managed instance, listed once if a console id needs it.
    let mut listed = None;
    for id in &req.ids {
        let i = fleet.find_managed(id, &mut listed).await?;
        if i.state.is_live() {
            victims.push(i);
        }
    }
    let (_, theirs) =
        crate::reap::split_by_owner(victims.clone(), owner, req.any_owner, |i: &Instance| i);
    if !theirs.is_empty() {
        let named: Vec<String> = theirs
            .iter()
            .map(|i| {
                format!(
                    "{} ({})",
                    i.id,
                    i.tags
                        .get(tags::OWNER)
                        .map_or_else(|| "no owner tag".to_string(), |o| format!("{o}'s"))
                )
            })
            .collect();
        return Err(Error::invalid_input(format!(
            "not yours ({owner}): {}; nothing was terminated; --any-owner terminates other owners' instances",
            named.join(", ")
        )));
    }
    let by_id_only = req.job.is_none() && req.tags.is_empty();
    if !by_id_only {
        victims.extend(fleet.managed(&filter).await);
    }
    victims.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    victims.dedup_by(|a, b| a.id == b.id);
    if victims.is_empty() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "no managed instance matches{}",
                if req.any_owner {
                    ""
                } else {
                    " (of yours: --any-owner for everyone's)"
                }
            ),
        ));
    }
    let rows = rows(fleet, &victims).await;
    Ok(Picked {
        victims,
        rows,
        filter,
        by_id_only,
    })
}

/// What a terminate or a reap did.
#[derive(Debug)]
pub struct Ended {
    /// The document it prints.
    pub doc: TerminateDoc,
    /// The first instance not terminated, with why (the command fails).
    pub failed: Option<Error>,
}

impl Ended {
    fn of(
        out: crate::reap::TerminateOutcome,
        groups: crate::reap::GroupCleanup,
        candidates: Vec<InstanceRow>,
        unknown: Vec<InstanceRow>,
        left_alone: Vec<InstanceRow>,
    ) -> Ended {
        let doc = TerminateDoc::new(
            &out.terminated,
            &out.failed,
            &groups.outcome,
            &groups.unchecked,
            candidates,
            unknown,
        )
        .with_left_alone(left_alone);
        let failed = out.failed.into_iter().next().map(|(_, e)| {
            Error::new(e.kind(), format!("some instances were not terminated: {e}"))
                .with_retryable(false)
        });
        Ended { doc, failed }
    }
}

impl Picked {
    /// Terminates the instances chosen, each end recorded in the site's
    /// ledger, then deletes the placement groups they leave empty (with
    /// ids alone, only groups one of them was in); the fake cloud's state
    /// is saved.
    pub async fn terminate(self, site: &Site, fleet: &Fleet) -> Result<Ended, Error> {
        let ledger = site.ledger().await?;
        let who = format!("gpufleet terminate by {}", site.config().owner);
        let out = crate::reap::terminate_recorded(
            &fleet.providers,
            &self.victims,
            Some(ledger.as_ref()),
            &|_| (EndedBy::Terminate, who.clone()),
            fleet.now,
        )
        .await;
        let groups = crate::reap::drop_empty_groups(
            &fleet.providers,
            &self.filter,
            &self.victims,
            self.by_id_only,
            &|_| false,
        )
        .await;
        fleet.save()?;
        Ok(Ended::of(out, groups, self.rows, Vec::new(), Vec::new()))
    }
}

/// The shortest idle window `reap` takes: a node's agent writes its
/// heartbeat every 60 s and the clouds' tag reads lag by seconds to a
/// minute, so a shorter window would call a working node idle.
pub const MIN_IDLE: Duration = Duration::from_secs(5 * 60);

/// What `reap` looks for and does.
#[derive(Debug, Clone)]
pub struct ReapRequest {
    /// Also instances idle this long: with `below`, whose GPUs stayed under
    /// it; without, whose job sent no heartbeat. At least [`MIN_IDLE`].
    pub idle: Option<Duration>,
    /// With `idle`: idle means GPUs under this percent (1 to 100).
    pub below: Option<u8>,
    /// How old a GPU summary may be before the instance counts as unknown.
    pub grace: Duration,
    /// Terminate them (else a dry run).
    pub apply: bool,
    /// Other owners' instances too.
    pub any_owner: bool,
}

impl Default for ReapRequest {
    fn default() -> Self {
        ReapRequest {
            idle: None,
            below: None,
            grace: Duration::from_secs(15 * 60),
            apply: false,
            any_owner: false,
        }
    }
}

impl ReapRequest {
    /// Refuses an idle window under [`MIN_IDLE`], a threshold outside 1 to
    /// 100, and a threshold without a window.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(d) = self.idle.filter(|d| *d < MIN_IDLE) {
            return Err(Error::invalid_input(format!(
                "invalid idle time {}: expected at least 5m (a node reports every 60 s, so a shorter window calls working nodes idle), such as 2h",
                gpufleet_core::placer::format_duration(d)
            )));
        }
        match self.below {
            Some(v) if !(1..=100).contains(&v) => Err(Error::invalid_input(format!(
                "invalid utilisation {v}: expected a whole percent from 1 to 100, such as 5"
            ))),
            Some(_) if self.idle.is_none() => Err(Error::invalid_input(
                "a utilisation threshold needs an idle window (--idle) to hold it for",
            )),
            _ => Ok(()),
        }
    }
}

/// What `reap` found, and did with `apply`.
#[derive(Debug)]
pub struct Reaped {
    /// The document (a dry run's without `apply`): candidates, unknown
    /// and left-alone rows, what was terminated.
    pub doc: TerminateDoc,
    /// What the candidates had cost, USD (for display).
    pub so_far_usd: f64,
    /// What they cost a day, USD (for display).
    pub per_day_usd: f64,
    /// The first instance not terminated, with why.
    pub failed: Option<Error>,
    /// What could not be done beside it, one line each.
    pub warnings: Vec<String>,
}

/// `reap`: the instances past their expiry (unless a controller drives
/// their job), silent or idle by `req`, the caller's own unless
/// `any_owner` (the others are rows left alone, with why); with `apply`,
/// terminated (each end recorded) and the placement groups they leave
/// empty deleted, except those of jobs the ledger shows launching.
pub async fn reap(site: &Site, fleet: &mut Fleet, req: &ReapRequest) -> Result<Reaped, Error> {
    req.check()?;
    let cfg = site.config();
    let all = fleet.managed(&TagFilter::default()).await;
    // The ledger opened once: for the ends to settle, the jobs a
    // controller drives, and (with `apply`) the ends reaping records.
    let existing = site.existing_ledger().await;
    let mut warnings = settle(&existing, fleet, &all, &TagFilter::default()).await;
    if let Err(e) = &existing {
        tracing::warn!(error = %e, "cannot read the ledger; expiry alone decides");
    }
    let read = existing.as_ref().ok().and_then(|l| l.as_deref());
    let driven = crate::reap::driven_jobs(read, fleet.now).await;
    let picked = crate::reap::select(all, fleet.now, req.idle, req.below, req.grace, &driven);
    let split = |v| {
        crate::reap::split_by_owner(
            v,
            &cfg.owner,
            req.any_owner,
            |(i, _): &(Instance, String)| i,
        )
    };
    let (victims, others) = split(picked.victims);
    let (unknown, _) = split(picked.unknown);
    let (victims, reasons): (Vec<_>, Vec<_>) = victims.into_iter().unzip();
    let (unknown, unknown_why): (Vec<_>, Vec<_>) = unknown.into_iter().unzip();
    let (others, others_why): (Vec<_>, Vec<_>) = others.into_iter().unzip();
    let mut left_alone = rows(fleet, &others).await;
    for (r, why) in left_alone.iter_mut().zip(others_why) {
        let whose = r.owner.as_deref().map_or_else(
            || "no one's (no owner tag)".to_string(),
            |o| format!("{o}'s"),
        );
        r.reason = Some(format!(
            "{why}; left alone: {whose}, not {}'s (--any-owner to include it)",
            cfg.owner
        ));
    }
    let mut candidates = rows(fleet, &victims).await;
    for (r, why) in candidates.iter_mut().zip(reasons) {
        r.reason = Some(why);
    }
    let mut unknown_rows = rows(fleet, &unknown).await;
    for (r, why) in unknown_rows.iter_mut().zip(unknown_why) {
        r.reason = Some(why);
    }
    let sum = |v: &mut dyn Iterator<Item = f64>| v.fold(0.0, |a, b| a + b);
    let so_far_usd = sum(&mut candidates.iter().filter_map(|r| r.cost_so_far_usd));
    let per_day_usd = sum(&mut candidates.iter().filter_map(|r| r.cost_per_day_usd));
    if !req.apply {
        let doc = TerminateDoc::dry_run(candidates, unknown_rows).with_left_alone(left_alone);
        return Ok(Reaped {
            doc,
            so_far_usd,
            per_day_usd,
            failed: None,
            warnings,
        });
    }
    let ledger = match existing {
        Ok(Some(l)) => Ok(l),
        // None yet (created now, to record the ends), or it could not be
        // opened a moment ago (tried once more).
        _ => site.ledger().await,
    };
    let now = fleet.now;
    let why = |i: &Instance| {
        let reason = candidates
            .iter()
            .find(|r| r.id == i.id.as_str())
            .and_then(|r| r.reason.clone())
            .unwrap_or_default();
        let by = if i.expires_at.is_some_and(|t| t <= now) {
            EndedBy::Ttl
        } else {
            EndedBy::Reap
        };
        (by, format!("gpufleet reap: {reason}"))
    };
    let out = crate::reap::terminate_recorded(
        &fleet.providers,
        &victims,
        ledger.as_ref().ok().map(|l| l.as_ref()),
        &why,
        now,
    )
    .await;
    // Groups whose last instance went (now or earlier), except those of
    // jobs the ledger says are launching right now (all of them kept when
    // the ledger cannot say).
    let launching = match &ledger {
        Ok(l) => crate::reap::launching_jobs(l.as_ref(), now).await,
        Err(e) => {
            warnings.push(format!(
                "cannot read the ledger ({e}); placement groups are kept this time"
            ));
            None
        }
    };
    let busy = |job: &str| {
        launching
            .as_ref()
            .is_none_or(|l| l.iter().any(|j| j == job))
    };
    let group_filter = if req.any_owner {
        TagFilter::default()
    } else {
        TagFilter::default().with(tags::OWNER, cfg.owner.clone())
    };
    let groups =
        crate::reap::drop_empty_groups(&fleet.providers, &group_filter, &victims, false, &busy)
            .await;
    fleet.save()?;
    let ended = Ended::of(out, groups, candidates, unknown_rows, left_alone);
    Ok(Reaped {
        doc: ended.doc,
        so_far_usd,
        per_day_usd,
        failed: ended.failed,
        warnings,
    })
}
