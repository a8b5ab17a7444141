//! A launch ends with exactly the instances asked for, recorded, or with none:
//! a fault sweep of a 4-instance launch (with a placement group where the
//! cloud's stand-in has them) through `Executor::launch_once`, the path
//! `gpufleet launch` takes, behind the runtime's timeout and retry layers.
//!
//! At every call of the launch, in turn, one of three faults:
//! - **error**: the call fails (HTTP 503 / a retryable provider error);
//! - **timeout**: the call's answer comes later than the layer's bound (the
//!   cloud did the work; the answer is lost), and the retry layer retries;
//! - **dropped**: the whole launch future is dropped while the call is in
//!   flight (a crash, or Ctrl-C), so no clean-up of this process runs.
//!
//! After an error or a timeout the run itself must end with 4 recorded
//! instances or 0; after a drop, and after every case, the same launch is run
//! again: it must end with the 4 instances recorded. At every check the cloud
//! holds exactly the recorded instances and at most their one group: no
//! orphaned VM (Failed ones included), group, disk or NIC (disks and NICs are
//! created with the VM and set to go with it).
//!
//! Provider-level sweeps run on moto_server (4 instances; moto answers
//! placement-group calls with HTTP 500, so no group there), the EC2 stand-in
//! and the GCP and Azure stand-ins; HTTP-level sweeps (every request the
//! launch sends, from the first one that changes anything) on the GCP and
//! Azure stand-ins, where one launch is many requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_testkit as stand_ins;
use stand_ins::{aws, azure, gcp, AZURE_IMAGE, GCE_IMAGE};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::FAKE_EPOCH;
use gpufleet_core::layers::{Call, Interceptor, LayerExt, Next, Reply, RetryLayer};
use gpufleet_core::ledger::{JobState, Ledger, MemoryLedger};
use gpufleet_core::placer::{JobFile, JobSpec};
use gpufleet_core::*;
use gpufleet_runtime::factory::{layered, Layers};
use gpufleet_runtime::{Executor, LaunchTemplate};
use tokio::sync::Notify;

/// Each case launches its own job (ids from this counter): a cloud keeps a
/// key bound after its launch ends, which a separate test covers.
static CASES: AtomicUsize = AtomicUsize::new(0);

fn next_job() -> String {
    format!("sweep-{}", CASES.fetch_add(1, Ordering::SeqCst))
}
const NODES: usize = 4;

/// Bounds short enough for a sweep: one call 1 s, one launch 2 s.
fn layers() -> Layers {
    Layers {
        timeout: Duration::from_secs(1),
        launch_timeout: Duration::from_secs(2),
        retry: RetryLayer::new()
            .with_max_retries(2)
            .with_min_delay(Duration::from_millis(5))
            .with_max_delay(Duration::from_millis(20))
            .without_jitter(),
    }
}

/// Longer than any bound in [`layers`].
const LATE: Duration = Duration::from_millis(2_600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Error,
    Timeout,
    Dropped,
}

const MODES: [Mode; 3] = [Mode::Error, Mode::Timeout, Mode::Dropped];

/// Injects `mode` at provider call number `at` (1-based). Sits inside the
/// timeout and retry layers, as a cloud's failure would.
#[derive(Debug)]
struct Faults {
    calls: Arc<AtomicUsize>,
    at: usize,
    mode: Mode,
    hit: Arc<Notify>,
}

impl Interceptor for Faults {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n != self.at {
                return next().await;
            }
            match self.mode {
                Mode::Error => Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("{} failed (injected)", call.operation),
                )),
                Mode::Timeout => {
                    // The cloud acted; its answer arrives after the bound.
                    let r = next().await;
                    tokio::time::sleep(LATE).await;
                    r
                }
                Mode::Dropped => {
                    // The cloud acted; the process dies before it hears.
                    let _ = next().await;
                    self.hit.notify_one();
                    std::future::pending().await
                }
            }
        }
        .boxed()
    }
}

