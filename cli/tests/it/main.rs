//! Integration tests of the gpufleet command (each runs the built binary).
//!
//! One test binary for the crate's integration tests (each file below was
//! its own binary): every binary links the whole dependency tree, and one
//! link instead of many keeps a CI build's disk and time down. Tests that
//! must own their process (a process-wide count, environment variables)
//! stay binaries of their own beside this one.

mod support;

mod advisor;
mod agent;
mod config;
mod controllers;
mod docs;
mod fault_sweep;
mod jobs;
mod live_aws;
mod live_gcp_azure;
mod local_run;
mod offers;
mod operator;
mod owners;
mod place;
mod refusals;
mod serve;
mod simulate;
mod tf_external;
mod watch;
