//! The executor over three fake clouds: failover on capacity errors, re-placement
//! on interruption, moves to a clearly cheaper pool, and nothing left running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::clock::ManualClock;
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::ledger::{Hooked, JobState, Ledger, MemoryLedger, RecordHook};
use gpufleet_core::placer::*;
use gpufleet_core::*;
use gpufleet_runtime::*;

use catalogs::THREE_CLOUD_A100 as CATALOG;
use gpufleet_testkit::catalogs;

struct World {
    clock: ManualClock,
    aws: Arc<FakeCloud>,
    gcp: Arc<FakeCloud>,
    azure: Arc<FakeCloud>,
    ledger: Arc<MemoryLedger>,
    exec: Executor,
    template: LaunchTemplate,
}

fn world() -> World {
    world_with(ExecutorConfig::default())
}

/// [`world`] with the executor's settings `config`.
fn world_with(config: ExecutorConfig) -> World {
    let snapshot = Snapshot::parse(CATALOG).unwrap();
    let clock = ManualClock::new(FAKE_EPOCH);
    let fake = |c: Cloud| {
        Arc::new(FakeCloud::with_catalog(c, &snapshot.for_cloud(c)).with_clock(clock.clone()))
    };
    let (aws, gcp, azure) = (fake(Cloud::Aws), fake(Cloud::Gcp), fake(Cloud::Azure));
    let ledger = Arc::new(MemoryLedger::new());
    let providers: Vec<Arc<dyn Provider>> = vec![aws.clone(), gcp.clone(), azure.clone()];
    let exec =
        Executor::new(providers, ledger.clone(), Arc::new(clock.clone())).with_config(config);
    let template = catalogs::three_cloud_template();
    World {
        clock,
        aws,
        gcp,
        azure,
        ledger,
        exec,
        template,
    }
}

fn pool(cloud: Cloud, capacity: Capacity) -> Pool {
    let snapshot = Snapshot::parse(CATALOG).unwrap();
    snapshot
        .offers()
        .iter()
        .find(|o| o.pool.cloud == cloud && o.pool.capacity == capacity)
        .unwrap()
        .pool
        .clone()
}

fn job() -> JobSpec {
    JobSpec::builder("train", GpuModel::A100, 8, 10.0)
        .deadline(Duration::from_secs(48 * 3600))
        .build()
        .unwrap()
}

/// Counts checkpoints.
#[derive(Default)]
struct CountingHook(AtomicUsize);