/// Refuses the first launch for lack of capacity (the pool the policy chose
/// first is full), so that the executor tries the next pools at once: the
/// hedged path.
#[derive(Debug, Default)]
struct FirstPoolFull {
    refused: std::sync::atomic::AtomicBool,
}

impl Interceptor for FirstPoolFull {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            if call.operation == Operation::Launch && !self.refused.swap(true, Ordering::SeqCst) {
                return Err(Error::new(
                    ErrorKind::InsufficientCapacity,
                    "InsufficientInstanceCapacity (injected)",
                ));
            }
            next().await
        }
        .boxed()
    }
}

fn job(cloud: &str, region: &str, gpu: &str) -> JobSpec {
    JobFile::new(2.0, gpu, 1)
        .named("sweep")
        .within(cloud, &[region])
        .into_spec()
        .unwrap()
}

/// One cloud under test: a provider straight to its stand-in (to look), and
/// how to read what the stand-in holds.
struct Target {
    cloud: Cloud,
    image: &'static str,
    spec: JobSpec,
    group: bool,
    raw: Arc<dyn Provider>,
    /// Every VM the cloud holds that is not on its way out, by id, Failed
    /// ones included; and a check of its disk and NIC settings.
    standing: Lister,
    /// The placement groups the cloud holds.
    groups: Lister,
}

/// Reads what a cloud holds, by id.
type Lister = Box<dyn Fn() -> BoxFuture<'static, Vec<String>> + Send + Sync>;

/// A lister that reads a stand-in's own state (no I/O).
fn read_now(read: impl Fn() -> Vec<String> + Send + Sync + 'static) -> Lister {
    Box::new(move || {
        let out = read();
        async move { out }.boxed()
    })
}

fn template(t: &Target) -> LaunchTemplate {
    let mut template = LaunchTemplate {
        nodes: NODES as u32,
        ..LaunchTemplate::default()
    };
    if t.group {
        template.placement_strategy = Some(PlacementStrategy::Cluster);
    }
    template.images.insert(t.cloud, t.image.into());
    template
}

fn executor(provider: Arc<dyn Provider>, ledger: Arc<MemoryLedger>) -> Executor {
    Executor::new(
        vec![provider],
        ledger,
        Arc::new(ManualClock::new(FAKE_EPOCH)) as Arc<dyn Clock>,
    )
}

/// What the ledger says the job holds: the instances of its last record when
/// that is `running`.
async fn recorded(ledger: &MemoryLedger, job: &str) -> Vec<String> {
    match ledger.job_history(job).await.unwrap().last() {
        Some(r) if r.state == JobState::Running => {
            r.instances.iter().map(|i| i.to_string()).collect()
        }
        _ => Vec::new(),
    }
}

/// The invariant: the cloud holds exactly what the ledger records, 4 or
/// (unless `must_run`) 0, and one group with 4 (when groups are used) or none.
async fn check(t: &Target, ledger: &MemoryLedger, job: &str, must_run: bool, case: &str) {
    let mut held = recorded(ledger, job).await;
    held.sort();
    let mut standing = (t.standing)().await;
    standing.sort();
    let groups = (t.groups)().await;
    let history: Vec<(JobState, String)> = ledger
        .job_history(job)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.state, r.detail))
        .collect();
    assert_eq!(
        standing, held,
        "{case}: the cloud holds {standing:?}, the ledger {held:?}; history {history:?}"
    );
    if must_run || !held.is_empty() {
        assert_eq!(held.len(), NODES, "{case}: {held:?}; history {history:?}");
        assert_eq!(
            groups.len(),
            usize::from(t.group),
            "{case}: groups {groups:?}"
        );
    } else {
        assert!(groups.is_empty(), "{case}: orphaned groups {groups:?}");
    }
}

