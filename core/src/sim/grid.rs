//! The benchmark grid `gpufleet simulate --grid` runs: which pool sets and
//! scenarios, each cell's result, and the one-table summary. The cells are
//! independent; a caller runs them in any order or in parallel
//! ([`Cell::run`]) and keeps the grid's order in the results.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{simulate, PolicyKind, PolicyResult, Scenario, SimPool, SimulatedTimes};
use crate::Result;

/// Pool sets times scenarios.
#[derive(Debug, Clone, Default)]
pub struct Grid {
    /// The pool sets, each simulated as one job's choices.
    pub sets: Vec<Vec<SimPool>>,
    /// The scenarios every set runs.
    pub scenarios: Vec<Scenario>,
}

/// One (pool set, scenario) of a [`Grid`].
#[derive(Debug, Clone, Copy)]
pub struct Cell<'a> {
    /// The pools.
    pub pools: &'a [SimPool],
    /// The scenario.
    pub scenario: &'a Scenario,
}

/// One scenario's results as `simulate --output json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// The traces' directory (or other label).
    pub traces: String,
    /// The instance types, in the manifest's order, joined by `|`.
    pub instance_type: String,
    /// The pools (zones) it ran over.
    pub pools: Vec<String>,
    /// Hours of work.
    pub job_hours: f64,
    /// Hours to the deadline.
    pub deadline_hours: f64,
    /// Hours per start, restart or move.
    pub changeover_hours: f64,
    /// Start offsets replayed.
    pub starts: usize,
    /// Each policy's result.
    pub results: Vec<PolicyResult>,
}

/// The instance types of `pools` in their order of first appearance.
pub fn types_in_order(pools: &[SimPool]) -> Vec<String> {
    let mut t: Vec<String> = Vec::new();
    for p in pools {
        if !t.contains(&p.pool.instance_type) {
            t.push(p.pool.instance_type.clone());
        }
    }
    t
}

/// The instance types of `pools`, sorted, each once.
pub fn types(pools: &[SimPool]) -> Vec<String> {
    let mut t: Vec<String> = pools.iter().map(|p| p.pool.instance_type.clone()).collect();
    t.sort();
    t.dedup();
    t
}

impl Grid {
    /// One pool set and one scenario.
    pub fn single(pools: Vec<SimPool>, scenario: Scenario) -> Grid {
        Grid {
            sets: vec![pools],
            scenarios: vec![scenario],
        }
    }

    /// The standard grid over a manifest's pools: 18 scenarios (jobs of 12,
    /// 24 and 48 h; deadlines 1.25, 1.5 and 2 times the job; changeovers of
    /// 10 and 30 min), each with `starts` offsets, over these sets: with
    /// single-type traces, every type's zones together (where it has
    /// several) and each zone alone; with any-of traces (throughputs other
    /// than 1), the first two types' pools and all of them.
    pub fn standard(all: &[SimPool], starts: usize) -> Grid {
        let mut sets: Vec<Vec<SimPool>> = Vec::new();
        let any_of = all.iter().any(|p| (p.throughput - 1.0).abs() > 1e-12);
        if any_of {
            let kinds = types_in_order(all);
            for n in [2, kinds.len()] {
                let set: Vec<SimPool> = all
                    .iter()
                    .filter(|p| kinds[..n.min(kinds.len())].contains(&p.pool.instance_type))
                    .cloned()
                    .collect();
                if !sets.iter().any(|s| s.len() == set.len()) {
                    sets.push(set);
                }
            }
        } else {
            for t in types(all) {
                let of_type: Vec<SimPool> = all
                    .iter()
                    .filter(|p| p.pool.instance_type == t)
                    .cloned()
                    .collect();
                if of_type.len() > 1 {
                    sets.push(of_type.clone());
                }
                sets.extend(of_type.into_iter().map(|p| vec![p]));
            }
        }
        let mut scenarios = Vec::new();
        for job in [12.0, 24.0, 48.0] {
            for factor in [1.25, 1.5, 2.0] {
                for co in [1.0 / 6.0, 0.5] {
                    scenarios.push(Scenario {
                        job_hours: job,
                        deadline_hours: job * factor,
                        changeover_hours: co,
                        starts,
                    });
                }
            }
        }
        Grid { sets, scenarios }
    }

    /// Every (set, scenario), sets outermost.
    pub fn cells(&self) -> Vec<Cell<'_>> {
        self.sets
            .iter()
            .flat_map(|set| {
                self.scenarios.iter().map(move |s| Cell {
                    pools: set,
                    scenario: s,
                })
            })
            .collect()
    }

    /// What whole ticks made of the times asked for, once per distinct
    /// rounding (a 10-minute changeover on one-hour ticks costs an hour).
    pub fn rounding_notes(&self) -> Result<BTreeSet<String>> {
        let mut notes = BTreeSet::new();
        for c in self.cells() {
            if let Some(note) = SimulatedTimes::of(c.pools, c.scenario)?.rounding(c.scenario) {
                notes.insert(note);
            }
        }
        Ok(notes)
    }
}

