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

/// The manual pacer moves the clock by what is asked and runs each event
/// once, in order of time, whatever order they were given in.
#[tokio::test]
async fn the_manual_pacer_moves_the_clock_and_runs_each_event_once_in_order() {
    use gpufleet_core::clock::{Clock, ManualClock};
    use gpufleet_core::fake::{FakeCloud, FAKE_EPOCH};
    use std::sync::Mutex;

    let clock = ManualClock::new(FAKE_EPOCH);
    let fake = Arc::new(FakeCloud::from_snapshot(Cloud::Aws).with_clock(clock.clone()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (a, b, c) = (seen.clone(), seen.clone(), seen.clone());
    let hours = |h: u64| Duration::from_secs(h * 3600);
    let pacer = ManualPacer::new(clock.clone(), vec![fake.clone()])
        .at(hours(3), move |_| a.lock().unwrap().push("3h"))
        .at(hours(1), move |f| {
            assert_eq!(f.len(), 1);
            b.lock().unwrap().push("1h")
        })
        .at(hours(1), move |_| c.lock().unwrap().push("1h, given later"));
    assert!(format!("{pacer:?}").contains("pending_events: 3"));

    pacer.pause(Duration::from_secs(1800)).await;
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(clock.now(), FAKE_EPOCH + time::Duration::minutes(30));
    pacer.pause(Duration::from_secs(1800)).await;
    assert_eq!(*seen.lock().unwrap(), ["1h", "1h, given later"]);
    pacer.pause(hours(5)).await;
    pacer.pause(hours(5)).await;
    assert_eq!(*seen.lock().unwrap(), ["1h", "1h, given later", "3h"]);
    assert_eq!(clock.now(), FAKE_EPOCH + time::Duration::hours(11));
}

#[test]
fn the_first_move_reviews_of_a_fleet_spread_over_the_period() {
    let every = Duration::from_secs(1800);
    let phases: Vec<i64> = (0..1000)
        .map(|i| super::step::review_phase(&format!("job-{i}"), every).whole_seconds())
        .collect();
    // Within half a period either side, and spread: each tenth of it holds
    // some of the 1,000 (about 100 expected).
    assert!(phases.iter().all(|p| (-900..900).contains(p)), "{phases:?}");
    for tenth in 0..10 {
        let lo = -900 + tenth * 180;
        let n = phases
            .iter()
            .filter(|p| (lo..lo + 180).contains(*p))
            .count();
        assert!(
            (50..=150).contains(&n),
            "{n} of 1,000 in [{lo}, {}) s",
            lo + 180
        );
    }
    // The same job, the same phase.
    assert_eq!(
        super::step::review_phase("job-7", every),
        super::step::review_phase("job-7", every)
    );
}
