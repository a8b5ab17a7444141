//! Generated availability regimes: traces in the measured traces' format
//! (`index,time,preempted`) and a pools manifest, drawn from a seeded
//! up/down process per pool, for measuring the policies on regimes the 2022
//! traces do not have (steadier or flakier pools, a daily rush, region-wide
//! storms, scarce capacity, many pools, any tick length).
//!
//! Each pool alternates between up and down; at every tick it leaves its
//! state with probability `1 - exp(-tick / mean)`, where the means (hours up,
//! hours down) are the regime's at that tick. Every figure is synthetic by
//! construction; only the instance types' prices and throughputs are the
//! measured ones of the any-of manifests (`data/traces/*/pools-any-of.csv`).
//!
//! The random numbers are a hand-written SplitMix64 (a dozen lines): the
//! traces must be the same for a seed on every version and platform, which
//! `rand`'s `StdRng` does not promise.

use time::format_description::well_known::Rfc3339;
use time::macros::datetime;
use time::Duration;

use super::trace::{format_trace, parse_manifest, SimPool};
use crate::{Error, Result};

/// An availability regime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Regime {
    /// Rare, short outages: up 48 h, down 1 h on average.
    Stable,
    /// Frequent short outages: up 1.5 h, down 20 minutes.
    Flaky,
    /// A daily rush from 14:00 to 22:00 UTC (up 1 h, down 1.5 h), calm
    /// otherwise (up 24 h, down 30 minutes).
    Diurnal,
    /// Region-wide storms that hit every pool at once (calm spells of 48 h,
    /// storms of 8 h on average): up 0.5 h, down 1 h in a storm; up 24 h,
    /// down 30 minutes when calm.
    Storms,
    /// Capacity there less than half the time: up 6 h, down 8 h.
    Scarce,
    /// Pool `k` in the `k mod 5`-th of the five regimes above.
    Mixed,
}

impl Regime {
    /// Every regime.
    pub const ALL: [Regime; 6] = [
        Regime::Stable,
        Regime::Flaky,
        Regime::Diurnal,
        Regime::Storms,
        Regime::Scarce,
        Regime::Mixed,
    ];

    /// Its name, as [`Regime::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Regime::Stable => "stable",
            Regime::Flaky => "flaky",
            Regime::Diurnal => "diurnal",
            Regime::Storms => "storms",
            Regime::Scarce => "scarce",
            Regime::Mixed => "mixed",
        }
    }

    /// The regime named `s`; the error lists the valid names.
    pub fn parse(s: &str) -> Result<Regime> {
        Regime::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Regime::ALL.iter().map(|r| r.name()).collect();
                Error::invalid_input(format!(
                    "unknown regime '{s}'; valid regimes: {}",
                    names.join(", ")
                ))
            })
    }

    /// Mean hours up and hours down for pool `pool` at `hour` of the day
    /// (UTC), in a storm or not.
    fn means(self, hour: f64, storm: bool, pool: usize) -> (f64, f64) {
        match self {
            Regime::Stable => (48.0, 1.0),
            Regime::Flaky => (1.5, 1.0 / 3.0),
            Regime::Diurnal if (14.0..22.0).contains(&hour) => (1.0, 1.5),
            Regime::Diurnal => (24.0, 0.5),
            Regime::Storms if storm => (0.5, 1.0),
            Regime::Storms => (24.0, 0.5),
            Regime::Scarce => (6.0, 8.0),
            Regime::Mixed => Regime::ALL[pool % 5].means(hour, storm, pool),
        }
    }
}

/// The instance types pools are drawn from, in order: name, on-demand $/h,
/// spot $/h (the two 2022 zones' mean) and throughput, as in the any-of
/// manifests.
const TYPES: [(&str, f64, f64, f64); 4] = [
    ("p3.2xlarge", 3.06, 0.9731, 1.0),
    ("p2.xlarge", 0.90, 0.27, 0.2),
    ("p3.16xlarge", 24.48, 7.9656, 6.77),
    ("p2.8xlarge", 7.20, 2.16, 1.35),
];

/// Storms' mean hours calm and stormy.
const CALM_HOURS: f64 = 48.0;
const STORM_HOURS: f64 = 8.0;

/// The most flags (pools × ticks) one generation writes.
pub const MAX_GENERATED_FLAGS: usize = 50_000_000;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerateSpec {
    /// The regime.
    pub regime: Regime,
    /// Pools (1 to 1,000): pool `k` has the `k mod types`-th instance type,
    /// in zone `k / types`.
    pub pools: usize,
    /// Instance types (1 to 4): p3.2xlarge, p2.xlarge, p3.16xlarge,
    /// p2.8xlarge, the first `types` of them.
    pub types: usize,
    /// Days of trace (more than 0, at most 366).
    pub days: f64,
    /// Seconds per tick (1 to 86,400).
    pub tick_seconds: u32,
    /// The seed: the same spec gives the same traces.
    pub seed: u64,
}

