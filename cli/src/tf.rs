//! `gpufleet tf-external`: Terraform's `external` data source protocol.
//!
//! Terraform runs the program with the `query` object on stdin (a flat JSON
//! object of strings) and reads a flat JSON object of strings from stdout; a
//! failure is a non-zero exit with the reason on stderr.

use std::collections::BTreeMap;
use std::io::Read;

use gpufleet::placer::external::{parse_query, ExternalQuery};
use gpufleet::placer::policy::Action;
use gpufleet::placer::PlaceRequest;
use gpufleet::runtime::verbs;
use gpufleet::Error;

use crate::shared::Failure;

fn bad(why: String) -> Failure {
    Failure::Error(Error::invalid_input(why))
}

/// The largest query read from stdin: Terraform's query is a handful of
/// short strings; anything bigger is refused, not buffered.
pub const MAX_QUERY_BYTES: u64 = 64 * 1024;

/// Reads the query from stdin and prints where the placement policy starts
/// the job: the decision `place` prints for the same job, from the same
/// ranking and the same ledger evidence. The global flags (`--config`, …)
/// apply as for every command: the catalog is the one `catalog refresh`
/// cached under that config.
pub fn run(flags: gpufleet::runtime::config::Flags) -> Result<(), Failure> {
    // A config that does not load is an error here too; its enabled clouds
    // are the query's when it names none.
    let cfg = gpufleet::runtime::config::Config::load(&flags)?;
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_QUERY_BYTES + 1)
        .read_to_string(&mut input)
        .map_err(|e| bad(format!("cannot read the query from stdin: {e}")))?;
    if input.len() as u64 > MAX_QUERY_BYTES {
        return Err(bad(format!(
            "the query on stdin is over {MAX_QUERY_BYTES} bytes; Terraform's external data source sends a flat object of a few strings"
        )));
    }
    let (catalog, _) = gpufleet::runtime::live::cache::current(&cfg);
    let snapshot = &catalog;
    let ExternalQuery {
        mut job,
        capacity,
        max_price,
        count,
        ..
    } = parse_query(&input, snapshot)?;
    job.clouds = cfg.clouds_or_enabled(&job.clouds);
    // The price limit bounds what may be launched, so it bounds the
    // policy's fallback too; the capacity only bounds the answer: a spot
    // pool's worth counts on-demand to fall back on, as it does when the
    // job runs.
    let offers: Vec<_> = snapshot
        .offers()
        .iter()
        .filter(|o| max_price.is_none_or(|m| o.price <= m))
        .cloned()
        .collect();
    let above_price = snapshot.offers().len() - offers.len();
    let now = time::OffsetDateTime::now_utc();
    let placer = cfg.placer();
    let site = crate::shared::site(&cfg);
    let evidence = crate::shared::runtime()?.block_on(verbs::place::evidence(&site, now, false))?;
    let mut placement =
        placer.place(&PlaceRequest::new(&job, &offers, &evidence, now).nodes(count))?;
    if let Some(m) = max_price.filter(|_| above_price > 0) {
        let ranking = &mut placement.ranking;
        ranking.considered += above_price;
        ranking
            .excluded
            .insert(format!("above max_price ${}/h", m.display(2)), above_price);
    }
    let ranking = &placement.ranking;
    // Nothing feasible is what `place` refuses too (exit 3), even though
    // the policy would still start the job and finish it late.
    if ranking.feasible().next().is_none() {
        return Err(Failure::NothingMatched(ranking.why_nothing()));
    }
    let Some(d) = placement.decision() else {
        return Err(Failure::NothingMatched(ranking.why_nothing()));
    };
    let plans = &placement.plans;
    let allowed = |i: usize| capacity.is_none_or(|c| plans[i].offer.pool.capacity == c);
    // The policy's choice; when the capacity asked for rules it out (or the
    // policy would wait for spot capacity), the policy's cheapest evaluated
    // option of that capacity, else the best of that capacity in the order
    // `place` shows (the policy may rule out spot where the slack cannot
    // absorb a loss; `policy` then says what it would do instead).
    let run = |a: Action| match a {
        Action::Run(i) if allowed(i) => Some(i),
        _ => None,
    };
    let chosen = run(d.action)
        .or_else(|| d.options.iter().find_map(|o| run(o.action)))
        .or_else(|| placement.order().into_iter().find(|i| allowed(*i)));
    let Some(best_i) = chosen else {
        let why = match (capacity, ranking.feasible().next()) {
            (Some(c), Some(other)) => format!(
                "no {c} plan satisfies the job; the best is {}",
                other.explanation
            ),
            _ => ranking.why_nothing(),
        };
        return Err(Failure::NothingMatched(why));
    };
    let best = &plans[best_i];
    let o = &best.offer;
    let gpu = o.instance_type.gpu.as_ref();
    let mut out: BTreeMap<&str, String> = BTreeMap::new();
    out.insert("cloud", o.pool.cloud.to_string());
    out.insert("region", o.pool.region.to_string());
    out.insert(
        "zone",
        o.pool
            .zone
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    );
    out.insert("zone_name", o.zone_name.clone().unwrap_or_default());
    out.insert("instance_type", o.pool.instance_type.clone());
    out.insert("capacity", o.pool.capacity.to_string());
    out.insert(
        "gpu_model",
        gpu.map(|g| g.model.to_string()).unwrap_or_default(),
    );
    out.insert("gpu_count", gpu.map_or(0, |g| g.count).to_string());
    out.insert("count", count.to_string());
    out.insert("price_per_hour_usd", o.price.display(4).to_string());
    // The policy's expected cost to finish starting there (what `place`
    // shows for the pool); empty when the policy did not evaluate it.
    out.insert(
        "expected_cost_usd",
        placement
            .expected_cost(best_i)
            .map(|c| c.display(2).to_string())
            .unwrap_or_default(),
    );
    out.insert("expected_hours", format!("{:.2}", best.expected_hours));
    out.insert("p_deadline", format!("{:.3}", best.p_deadline));
    out.insert(
        "interruption_rate_per_hour",
        format!("{:.4}", best.hazard.rate_per_hour),
    );
    out.insert("pool", o.pool.to_string());
    out.insert("price_source", o.source.to_string());
    out.insert("explanation", best.explanation.clone());
    out.insert("policy", d.explanation.clone());
    let text = serde_json::to_string(&out)
        .map_err(|e| Failure::Error(Error::new(gpufleet::ErrorKind::Unexpected, e.to_string())))?;
    println!("{text}");
    Ok(())
}