/// One launch through the layers with `faults` inside them; `None` when the
/// launch was dropped at the injected call.
async fn launch(
    t: &Target,
    job: &str,
    provider: Arc<dyn Provider>,
    ledger: Arc<MemoryLedger>,
    hit: Arc<Notify>,
) -> Option<Result<(bool, usize)>> {
    let exec = executor(provider, ledger);
    let template = template(t);
    let run = exec.launch_once(job, &t.spec, &template, None);
    tokio::select! {
        r = run => Some(r.map(|(already, running)| (already, running.instances.len()))),
        () = hit.notified() => None,
        () = tokio::time::sleep(Duration::from_secs(60)) => panic!("a launch took over 60 s"),
    }
}

/// Runs the case, checks, runs again with no fault, checks.
async fn case(
    t: &Target,
    job: &str,
    provider: Arc<dyn Provider>,
    hit: Arc<Notify>,
    name: &str,
) -> bool {
    let ledger = Arc::new(MemoryLedger::new());
    let first = launch(t, job, provider, ledger.clone(), hit).await;
    let dropped = first.is_none();
    if name == "clean" {
        // The run that counts the calls must be a whole launch.
        assert!(matches!(first, Some(Ok(_))), "the clean run: {first:?}");
    }
    if let Some(r) = &first {
        // An error or a timeout: this run ends with 4 or 0 by itself.
        check(
            t,
            &ledger,
            job,
            false,
            &format!("{name}, first run ({r:?})"),
        )
        .await;
    }
    let again = layered(t.raw.clone(), &layers());
    let second = launch(t, job, again, ledger.clone(), Arc::new(Notify::new()))
        .await
        .expect("nothing drops the second run");
    let (_, n) = second.unwrap_or_else(|e| panic!("{name}: the re-run failed: {e}"));

    assert_eq!(n, NODES, "{name}");
    check(t, &ledger, job, true, &format!("{name}, re-run")).await;
    clear(t, &ledger, job, name).await;
    dropped
}

/// Leaves the cloud empty for the next case: rolls back every attempt the
/// ledger knows of.
async fn clear(t: &Target, ledger: &Arc<MemoryLedger>, job: &str, name: &str) {
    let exec = executor(t.raw.clone(), ledger.clone());
    let key_attempts = ledger
        .job_history(job)
        .await
        .unwrap()
        .iter()
        .map(|r| r.attempt)
        .max()
        .unwrap();
    for attempt in 1..=key_attempts {
        let key = gpufleet_runtime::launch_key(job, attempt).unwrap();
        let groups = if t.group {
            t.raw
                .list_placement_groups(
                    &TagFilter::default().with(tags::IDEMPOTENCY_KEY, key.as_str()),
                )
                .await
                .unwrap()
        } else {
            Vec::new()
        };
        exec.roll_back(&t.raw, &key, groups.first(), None)
            .await
            .unwrap();
    }
    assert!((t.standing)().await.is_empty(), "{name}: clean-up left VMs");
    assert!(
        (t.groups)().await.is_empty(),
        "{name}: clean-up left groups"
    );
}

/// The provider-level sweep: every provider call of a clean launch, each
/// mode. Returns the number of calls swept.
async fn provider_sweep(t: &Target) -> usize {
    sweep(t, false).await
}

