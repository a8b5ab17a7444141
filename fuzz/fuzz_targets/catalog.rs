//! The embedded / cached catalog loader.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(s) = gpufleet_core::Snapshot::parse(text) {
            // What parses must print and parse again.
            let again = gpufleet_core::Snapshot::parse(&s.to_text());
            assert!(again.is_ok(), "to_text of a parsed catalog does not parse");
        }
    }
});
