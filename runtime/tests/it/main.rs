//! Integration tests of gpufleet-runtime.
//!
//! One test binary for the crate's integration tests (each file below was
//! its own binary): every binary links the whole dependency tree, and one
//! link instead of many keeps a CI build's disk and time down. Tests that
//! must own their process (a process-wide count, environment variables)
//! stay binaries of their own beside this one.

mod controller;
#[cfg(all(feature = "aws", feature = "gcp", feature = "azure"))]
mod controller_clouds;
#[cfg(feature = "sqlite")]
mod gpu_usage;
#[cfg(feature = "aws")]
mod interruption_queue;
#[cfg(all(feature = "aws", feature = "gcp", feature = "azure"))]
mod launch_faults;
#[cfg(feature = "postgres")]
mod ledger_postgres;
#[cfg(feature = "sqlite")]
mod ledger_sqlite;
mod placer_exec;
#[cfg(feature = "postgres")]
mod secrets_in_urls;
#[cfg(feature = "serve")]
mod serve_clouds;
#[cfg(feature = "serve")]
mod serve_hostile;
#[cfg(all(feature = "serve", feature = "postgres"))]
mod serve_lease;
#[cfg(feature = "serve")]
mod serve_local;
#[cfg(feature = "serve")]
mod serve_proxy;
mod spend;
#[cfg(feature = "serve")]
mod verbs;
