//! Deciding where to run: the offers for a job from every provider, the
//! ranking `place` prints, and the one policy's decision at a start.

use super::*;
use gpufleet_core::catalog::plausible::plausible;
use gpufleet_core::Snapshot;

/// Drops the plans `drop` names, with their candidates (the two lists stay
/// index for index).
pub(super) fn drop_plans(
    plans: &mut Vec<Plan>,
    cands: &mut Vec<policy::Candidate>,
    drop: impl Fn(usize, &Plan) -> bool,
) {
    for i in (0..plans.len()).rev() {
        if drop(i, &plans[i]) {
            plans.remove(i);
            cands.remove(i);
        }
    }
}

impl Executor {
    /// Offers for the job from every allowed provider, with the providers'
    /// stability signals merged in. A price under the plausible floor
    /// ([`plausible`]) is dropped with a warning, as `offers --live` drops it.
    /// A provider that fails is skipped (and logged); if all fail, the last
    /// error is returned.
    pub async fn offers(&self, job: &JobSpec) -> Result<Vec<Offer>> {
        Ok(self.offers_and_dropped(job).await?.0)
    }

    /// [`Executor::offers`], with a line for each live price dropped as
    /// implausible.
    async fn offers_and_dropped(&self, job: &JobSpec) -> Result<(Vec<Offer>, Vec<String>)> {
        let mut q = OfferQuery::new();
        q.gpus = job
            .gpus
            .iter()
            .map(|g| GpuRequirement {
                model: g.model.clone(),
                count: Some(g.count),
            })
            .collect();
        q.regions = job.regions.clone();
        q.zones = job.zones.clone();
        let (mut all, mut last_err, mut asked) = (Vec::new(), None, 0);
        let mut all_dropped = Vec::new();
        for p in &self.providers {
            if !job.clouds.is_empty() && !job.clouds.contains(&p.cloud()) {
                continue;
            }
            asked += 1;
            match p.offers(&q).await {
                Ok(offers) => {
                    // The floor `offers --live` applies: a price far under
                    // anything published is a bad feed, not a bargain, and
                    // must not be where the job starts.
                    let (mut offers, dropped) = plausible(offers, Snapshot::embedded());
                    if let Some(first) = dropped.first() {
                        tracing::warn!(
                            provider = p.name(),
                            dropped = dropped.len(),
                            first = %first,
                            "implausible live prices dropped; those pools are not placed on"
                        );
                    }
                    all_dropped.extend(dropped);
                    let spot: Vec<Pool> = offers
                        .iter()
                        .filter(|o| o.pool.capacity == Capacity::Spot)
                        .map(|o| o.pool.clone())
                        .collect();
                    if !spot.is_empty() && p.capabilities().stability {
                        if let Ok(stab) = p.stability(&spot).await {
                            let by_pool: HashMap<Pool, _> = spot.into_iter().zip(stab).collect();
                            for o in offers.iter_mut() {
                                if let Some(s) = by_pool.get(&o.pool) {
                                    if s.bucket.is_some()
                                        || s.placement_score.is_some()
                                        || s.interruption_rate_per_hour.is_some()
                                    {
                                        o.stability = s.clone();
                                    }
                                }
                            }
                        }
                    }
                    all.extend(offers);
                }
                Err(e) => {
                    tracing::warn!(provider = p.name(), error = %e, "offers failed; placing without this provider");
                    last_err = Some(e);
                }
            }
        }
        match (all.is_empty(), last_err) {
            (true, Some(e)) => Err(e),
            (true, None) if asked == 0 => Err(Error::invalid_input(
                "no provider for the job's allowed clouds",
            )),
            _ => Ok((all, all_dropped)),
        }
    }

    /// The providers' offers for the job, the ledger's evidence (covering at
    /// least the cooldown) and now: what ranking and the policy read.
    pub(super) async fn inputs(
        &self,
        job: &JobSpec,
    ) -> Result<(Vec<Offer>, HashMap<Pool, PoolEvidence>, OffsetDateTime)> {
        let offers = self.offers(job).await?;
        let now = self.clock.now();
        let window = self.config.evidence_window.max(self.config.cooldown);
        let since = now - time::Duration::try_from(window).unwrap_or(time::Duration::days(14));
        let evidence = self.ledger.evidence(since).await?;
        Ok((offers, evidence, now))
    }

    /// Ranks the job over the providers' offers and the ledger's evidence.
    pub async fn rank(&self, job: &JobSpec, limit: usize) -> Result<Ranking> {
        let (offers, evidence, now) = self.inputs(job).await?;
        Ok(rank(
            job,
            &offers,
            &self.rank_context(now, &evidence, limit),
        ))
    }

