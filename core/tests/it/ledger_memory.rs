//! The ledger conformance suite on the in-memory ledger.
#![cfg(feature = "conformance")]

gpufleet_core::ledger_conformance!(async { Some(gpufleet_core::ledger::MemoryLedger::new()) });