#[gpufleet_core::async_trait]
impl CheckpointHook for CountingHook {
    async fn checkpoint(&self, _job: &RunningJob) -> Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn live(w: &World) -> usize {
    w.aws.live_instances().len() + w.gcp.live_instances().len() + w.azure.live_instances().len()
}

#[tokio::test]
async fn fails_over_on_capacity_replaces_on_interruption_moves_when_cheaper_and_cleans_up() {
    // One pool at a time, so that the timeline below is one sequence (the
    // hedged search has its own test, at the end).
    let w = world_with(ExecutorConfig {
        hedge_width: 1,
        ..ExecutorConfig::default()
    });
    let hook = CountingHook::default();
    w.aws
        .set_out_of_capacity(&pool(Cloud::Aws, Capacity::Spot), true);

    // 1. AWS spot is cheapest but has no capacity: GCP spot is next.
    let running = w.exec.start("job-1", &job(), &w.template).await.unwrap();
    assert_eq!(running.plan.offer.pool, pool(Cloud::Gcp, Capacity::Spot));
    assert_eq!(live(&w), 1);

    // 2. Four hours in, GCP preempts it with 30 s of notice.
    w.clock.advance(Duration::from_secs(4 * 3600));
    let notice = w
        .gcp
        .inject_interruption(
            &running.instances[0].id,
            NoticeKind::Preemption,
            Duration::from_secs(30),
        )
        .unwrap();
    let running = w
        .exec
        .on_notice(running, &notice, &hook, 4.0, &w.template)
        .await
        .unwrap();
    assert_eq!(
        hook.0.load(Ordering::SeqCst),
        1,
        "checkpointed before the deadline"
    );
    // AWS spot is still out of capacity; GCP just preempted and is in cooldown
    // (it would likely refuse or preempt again); Azure spot is next.
    assert_eq!(running.plan.offer.pool, pool(Cloud::Azure, Capacity::Spot));
    assert!(
        (running.spec.hours - 6.0).abs() < 1e-9,
        "only the remaining work is placed"
    );
    assert_eq!(live(&w), 1);

    // 3. AWS capacity returns and its spot price halves: clearly cheaper; move.
    w.clock.advance(Duration::from_secs(3600));
    w.aws
        .set_out_of_capacity(&pool(Cloud::Aws, Capacity::Spot), false);
    w.aws
        .set_price(&pool(Cloud::Aws, Capacity::Spot), "4.00".parse().unwrap());
    let review = w.exec.consider_move(running, 1.0, &hook, &w.template);
    let running = review.await.unwrap().expect("moved");
    assert_eq!(running.plan.offer.pool, pool(Cloud::Aws, Capacity::Spot));

    // A marginal saving does not move it.
    w.clock.advance(Duration::from_secs(600));
    w.gcp
        .set_price(&pool(Cloud::Gcp, Capacity::Spot), "3.90".parse().unwrap());
    let review = w.exec.consider_move(running, 0.2, &hook, &w.template);
    let running = review.await.unwrap().expect_err("not worth moving");

    // 4. Done: nothing left running anywhere.
    w.exec.complete(running).await.unwrap();
    assert_eq!(live(&w), 0);

    use ExecEvent::*;
    let sp = |c| pool(c, Capacity::Spot);
    let all = w.exec.events();
    // Every launch follows a decision of the placement policy, which says why.
    for (i, e) in all.iter().enumerate() {
        if matches!(e, Launched { .. } | LaunchFailed { .. }) {
            let decided = all[..i].iter().rev().find_map(|e| match e {
                Decided { explanation } => Some(explanation),
                _ => None,
            });
            assert!(
                decided.is_some_and(|x| x.contains("expected to finish") && x.contains("hazard")),
                "{decided:?}"
            );
        }
    }
    let events: Vec<ExecEvent> = all
        .into_iter()
        .filter(|e| !matches!(e, Decided { .. }))
        .map(|e| match e {
            Moved { from, to, .. } => Moved {
                from,
                to,
                saving_usd: 0.0,
            },
            other => other,
        })
        .collect();
    assert_eq!(
        events,
        vec![
            LaunchFailed {
                pool: sp(Cloud::Aws),
                kind: "insufficient-capacity".into()
            },
            Launched {
                pool: sp(Cloud::Gcp),
                instances: 1
            },
            Checkpointed {
                pool: sp(Cloud::Gcp)
            },
            Interrupted {
                pool: sp(Cloud::Gcp)
            },
            Terminated {
                pool: sp(Cloud::Gcp),
                instances: 1
            },
            LaunchFailed {
                pool: sp(Cloud::Aws),
                kind: "insufficient-capacity".into()
            },
            Launched {
                pool: sp(Cloud::Azure),
                instances: 1
            },
            Checkpointed {
                pool: sp(Cloud::Azure)
            },
            Launched {
                pool: sp(Cloud::Aws),
                instances: 1
            },
            Moved {
                from: sp(Cloud::Azure),
                to: sp(Cloud::Aws),
                saving_usd: 0.0
            },
            Terminated {
                pool: sp(Cloud::Azure),
                instances: 1
            },
            Terminated {
                pool: sp(Cloud::Aws),
                instances: 1
            },
        ]
    );
    // The ledger remembers the interruption, the capacity failures and the jobs.
    let ev = w.ledger.evidence(FAKE_EPOCH).await.unwrap();
    assert_eq!(ev[&sp(Cloud::Gcp)].events.len(), 1);
    assert_eq!(ev[&sp(Cloud::Aws)].events.len(), 2);
    let states: Vec<JobState> = w
        .ledger
        .jobs()
        .await
        .unwrap()
        .iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(
        states,
        vec![
            // Two pools refuse capacity before the first runs: each launch
            // is announced, each refusal is on the timeline.
            JobState::Launching,
            JobState::Placing,
            JobState::Launching,
            JobState::Running,
            JobState::Interrupted,
            JobState::Launching,
            JobState::Placing,
            JobState::Launching,
            JobState::Running,
            // The move: announced, launched, running, the old one released.
            JobState::Moving,
            JobState::Launching,
            JobState::Running,
            JobState::Moved,
            JobState::Succeeded
        ]
    );
}

#[tokio::test]
async fn a_price_under_the_plausible_floor_is_not_where_a_job_starts() {
    let w = world();
    // A bad feed (an emulator's placeholder, a unit error): far under
    // anything published, so not a bargain. `offers --live` drops it; the
    // executor must not start the job there either.
    w.aws.set_price(
        &pool(Cloud::Aws, Capacity::Spot),
        "0.00001".parse().unwrap(),
    );
    let ranking = w.exec.rank(&job(), 0).await.unwrap();
    assert!(
        ranking
            .plans
            .iter()
            .all(|p| p.offer.pool != pool(Cloud::Aws, Capacity::Spot)),
        "{:?}",
        ranking
            .plans
            .iter()
            .map(|p| &p.offer.pool)
            .collect::<Vec<_>>()
    );
    let running = w
        .exec
        .start("job-floor", &job(), &w.template)
        .await
        .unwrap();
    assert_ne!(running.plan.offer.pool, pool(Cloud::Aws, Capacity::Spot));
    assert!(running.plan.offer.price.usd_per_hour_f64() > 1.0);
    w.exec.complete(running).await.unwrap();
    assert_eq!(live(&w), 0);
}

#[tokio::test]
async fn a_failed_launch_leaves_no_placement_group_and_a_tight_deadline_goes_on_demand() {
    let w = world();
    let spec = JobSpec::builder("mpi", GpuModel::A100, 8, 10.0)
        .placement_group(true)
        .cloud(Cloud::Aws)
        .build()
        .unwrap();
    w.aws.fail_next(
        gpufleet_core::Operation::Launch,
        Error::new(
            ErrorKind::InsufficientCapacity,
            "InsufficientInstanceCapacity",
        ),
    );
    let running = w.exec.start("job-2", &spec, &w.template).await.unwrap();
    // Spot failed (its group deleted), on-demand launched into a new group.
    assert_eq!(
        running.plan.offer.pool,
        pool(Cloud::Aws, Capacity::OnDemand)
    );
    assert_eq!(w.aws.placement_groups().len(), 1);
    w.exec.complete(running).await.unwrap();
    assert!(w.aws.placement_groups().is_empty() && live(&w) == 0);

    // 10 h of work due in 11 h: spot cannot be trusted with it.
    let tight = JobSpec::builder("t", GpuModel::A100, 8, 10.0)
        .deadline(Duration::from_secs(11 * 3600))
        .build()
        .unwrap();
    let running = w.exec.start("job-3", &tight, &w.template).await.unwrap();
    assert_eq!(running.plan.offer.pool.capacity, Capacity::OnDemand);
    w.exec.complete(running).await.unwrap();
    assert_eq!(live(&w), 0);
}

#[tokio::test]
async fn when_every_pool_fails_the_error_says_so_and_nothing_runs() {
    let w = world();
    for c in [Cloud::Aws, Cloud::Gcp, Cloud::Azure] {
        for cap in [Capacity::Spot, Capacity::OnDemand] {
            let f = match c {
                Cloud::Aws => &w.aws,
                Cloud::Gcp => &w.gcp,
                _ => &w.azure,
            };
            f.set_out_of_capacity(&pool(c, cap), true);
        }
    }
    let e = w
        .exec
        .start("job-4", &job(), &w.template)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity);
    assert!(e.to_string().contains("every plan tried failed"), "{e}");
    assert_eq!(live(&w), 0);
    // A job nothing can satisfy says which constraint excluded what.
    let impossible = JobSpec::builder("x", GpuModel::H100, 8, 10.0)
        .build()
        .unwrap();
    let e = w
        .exec
        .start("job-5", &impossible, &w.template)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no offer matches the job's GPU options (8xH100)"),
        "{e}"
    );
}

