//! Spot availability traces and the pools manifest.

use std::sync::Arc;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::Price;
use crate::{Capacity, Cloud, Pool, Region, Zone};
use crate::{Error, Result};

/// A measured availability trace: one flag per tick, `true` when spot capacity
/// was there.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Its name (the file).
    pub name: String,
    /// When the first tick was taken.
    pub start: OffsetDateTime,
    /// Seconds between ticks.
    pub tick_seconds: u64,
    /// Availability per tick.
    pub available: Vec<bool>,
}

/// Writes a trace in the format [`parse_trace`] reads: a row per tick, each
/// given as its time (already in RFC 3339, so a caller writing many traces of
/// the same ticks formats the times once) and whether spot capacity was there.
pub fn format_trace<T: std::fmt::Display>(ticks: impl IntoIterator<Item = (T, bool)>) -> String {
    use std::fmt::Write as _;
    let mut text = String::from("index,time,preempted\n");
    for (i, (at, available)) in ticks.into_iter().enumerate() {
        // Writing to a String cannot fail.
        let _ = writeln!(text, "{i},{at},{}", u8::from(!available));
    }
    text
}

/// Reads a trace in the SkyPilot format `index,time,preempted` (1 = no spot
/// capacity at that tick). The tick is the median spacing of the timestamps in
/// whole seconds (10 minutes in the 2022 traces; 195 s works as well). The
/// simulator replays samples as consecutive ticks, so every spacing must be
/// within half a tick of it: a missing sample (a gap of 1.5 ticks or more)
/// or an extra one is refused naming its line, where it would otherwise
/// shift the rest of the trace in time without a word.
pub fn parse_trace(name: &str, text: &str) -> Result<Trace> {
    let err =
        |line: usize, why: String| Error::invalid_input(format!("trace {name} line {line}: {why}"));
    let rows = crate::csv_rows::rows(text, &format!("trace {name}"))?;
    let mut lines = rows.iter();
    match lines.next() {
        Some((_, h)) if h.join(",") == "index,time,preempted" => {}
        Some((n, h)) => {
            return Err(err(
                *n,
                format!(
                    "expected the header 'index,time,preempted', found '{}'",
                    h.join(",").chars().take(60).collect::<String>()
                ),
            ))
        }
        None => return Err(err(1, "the file is empty".into())),
    }
    let (mut times, mut available, mut line_of) = (Vec::new(), Vec::new(), Vec::new());
    for (n, fields) in lines {
        // Line numbers as people count them (the messages say "line N").
        let i = *n - 1;
        let [_, time, flag] = &fields[..] else {
            return Err(err(
                i + 1,
                format!("expected 3 fields, found {}", fields.len()),
            ));
        };
        let (time, flag) = (time.as_str(), flag.as_str());
        let at = OffsetDateTime::parse(time, &Rfc3339)
            .map_err(|e| err(i + 1, format!("bad time '{time}': {e}")))?;
        if times.last().is_some_and(|last| at <= *last) {
            return Err(err(i + 1, "times must increase".into()));
        }
        available.push(match flag {
            "0" => true,
            "1" => false,
            other => {
                return Err(err(
                    i + 1,
                    format!("preempted must be 0 or 1, found '{other}'"),
                ))
            }
        });
        times.push(at);
        line_of.push(i + 1);
    }
    if times.len() < 2 {
        return Err(err(0, "a trace needs at least two ticks".into()));
    }
    let gaps: Vec<i64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).whole_seconds())
        .collect();
    let mut sorted = gaps.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let tick_seconds = median.max(1) as u64;
    // Within half a tick of the median, in whole seconds (2 * gap against
    // 3 * tick and 1 * tick, so no rounding).
    let tick = tick_seconds as i64;
    if let Some(j) = gaps
        .iter()
        .position(|&g| 2 * g >= 3 * tick || 2 * g <= tick)
    {
        let why = if 2 * gaps[j] >= 3 * tick {
            "samples are missing before it"
        } else {
            "it is an extra sample"
        };
        return Err(err(
            line_of[j + 1],
            format!(
                "{} s after the previous sample in a trace of {tick_seconds}-second ticks: {why}; the simulator replays samples as consecutive ticks, so fill the gap (or drop the extra sample) or split the trace there",
                gaps[j]
            ),
        ));
    }
    Ok(Trace {
        name: name.to_string(),
        start: times[0],
        tick_seconds,
        available,
    })
}

