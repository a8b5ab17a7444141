//! The fleet's verbs as an embedding program calls them, on fake clouds it
//! holds in memory (`Site::InMemory`, the Python `FakeCloud`): a launch
//! found again under its name, listed and priced, its spend in `costs`, a
//! reconcile with nothing to do, a reap with nothing forgotten, another
//! owner's launch under the same name refused, and a terminate of the
//! owner's instances that leaves another owner's alone.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use gpufleet_core::clock::ManualClock;
use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
use gpufleet_core::ledger::MemoryLedger;
use gpufleet_core::{Cloud, ErrorKind};
use gpufleet_runtime::config::{Config, ConfigKey, Flags, ProviderKind};
use gpufleet_runtime::spend::CostBy;
use gpufleet_runtime::verbs::input::JobInput;
use gpufleet_runtime::verbs::instances::{self, ReapRequest, TerminateRequest};
use gpufleet_runtime::verbs::launch::{self, LaunchRequest, Launched};
use gpufleet_runtime::verbs::{self, InMemory, Opening, Site};

const JOB: &str =
    "name = \"nightly\"\nhours = 6\ndeadline = \"24h\"\n[[gpu]]\nmodel = \"A10G\"\ncount = 1\n";

/// One in-memory AWS fake, seen as `owner`'s (the fakes and ledger shared
/// with `with` when given).
fn site(owner: &str, dir: &std::path::Path, with: Option<&Site>) -> Site {
    let config = dir.join("gpufleet.toml");
    std::fs::write(&config, "").unwrap();
    let flags = Flags {
        config: Some(config),
        provider: Some(ProviderKind::Fake),
        owner: Some(owner.into()),
        ..Flags::default()
    }
    .with(ConfigKey::Clouds, "aws");
    let cfg = Config::load(&flags).unwrap();
    let m = match with {
        Some(Site::InMemory(_, m)) => m.clone(),
        _ => {
            let clock = ManualClock::new(FAKE_EPOCH);
            let aws = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()));
            Arc::new(InMemory {
                fakes: vec![(Cloud::Aws, aws)],
                clock,
                ledger: Arc::new(MemoryLedger::new()),
            })
        }
    };
    Site::InMemory(cfg, m)
}

async fn launch_job(site: &Site, name: &str, count: u32) -> gpufleet_runtime::report::LaunchDoc {
    try_launch(site, name, count).await.unwrap()
}

async fn try_launch(
    site: &Site,
    name: &str,
    count: u32,
) -> Result<gpufleet_runtime::report::LaunchDoc, gpufleet_core::Error> {
    let job = JobInput::Document {
        text: JOB.into(),
        label: "the job".into(),
    }
    .read(site.config())
    .unwrap()
    .spec;
    let checked = LaunchRequest {
        job: Some(job),
        name: Some(name.into()),
        image: Some("img".into()),
        count,
        ..LaunchRequest::default()
    }
    .check()
    .unwrap();
    let never = || std::future::pending::<&'static str>();
    match launch::launch(site, checked, never, |_| {}).await? {
        Launched::Done { doc, unread } => {
            assert!(unread.is_empty());
            Ok(doc)
        }
        other => panic!("not launched: {other:?}"),
    }
}

#[tokio::test]
async fn the_fleets_verbs_on_fakes_held_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let alice = site("alice", dir.path(), None);
    let bob = site("bob", dir.path(), Some(&alice));

    let first = launch_job(&alice, "nightly", 2).await;
    assert!(!first.already_launched && first.instances.len() == 2);
    // The same name finds what it launched; another owner's name is
    // another launch.
    let again = launch_job(&alice, "nightly", 2).await;
    assert!(again.already_launched);
    assert_eq!(again.idempotency_key, first.idempotency_key);
    // Another owner's launch under the same name in the same ledger is
    // refused, naming whose the instances are: never adopted as theirs.
    let e = try_launch(&bob, "nightly", 2).await.unwrap_err();
    assert!(e.message().contains("owned by alice, not bob"), "{e}");
    let theirs = launch_job(&bob, "bobs", 1).await;
    assert!(!theirs.already_launched);

    let mut fleet = alice.open(Opening::Checked).await.unwrap();
    let listed = instances::ls(&alice, &mut fleet, None).await;
    assert_eq!(listed.rows.len(), 3, "both owners' instances are listed");
    assert_eq!(
        instances::ls(&alice, &mut fleet, Some("bobs"))
            .await
            .rows
            .len(),
        1
    );
    assert!(listed.warnings.is_empty());
    assert!(listed.rows.iter().all(|r| r.price_per_hour_usd.is_some()));

    // An hour on, the ledger has spent on all three.
    if let Site::InMemory(_, m) = &alice {
        m.clock.advance(std::time::Duration::from_secs(3600));
    }
    let costs = verbs::spend::costs(&alice, CostBy::Owner, "30d")
        .await
        .unwrap();
    assert_eq!(costs.total.instances, 3);
    assert_eq!(costs.rows.len(), 2, "alice and bob");
    let bad = verbs::spend::costs(&alice, CostBy::Owner, "tomorrow")
        .await
        .unwrap_err();
    assert!(
        bad.message().contains("invalid --since 'tomorrow'"),
        "{bad}"
    );

    let rec = verbs::spend::reconcile(&alice, false, false).await.unwrap();
    assert!(rec.report.is_clean() && !rec.report.applied && rec.unread.is_empty());

    let mut fleet = alice.open(Opening::Checked).await.unwrap();
    let reaped = instances::reap(&alice, &mut fleet, &ReapRequest::default())
        .await
        .unwrap();
    assert!(reaped.doc.dry_run && reaped.doc.candidates.is_empty());
    let too_short = ReapRequest {
        idle: Some(std::time::Duration::from_secs(60)),
        ..ReapRequest::default()
    };
    let e = instances::reap(&alice, &mut fleet, &too_short)
        .await
        .unwrap_err();
    assert!(e.message().contains("at least 5m"), "{e}");

    // By tag: alice's two, bob's left alone (without --any-owner, only
    // the caller's own match).
    let req = TerminateRequest {
        tags: vec!["gpufleet:managed=true".into()],
        ..TerminateRequest::default()
    };
    let picked = instances::pick(&alice, &mut fleet, &req).await.unwrap();
    assert_eq!(picked.victims.len(), 2);
    let ended = picked.terminate(&alice, &fleet).await.unwrap();
    assert!(ended.failed.is_none());
    assert_eq!(ended.doc.terminated.len(), 2);
    let mut fleet = alice.open(Opening::Checked).await.unwrap();
    let e = instances::pick(&alice, &mut fleet, &req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let left = instances::ls(&bob, &mut fleet, None).await;
    let live: Vec<_> = left.rows.iter().filter(|r| r.state == "running").collect();
    assert_eq!(live.len(), 1, "bob's instance is left: {:?}", left.rows);
    assert_eq!(live[0].owner.as_deref(), Some("bob"));

    assert!(verbs::serve::ls(&alice).await.unwrap().is_empty());
    let e = verbs::serve::status(&alice, "echo").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}
