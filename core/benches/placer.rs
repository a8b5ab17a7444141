//! Ranking a job against 100,000 offers (target: under 10 ms on 2 cores).
#![allow(missing_docs)]

use std::collections::HashMap;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use gpufleet_core::placer::{rank, HazardModel, JobSpec, RankContext};
use gpufleet_core::{GpuModel, Offer, Price, Region, Snapshot};

/// 100,000 offers: the embedded catalog replicated into synthetic regions with
/// prices varied by a few percent, so nothing is a duplicate.
fn offers(n: usize) -> Vec<Offer> {
    let base = Snapshot::embedded().offers();
    (0..n)
        .map(|i| {
            let mut o = base[i % base.len()].clone();
            let copy = i / base.len();
            o.pool.region = Region::new(format!("{}-x{copy}", o.pool.region));
            o.price = Price::from_micros_per_hour(
                o.price.micros_per_hour() * (100 + (i % 7) as i64) / 100,
            );
            o
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let offers = offers(100_000);
    let job = JobSpec::builder("bench", GpuModel::H100, 8, 20.0)
        .or_gpu(GpuModel::A100_80GB, 8)
        .or_gpu(GpuModel::A100, 8)
        .deadline(Duration::from_secs(48 * 3600))
        .build()
        .expect("valid job");
    let model = HazardModel::default();
    let evidence = HashMap::new();
    let ctx = RankContext {
        now: gpufleet_core::fake::FAKE_EPOCH,
        model: &model,
        evidence: &evidence,
        limit: 20,
    };
    c.bench_function("placer/rank_100k_offers", |b| {
        b.iter(|| {
            rank(
                std::hint::black_box(&job),
                std::hint::black_box(&offers),
                &ctx,
            )
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