impl Default for GenerateSpec {
    /// Six pools of three types, 21 days of 10-minute ticks, seed 1.
    fn default() -> Self {
        GenerateSpec {
            regime: Regime::Mixed,
            pools: 6,
            types: 3,
            days: 21.0,
            tick_seconds: 600,
            seed: 1,
        }
    }
}

/// Generated traces and their manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// The pools manifest (`pools.csv`, with the `throughput` column).
    pub manifest: String,
    /// Each trace: its file name (as the manifest names it) and its text.
    pub traces: Vec<(String, String)>,
}

impl Generated {
    /// The pools, parsed as `simulate` would read them from files.
    pub fn pools(&self) -> Result<Vec<SimPool>> {
        parse_manifest(&self.manifest, |file| {
            self.traces
                .iter()
                .find(|(name, _)| name == file)
                .map(|(_, text)| text.clone())
                .ok_or_else(|| Error::invalid_input(format!("no generated trace '{file}'")))
        })
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014).
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `1 - exp(-dt / mean)`.
    fn leaves(&mut self, dt: f64, mean: f64) -> bool {
        self.unit() < -(-dt / mean).exp_m1()
    }
}

/// Traces and a manifest for `spec`; an out-of-range field is an error
/// naming it and its valid range.
pub fn generate(spec: &GenerateSpec) -> Result<Generated> {
    let drawn = draw(spec)?;
    let start = datetime!(2024-03-04 00:00 UTC);
    let times: Vec<String> = (0..drawn.ticks)
        .map(|t| {
            let at = start + Duration::seconds(i64::from(spec.tick_seconds) * t as i64);
            at.format(&Rfc3339).unwrap_or_default()
        })
        .collect();
    let mut manifest = String::from(
        "file,cloud,region,zone,instance_type,on_demand_price,spot_price,throughput\n",
    );
    let mut traces = Vec::with_capacity(spec.pools);
    for (k, (spot, up)) in drawn.spot.iter().zip(&drawn.up).enumerate() {
        let (name, on_demand, _, throughput) = TYPES[k % spec.types];
        let file = format!("pool-{k:03}.csv");
        manifest.push_str(&format!(
            "{file},aws,us-west-2,us-west-2-s{},{name},{on_demand:.2},{spot:.4},{throughput}\n",
            k / spec.types
        ));
        traces.push((file, format_trace(times.iter().zip(up.iter().copied()))));
    }
    Ok(Generated { manifest, traces })
}

/// What [`generate`] draws before writing it out.
struct Drawn {
    ticks: usize,
    /// Each pool's spot price, $/h.
    spot: Vec<f64>,
    /// Each pool's availability per tick.
    up: Vec<Vec<bool>>,
}