/// A pool in a simulation: its trace and prices.
#[derive(Debug, Clone)]
pub struct SimPool {
    /// The spot pool.
    pub pool: Pool,
    /// On-demand price of the same instance type.
    pub on_demand: Price,
    /// Spot price.
    pub spot: Price,
    /// Measured availability.
    pub trace: Arc<Trace>,
    /// Reference work-hours per hour on this instance type (1.0 unless the
    /// manifest's optional `throughput` column says otherwise).
    pub throughput: f64,
}

/// Reads a `pools.csv` manifest (`file,cloud,region,zone,instance_type,
/// on_demand_price,spot_price`, and optionally `throughput`: reference
/// work-hours per hour on that type, for any-of jobs over several types),
/// loading each trace through `read` (given the `file` column; the caller
/// resolves it, so this does no I/O).
pub fn parse_manifest(text: &str, read: impl Fn(&str) -> Result<String>) -> Result<Vec<SimPool>> {
    parse_manifest_named("pools.csv", text, read)
}

/// [`parse_manifest`] for a manifest its errors call `name` (the path it was
/// read from). Each pool (cloud, region, zone, instance type) may be listed
/// once.
pub fn parse_manifest_named(
    name: &str,
    text: &str,
    read: impl Fn(&str) -> Result<String>,
) -> Result<Vec<SimPool>> {
    let err = |line: usize, why: String| Error::invalid_input(format!("{name} line {line}: {why}"));
    let rows = crate::csv_rows::rows(text, name)?;
    let mut lines = rows.iter();
    const HEADER: &str = "file,cloud,region,zone,instance_type,on_demand_price,spot_price";
    let with_throughput = match lines.next() {
        Some((_, h)) if h.join(",") == HEADER => false,
        Some((_, h)) if h.join(",") == format!("{HEADER},throughput") => true,
        _ => {
            return Err(err(
                1,
                format!("expected the header '{HEADER}' (optionally followed by ',throughput')"),
            ))
        }
    };
    let width = if with_throughput { 8 } else { 7 };
    let mut pools: Vec<SimPool> = Vec::new();
    let mut first_line: std::collections::HashMap<Pool, usize> = std::collections::HashMap::new();
    for (n, fields) in lines {
        let i = *n - 1;
        let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
        if fields.len() != width {
            return Err(err(
                i + 1,
                format!("expected {width} fields, found {}", fields.len()),
            ));
        }
        let [file, cloud, region, zone, itype, od, spot] = fields[..7] else {
            return Err(err(i + 1, format!("expected {width} fields")));
        };
        let throughput = match fields.get(7) {
            None => 1.0,
            Some(v) => match v.parse::<f64>() {
                Ok(t) if t.is_finite() && t > 0.0 && t <= 1000.0 => t,
                _ => {
                    return Err(err(
                        i + 1,
                        format!("invalid throughput '{v}': expected a number above 0 and at most 1000 (1.0 = the reference)"),
                    ))
                }
            },
        };
        if !trace_path_ok(file) {
            return Err(err(
                i + 1,
                format!("file '{file}' must be a name inside the traces directory, or '../WINDOW/NAME' for a sibling directory's trace"),
            ));
        }
        let cloud: Cloud = cloud
            .parse()
            .map_err(|e: crate::ParseCloudError| err(i + 1, e.to_string()))?;
        let price = |s: &str, what: &str| -> Result<Price> {
            match s.parse::<Price>() {
                Ok(p) if p > Price::ZERO => Ok(p),
                _ => Err(err(
                    i + 1,
                    format!("invalid {what} '{s}': expected a positive price in USD per hour"),
                )),
            }
        };
        let (on_demand, spot) = (price(od, "on_demand_price")?, price(spot, "spot_price")?);
        let text = read(file).map_err(|e| err(i + 1, e.message().to_string()))?;
        let trace = Arc::new(parse_trace(file, &text)?);
        if let Some(first) = pools.first() {
            if first.trace.tick_seconds != trace.tick_seconds {
                return Err(err(
                    i + 1,
                    format!(
                        "{file} ticks every {} s, {} every {} s",
                        trace.tick_seconds, first.trace.name, first.trace.tick_seconds
                    ),
                ));
            }
        }
        let pool = Pool {
            cloud,
            region: Region::new(region),
            zone: (!zone.is_empty() && zone != "-").then(|| Zone::new(zone)),
            instance_type: itype.to_string(),
            capacity: Capacity::Spot,
        };
        if let Some(earlier) = first_line.insert(pool.clone(), i + 1) {
            return Err(err(
                i + 1,
                format!("pool {pool} is listed again (first on line {earlier}); give each trace its own zone name, such as us-west-2a-oct"),
            ));
        }
        pools.push(SimPool {
            pool,
            on_demand,
            spot,
            trace,
            throughput,
        });
    }
    if pools.is_empty() {
        return Err(err(1, "no pools listed".into()));
    }
    Ok(pools)
}

