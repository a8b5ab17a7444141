//! The node agent's per-sample work: adding one 8-GPU reading to the
//! 15-minute window and summarising it (what `gpufleet watch` does every
//! `--sample`, 10 s by default), and a whole day of samples.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use gpufleet_core::usage::{uniform, UsageWindow};
use time::OffsetDateTime;

fn bench(c: &mut Criterion) {
    let t0 = OffsetDateTime::from_unix_timestamp(1_767_949_980).expect("a valid time");
    let readings = uniform(8, 37, 20_480, 81_920);
    // A window that has been running for a while (full).
    let mut w = UsageWindow::default();
    for s in 0..200 {
        w.add(t0 + time::Duration::seconds(s * 10), &readings)
            .expect("in order");
    }
    let mut next = 200i64;
    c.bench_function("usage/sample+summary (8 GPUs)", |b| {
        b.iter(|| {
            next += 1;
            w.add(t0 + time::Duration::seconds(next * 10), &readings)
                .expect("in order");
            std::hint::black_box(w.summary())
        })
    });
    c.bench_function("usage/one day at 10 s (8,640 samples)", |b| {
        b.iter(|| {
            let mut w = UsageWindow::default();
            for s in 0..8_640 {
                w.add(t0 + time::Duration::seconds(s * 10), &readings)
                    .expect("in order");
            }
            std::hint::black_box(w.summary())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
