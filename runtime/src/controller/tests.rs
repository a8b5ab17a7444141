use super::*;

/// 1,000 random names, long, unicode, sharing prefixes: every one gets a
/// valid job id and valid keys, no two alike, and nothing panics.
#[test]
fn a_thousand_hostile_names_never_share_a_key() {
    let alphabet: Vec<char> = "aZ09-_.训练🚀éß \u{202e}\u{0}/:#%ǅ".chars().collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut names = std::collections::BTreeSet::new();
    let shared = "a-very-long-common-prefix-that-fills-sixty-four-bytes-of-the-name";
    while names.len() < 1_000 {
        let len = (next() % 120) as usize;
        let mut name: String = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        if next() % 3 == 0 {
            name = format!("{shared}{name}");
        }
        if !name.is_empty() {
            names.insert(name);
        }
    }
    let mut ids = std::collections::HashSet::new();
    let mut keys = std::collections::HashSet::new();
    for name in &names {
        let id = job_id_for_name(name);
        check_job_id(&id).unwrap_or_else(|e| panic!("{name:?} -> {id:?}: {e}"));
        assert!(ids.insert(id.clone()), "two names share the id {id}");
        for attempt in [1, 2, 17, u32::MAX] {
            let key = crate::executor::launch_key(&id, attempt).unwrap();
            // Its placement group's name holds the key and is valid on
            // GCP (the strictest: 63 characters, [a-z0-9-]).
            let group = crate::executor::placement_group_name(&id, attempt);
            assert_eq!(group, format!("gpufleet-{key}"));
            assert!(group.len() <= 63, "{group}");
            assert!(
                group
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{group}"
            );
            assert!(
                keys.insert(key.to_string()),
                "two names share the key {key}"
            );
        }
    }
    assert_eq!(keys.len(), 4_000);
}