/// [`provider_sweep`], with the first pool full when `hedged` (each case's
/// first launch is refused for lack of capacity, and the next pools are
/// launched at once).
async fn sweep(t: &Target, hedged: bool) -> usize {
    let base = || -> Arc<dyn Provider> {
        if hedged {
            Arc::new(t.raw.clone().layer(FirstPoolFull::default()))
        } else {
            t.raw.clone()
        }
    };
    // The stand-in's first answers can be slow (moto builds its price
    // history on the first read): read once before the clean run, whose
    // calls must all be the launch's.
    let _ = t
        .raw
        .offers(&gpufleet_core::catalog::OfferQuery::new())
        .await;
    // A clean run counts the calls.
    let calls = Arc::new(AtomicUsize::new(0));
    let counting = base().layer(Faults {
        calls: calls.clone(),
        at: 0,
        mode: Mode::Error,
        hit: Arc::new(Notify::new()),
    });
    let clean = next_job();
    case(
        t,
        &clean,
        layered(counting, &layers()),
        Arc::new(Notify::new()),
        "clean",
    )
    .await;
    let total = calls.load(Ordering::SeqCst);
    assert!(total >= 2, "a launch of {total} calls");
    if hedged {
        // The refused launch, then three at once.
        assert!(total >= 4, "a hedged launch of {total} calls");
    }
    for at in 1..=total {
        for mode in MODES {
            let hit = Arc::new(Notify::new());
            let faulty = base().layer(Faults {
                calls: Arc::new(AtomicUsize::new(0)),
                at,
                mode,
                hit: hit.clone(),
            });
            case(
                t,
                &next_job(),
                layered(faulty, &layers()),
                hit,
                &format!("{:?} call {at}/{total} {mode:?}", t.cloud),
            )
            .await;
        }
    }
    // The clean run's job again, with a ledger that has forgotten it (a
    // wiped ledger, or a second machine): its key was used and ended; the
    // cloud may still hold it bound, and the launch takes the next key.
    case(
        t,
        &clean,
        layered(t.raw.clone(), &layers()),
        Arc::new(Notify::new()),
        "a key whose launch ended",
    )
    .await;
    total
}

/// What a provider lists, by id: its live instances (for clouds whose
/// stand-in is not ours to read: moto), or with `groups` its placement groups.
fn listed(p: Arc<dyn Provider>, groups: bool) -> Lister {
    Box::new(move || {
        let p = p.clone();
        async move {
            let all = TagFilter::default();
            if groups {
                let groups = p.list_placement_groups(&all).await.unwrap();
                return groups.into_iter().map(|g| g.id.to_string()).collect();
            }
            let instances = p.list_instances(&all).await.unwrap();
            instances
                .into_iter()
                .filter(|i| i.state.is_live())
                .map(|i| i.id.to_string())
                .collect()
        }
        .boxed()
    })
}

// ------------------------------------------------------------------ AWS

