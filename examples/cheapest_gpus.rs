//! The cheapest GPU-hour per model across AWS, GCP and Azure, from the catalog
//! snapshot compiled into gpufleet (no credentials needed).
//!
//! `cargo run --example cheapest_gpus`

use gpufleet::catalog::sort_offers;
use gpufleet::prelude::*;
use gpufleet::KNOWN_GPU_MODELS;

fn main() {
    let snapshot = Snapshot::embedded();
    println!(
        "{:<11} {:>14} {:>14}  where (spot)",
        "GPU", "on-demand $/h", "spot $/h"
    );
    for model in KNOWN_GPU_MODELS {
        let cheapest = |capacity| {
            let mut offers = snapshot.query(
                &OfferQuery::new()
                    .gpu(model.clone(), None)
                    .capacity(capacity),
            );
            sort_offers(&mut offers, OfferSort::PricePerGpu);
            offers.into_iter().next()
        };
        let (Some(od), spot) = (cheapest(Capacity::OnDemand), cheapest(Capacity::Spot)) else {
            continue;
        };
        println!(
            "{:<11} {:>14} {:>14}  {}",
            model.as_str(),
            od.price_per_gpu().display(4).to_string(),
            spot.as_ref()
                .map_or("-".into(), |s| s.price_per_gpu().display(4).to_string()),
            spot.as_ref().map_or(String::new(), |s| s.pool.to_string()),
        );
    }
}
