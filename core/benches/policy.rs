//! One placement decision (48 h job, 72 h deadline, 10-minute changeover,
//! 10-minute planning step) over 10, 100 and 1,000 candidate pools: the
//! decision `place`, the executor and the simulator share; and two shorter
//! jobs whose solve fits a third pool.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpufleet_core::placer::policy::{
    decide, AvailState, Availability, Candidate, HazardBasis, JobState, PolicyConfig,
};
use gpufleet_core::{Capacity, Price};

/// `n` candidates: spot pools with prices, speeds, hazards and states spread
/// out (a tenth in an outage), and one on-demand pool per ten spot pools.
pub fn candidates(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| {
            let od = i % 10 == 9;
            let speed = [1.0, 2.2, 2.6, 4.4][i % 4];
            let state = match i % 10 {
                3 => AvailState::OutageYoung,
                7 => AvailState::OutageOld,
                5 => AvailState::Fresh,
                _ => AvailState::Up,
            };
            let base = (1_000_000 + (i as i64 * 7919) % 900_000) * speed as i64;
            Candidate {
                label: format!("pool-{i}"),
                price: Price::from_micros_per_hour(if od { base * 3 } else { base }),
                work_rate: speed,
                capacity: if od {
                    Capacity::OnDemand
                } else {
                    Capacity::Spot
                },
                availability: Availability::from_hazard(state, 0.05 + (i % 13) as f64 * 0.05, 3.0),
                basis: HazardBasis::Published("bench".into()),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let job = JobState {
        work_left_hours: 48.0,
        time_left_hours: Some(72.0),
        changeover_hours: 1.0 / 6.0,
        current: None,
    };
    let config = PolicyConfig::default();
    let mut g = c.benchmark_group("decide 48h job, 72h deadline");
    g.sample_size(10);
    for n in [10usize, 100, 1000] {
        let cands = candidates(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &cands, |b, cands| {
            b.iter(|| decide(&job, cands, &config).expect("decision"))
        });
    }
    g.finish();
    // Shorter jobs fit a third pool in the solve budget: the same decision
    // with three pools modelled jointly (20 h / 24 h is 3.2 million cells,
    // near the default budget's edge).
    let mut g = c.benchmark_group("decide with a third pool, 10 pools");
    g.sample_size(10);
    for (work, deadline) in [(12.0, 24.0), (20.0, 24.0)] {
        let job = JobState {
            work_left_hours: work,
            time_left_hours: Some(deadline),
            ..job
        };
        let cands = candidates(10);
        assert_eq!(
            decide(&job, &cands, &config)
                .expect("decision")
                .shortlist
                .len(),
            3
        );
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{work}h job, {deadline}h deadline")),
            &cands,
            |b, cands| b.iter(|| decide(&job, cands, &config).expect("decision")),
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
