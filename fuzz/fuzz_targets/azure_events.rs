//! Azure Scheduled Events documents.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(events) = gpufleet_azure::interruption::parse_events(text, time::OffsetDateTime::UNIX_EPOCH) {
            for (_, n) in &events {
                let _ = gpufleet_azure::interruption::event_id(n);
            }
        }
    }
});
