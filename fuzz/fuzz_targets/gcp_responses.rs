//! Compute Engine and Cloud Billing response bodies -> gpufleet's model.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpufleet_gcp::fuzzing::responses(data);
});
