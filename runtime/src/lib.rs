//! gpufleet's runtime: everything that acts on clouds on a job's behalf.
//!
//! - [`config`]: the settings from `gpufleet.toml`, the environment and
//!   flags (or a program's own values), each with where it came from;
//! - [`factory`]: the one way a provider is opened, always behind the
//!   timeout, retry and tracing layers;
//! - [`fleet`]: the providers a [`config::Config`] enables, opened through
//!   the factory (or the fake cloud kept in a state file);
//! - [`executor`]: places a job with the ledger's evidence and the one
//!   placement policy, launches it with failover, re-places it after an
//!   interruption and moves it when moving pays;
//! - [`controller`]: the job controller behind `gpufleet run`, which keeps a
//!   job going to completion across interruptions, capacity errors and its
//!   own crashes, with every transition in the ledger;
//! - [`workload`]: the boot script a managed job's instances run;
//! - [`reap`]: finding and terminating what gpufleet launched and nothing
//!   holds, and the cost of what runs;
//! - [`ledgers`]: opening the ledger a location names.
//!
//! Features: `sqlite` (default) is the SQLite ledger (`sqlite`),
//! `postgres` the PostgreSQL one (`postgres`), `agent` the node agent's GPU
//! runner, signals, GPU readers and metrics endpoint (`agent`, `gpu`); `aws`, `gcp`, `azure`
//! (default) the providers the factory can open. Without `postgres` and
//! `agent`, the crate builds no PostgreSQL driver, NVML or HTTP server.
//!
//! `gpufleet-core` holds the model, the policy and the simulator; this crate
//! is where they meet the providers. Dependencies point one way: `cli ->
//! gpufleet -> gpufleet-runtime -> providers -> core`.

#[cfg(feature = "agent")]
pub mod agent;
pub mod clouds;
pub mod config;
pub mod controller;
pub mod executor;
pub mod factory;
pub mod fake_script;
pub mod fake_store;
pub mod fleet;
#[cfg(feature = "agent")]
pub mod gpu;
pub mod input;
pub mod jobs;
pub mod lease;
pub mod ledgers;
pub mod live;
#[cfg(feature = "serve")]
pub mod local;
pub mod names;
pub mod pacer;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod private_fs;
pub mod reap;
pub mod report;
#[cfg(feature = "serve")]
pub mod serve;
pub mod spend;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod verbs;
pub mod workload;

pub use controller::{
    Controller, ControllerConfig, ManualPacer, Outcome, Pacer, RealTime, ServeConfig, ServeReport,
};
pub use executor::{
    launch_key, CheckpointHook, ExecEvent, Executor, ExecutorConfig, LaunchTemplate, NoCheckpoint,
    RunningJob,
};
pub use factory::{open, open_with, Layers, Settings};

/// Resolves when the process is asked to stop, by Ctrl-C (SIGINT), SIGTERM
/// or SIGHUP (a closed terminal), with the signal's name.
pub async fn stopped() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let wait = |kind: SignalKind, name: &'static str| async move {
            if let Ok(mut s) = signal(kind) {
                if s.recv().await.is_some() {
                    return name;
                }
            }
            std::future::pending().await
        };
        tokio::select! {
            n = wait(SignalKind::interrupt(), "Ctrl-C") => n,
            n = wait(SignalKind::terminate(), "SIGTERM") => n,
            n = wait(SignalKind::hangup(), "SIGHUP") => n,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
