//! Integration tests of gpufleet-gcp against wiremock stand-ins.
//!
//! One test binary for the crate's integration tests (each file below was
//! its own binary): every binary links the whole dependency tree, and one
//! link instead of many keeps a CI build's disk and time down. Tests that
//! must own their process (a process-wide count, environment variables)
//! stay binaries of their own beside this one.

mod behaviour;
mod conformance;
