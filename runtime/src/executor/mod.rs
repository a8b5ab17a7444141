//! Execution: at every decision point (start, capacity failure, interruption,
//! periodic review) ask the placer ([`gpufleet_core::placer::Placer`], the
//! one `gpufleet place` and the simulator decide through) what to do, and do it: launch where it
//! says; on a capacity error record the failure, drop that pool for this
//! placement and ask again; on an interruption notice checkpoint before the
//! deadline, record the interruption and place the rest of the work again;
//! move a running job only when the policy says the move pays for its
//! changeover; and leave nothing running.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use derive_setters::Setters;
use serde::Serialize;
use time::OffsetDateTime;

use gpufleet_core::clock::Clock;
use gpufleet_core::ledger::{EndedBy, JobRecord, JobState, Ledger};
use gpufleet_core::placer::policy::{Action, Decision};
use gpufleet_core::placer::{
    rank, JobSpec, PlaceRequest, Placement, Placer, Plan, PoolEvent, PoolEventKind, RankContext,
    Ranking, Remaining,
};
use gpufleet_core::{
    fnv1a64, tags, Cloud, Error, ErrorKind, IdempotencyKey, Instance, InterruptionNotice,
    LaunchRequest, NoticeKind, Offer, PlacementGroup, PlacementGroupRequest, PlacementStrategy,
    Pool, Provider, Result, Tags,
};

use gpufleet_core::placer::Workload;

mod decide;
mod launch;
mod lifecycle;
mod once;
mod types;
pub use self::types::*;

/// How many times a launch whose key the cloud still binds to an ended launch
/// (`AlreadyExists`) moves on to the next attempt's key.
const STALE_KEY_RETRIES: u32 = 2;

/// At most this many events are kept in memory (older ones are in the log
/// and, for managed jobs, in the ledger): a long-lived controller's memory
/// stays flat.
const MAX_EVENTS: usize = 256;

/// Places and runs jobs over several providers.
#[derive(Debug, Setters)]
#[setters(generate = false, prefix = "with_", strip_option)]
pub struct Executor {
    providers: Vec<Arc<dyn Provider>>,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    /// Sets the configuration.
    #[setters(generate)]
    config: ExecutorConfig,
    events: Mutex<Vec<ExecEvent>>,
    totals: Totals,
    fences: Arc<crate::lease::Fences>,
}

/// Running totals over the executor's life (the event list keeps only the
/// newest [`MAX_EVENTS`]).
#[derive(Debug, Default)]
struct Totals {
    launched: AtomicU64,
    terminated: AtomicU64,
}

impl Executor {
    /// An executor over `providers` (one per cloud). Its records of a job
    /// this process holds a lease on carry the lease's fencing token (see
    /// [`crate::lease`]).
    pub fn new(
        providers: Vec<Arc<dyn Provider>>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let fences = Arc::new(crate::lease::Fences::default());
        Executor {
            providers,
            ledger: Arc::new(crate::lease::FencedLedger::new(
                ledger,
                crate::lease::FenceStamp(fences.clone()),
            )),
            fences,
            clock,
            config: ExecutorConfig::default(),
            events: Mutex::new(Vec::new()),
            totals: Totals::default(),
        }
    }

    /// Decides through `placer` (the one the embedding program or the CLI
    /// built from its settings; default [`Placer::default`]).
    pub fn with_placer(mut self, placer: Placer) -> Self {
        self.config.placer = placer;
        self
    }

    /// Scopes launch keys and group names to `scope` ([`launch_scope`]).
    pub fn with_key_scope(mut self, scope: impl Into<String>) -> Self {
        self.config.key_scope = Some(scope.into());
        self
    }

    /// The idempotency key of launch `attempt` of `job_id`, in this
    /// executor's scope.
    pub fn launch_key(&self, job_id: &str, attempt: u32) -> Result<IdempotencyKey> {
        launch_key(
            &scoped_id(job_id, self.config.key_scope.as_deref()),
            attempt,
        )
    }

    /// The name of launch `attempt`'s placement group, in this executor's
    /// scope.
    pub fn group_name(&self, job_id: &str, attempt: u32) -> String {
        placement_group_name(
            &scoped_id(job_id, self.config.key_scope.as_deref()),
            attempt,
        )
    }

    /// The placer every decision goes through.
    pub fn placer(&self) -> &Placer {
        &self.config.placer
    }

    /// The fencing tokens of the leases this process holds.
    pub fn fences(&self) -> &Arc<crate::lease::Fences> {
        &self.fences
    }

    /// What happened so far.
    pub fn events(&self) -> Vec<ExecEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn emit(&self, event: ExecEvent) {
        tracing::info!(?event, "gpufleet executor");
        match &event {
            ExecEvent::Launched { instances, .. } => {
                self.totals
                    .launched
                    .fetch_add(*instances as u64, Ordering::Relaxed);
            }
            ExecEvent::Terminated { instances, .. } => {
                self.totals
                    .terminated
                    .fetch_add(*instances as u64, Ordering::Relaxed);
            }
            _ => {}
        }
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() >= MAX_EVENTS {
            events.drain(..MAX_EVENTS / 2);
        }
        events.push(event);
    }

    /// Instances launched and terminated over the executor's life.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.totals.launched.load(Ordering::Relaxed),
            self.totals.terminated.load(Ordering::Relaxed),
        )
    }

    /// The providers, one per cloud.
    pub fn providers(&self) -> &[Arc<dyn Provider>] {
        &self.providers
    }

    /// The executor's settings.
    pub fn settings(&self) -> &ExecutorConfig {
        &self.config
    }

    /// The ledger it records to.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// The clock it reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The provider of `cloud`, if it has one.
    pub fn provider(&self, cloud: Cloud) -> Option<&Arc<dyn Provider>> {
        gpufleet_core::provider_for(&self.providers, cloud).ok()
    }
}