/// Moto's EC2 as a target: no placement groups (moto answers their calls
/// with HTTP 500), what it holds read through `raw`.
fn moto_target(raw: Arc<dyn Provider>) -> Target {
    Target {
        cloud: Cloud::Aws,
        image: "ami-12c6146b",
        spec: job("aws", "us-east-1", "A10G"),
        group: false,
        raw: raw.clone(),
        standing: listed(raw, false),
        groups: read_now(Vec::new),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_every_provider_call_of_a_launch_can_fail_and_nothing_leaks() {
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let raw: Arc<dyn Provider> = Arc::new(aws::provider(&moto.url, None, "us-east-1").await);
    let t = moto_target(raw);
    let n = provider_sweep(&t).await;
    eprintln!("moto: swept {n} provider calls x 3 faults");
}

/// The hedged path: the chosen pool is full, the next three are launched
/// at once (each has capacity: one wins, two are rolled back), and every
/// call of it fails in turn, is answered late, or has the whole launch
/// dropped under it (every branch with it). On the fake cloud, which passes
/// the conformance suite: moto_server stops answering for seconds under three
/// concurrent 4-instance RunInstances calls, past this sweep's 1 s and 2 s
/// bounds, so every case there fails for the stand-in, not the launch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_a_hedged_launch_can_fail_and_nothing_leaks() {
    let raw: Arc<dyn Provider> =
        Arc::new(gpufleet_core::fake::FakeCloud::from_snapshot(Cloud::Aws));
    let t = Target {
        cloud: Cloud::Aws,
        image: "ami-1",
        spec: job("aws", "us-east-1", "A10G"),
        group: false,
        raw: raw.clone(),
        standing: listed(raw, false),
        groups: read_now(Vec::new),
    };
    let n = sweep(&t, true).await;
    eprintln!("fake cloud, hedged: swept {n} provider calls x 3 faults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec2_stand_in_every_provider_call_of_a_grouped_launch_can_fail_and_nothing_leaks() {
    let (server, _state) = aws::ec2_mock::Ec2Mock::start().await;
    let raw: Arc<dyn Provider> = Arc::new(aws::provider(&server.uri(), None, "us-east-1").await);
    let t = Target {
        cloud: Cloud::Aws,
        image: "ami-12c6146b",
        spec: job("aws", "us-east-1", "A10G"),
        group: true,
        raw: raw.clone(),
        standing: listed(raw.clone(), false),
        groups: listed(raw, true),
    };
    let n = provider_sweep(&t).await;
    eprintln!("EC2 stand-in: swept {n} provider calls x 3 faults");
}

// ------------------------------------------------------------------ GCP

/// Both sweeps against a wiremock stand-in (one with `calls()` and
/// `fail_call(n, fault)`): every provider call of a grouped launch, then
/// every request from the first that changes anything, each failing as
/// `error`, as a `delay` past the timeout, and dropped.
macro_rules! stand_in_sweeps {
    (
        $label:literal, $calls_test:ident, $http_test:ident,
        start: $start:expr,
        provider($server:ident): $provider:expr,
        target: $target:ident,
        error: $error:expr,
        delay: $delay:path,
        mutating: $mutating:expr $(,)?
    ) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $calls_test() {
            let ($server, stand_in) = $start.await;
            let raw: Arc<dyn Provider> = Arc::new($provider.await);
            let n = provider_sweep(&$target(&stand_in, raw)).await;
            eprintln!("{}: swept {n} provider calls x 3 faults", $label);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $http_test() {
            let ($server, stand_in) = $start.await;
            let raw: Arc<dyn Provider> = Arc::new($provider.await);
            let t = $target(&stand_in, raw);
            let fault = |mode| match mode {
                Mode::Error => $error,
                Mode::Timeout => $delay(LATE),
                Mode::Dropped => $delay(Duration::from_secs(30)),
            };
            let n = http_sweep(
                &t,
                &|| stand_in.calls().len(),
                &|| stand_in.calls().iter().map(|(op, _)| op.clone()).collect(),
                &|n, mode| stand_in.fail_call(n, fault(mode)),
                &$mutating,
            )
            .await;
            eprintln!("{}: swept {n} requests x 3 faults", $label);
        }
    };
}

fn gce_target(gce: &gcp::Gce, raw: Arc<dyn Provider>) -> Target {
    let look = gce.clone();
    let policies = gce.clone();
    Target {
        cloud: Cloud::Gcp,
        image: GCE_IMAGE,
        spec: job("gcp", "us-central1", "A100"),
        group: true,
        raw,
        standing: read_now(move || {
            let s = look.0.lock().unwrap();
            let mut out = Vec::new();
            for (zone, list) in &s.instances {
                for (name, body) in list {
                    // The boot disk goes with the VM: no orphaned disk.
                    assert_eq!(
                        body["disks"][0]["autoDelete"],
                        serde_json::json!(true),
                        "{name}"
                    );
                    out.push(format!("{zone}/{name}"));
                }
            }
            out
        }),
        groups: read_now(move || policies.policy_names()),
    }
}

stand_in_sweeps! {
    "GCE stand-in",
    gce_every_provider_call_of_a_grouped_launch_can_fail_and_nothing_leaks,
    gce_every_request_of_a_grouped_launch_can_fail_and_nothing_leaks,
    start: gcp::Gce::start(),
    provider(server): gcp::provider(&server, None),
    target: gce_target,
    error: gcp::Fault::http(503, "backendError"),
    delay: gcp::Fault::Delay,
    mutating: ["insert", "delete"],
}

// ------------------------------------------------------------------ Azure

fn arm_target(arm: &azure::Arm, raw: Arc<dyn Provider>) -> Target {
    let look = arm.clone();
    let groups = arm.clone();
    Target {
        cloud: Cloud::Azure,
        image: AZURE_IMAGE,
        spec: job("azure", "eastus", "A100-80GB"),
        group: true,
        raw,
        standing: read_now(move || {
            look.standing_vms()
                .iter()
                .map(|vm| {
                    let props = &vm["properties"];
                    // The OS disk and the NIC go with the VM.
                    assert_eq!(props["storageProfile"]["osDisk"]["deleteOption"], "Delete");
                    for nic in props["networkProfile"]["networkInterfaceConfigurations"]
                        .as_array()
                        .unwrap()
                    {
                        assert_eq!(nic["properties"]["deleteOption"], "Delete");
                    }
                    format!("{}/{}", azure::RG, vm["name"].as_str().unwrap())
                })
                .collect()
        }),
        groups: read_now(move || groups.group_names()),
    }
}

stand_in_sweeps! {
    "Azure stand-in",
    arm_every_provider_call_of_a_grouped_launch_can_fail_and_nothing_leaks,
    arm_every_request_of_a_grouped_launch_can_fail_and_nothing_leaks,
    start: azure::Arm::start(),
    provider(server): azure::provider(&server),
    target: arm_target,
    error: azure::Fault::http(503, "ServiceUnavailable"),
    delay: azure::Fault::Delay,
    mutating: ["put", "delete"],
}

/// The HTTP-level sweep: every request of a clean launch from the first that
/// changes anything (an operation name containing one of `mutating`; the
/// reads before it are covered by the provider-level sweep), each mode. A
/// dropped case drops the launch once the stand-in has received the faulted
/// request. Returns the number of requests swept.
async fn http_sweep(
    t: &Target,
    count: &(dyn Fn() -> usize + Sync),
    ops: &(dyn Fn() -> Vec<String> + Sync),
    inject: &(dyn Fn(usize, Mode) + Sync),
    mutating: &[&str],
) -> usize {
    // A clean launch names the requests; the second of two, so that the
    // provider's catalog cache is as warm as in every case that follows.
    let mut requests = Vec::new();
    for _ in 0..2 {
        let ledger = Arc::new(MemoryLedger::new());
        let before = count();
        let job = next_job();
        let clean = launch(
            t,
            &job,
            layered(t.raw.clone(), &layers()),
            ledger.clone(),
            Arc::new(Notify::new()),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(clean.1, NODES);
        requests = ops()[before..].to_vec();
        clear(t, &ledger, &job, "clean").await;
    }
    let first = requests
        .iter()
        .position(|op| mutating.iter().any(|m| op.contains(m)))
        .expect("a launch that changes nothing");
    let mut swept = 0;
    for i in first..requests.len() {
        for mode in MODES {
            let start = count();
            let n = start + i + 1;
            inject(n, mode);
            let hit = Arc::new(Notify::new());
            let watcher = {
                let hit = hit.clone();
                let seen = async move {
                    let waited = tokio::time::Instant::now();
                    while count() < n {
                        assert!(
                            waited.elapsed() < Duration::from_secs(30),
                            "request {n} never came"
                        );
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    // Let the request reach its delay before the drop.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    hit.notify_one();
                };
                seen
            };
            let name = format!(
                "{:?} request {}/{} ({}) {mode:?}",
                t.cloud,
                i + 1,
                requests.len(),
                requests[i]
            );
            let provider = layered(t.raw.clone(), &layers());
            if mode == Mode::Dropped {
                let job = next_job();
                let (dropped, ()) = tokio::join!(case(t, &job, provider, hit, &name), watcher);
                assert!(dropped, "{name}: the launch was not dropped");
            } else {
                case(t, &next_job(), provider, Arc::new(Notify::new()), &name).await;
            }
            swept += 1;
        }
    }
    swept / MODES.len()
}

/// Issue 63: a roll-back terminates by key first and never stops at a
/// failed lookup of something it did not create. On moto, whose
/// DescribePlacementGroups answers HTTP 500, a launch that asked for no
/// group, cut off once RunInstances answered (Ctrl-C), used to leave its
/// instances running because the group lookup came first and failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_a_roll_back_terminates_by_key_although_the_group_lookup_fails() {
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let raw: Arc<dyn Provider> = Arc::new(aws::provider(&moto.url, None, "us-east-1").await);
    let hit = Arc::new(Notify::new());
    let cut: Arc<dyn Provider> = raw.clone().layer(DropAfterLaunch(hit.clone()));
    let ledger = Arc::new(MemoryLedger::new());
    let t = moto_target(raw.clone());
    let job = next_job();
    assert!(launch(&t, &job, cut, ledger.clone(), hit).await.is_none());
    assert_eq!((t.standing)().await.len(), NODES, "the launch made nothing");
    let exec = executor(raw.clone(), ledger.clone());
    let rolled = exec.roll_back_unfinished(&job).await.unwrap().unwrap();
    assert_eq!(rolled.terminated, NODES, "{rolled:?}");
    let left = rolled.left.expect("the failed lookup is reported");
    assert!(left.contains("not looked up"), "{left}");
    assert!((t.standing)().await.is_empty(), "instances left running");
    let last = ledger.job_latest(&job).await.unwrap().unwrap();
    assert_eq!(last.state, JobState::Placing);
    assert!(last.detail.contains("reap --yes"), "{}", last.detail);
}

/// Lets the launch call through, then never answers (the process was
/// interrupted once the cloud had acted).
#[derive(Debug)]
struct DropAfterLaunch(Arc<Notify>);

impl Interceptor for DropAfterLaunch {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            let r = next().await;
            if call.operation != Operation::Launch {
                return r;
            }
            self.0.notify_one();
            std::future::pending().await
        }
        .boxed()
    }
}

// ------------------------------------------------- a cancel is final (moto)

/// Holds the launch call (before it reaches the cloud, or after the cloud
/// acted) until released, saying when it got there.
#[derive(Debug)]
struct Gate {
    after_effect: bool,
    reached: Arc<Notify>,
    release: Arc<Notify>,
}

impl Interceptor for Gate {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        async move {
            if call.operation != Operation::Launch {
                return next().await;
            }
            if self.after_effect {
                let r = next().await;
                self.reached.notify_one();
                self.release.notified().await;
                return r;
            }
            self.reached.notify_one();
            self.release.notified().await;
            next().await
        }
        .boxed()
    }
}

