//! Reading a placement's instances: gone or stopped (interrupted), a
//! notice tag, a stale heartbeat, saved progress, an exit code; and how
//! progress is estimated when the node does not report it.

use super::*;
use gpufleet_core::ledger::EndedBy;

/// What one poll saw of a running placement.
pub(super) enum Seen {
    /// Working; `saved` reference hours of this placement would survive a
    /// restart; `live` have been done.
    Working {
        saved: f64,
        live: f64,
        reported: bool,
        /// The listing of the placement's region this poll read (for the
        /// orphan sweep).
        listed: super::board::Listed,
    },
    /// Interrupted, as the controller or the node saw it.
    Interrupted {
        why: String,
        saved: f64,
        from_node: bool,
        /// Whether it counts against the pool (see [`counts_against_pool`]).
        against_pool: bool,
    },
    /// The job's command exited.
    Exited { code: String, live: f64 },
    /// A node started with a workload never sent its first heartbeat within
    /// the boot grace: the job did not start there (treated as the job's own
    /// failure, not the pool's).
    NeverStarted { why: String },
    /// The instances could not be read this time.
    Unknown(String),
}

/// Why an instance ended, in words: who ended it and the cloud's code.
pub(super) fn describe_end(cloud: Cloud, r: &gpufleet_core::EndReason) -> String {
    match r.cause {
        EndCause::Reclaimed => format!("{cloud} reclaimed it: {}", r.code),
        EndCause::Requested => format!("{} {}", crate::jobs::REQUESTED_END, r.code),
        EndCause::Other => format!("{cloud} ended it: {}", r.code),
    }
}

/// Whether an instance that ended with `cause` is evidence against its pool:
/// a reclaim or a cloud-side failure is; an instance someone stopped or
/// terminated by hand is not. With no cause given, a spot instance that
/// vanished is counted (reclaims are what ends spot instances unasked), an
/// on-demand one is not.
pub fn counts_against_pool(capacity: Capacity, cause: Option<EndCause>) -> bool {
    match cause {
        Some(EndCause::Reclaimed | EndCause::Other) => true,
        Some(EndCause::Requested) => false,
        None => capacity == Capacity::Spot,
    }
}

/// Estimated reference hours of `r`'s placement at `now`: (saved at the last
/// checkpoint, done so far).
pub fn estimate_progress(r: &RunningJob, now: OffsetDateTime) -> (f64, f64) {
    let hours = |d: Duration| d.as_secs_f64() / 3600.0;
    let elapsed =
        ((now - r.started_at).as_seconds_f64() / 3600.0 - hours(r.spec.restart_overhead)).max(0.0);
    if r.plan.work_hours <= 0.0 {
        return (0.0, 0.0);
    }
    let rate = r.spec.hours / r.plan.work_hours;
    let interval = match r.spec.checkpoint_interval {
        CheckpointInterval::Every(d) => hours(d),
        CheckpointInterval::Auto => r.plan.checkpoint_interval_hours,
    };
    let cost = hours(r.spec.checkpoint_cost);
    let (saved, live) = if interval > 0.0 && interval.is_finite() {
        let cycle = interval + cost;
        let full = (elapsed / cycle).floor();
        let partial = elapsed - full * cycle;
        (full * interval, full * interval + partial.min(interval))
    } else {
        (0.0, elapsed)
    };
    let cap = r.spec.hours;
    ((saved * rate).min(cap), (live * rate).min(cap))
}

/// What a node needs to write its own tags on `cloud`: the cloud's CLI on
/// the image and an identity allowed to tag the instance (the job file's
/// `identity`).
fn needs_to_report(cloud: Cloud) -> &'static str {
    match cloud {
        Cloud::Aws => "the image needs the aws CLI or curl 7.75 or newer, and the job file's identity an instance profile allowed ec2:CreateTags on the instance",
        Cloud::Gcp => "the image needs gcloud or curl, and the job file's identity a service account allowed compute.instances.setLabels (with the compute or cloud-platform scope)",
        Cloud::Azure => "the image needs curl, and the job file's identity a managed identity allowed Microsoft.Resources/tags/write on the VM (Tag Contributor)",
        _ => "the node needs a way to write its own tags",
    }
}