/// Every spot pool refused capacity a minute ago. With days of slack the
/// policy waits for spot (and `start` says so, launching nothing); with a
/// deadline that leaves little slack it starts on-demand. The executor's
/// decision is `placer::policy`'s over the same plans.
#[tokio::test]
async fn the_executor_acts_on_the_policys_wait_and_on_demand() {
    let w = world();
    for c in [Cloud::Aws, Cloud::Gcp, Cloud::Azure] {
        w.ledger
            .record_event(
                &pool(c, Capacity::Spot),
                PoolEvent {
                    at: FAKE_EPOCH,
                    kind: PoolEventKind::CapacityFailure,
                },
            )
            .await
            .unwrap();
    }
    w.clock.advance(Duration::from_secs(60));
    let relaxed = JobSpec::builder("later", GpuModel::A100, 8, 10.0)
        .deadline(Duration::from_secs(200 * 3600))
        .build()
        .unwrap();
    let (decision, plans) = w.exec.decide(&relaxed, &w.template).await.unwrap();
    assert_eq!(
        decision.action,
        policy::Action::Wait,
        "{}",
        decision.explanation
    );
    assert!(plans
        .iter()
        .any(|p| p.offer.pool.capacity == Capacity::OnDemand));
    let e = w
        .exec
        .start("later", &relaxed, &w.template)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InsufficientCapacity);
    assert!(e.to_string().contains("waits for spot capacity"), "{e}");
    assert_eq!(live(&w), 0, "nothing launched");

    let tight = JobSpec::builder("now", GpuModel::A100, 8, 10.0)
        .deadline(Duration::from_secs(11 * 3600))
        .build()
        .unwrap();
    let (decision, plans) = w.exec.decide(&tight, &w.template).await.unwrap();
    let policy::Action::Run(i) = decision.action else {
        panic!("{}", decision.explanation)
    };
    assert_eq!(
        plans[i].offer.pool.capacity,
        Capacity::OnDemand,
        "{}",
        decision.explanation
    );
    let running = w.exec.start("now", &tight, &w.template).await.unwrap();
    assert_eq!(running.plan.offer.pool, plans[i].offer.pool);
    w.exec.complete(running).await.unwrap();
    assert_eq!(live(&w), 0);
}

