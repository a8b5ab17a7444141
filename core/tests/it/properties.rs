//! Property tests for money, the cost model and ranking.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::placer::cost::RunModel;
use gpufleet_core::placer::{rank, HazardModel, JobSpec, RankContext};
use gpufleet_core::*;
use proptest::prelude::*;

fn run(hazard: f64, work: f64, interval: f64, ckpt: f64, restart: f64) -> RunModel {
    RunModel {
        work,
        hazard,
        interval,
        checkpoint_cost: ckpt,
        restart,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// More hazard never makes a run shorter; a higher price never makes it cheaper.
    #[test]
    fn expected_cost_is_monotone_in_hazard_and_price(
        h1 in 0.0f64..3.0, dh in 0.0f64..3.0,
        work in 0.1f64..200.0, interval in 0.05f64..8.0,
        ckpt in 0.0f64..0.5, restart in 0.0f64..1.0,
        p1 in 1u32..200_000_000, dp in 0u32..100_000_000,
    ) {
        let a = run(h1, work, interval, ckpt, restart).expected_hours();
        let b = run(h1 + dh, work, interval, ckpt, restart).expected_hours();
        prop_assert!(b >= a * (1.0 - 1e-12), "hazard {h1} -> {}: {a} h -> {b} h", h1 + dh);
        if a.is_finite() && a < 1e6 {
            let price = Price::from_micros_per_hour(i64::from(p1));
            let dearer = Price::from_micros_per_hour(i64::from(p1) + i64::from(dp));
            let ca = price.cost_for_hours(a).unwrap();
            prop_assert!(dearer.cost_for_hours(a).unwrap() >= ca);
            // A longer run costs more, or more than money can hold (an
            // error, never a clamped figure).
            match price.cost_for_hours(b) {
                Ok(cb) => prop_assert!(cb >= ca),
                Err(e) => prop_assert!(e.to_string().contains("beyond"), "{e}"),
            }
        }
    }

    /// On realistic ranges (up to $1,000 an hour, ten years of hours) money
    /// neither overflows nor loses a cent: whole seconds cost exactly the
    /// price times the time, to the micro-dollar.
    #[test]
    fn price_arithmetic_is_exact_on_realistic_ranges(
        micros in 0i64..1_000_000_000, secs in 0u64..315_360_000,
    ) {
        let p = Price::from_micros_per_hour(micros);
        let cost = p.cost_for_seconds(secs).unwrap();
        let exact = (i128::from(micros) * i128::from(secs) + 1800) / 3600;
        prop_assert!((i128::from(cost.micros()) - exact).abs() <= 1, "{micros} x {secs}s = {}", cost.micros());
        let sum = cost.checked_add(cost);
        prop_assert!(sum.is_some());
        let text = p.display(6).to_string();
        prop_assert_eq!(text.parse::<Price>().unwrap(), p);
    }
}

fn offer(
    itype: &Arc<InstanceType>,
    capacity: Capacity,
    price: Price,
    rate: Option<f64>,
    zone: &str,
) -> Offer {
    Offer {
        pool: Pool {
            cloud: Cloud::Aws,
            region: Region::new("us-east-1"),
            zone: Some(Zone::new(zone)),
            instance_type: itype.name.clone(),
            capacity,
        },
        instance_type: itype.clone(),
        zone_name: None,
        price,
        observed_at: time::macros::datetime!(2026-01-01 00:00 UTC),
        effective_at: None,
        source: PriceSource::new(SourceKind::User, "prop"),
        stability: Stability {
            interruption_rate_per_hour: rate,
            ..Stability::default()
        },
    }
}

fn a100() -> Arc<InstanceType> {
    Arc::new(InstanceType {
        cloud: Cloud::Aws,
        name: "p4d.24xlarge".into(),
        gpu: Some(GpuSpec {
            model: GpuModel::A100,
            count: 8,
            memory_gib: 40,
        }),
        vcpus: 96,
        memory_mib: 1_179_648,
        interconnect: Interconnect::BASIC,
    })
}

fn ranked(job: &JobSpec, offers: &[Offer]) -> Vec<Pool> {
    let model = HazardModel::default();
    let evidence = HashMap::new();
    rank(
        job,
        offers,
        &RankContext {
            now: time::macros::datetime!(2026-01-02 00:00 UTC),
            model: &model,
            evidence: &evidence,
            limit: 100,
        },
    )
    .feasible()
    .map(|p| p.offer.pool.clone())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// An on-demand pool is never ranked above a spot pool at the same price
    /// that never interrupts.
    #[test]
    fn on_demand_never_beats_an_equal_priced_spot_pool_with_zero_hazard(
        micros in 100_000i64..60_000_000, hours in 0.5f64..100.0,
    ) {
        let t = a100();
        let p = Price::from_micros_per_hour(micros);
        let offers = [
            offer(&t, Capacity::OnDemand, p, None, "use1-az1"),
            offer(&t, Capacity::Spot, p, Some(0.0), "use1-az1"),
        ];
        let job = JobSpec::builder("j", GpuModel::A100, 8, hours).build().unwrap();
        let order = ranked(&job, &offers);
        prop_assert_eq!(order[0].capacity, Capacity::Spot);
    }

    /// The same offers in any order rank the same; a rising spot price or
    /// hazard never lowers that pool's expected cost.
    #[test]
    fn ranking_is_deterministic_and_monotone(
        prices in proptest::collection::vec(1_000_000i64..40_000_000, 2..12),
        rates in proptest::collection::vec(0.0f64..2.0, 12),
        seed in 0u64..1000, bump in 1i64..5_000_000, dh in 0.01f64..1.0,
    ) {
        let t = a100();
        let offers: Vec<Offer> = prices
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let cap = if i % 3 == 0 { Capacity::OnDemand } else { Capacity::Spot };
                offer(&t, cap, Price::from_micros_per_hour(*p), Some(rates[i]), &format!("use1-az{i}"))
            })
            .collect();
        let job = JobSpec::builder("j", GpuModel::A100, 8, 10.0)
            .deadline(Duration::from_secs(72 * 3600))
            .build()
            .unwrap();
        let first = ranked(&job, &offers);
        let mut shuffled = offers.clone();
        let n = shuffled.len();
        for i in 0..n {
            shuffled.swap(i, (seed as usize * 31 + i * 17) % n);
        }
        prop_assert_eq!(&first, &ranked(&job, &shuffled));
        // Make one spot pool dearer and riskier: its expected cost cannot fall.
        let model = HazardModel::default();
        let evidence = HashMap::new();
        let ctx = RankContext { now: time::macros::datetime!(2026-01-02 00:00 UTC), model: &model, evidence: &evidence, limit: 100 };
        let cost_of = |offers: &[Offer], pool: &Pool| {
            rank(&job, offers, &ctx).plans.iter().find(|p| &p.offer.pool == pool).map(|p| p.expected_cost)
        };
        if let Some(i) = (0..n).find(|i| offers[*i].pool.capacity == Capacity::Spot) {
            let before = cost_of(&offers, &offers[i].pool);
            let mut worse = offers.clone();
            worse[i].price = Price::from_micros_per_hour(prices[i] + bump);
            worse[i].stability.interruption_rate_per_hour = Some(rates[i] + dh);
            let after = cost_of(&worse, &offers[i].pool);
            if let (Some(b), Some(a)) = (before, after) {
                prop_assert!(a >= b, "{b} -> {a}");
            }
        }
    }
}
