//! Deciding where to run: the offers for a job from every provider, the
//! ranking `place` prints, and the one policy's decision at a start.

use super::*;

impl Executor {
    /// Offers for the job from every allowed provider, with the providers'
    /// stability signals merged in ([`crate::live::job_offers`], what `place
    /// --live` reads too). A provider that fails is skipped (and logged); if
    /// all fail, the last error is returned.
    pub async fn offers(&self, job: &JobSpec) -> Result<Vec<Offer>> {
        let got = crate::live::job_offers(&self.providers, job).await?;
        for (cloud, e) in got.failed {
            self.emit(ExecEvent::CloudSkipped {
                cloud,
                error: e.to_string(),
            });
        }
        Ok(got.offers)
    }

    /// The clouds skipped while gathering offers so far, once each, with
    /// the last reason ([`ExecEvent::CloudSkipped`]): a decision made
    /// without them, a partial answer.
    pub fn skipped_clouds(&self) -> Vec<(Cloud, String)> {
        let mut out: Vec<(Cloud, String)> = Vec::new();
        for e in self.events() {
            if let ExecEvent::CloudSkipped { cloud, error } = e {
                out.retain(|(c, _)| *c != cloud);
                out.push((cloud, error));
            }
        }
        out
    }

    /// Asks the placer where `job` should run with `remaining` left: the
    /// providers' offers for it (with their stability signals), the ledger's
    /// evidence since [`Placer::evidence_since`], now, the template's node
    /// count, where it runs (`current`) and the pools this executor can
    /// launch in (a provider and an image), never in `exclude`. Every
    /// decision the executor and the controller make comes through here.
    pub async fn place(
        &self,
        job: &JobSpec,
        remaining: Remaining,
        template: &LaunchTemplate,
        current: Option<&Plan>,
        exclude: Option<&Pool>,
    ) -> Result<Placement> {
        let offers = self.offers(job).await?;
        let now = self.clock.now();
        let placer = &self.config.placer;
        let evidence = self.ledger.evidence(placer.evidence_since(now)).await?;
        let launchable = |pool: &Pool| {
            self.provider(pool.cloud).is_some() && template.images.contains_key(&pool.cloud)
        };
        let mut req = PlaceRequest::new(job, &offers, &evidence, now)
            .remaining(remaining)
            .nodes(template.nodes)
            .exclude(exclude)
            .launchable(&launchable);
        if let Some(plan) = current {
            req = req.current(plan);
        }
        placer.place(&req)
    }

    /// Ranks the job over the providers' offers and the ledger's evidence
    /// by the placer's index, keeping `limit` plans: a lookup (what a pool
    /// would cost, why nothing is feasible), never a decision.
    pub async fn rank(&self, job: &JobSpec, limit: usize) -> Result<Ranking> {
        let offers = self.offers(job).await?;
        let now = self.clock.now();
        let placer = &self.config.placer;
        let evidence = self.ledger.evidence(placer.evidence_since(now)).await?;
        Ok(rank(
            job,
            &offers,
            &RankContext {
                now,
                model: placer.hazard(),
                evidence: &evidence,
                limit,
            },
        ))
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

    /// What the placer would do for `job` now, from nowhere: the decision
    /// [`Executor::start`] acts on first, with the plans its candidates
    /// index (`decision.action` is `Run(i)` for `plans[i]`, or `Wait`).
    pub async fn decide(
        &self,
        job: &JobSpec,
        template: &LaunchTemplate,
    ) -> Result<(Decision, Vec<Plan>)> {
        job.validate()?;
        let remaining = Remaining::of(job, self.clock.now());
        let placement = self.place(job, remaining, template, None, None).await?;
        match placement.decision() {
            Some(d) => Ok((d.clone(), placement.plans)),
            None => Err(Error::new(
                ErrorKind::InsufficientCapacity,
                "no feasible plan on a cloud with an image and a provider",
            )),
        }
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
        let dropped = match crate::live::job_offers(&self.providers, &narrowed(job, pool)).await {
            Ok(got) => got.dropped,
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