/// Refuses to record job transitions in the given states (as a full or
/// read-only ledger would); everything else is recorded.
#[derive(Debug)]
struct Refuse(Vec<JobState>);

impl RecordHook for Refuse {
    fn before_record<'a>(
        &self,
        record: &'a gpufleet_core::ledger::JobRecord,
    ) -> Result<std::borrow::Cow<'a, gpufleet_core::ledger::JobRecord>> {
        if self.0.contains(&record.state) {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                "ledger is read-only (test)",
            ));
        }
        Ok(std::borrow::Cow::Borrowed(record))
    }
}

/// Ledger failures never drop a handle: a launch the ledger will not record
/// is terminated (nothing runs that the ledger does not know), and an
/// interrupted placement is released before its record is written, so a
/// ledger that refuses the record leaves nothing running and the error names
/// the instances released.
#[tokio::test]
async fn a_ledger_that_refuses_a_record_leaves_nothing_running() {
    let w = world();
    let refusing = |refuse: Vec<JobState>| {
        let providers: Vec<Arc<dyn Provider>> = vec![w.aws.clone(), w.gcp.clone(), w.azure.clone()];
        Executor::new(
            providers,
            Arc::new(Hooked::new(Arc::new(MemoryLedger::new()), Refuse(refuse))),
            Arc::new(w.clock.clone()),
        )
    };
    let exec = refusing(vec![JobState::Running]);
    let e = exec.start("job-r1", &job(), &w.template).await.unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    assert_eq!(live(&w), 0, "a launch the ledger refused is still running");

    let exec = refusing(vec![JobState::Interrupted]);
    let running = exec.start("job-r2", &job(), &w.template).await.unwrap();
    assert_eq!(live(&w), 1);
    let ids: Vec<String> = running.instances.iter().map(|i| i.id.to_string()).collect();
    let e = exec
        .interrupted(&running, 1.0, "test".into(), true)
        .await
        .unwrap_err();
    assert_eq!(live(&w), 0, "an interrupted placement was left running");
    for id in &ids {
        assert!(
            e.to_string().contains(id.as_str()),
            "{e} does not name {id}"
        );
    }
}

