//! Compute checks: a launch's lifecycle, idempotence under one key, and
//! `NotFound` for what does not exist.

use super::*;

pub(super) async fn launch_pool(p: &dyn Provider, caps: Capabilities, capacity: Capacity) -> Offer {
    let capacity = if capacity == Capacity::Spot && !caps.spot {
        Capacity::OnDemand
    } else {
        capacity
    };
    let mut offers = p
        .offers(&OfferQuery::new().capacity(capacity))
        .await
        .unwrap_or_else(|e| panic!("offers: {e}"));
    sort_offers(&mut offers, OfferSort::Price);
    offers
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("the provider has no {capacity} offer to launch into"))
}

pub(super) fn request(h: &dyn Harness, offer: &Offer, job: &str) -> LaunchRequest {
    let key = IdempotencyKey::new(unique("conf")).unwrap_or_else(|e| panic!("{e}"));
    LaunchRequest::new(offer.pool.clone(), h.image(), key)
        .with_tag(crate::tags::JOB, job)
        .with_tag(crate::tags::OWNER, "conformance")
}

/// A provider that computes, its cheapest on-demand offer, a fresh job id
/// and a request for one instance of that offer under it.
struct Setup {
    p: Arc<dyn Provider>,
    offer: Offer,
    job: String,
    req: LaunchRequest,
}

impl Setup {
    /// Launches the request, which must succeed (`what` names it if not).
    async fn launch(&self, what: &str) -> Vec<Instance> {
        let pool = &self.offer.pool;
        let launched = self.p.launch(&self.req).await;
        launched.unwrap_or_else(|e| panic!("{what} into {pool}: {e}"))
    }
}

/// The setup of a compute check; the skipped outcome when the provider has
/// no compute.
async fn compute_setup(h: &dyn Harness) -> Result<Setup, Outcome> {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(caps.compute && caps.catalog, "no compute") {
        return Err(s);
    }
    let offer = launch_pool(p.as_ref(), caps, Capacity::OnDemand).await;
    let job = unique("job");
    let req = request(h, &offer, &job);
    Ok(Setup { p, offer, job, req })
}

/// The instances tagged with `job`.
async fn job_instances(p: &dyn Provider, job: &str) -> Vec<Instance> {
    p.list_instances(&TagFilter::default().with(crate::tags::JOB, job))
        .await
        .unwrap_or_else(|e| panic!("list_instances: {e}"))
}

/// Launch, describe, list by tag and terminate one instance.
pub async fn check_launch_lifecycle(h: &dyn Harness) -> Outcome {
    let s = match compute_setup(h).await {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let launched = s.launch("launch").await;
    let Setup { p, offer, job, .. } = s;
    assert_eq!(
        launched.len(),
        1,
        "launched {} instances, asked for 1",
        launched.len()
    );
    let inst = &launched[0];
    assert_eq!(inst.pool, offer.pool, "instance landed in another pool");
    assert_eq!(
        inst.tags.get(crate::tags::MANAGED).map(String::as_str),
        Some("true"),
        "no managed tag"
    );
    assert_eq!(inst.tags.get(crate::tags::JOB), Some(&job), "job tag lost");
    let got = p
        .instance(&inst.id)
        .await
        .unwrap_or_else(|e| panic!("instance({}): {e}", inst.id));
    assert_eq!(got.id, inst.id);
    // A controller extends the expiry of what it drives: the new one reads
    // back, by describe and by list, and the launch's tags stay.
    let until = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|e| panic!("{e}"))
        + time::Duration::hours(2);
    let mut extended = crate::Tags::new();
    extended.insert(
        crate::tags::EXPIRES_AT.into(),
        crate::tags::format_time(until),
    );
    p.tag_instances(std::slice::from_ref(&inst.id), &extended)
        .await
        .unwrap_or_else(|e| panic!("tag_instances({}): {e}", inst.id));
    let got = p
        .instance(&inst.id)
        .await
        .unwrap_or_else(|e| panic!("instance({}) after tagging: {e}", inst.id));
    assert_eq!(
        got.expires_at,
        Some(until),
        "the extended expiry by describe"
    );
    assert_eq!(
        got.tags.get(crate::tags::JOB),
        Some(&job),
        "job tag lost by tagging"
    );
    let listed = job_instances(p.as_ref(), &job).await;
    assert_eq!(
        listed.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&inst.id],
        "list by job tag"
    );
    assert_eq!(
        listed[0].expires_at,
        Some(until),
        "the extended expiry by list"
    );
    p.terminate(&inst.id)
        .await
        .unwrap_or_else(|e| panic!("terminate({}): {e}", inst.id));
    let listed = job_instances(p.as_ref(), &job).await;
    assert!(listed.is_empty(), "a terminated instance is still listed");
    match p.instance(&inst.id).await {
        Ok(i) => assert!(
            matches!(
                i.state,
                InstanceState::Terminated | InstanceState::ShuttingDown
            ),
            "terminated instance is {:?}",
            i.state
        ),
        Err(e) => assert_eq!(
            e.kind(),
            ErrorKind::NotFound,
            "describe after terminate: {e}"
        ),
    }
    Outcome::Passed
}