impl Controller {
    pub(super) async fn observe(
        &self,
        d: &Driven,
        r: &RunningJob,
        now: OffsetDateTime,
        summaries: &mut Vec<(InstanceId, GpuSummary)>,
    ) -> Seen {
        let pool = &r.plan.offer.pool;
        let Some(provider) = self.exec.provider(pool.cloud) else {
            return Seen::Unknown(format!("no provider for {}", pool.cloud));
        };
        // The cloud's event feed said an instance is being taken (or has
        // stopped) since the placement began: acted on now, without waiting
        // for a listing to show it.
        if let Some(e) = self.heard.ending(
            r.instances.iter().map(|i| &i.id),
            r.started_at - time::Duration::minutes(5),
        ) {
            let (saved, _) = estimate_progress(r, now);
            let saved = r
                .instances
                .iter()
                .filter_map(|i| self.reported(d, r, i))
                .reduce(f64::min)
                .unwrap_or(saved);
            return Seen::Interrupted {
                why: format!(
                    "{}: {} at {} (heard on the interruption queue)",
                    e.instance, e.source, e.at
                ),
                saved,
                from_node: false,
                against_pool: !matches!(e.kind, gpufleet_core::CloudEventKind::StateChange { .. })
                    || pool.capacity == Capacity::Spot,
            };
        }
        // The cloud's listing this poll, shared with every job this
        // controller drives; it extends their expiry too.
        let ttl = d
            .template
            .ttl
            .and_then(|t| time::Duration::try_from(t).ok());
        let ask = super::board::Ask {
            job: &d.job_id,
            region: &pool.region,
            instances: r
                .instances
                .iter()
                .map(|i| (i.id.clone(), ttl.map(|t| i.launched_at + t)))
                .collect(),
            proven: &d.template.expiry_clouds,
            newer_than: d.observed_at.map_or(r.started_at, |o| o.max(r.started_at)),
            now,
        };
        let listed = match self.board.read(provider.as_ref(), &self.config, ask).await {
            Ok(l) => l,
            Err((_, why)) => return Seen::Unknown(why),
        };
        let mut seen: Vec<Instance> = Vec::with_capacity(r.instances.len());
        // When every instance was last known alive: a listing shows what
        // was alive when it was taken (up to a poll ago, shared with the
        // other jobs), an instance read on its own what is alive now. Run
        // time counts up to then only: an instance reclaimed since is not
        // credited with work it may not have lived to do.
        let mut alive_at = now;
        for i in &r.instances {
            // Running as listed; else ended or stopping (the cloud says why
            // only when asked about the instance itself), or too new to be
            // listed: read on its own.
            let read = match listed.get(&i.id) {
                Some(found)
                    if matches!(found.state, InstanceState::Pending | InstanceState::Running) =>
                {
                    alive_at = alive_at.min(listed.taken_at().unwrap_or(now));
                    Ok(found.clone())
                }
                _ => provider.instance(&i.id).await,
            };
            match read {
                Ok(now_i) => seen.push(now_i),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    let (saved, _) = estimate_progress(r, now);
                    // The instance is gone; some clouds still say why (GCE's
                    // zone operations outlive a spot VM deleted on
                    // preemption).
                    let reason = match provider.end_reason(&i.id).await {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::debug!(instance = %i.id, error = %e, "no end reason");
                            None
                        }
                    };
                    self.exec
                        .ended(
                            pool.cloud,
                            &i.id,
                            EndedBy::Cloud,
                            crate::spend::gone_detail(reason.as_ref()),
                        )
                        .await;
                    let why = match &reason {
                        Some(r) => format!(
                            "instance {} no longer exists: {}",
                            i.id,
                            describe_end(pool.cloud, r)
                        ),
                        None => format!("instance {} no longer exists", i.id),
                    };
                    return Seen::Interrupted {
                        why,
                        saved,
                        from_node: false,
                        against_pool: counts_against_pool(
                            pool.capacity,
                            reason.as_ref().map(|r| r.cause),
                        ),
                    };
                }
                Err(e) => return Seen::Unknown(e.to_string()),
            }
        }
        summaries.extend(
            seen.iter()
                .filter_map(|i| GpuSummary::from_tags(&i.tags).map(|s| (i.id.clone(), s))),
        );
        // What the node reports.
        let mut reported: Option<f64> = None;
        let mut beat: Option<OffsetDateTime> = None;
        for i in &seen {
            if let Some(code) = i.tags.get(tags::EXIT) {
                let (_, live) = estimate_progress(r, now);
                let live = self.reported(d, r, i).unwrap_or(live);
                return Seen::Exited {
                    code: code.clone(),
                    live,
                };
            }
        }
        for i in &seen {
            if let Some(p) = self.reported(d, r, i) {
                reported = Some(reported.map_or(p, |q: f64| q.min(p)));
            }
            if let Some(b) = i
                .tags
                .get(tags::HEARTBEAT)
                .and_then(|v| tags::parse_time(v))
            {
                beat = Some(beat.map_or(b, |c: OffsetDateTime| c.min(b)));
            }
        }
        let (est_saved, est_live) = estimate_progress(r, alive_at);
        let saved = reported.unwrap_or(est_saved);
        let live = reported.unwrap_or(est_live);
        for i in &seen {
            let gone = match i.state {
                InstanceState::Terminated | InstanceState::ShuttingDown => Some("terminated"),
                InstanceState::Stopped | InstanceState::Stopping => Some("stopped"),
                InstanceState::Pending | InstanceState::Running => None,
            };
            if let Some(state) = gone {
                if !i.state.is_live() {
                    let end = crate::spend::seen_ended(i, now);
                    crate::spend::record_end(
                        self.exec.ledger().as_ref(),
                        pool.cloud,
                        &i.id,
                        end.at,
                        end.by,
                        end.detail,
                    )
                    .await;
                }
                let by = match &i.end_reason {
                    Some(r) => describe_end(pool.cloud, r),
                    None => format!(
                        "{} reclaimed it or it was ended out of band; the cloud gave no reason",
                        pool.cloud
                    ),
                };
                return Seen::Interrupted {
                    why: format!("instance {} is {state} ({by})", i.id),
                    saved,
                    from_node: false,
                    against_pool: counts_against_pool(
                        pool.capacity,
                        i.end_reason.as_ref().map(|r| r.cause),
                    ),
                };
            }
            if let Some(at) = i.tags.get(tags::NOTICE).and_then(|v| tags::parse_time(v)) {
                if at >= r.started_at {
                    return Seen::Interrupted {
                        why: format!("interruption notice on {} at {at}", i.id),
                        // The watch agent ran the checkpoint hook.
                        saved: live,
                        from_node: true,
                        against_pool: true,
                    };
                }
            }
        }
        if let Some(why) = self.never_started(d, r, &seen, now, provider.as_ref()) {
            return Seen::NeverStarted { why };
        }
        if let Some(b) = beat {
            let quiet = (now - b).whole_seconds().max(0) as u64;
            if quiet >= self.config.heartbeat_grace.as_secs() {
                return Seen::Interrupted {
                    why: format!(
                        "no heartbeat for {} (grace {}); the node is treated as failed",
                        gpufleet_core::placer::format_duration(Duration::from_secs(quiet)),
                        gpufleet_core::placer::format_duration(self.config.heartbeat_grace)
                    ),
                    saved,
                    from_node: false,
                    // A silent node says nothing about its pool.
                    against_pool: false,
                };
            }
        }
        Seen::Working {
            saved,
            live,
            reported: reported.is_some() || beat.is_some(),
            listed,
        }
    }

    /// Why a node on `provider` is not heard from by design, so that run
    /// time says when its work is done: the provider runs no boot script, or
    /// the boot grace is off. `None` where the node reports (and a silent
    /// one fails the boot grace).
    pub(super) fn unheard(&self, provider: &dyn gpufleet_core::Provider) -> Option<String> {
        if !provider.capabilities().runs_boot_script {
            Some(format!(
                "provider {} runs no boot script, so its node cannot report",
                provider.name()
            ))
        } else if self.config.boot_grace.is_zero() {
            Some("the node never reported; the boot grace is off".to_string())
        } else {
            None
        }
    }

    /// Why the placement's job never started: a node launched with a
    /// workload, where nodes are heard from ([`Controller::unheard`]),
    /// running without a first heartbeat when the boot grace since the
    /// placement's launch is over. `None` while every node has beaten or
    /// the grace lasts, and for a job with nothing to run.
    fn never_started(
        &self,
        d: &Driven,
        r: &RunningJob,
        seen: &[Instance],
        now: OffsetDateTime,
        provider: &dyn gpufleet_core::Provider,
    ) -> Option<String> {
        let grace = self.config.boot_grace;
        if d.spec.workload.is_empty() || self.unheard(provider).is_some() {
            return None;
        }
        // Counted on the controller's own clock from when it launched the
        // placement, not from the cloud's launch time: a clock apart from
        // the cloud's cannot cut the grace short.
        let quiet = Duration::from_secs((now - r.started_at).whole_seconds().max(0) as u64);
        if quiet < grace {
            return None;
        }
        let silent = seen
            .iter()
            .find(|i| i.state == InstanceState::Running && !i.tags.contains_key(tags::HEARTBEAT))?;
        let cloud = r.plan.offer.pool.cloud;
        Some(format!(
            "never started: instance {} has run {} without a first heartbeat (boot grace {}): its boot script did not run, or cannot tag the instance ({}); `gpufleet jobs logs {}` shows its console",
            silent.id,
            gpufleet_core::placer::format_duration(quiet),
            gpufleet_core::placer::format_duration(grace),
            needs_to_report(cloud),
            d.job_id,
        ))
    }

    /// The reference hours of this placement the node says are saved.
    pub(super) fn reported(&self, d: &Driven, r: &RunningJob, i: &Instance) -> Option<f64> {
        let permille: f64 = i
            .tags
            .get(tags::PROGRESS)?
            .trim()
            .parse::<u32>()
            .ok()?
            .min(1000)
            .into();
        let total_done = permille / 1000.0 * d.total;
        Some((total_done - r.done_before).clamp(0.0, r.spec.hours))
    }
}