fn draw(spec: &GenerateSpec) -> Result<Drawn> {
    let bad = |what: &str, v: String, valid: &str| {
        Error::invalid_input(format!("invalid {what} {v}: expected {valid}"))
    };
    if !(1..=1000).contains(&spec.pools) {
        return Err(bad("pool count", spec.pools.to_string(), "1 to 1000"));
    }
    if !(1..=TYPES.len()).contains(&spec.types) {
        return Err(bad("type count", spec.types.to_string(), "1 to 4"));
    }
    if !(spec.days.is_finite() && spec.days > 0.0 && spec.days <= 366.0) {
        return Err(bad(
            "days",
            spec.days.to_string(),
            "more than 0, at most 366",
        ));
    }
    if !(1..=86_400).contains(&spec.tick_seconds) {
        return Err(bad(
            "tick",
            format!("{} s", spec.tick_seconds),
            "1 to 86400 seconds",
        ));
    }
    let ticks = (spec.days * 86_400.0 / f64::from(spec.tick_seconds)).floor() as usize;
    if ticks < 2 {
        return Err(bad(
            "days",
            spec.days.to_string(),
            "at least two ticks of trace",
        ));
    }
    if spec.pools.saturating_mul(ticks) > MAX_GENERATED_FLAGS {
        return Err(Error::invalid_input(format!(
            "{} pools of {ticks} ticks is {} flags, over the limit of {MAX_GENERATED_FLAGS}: fewer pools, fewer days or a longer tick",
            spec.pools,
            spec.pools.saturating_mul(ticks)
        )));
    }
    let dt = f64::from(spec.tick_seconds) / 3600.0;
    let hour = |t: usize| (t as f64 * dt) % 24.0;
    let mut rng = SplitMix(spec.seed);
    let mut storm = Vec::with_capacity(ticks);
    let mut stormy = rng.unit() < STORM_HOURS / (CALM_HOURS + STORM_HOURS);
    for _ in 0..ticks {
        storm.push(stormy);
        if rng.leaves(dt, if stormy { STORM_HOURS } else { CALM_HOURS }) {
            stormy = !stormy;
        }
    }
    let mut drawn = Drawn {
        ticks,
        spot: Vec::with_capacity(spec.pools),
        up: Vec::with_capacity(spec.pools),
    };
    for k in 0..spec.pools {
        drawn
            .spot
            .push(TYPES[k % spec.types].2 * (0.9 + 0.2 * rng.unit()));
        let (up0, down0) = spec.regime.means(hour(0), storm[0], k);
        let mut up = rng.unit() < up0 / (up0 + down0);
        let mut flags = Vec::with_capacity(ticks);
        for (t, stormy) in storm.iter().enumerate() {
            flags.push(up);
            let (mean_up, mean_down) = spec.regime.means(hour(t), *stormy, k);
            if rng.leaves(dt, if up { mean_up } else { mean_down }) {
                up = !up;
            }
        }
        drawn.up.push(flags);
    }
    Ok(drawn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(regime: Regime) -> GenerateSpec {
        GenerateSpec {
            regime,
            ..GenerateSpec::default()
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_traces() {
        let a = generate(&spec(Regime::Mixed)).unwrap();
        assert_eq!(a, generate(&spec(Regime::Mixed)).unwrap());
        let other = GenerateSpec {
            seed: 2,
            ..spec(Regime::Mixed)
        };
        assert_ne!(a.traces, generate(&other).unwrap().traces);
        let pools = a.pools().unwrap();
        assert_eq!(pools.len(), 6);
        assert_eq!(pools[1].pool.instance_type, "p2.xlarge");
        assert!((pools[1].throughput - 0.2).abs() < 1e-12);
        assert_eq!(pools[0].trace.tick_seconds, 600);
        assert_eq!(pools[0].trace.available.len(), 21 * 144);
    }

    /// Over a long trace each regime's share of time up is its means'.
    #[test]
    fn each_regime_is_up_as_often_as_its_means_say() {
        let share = |regime: Regime| {
            let d = draw(&GenerateSpec {
                regime,
                pools: 4,
                types: 1,
                days: 300.0,
                ..GenerateSpec::default()
            })
            .unwrap();
            let flags: Vec<bool> = d.up.concat();
            flags.iter().filter(|a| **a).count() as f64 / flags.len() as f64
        };
        // Up / (up + down); the diurnal regime is a third rush, two thirds calm;
        // storms hit a seventh of the time (8 h in 56 h).
        let expected = [
            (Regime::Stable, 48.0 / 49.0),
            (Regime::Flaky, 1.5 / (1.5 + 1.0 / 3.0)),
            (Regime::Scarce, 6.0 / 14.0),
        ];
        for (regime, want) in expected {
            let got = share(regime);
            assert!((got - want).abs() < 0.03, "{regime:?}: {got} vs {want}");
        }
        let diurnal = share(Regime::Diurnal);
        assert!((0.7..0.9).contains(&diurnal), "diurnal {diurnal}");
        let storms = share(Regime::Storms);
        assert!((0.8..0.95).contains(&storms), "storms {storms}");
    }

    /// Storms hit every pool at once: the pools' outages overlap far more than
    /// independent pools' would.
    #[test]
    fn storms_are_shared_by_every_pool() {
        let d = draw(&GenerateSpec {
            regime: Regime::Storms,
            pools: 2,
            types: 1,
            days: 200.0,
            ..GenerateSpec::default()
        })
        .unwrap();
        let (a, b) = (&d.up[0], &d.up[1]);
        let n = a.len() as f64;
        let down = |x: &Vec<bool>| x.iter().filter(|v| !**v).count() as f64 / n;
        let both = a.iter().zip(b).filter(|(x, y)| !**x && !**y).count() as f64 / n;
        assert!(
            both > 2.0 * down(a) * down(b),
            "{both} vs {}",
            down(a) * down(b)
        );
    }

    #[test]
    fn any_tick_length_is_read_back() {
        let g = generate(&GenerateSpec {
            tick_seconds: 195,
            days: 2.0,
            ..spec(Regime::Flaky)
        })
        .unwrap();
        let pools = g.pools().unwrap();
        assert_eq!(pools[0].trace.tick_seconds, 195);
        assert_eq!(pools[0].trace.available.len(), 2 * 86_400 / 195);
    }

    #[test]
    fn bad_specs_name_the_value_and_the_range() {
        let with = |change: fn(&mut GenerateSpec)| {
            let mut spec = GenerateSpec::default();
            change(&mut spec);
            spec
        };
        let huge = |s: &mut GenerateSpec| {
            (s.pools, s.days, s.tick_seconds) = (1000, 366.0, 60);
        };
        let cases = [
            (
                with(|s| s.pools = 0),
                "invalid pool count 0: expected 1 to 1000",
            ),
            (
                with(|s| s.types = 5),
                "invalid type count 5: expected 1 to 4",
            ),
            (with(|s| s.days = f64::NAN), "invalid days NaN"),
            (
                with(|s| s.tick_seconds = 0),
                "invalid tick 0 s: expected 1 to 86400 seconds",
            ),
            (with(|s| s.days = 0.001), "at least two ticks"),
            (with(huge), "over the limit of 50000000"),
        ];
        for (spec, want) in cases {
            let e = generate(&spec).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = Regime::parse("calm").unwrap_err().to_string();
        assert!(
            e.contains("'calm'") && e.contains("stable, flaky, diurnal, storms, scarce, mixed"),
            "{e}"
        );
        for r in Regime::ALL {
            assert_eq!(Regime::parse(r.name()).unwrap(), r);
        }
    }
}
