//! Job spec files (`gpufleet place --job FILE`), TOML and JSON.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = gpufleet_core::placer::JobSpec::from_toml(text);
        let _ = gpufleet_core::placer::JobSpec::from_json(text);
    }
});
