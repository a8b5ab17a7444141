//! Each verb's orchestration, written once for every front end: the CLI
//! keeps its flags, terminal and printing, the Python bindings their
//! conversions, and both call these.
//!
//! - [`Site`]: where a verb acts (the configured clouds and ledger, or fake
//!   clouds a program holds in memory) and how its clouds are opened;
//! - [`input`]: a job from a file, a document or flags, read into a
//!   [`JobSpec`](gpufleet_core::placer::JobSpec) once, against the live
//!   catalog cache;
//! - [`run`]: submit a managed job, resume one, drive it to its end or
//!   until the caller says stop; [`jobs`]: cancel one, serve the ledger's;
//! - [`launch`]: place and launch instances under an idempotency key,
//!   rolled back when the caller says stop;
//! - [`instances`]: `ls`, `terminate` and `reap` over the clouds a caller
//!   opened; [`spend`]: `costs` and `reconcile`;
//! - [`simulate`]: traces replayed for one scenario or the grid, with a
//!   progress callback;
//! - `serve` (with the `serve` feature): a service run in the foreground,
//!   and `serve ls`, `status`, `down`, `update` through the ledger.

pub mod fit;
pub mod input;
pub mod instances;
pub mod jobs;
pub mod launch;
pub mod place;
pub mod run;
#[cfg(feature = "serve")]
pub mod serve;
pub mod simulate;
mod site;
pub mod spend;

pub use site::{InMemory, Opening, Site};
