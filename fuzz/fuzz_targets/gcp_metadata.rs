//! GCE metadata values (`instance/preempted`, `instance/maintenance-event`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        gpufleet_gcp::fuzzing::metadata(text);
    }
});