    /// What a ranking reads besides the offers: the time, the hazard model,
    /// the evidence and how many plans to keep.
    fn rank_context<'a>(
        &'a self,
        now: OffsetDateTime,
        evidence: &'a HashMap<Pool, PoolEvidence>,
        limit: usize,
    ) -> RankContext<'a> {
        RankContext {
            now,
            model: &self.model,
            evidence,
            limit,
        }
    }

    /// Ranks for the policy ([`plans::rank_for_policy`]): the ranking, the
    /// usable plans with an on-demand fallback, and the evidence read.
    pub(super) async fn rank_for_policy(
        &self,
        job: &JobSpec,
        limit: usize,
    ) -> Result<(Ranking, Vec<Plan>, HashMap<Pool, PoolEvidence>)> {
        let (offers, evidence, now) = self.inputs(job).await?;
        let (ranking, plans) =
            plans::rank_for_policy(job, &offers, &self.rank_context(now, &evidence, limit));
        Ok((ranking, plans, evidence))
    }

    /// What turning plans into the policy's candidates reads, now.
    pub(super) fn policy_context<'a>(
        &'a self,
        nodes: u32,
        evidence: &'a HashMap<Pool, PoolEvidence>,
    ) -> plans::Context<'a> {
        plans::Context {
            nodes,
            model: &self.model,
            evidence,
            now: self.clock.now(),
            cooldown: self.config.cooldown,
            config: &self.config.policy,
        }
    }

    /// Places the job and launches it on the best plan that has capacity.
    pub async fn start(
        &self,
        job_id: &str,
        job: &JobSpec,
        template: &LaunchTemplate,
    ) -> Result<RunningJob> {
        self.start_excluding(job_id, job, template, 0, None, None, 0.0)
            .await
    }

    /// The plans the policy may choose from ([`plans::usable`]) on a cloud
    /// with a provider and an image, not in `exclude`.
    pub(super) fn usable(
        &self,
        plans: Vec<Plan>,
        template: &LaunchTemplate,
        exclude: Option<&Pool>,
    ) -> Vec<Plan> {
        plans
            .into_iter()
            .filter(|p| Some(&p.offer.pool) != exclude)
            .filter(|p| {
                self.provider(p.offer.pool.cloud).is_some()
                    && template.images.contains_key(&p.offer.pool.cloud)
            })
            .collect()
    }

    /// What the placement policy would do for `job` now, from nowhere: the
    /// decision [`Executor::start`] acts on, with the plans its candidates
    /// index (`decision.action` is `Run(i)` for `plans[i]`, or `Wait`).
    pub async fn decide(
        &self,
        job: &JobSpec,
        template: &LaunchTemplate,
    ) -> Result<(Decision, Vec<Plan>)> {
        job.validate()?;
        let (_, plans, evidence) = self
            .rank_for_policy(job, self.config.max_launch_attempts * 4)
            .await?;
        let plans = self.usable(plans, template, None);
        if plans.is_empty() {
            return Err(Error::new(
                ErrorKind::InsufficientCapacity,
                "no feasible plan on a cloud with an image and a provider",
            ));
        }
        let decision = plans::decide_from_nowhere(
            job,
            &plans,
            &self.policy_context(template.nodes, &evidence),
        )?;
        Ok((decision, plans))
    }

    /// The plan for `job` in `pool` (feasible or not), from the providers'
    /// offers now: how a resumed controller rebuilds a placement it recorded.
    pub async fn plan_for(&self, job: &JobSpec, pool: &Pool) -> Result<Option<Plan>> {
        let ranking = self.rank(&narrowed(job, pool), 1000).await?;
        Ok(ranking.plans.into_iter().find(|p| p.offer.pool == *pool))
    }

    /// Why `pool`, asked for by hand, has no plan for `job`: its live price
    /// was dropped as implausible, or it is not offered. Asks the providers
    /// again: only a refused launch comes here.
    pub(super) async fn no_plan_in(&self, job: &JobSpec, pool: &Pool) -> Error {
        let at = format!("{pool} at ");
        let dropped = match self.offers_and_dropped(&narrowed(job, pool)).await {
            Ok((_, dropped)) => dropped,
            Err(e) => return e,
        };
        match dropped.iter().find(|d| d.starts_with(&at)) {
            Some(why) => Error::invalid_input(format!(
                "not launching in {pool}: its live price is not one to trust ({why}: \
                 a bad price feed or an emulator's placeholder)"
            )),
            None => Error::invalid_input(format!(
                "no pool {pool} among the offers for this job; `gpufleet offers` lists what is sold"
            )),
        }
    }
}

/// `job` narrowed to `pool`'s cloud, region and zone.
fn narrowed(job: &JobSpec, pool: &Pool) -> JobSpec {
    let mut narrow = job.clone();
    narrow.clouds = vec![pool.cloud];
    narrow.regions = vec![pool.region.clone()];
    narrow.zones = pool.zone.iter().cloned().collect();
    narrow
}