/// A launch request that cannot be valid (a zero time to live) is refused
/// before the executor records a `launching` attempt or makes a placement
/// group: nothing half-created, no attempt spent. It used to be recorded,
/// the group made and rolled back, and the provider asked.
#[tokio::test]
async fn a_bad_launch_request_is_refused_before_anything_is_recorded_or_made() {
    let mut w = world();
    w.template.ttl = Some(Duration::ZERO);
    w.template.placement_strategy = Some(PlacementStrategy::Cluster);
    let e = w
        .exec
        .start("job-bad", &job(), &w.template)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("invalid ttl 0s"), "{e}");
    let history = w.ledger.job_history("job-bad").await.unwrap();
    assert!(
        history.iter().all(|r| r.state != JobState::Launching),
        "{history:?}"
    );
    for fake in [&w.aws, &w.gcp, &w.azure] {
        let ops: Vec<String> = fake
            .calls()
            .iter()
            .map(|c| c.operation.to_string())
            .collect();
        assert!(
            !ops.iter()
                .any(|o| o == "launch" || o == "create_placement_group"),
            "{ops:?}"
        );
    }
}

/// Issue 62: a cloud that does not answer for offers is skipped, and the
/// executor says so (`skipped_clouds`, what `launch` turns into a warning
/// line and exit 4): the launch goes on with the clouds that answered.
#[tokio::test]
async fn a_cloud_that_does_not_answer_is_skipped_and_said() {
    let w = world();
    w.gcp.fail_next(
        Operation::Offers,
        Error::new(ErrorKind::Unavailable, "connection refused"),
    );
    let (_, running) = w
        .exec
        .launch_once("skip-1", &job(), &w.template, None)
        .await
        .unwrap();
    assert_ne!(running.plan.offer.pool.cloud, Cloud::Gcp);
    let skipped = w.exec.skipped_clouds();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].0, Cloud::Gcp);
    assert!(skipped[0].1.contains("connection refused"), "{skipped:?}");
    // What `run` says after the job.
    let lines = gpufleet_runtime::report::skipped_lines(&w.exec);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("gcp not read while placing"),
        "{lines:?}"
    );
}

/// A controller's expiry goes on a launch only on a cloud where it has been
/// able to extend one: where the tag write is refused, an expiry nobody can
/// extend would end a live job's instances.
#[tokio::test]
async fn a_launch_carries_the_driven_expiry_only_where_it_can_be_extended() {
    let w = world();
    let mut template = w.template.clone();
    template.driven_expiry = Some(Duration::from_secs(3600));
    let (_, first) = w
        .exec
        .launch_once("exp-1", &job(), &template, None)
        .await
        .unwrap();
    assert_eq!(first.instances[0].expires_at, None, "not yet proven there");
    let cloud = first.plan.offer.pool.cloud;
    template.expiry_clouds.lock().unwrap().insert(cloud);
    let (_, second) = w
        .exec
        .launch_once("exp-2", &job(), &template, Some(&first.plan.offer.pool))
        .await
        .unwrap();
    assert!(
        second.instances[0].expires_at.is_some(),
        "{:?}",
        second.instances[0]
    );
}

