//! `gpufleet tf-external` queries (Terraform's external protocol).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = gpufleet_core::placer::external::parse_query(text, gpufleet_core::Snapshot::embedded());
    }
});