impl Cell<'_> {
    /// Simulates `policies` in this cell; `traces` labels the result.
    pub fn run(&self, policies: &[PolicyKind], traces: &str) -> Result<ScenarioResult> {
        let s = self.scenario;
        Ok(ScenarioResult {
            traces: traces.to_string(),
            instance_type: types_in_order(self.pools).join("|"),
            pools: self
                .pools
                .iter()
                .map(|p| {
                    p.pool
                        .zone
                        .as_ref()
                        .map_or_else(|| p.pool.region.to_string(), |z| z.to_string())
                })
                .collect(),
            job_hours: s.job_hours,
            deadline_hours: s.deadline_hours,
            changeover_hours: s.changeover_hours,
            starts: s.starts,
            results: simulate(self.pools, s, policies)?,
        })
    }
}

/// A scenario's zones for a person to read: each zone once, in order, joined
/// by `+` up to four of them, otherwise the count with the first two and the
/// last; and the number of pools when a zone holds several (an any-of job's
/// types). The JSON keeps every pool's zone.
pub fn zones_label(pools: &[String]) -> String {
    let mut seen = std::collections::HashSet::new();
    let zones: Vec<&str> = pools
        .iter()
        .map(String::as_str)
        .filter(|z| seen.insert(*z))
        .collect();
    let listed = match zones.as_slice() {
        [first, second, .., last] if zones.len() > 4 => {
            format!("{} zones ({first}, {second}, … {last})", zones.len())
        }
        _ => zones.join("+"),
    };
    if zones.len() == pools.len() {
        listed
    } else {
        format!("{listed}, {} pools", pools.len())
    }
}

/// The grid in one table: per policy, the mean of (mean cost / optimum) over
/// scenarios, total deadline misses, and the scenarios where gpufleet's mean
/// cost is above the better Uniform Progress variant.
pub fn summary(rows: &[ScenarioResult]) -> String {
    use std::fmt::Write as _;
    // Per policy: the sum of cost / optimum, the misses, and the hours late
    // summed over the missed runs.
    let mut per: Vec<(String, f64, usize, f64)> = Vec::new();
    let mut above = Vec::new();
    for row in rows {
        for r in &row.results {
            let late = r.mean_hours_late * r.deadline_misses as f64;
            match per.iter_mut().find(|(n, ..)| *n == r.policy) {
                Some(e) => {
                    e.1 += r.cost_vs_optimum;
                    e.2 += r.deadline_misses;
                    e.3 += late;
                }
                None => per.push((r.policy.clone(), r.cost_vs_optimum, r.deadline_misses, late)),
            }
        }
        let cost = |n: &str| {
            row.results
                .iter()
                .find(|r| r.policy == n)
                .map(|r| r.mean_cost_usd)
        };
        if let (Some(g), Some(up)) = (
            cost("gpufleet"),
            [cost("uniform-progress"), cost("uniform-progress-multi")]
                .into_iter()
                .flatten()
                .reduce(f64::min),
        ) {
            if g > up + 1e-6 {
                above.push(format!(
                    "  {} in {}: job {} h, deadline {} h, changeover {:.2} h: gpufleet ${g:.2} vs uniform progress ${up:.2} (+{:.1}%)",
                    row.instance_type,
                    zones_label(&row.pools),
                    row.job_hours,
                    row.deadline_hours,
                    row.changeover_hours,
                    (g / up - 1.0) * 100.0
                ));
            }
        }
    }
    let n = rows.len().max(1) as f64;
    let mut s = format!(
        "{} scenarios, {} starts each\n",
        rows.len(),
        rows.first().map_or(0, |r| r.starts)
    );
    let _ = writeln!(
        s,
        "{:<30} {:>22} {:>15} {:>16}",
        "POLICY", "MEAN COST / OPTIMUM", "DEADLINE MISSES", "MEAN HOURS LATE"
    );
    for (name, sum, misses, late) in &per {
        let late = if *misses == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", late / *misses as f64)
        };
        let _ = writeln!(s, "{name:<30} {:>22.3} {misses:>15} {late:>16}", sum / n);
    }
    let _ = writeln!(
        s,
        "scenarios where gpufleet costs more than uniform progress: {}",
        above.len()
    );
    for line in above {
        let _ = writeln!(s, "{line}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::zones_label;

    fn zones(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn a_scenarios_zones_read_the_same_at_any_pool_count() {
        let cases = [
            (zones(&["us-west-2a"]), "us-west-2a"),
            (
                zones(&["us-west-2a", "us-west-2b"]),
                "us-west-2a+us-west-2b",
            ),
            (
                zones(&["us-west-2a", "us-west-2b", "us-west-2a", "us-west-2b"]),
                "us-west-2a+us-west-2b, 4 pools",
            ),
            (zones(&["a", "b", "c", "d", "e"]), "5 zones (a, b, … e)"),
        ];
        for (pools, want) in cases {
            assert_eq!(zones_label(&pools), want, "{pools:?}");
        }
        // 100 zones of four types each: one short line, not 400 names.
        let many: Vec<String> = (0..100)
            .flat_map(|z| std::iter::repeat_n(format!("s{z}"), 4))
            .collect();
        assert_eq!(zones_label(&many), "100 zones (s0, s1, … s99), 400 pools");
    }
}