/// Time to a running instance with the policy's top five pools full and
/// every launch taking 20 s (issue 64), one at a time against three at once.
/// The pools are the fake AWS's A10G pools in us-east-1 (embedded catalog);
/// the time is tokio's, paused, so 20 s take none.
#[tokio::test(start_paused = true)]
async fn with_the_top_five_pools_full_launching_three_at_once_finds_capacity_sooner() {
    let spec = JobFile::new(2.0, "A10G", 1)
        .named("hedge")
        .within("aws", &["us-east-1"])
        .into_spec()
        .unwrap();
    let executor = |width: usize| {
        let clock = ManualClock::new(FAKE_EPOCH);
        let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()));
        let exec = Executor::new(
            vec![fake.clone() as Arc<dyn Provider>],
            Arc::new(MemoryLedger::new()),
            Arc::new(clock),
        )
        .with_config(ExecutorConfig {
            hedge_width: width,
            ..ExecutorConfig::default()
        });
        (fake, exec)
    };
    let mut template = LaunchTemplate::default();
    template.images.insert(Cloud::Aws, "ami-1".into());
    // The policy's order: each probe's choice is then made full.
    let (probe, exec) = executor(1);
    let mut full = Vec::new();
    for k in 0..5 {
        let r = exec
            .start(&format!("probe-{k}"), &spec, &template)
            .await
            .unwrap();
        full.push(r.plan.offer.pool.clone());
        probe.set_out_of_capacity(&r.plan.offer.pool, true);
    }
    let mut took = Vec::new();
    for width in [1, 3] {
        let (fake, exec) = executor(width);
        for p in &full {
            fake.set_out_of_capacity(p, true);
        }
        fake.set_latency(Operation::Launch, Duration::from_secs(20));
        let started = tokio::time::Instant::now();
        let r = exec.start("hedge", &spec, &template).await.unwrap();
        took.push(started.elapsed());
        assert!(!full.contains(&r.plan.offer.pool), "{}", r.plan.offer.pool);
        // Exactly the winner's instance is left, and recorded.
        assert_eq!(fake.live_instances().len(), 1, "width {width}");
        assert_eq!(
            fake.live_instances()[0].id,
            r.instances[0].id,
            "width {width}"
        );
    }
    eprintln!(
        "top 5 pools full, 20 s launches: one at a time {:?}, three at once {:?}",
        took[0], took[1]
    );
    assert_eq!(took[0], Duration::from_secs(120), "six launches in turn");
    assert!(took[1] <= Duration::from_secs(60), "{:?}", took[1]);
}

/// A launch whose every try failed because the clouds answered with errors
/// (a placement group API answering 500), not for want of capacity, fails
/// with that error's kind (issue 79: it said "nothing matched", exit 3, as
/// for a lack of capacity).
#[tokio::test]
async fn a_launch_failed_by_cloud_errors_says_so_not_no_capacity() {
    let w = world();
    let mut template = w.template.clone();
    template.placement_strategy = Some(PlacementStrategy::Cluster);
    for fake in [&w.aws, &w.gcp, &w.azure] {
        for _ in 0..40 {
            fake.fail_next(
                Operation::CreatePlacementGroup,
                Error::new(ErrorKind::Unavailable, "HTTP 500 from the group API"),
            );
        }
    }
    let e = w
        .exec
        .launch_once("pg-500", &job(), &template, None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("HTTP 500"), "{e}");
}
