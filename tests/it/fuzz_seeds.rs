//! Every fuzz target's seed corpus (`fuzz/corpus/`) through the same entry
//! points the targets call, so CI catches a seed that starts to panic
//! without running the fuzzer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(!out.is_empty(), "no seeds for {target}");
    // Truncated copies too: the cheapest malformed input there is.
    let cut: Vec<Vec<u8>> = out.iter().map(|s| s[..s.len() / 2].to_vec()).collect();
    out.extend(cut);
    out
}

fn text(data: &[u8]) -> &str {
    std::str::from_utf8(data).unwrap_or("")
}

#[test]
fn every_seed_goes_through_its_target() {
    for s in seeds("job_spec") {
        let _ = gpufleet::placer::JobSpec::from_toml(text(&s));
        let _ = gpufleet::placer::JobSpec::from_json(text(&s));
    }
    for s in seeds("catalog") {
        if let Ok(c) = gpufleet::Snapshot::parse(text(&s)) {
            gpufleet::Snapshot::parse(&c.to_text()).unwrap();
        }
    }
    for s in seeds("tf_external") {
        let _ = gpufleet::placer::external::parse_query(text(&s), gpufleet::Snapshot::embedded());
    }
    for s in seeds("aws_imds") {
        gpufleet::aws::fuzzing::imds(text(&s));
    }
    for s in seeds("gcp_metadata") {
        gpufleet::gcp::fuzzing::metadata(text(&s));
    }
    for s in seeds("azure_events") {
        let _ =
            gpufleet::azure::interruption::parse_events(text(&s), time::OffsetDateTime::UNIX_EPOCH);
    }
    for s in seeds("gcp_responses") {
        gpufleet::gcp::fuzzing::responses(&s);
    }
    for s in seeds("azure_responses") {
        gpufleet::azure::fuzzing::responses(&s);
    }
}

#[test]
fn the_full_seeds_parse() {
    // The seeds are real-shaped documents, not noise: the whole ones parse.
    let full = |t: &str, name: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fuzz/corpus")
                .join(t)
                .join(name),
        )
        .unwrap()
    };
    gpufleet::placer::JobSpec::from_toml(&full("job_spec", "full.toml")).unwrap();
    gpufleet::placer::external::parse_query(
        &full("tf_external", "full.json"),
        gpufleet::Snapshot::embedded(),
    )
    .unwrap();
    gpufleet::Snapshot::parse(&full("catalog", "head.txt")).unwrap();
    let events = gpufleet::azure::interruption::parse_events(
        &full("azure_events", "preempt.json"),
        time::OffsetDateTime::UNIX_EPOCH,
    )
    .unwrap();
    assert_eq!(events.len(), 1);
}
