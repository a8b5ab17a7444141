//! IMDS `spot/instance-action` and rebalance JSON, and Spot Advisor data.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        gpufleet_aws::fuzzing::imds(text);
    }
});