/// Pools are lined up sample by sample (the `n`-th sample of every trace is
/// one tick), not by clock time, which `many-pools` relies on to assemble
/// windows. When the traces start a tick or more apart, a one-line note that
/// says so, with the earliest and latest start.
pub fn alignment_note(pools: &[SimPool]) -> Option<String> {
    let first = pools.iter().min_by_key(|p| p.trace.start)?;
    let last = pools.iter().max_by_key(|p| p.trace.start)?;
    let apart = (last.trace.start - first.trace.start).whole_seconds();
    let tick = i64::try_from(first.trace.tick_seconds).unwrap_or(i64::MAX);
    let at = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
    (apart >= tick).then(|| {
        format!(
            "the traces start at different times ({} {}, {} {}): pools are lined up sample by sample, not by clock time",
            first.trace.name,
            at(first.trace.start),
            last.trace.name,
            at(last.trace.start)
        )
    })
}

/// A manifest's `file`: a plain name, or `../DIR/NAME` (a trace of a sibling
/// directory, for scenarios assembled from several windows); nothing absolute
/// and nothing further up.
fn trace_path_ok(file: &str) -> bool {
    let plain = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    };
    match file.split('/').collect::<Vec<_>>()[..] {
        [name] => plain(name),
        ["..", dir, name] => plain(dir) && plain(name),
        _ => false,
    }
}

/// Reads the pools manifest at `manifest` and each trace it names from
/// `traces` (what `gpufleet simulate --traces DIR [--pools FILE]` reads): a
/// file that cannot be read is an error naming it.
pub fn load(manifest: &std::path::Path, traces: &std::path::Path) -> Result<Vec<SimPool>> {
    let text = std::fs::read_to_string(manifest).map_err(|e| {
        Error::invalid_input(format!(
            "cannot read the pools manifest '{}': {e}",
            manifest.display()
        ))
    })?;
    // A trace is read only where the manifest may name it (the directory,
    // or beside it by `../DIR/NAME`), a symlink's target included: one
    // pointing elsewhere (`/etc/shadow`) is refused unread, where it used to
    // be followed and its first line quoted in the header error.
    let root = traces.canonicalize().map_err(|e| {
        Error::invalid_input(format!(
            "cannot read the trace directory '{}': {e}",
            traces.display()
        ))
    })?;
    parse_manifest_named(&manifest.display().to_string(), &text, |file| {
        let path = traces.join(file);
        let cannot = |e: std::io::Error| {
            Error::invalid_input(format!("cannot read trace '{}': {e}", path.display()))
        };
        // `NAME` stays in the directory, `../DIR/NAME` in that sibling.
        let allowed = match file.strip_prefix("../").and_then(|r| r.split_once('/')) {
            Some((dir, _)) => root
                .parent()
                .unwrap_or(&root)
                .join(dir)
                .canonicalize()
                .map_err(cannot)?,
            None => root.clone(),
        };
        let real = path.canonicalize().map_err(cannot)?;
        if !real.starts_with(&allowed) {
            return Err(Error::invalid_input(format!(
                "trace '{}' leads outside the trace directory (a symlink to {}): not read",
                path.display(),
                real.display()
            )));
        }
        std::fs::read_to_string(&real).map_err(cannot)
    })
}

/// The pools of `all` of the instance types `types` (which must be among
/// them; none given: the one type there is, else an error listing them) and,
/// with `zone`, of that zone only.
pub fn choose(all: Vec<SimPool>, types: &[String], zone: Option<&str>) -> Result<Vec<SimPool>> {
    let kinds = super::grid::types(&all);
    let chosen: Vec<String> = match (types, kinds.len()) {
        ([], 1) => kinds.clone(),
        ([], _) => {
            return Err(Error::invalid_input(format!(
            "the manifest has several instance types; choose one or more with --instance-type: {}",
            kinds.join(", ")
        )))
        }
        (given, _) => {
            for t in given {
                crate::check_known("instance type", t, kinds.iter().map(String::as_str))?;
            }
            given.to_vec()
        }
    };
    let mut set: Vec<SimPool> = all
        .into_iter()
        .filter(|p| chosen.contains(&p.pool.instance_type))
        .collect();
    if let Some(z) = zone {
        let zones: Vec<String> = set
            .iter()
            .filter_map(|p| p.pool.zone.as_ref().map(|z| z.to_string()))
            .collect();
        crate::check_known("zone", z, zones.iter().map(String::as_str))?;
        set.retain(|p| p.pool.zone.as_ref().is_some_and(|pz| pz.as_str() == z));
    }
    Ok(set)
}