/// Issue 63: a cancel is final on the EC2 API. A person cancels a managed
/// job at each step of its launch: while the launch is held before it
/// reaches EC2, once EC2 made the instance but before the controller heard,
/// after the job runs, and with the controller killed while EC2's answer
/// was on its way (the cancel then finds the instance by its job tag, and
/// the reconciliation `jobs serve` runs would end anything still left).
/// Every time the job ends `cancelled`, no record follows the cancel, and
/// nothing of it is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_a_cancel_at_every_step_of_a_launch_is_final() {
    use gpufleet_runtime::controller::{Controller, ControllerConfig, RealTime};
    let Some(moto) = aws::Moto::start() else {
        return;
    };
    let raw: Arc<dyn Provider> = Arc::new(aws::provider(&moto.url, None, "us-east-1").await);
    let file = JobFile::new(2.0, "A10G", 1)
        .named("cancelled")
        .within("aws", &["us-east-1"]);
    for step in ["before", "in-flight", "running", "killed"] {
        let ledger = Arc::new(MemoryLedger::new());
        let (reached, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let gated: Arc<dyn Provider> = raw.clone().layer(Gate {
            after_effect: step != "before",
            reached: reached.clone(),
            release: release.clone(),
        });
        let provider = if step == "running" {
            raw.clone()
        } else {
            gated
        };
        let controller = |p: Arc<dyn Provider>, holder: &str| {
            let exec = Arc::new(Executor::new(
                vec![p],
                ledger.clone(),
                Arc::new(gpufleet_core::clock::SystemClock) as Arc<dyn Clock>,
            ));
            let mut t = LaunchTemplate {
                nodes: 1,
                ..LaunchTemplate::default()
            };
            t.images.insert(Cloud::Aws, "ami-12c6146b".into());
            Controller::new(exec, t, Arc::new(RealTime)).with_config(ControllerConfig {
                poll: Duration::from_secs(1),
                lease_ttl: Duration::from_secs(3),
                holder: holder.into(),
                ..ControllerConfig::default()
            })
        };
        let id = format!("cancel-{step}");
        let ctl = Arc::new(controller(provider, "ctl"));
        ctl.submit(&id, &file).await.unwrap();
        let driving = {
            let (ctl, id) = (ctl.clone(), id.clone());
            tokio::spawn(async move { ctl.drive(&id).await })
        };
        if step == "running" {
            let started = std::time::Instant::now();
            while ledger.job_latest(&id).await.unwrap().map(|r| r.state) != Some(JobState::Running)
            {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{step}: never ran"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            tokio::time::timeout(Duration::from_secs(30), reached.notified())
                .await
                .unwrap_or_else(|_| panic!("{step}: the launch never began"));
        }
        // A person's cancel (no lease), from another process.
        let person = controller(raw.clone(), "a-person");
        let driving = if step == "killed" {
            driving.abort();
            let _ = driving.await;
            None
        } else {
            Some(driving)
        };
        person.cancel(&id).await.unwrap();
        release.notify_one();
        if let Some(driving) = driving {
            let out = tokio::time::timeout(Duration::from_secs(60), driving)
                .await
                .unwrap_or_else(|_| panic!("{step}: the controller never ended"))
                .unwrap()
                .unwrap();
            assert_eq!(out.state, JobState::Cancelled, "{step}: {}", out.detail);
        } else {
            // The killed controller never heard EC2's answer: what the
            // cancel did not end, the next reconciliation would.
            let listed = raw
                .list_instances(&TagFilter::managed().with(tags::JOB, id.as_str()))
                .await
                .unwrap();
            let providers = vec![raw.clone()];
            let seen = gpufleet_runtime::spend::Observed {
                providers: &providers,
                read: vec![Cloud::Aws],
                listed: &listed,
                now: time::OffsetDateTime::now_utc(),
            };
            let owner = listed
                .first()
                .and_then(|i| i.tags.get(tags::OWNER).cloned())
                .unwrap_or_default();
            gpufleet_runtime::spend::reconcile(
                ledger.as_ref(),
                &seen,
                Some(&owner),
                &Default::default(),
                gpufleet_runtime::spend::Apply::SERVE,
            )
            .await
            .unwrap();
        }
        let states: Vec<JobState> = ledger
            .job_history(&id)
            .await
            .unwrap()
            .iter()
            .map(|r| r.state)
            .collect();
        assert_eq!(
            states.last(),
            Some(&JobState::Cancelled),
            "{step}: {states:?}"
        );
        assert!(
            states
                .iter()
                .skip_while(|s| **s != JobState::Cancelled)
                .all(|s| *s == JobState::Cancelled),
            "{step}: a record after the cancel: {states:?}"
        );
        let left: Vec<_> = raw
            .list_instances(&TagFilter::managed().with(tags::JOB, id.as_str()))
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.state.is_live())
            .collect();
        assert!(left.is_empty(), "{step}: left running: {left:?}");
    }
}
