//! How long loading the embedded catalog takes (target: under 20 ms).
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use gpufleet_core::{Capacity, GpuModel, OfferQuery, Snapshot};

fn bench(c: &mut Criterion) {
    let text = Snapshot::embedded().to_text();
    c.bench_function("catalog/parse_embedded", |b| {
        b.iter(|| Snapshot::parse(std::hint::black_box(&text)))
    });
    let snapshot = Snapshot::embedded();
    let query = OfferQuery::new()
        .gpu(GpuModel::H100, Some(8))
        .capacity(Capacity::Spot);
    c.bench_function("catalog/query_h100x8_spot", |b| {
        b.iter(|| snapshot.query(std::hint::black_box(&query)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
