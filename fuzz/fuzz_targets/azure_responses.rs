//! Azure Resource Manager, Retail Prices and Resource Graph bodies ->
//! gpufleet's model.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpufleet_azure::fuzzing::responses(data);
});