/// The same idempotency key launches once; reusing it for another request is
/// refused; a bad request creates nothing.
pub async fn check_idempotent_launch(h: &dyn Harness) -> Outcome {
    let s = match compute_setup(h).await {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let first = s.launch("launch").await;
    let second = s.launch("relaunch with the same key").await;
    let Setup { p, offer, job, req } = s;
    let ids = |v: &[Instance]| v.iter().map(|i| i.id.clone()).collect::<Vec<InstanceId>>();
    assert_eq!(
        ids(&first),
        ids(&second),
        "the same key launched different instances"
    );
    let listed = job_instances(p.as_ref(), &job).await;
    assert_eq!(
        listed.len(),
        1,
        "the same key left {} instances",
        listed.len()
    );
    expect_kind!(
        p.launch(&req.clone().with_count(2)).await,
        ErrorKind::InvalidInput,
        "reusing a key for another request"
    );

    let bad_job = unique("job");
    let bad = request(h, &offer, &bad_job).with_count(0);
    expect_kind!(
        p.launch(&bad).await,
        ErrorKind::InvalidInput,
        "launching 0 instances"
    );
    let listed = job_instances(p.as_ref(), &bad_job).await;
    assert!(listed.is_empty(), "a refused launch left instances behind");
    for i in first {
        p.terminate(&i.id)
            .await
            .unwrap_or_else(|e| panic!("terminate: {e}"));
    }
    Outcome::Passed
}

/// Unknown and gone resources are NotFound, never a panic or success.
pub async fn check_not_found(h: &dyn Harness) -> Outcome {
    let s = match compute_setup(h).await {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let p = &s.p;
    let ghost = InstanceId::new(unique("i-0gpufleetghost"));
    expect_kind!(
        p.instance(&ghost).await,
        ErrorKind::NotFound,
        "describing an unknown instance"
    );
    expect_kind!(
        p.terminate(&ghost).await,
        ErrorKind::NotFound,
        "terminating an unknown instance"
    );
    expect_kind!(
        p.tag_instances(std::slice::from_ref(&ghost), &crate::Tags::new())
            .await,
        ErrorKind::NotFound,
        "tagging an unknown instance"
    );
    if p.capabilities().placement_groups {
        let ghost = PlacementGroupId::new(unique("pg-ghost"));
        expect_kind!(
            p.placement_group(&ghost).await,
            ErrorKind::NotFound,
            "an unknown placement group"
        );
    }
    let launched = s.launch("launch").await;
    let id = &launched[0].id;
    p.terminate(id)
        .await
        .unwrap_or_else(|e| panic!("terminate: {e}"));
    expect_kind!(
        p.terminate(id).await,
        ErrorKind::NotFound,
        "terminating an instance twice"
    );
    Outcome::Passed
}
