//! `gpufleet simulate --timeline START`: one start of one scenario, tick by
//! tick, for every policy beside every pool's availability.

use serde::Serialize;

use crate::sim::{timelines, PolicyKind, Scenario, SimPool, Timeline};
use crate::Result;

/// Pools are drawn as letters, so a timeline table shows at most this many
/// (the JSON names pools by their index and has no limit).
pub const MAX_POOLS: usize = 26;

/// One pool as the timeline names it.
#[derive(Debug, Serialize)]
pub struct PoolLine {
    /// The letter its ticks are drawn with in the table (upper case
    /// running, lower case in a changeover); absent past the 26th pool. A
    /// run's ticks name pools by their index in this list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub letter: Option<char>,
    /// Instance type.
    pub instance_type: String,
    /// Region or zone.
    pub location: String,
    /// Spot price, USD per hour.
    pub spot_usd_per_hour: f64,
    /// Throughput relative to the reference GPU.
    pub throughput: f64,
    /// Capacity at each tick from the start.
    pub available: Vec<bool>,
}

/// What `--timeline` prints with `--output json`.
#[derive(Debug, Serialize)]
pub struct TimelineDoc {
    /// Where the traces were read from.
    pub traces: String,
    /// Hours of work.
    pub job_hours: f64,
    /// Hours to the deadline.
    pub deadline_hours: f64,
    /// Hours lost to each start or move.
    pub changeover_hours: f64,
    /// The start (0-based, of `starts`).
    pub start: usize,
    /// Starts in the scenario.
    pub starts: usize,
    /// The start's tick in the traces.
    pub offset: usize,
    /// The start's time in the traces.
    pub start_time: String,
    /// Seconds per tick.
    pub tick_seconds: u64,
    /// The pools.
    pub pools: Vec<PoolLine>,
    /// One run per policy.
    pub runs: Vec<Timeline>,
}

/// The letter pool `k` is drawn with, if it has one.
pub fn letter(k: usize) -> Option<char> {
    u8::try_from(k)
        .ok()
        .filter(|k| usize::from(*k) < MAX_POOLS)
        .map(|k| char::from(b'A' + k))
}

impl TimelineDoc {
    /// Replays `policies` from start `start` of `scenario` over `set` (read
    /// from `traces`, named as such) and gives the document.
    pub fn new(
        traces: &str,
        set: &[SimPool],
        scenario: &Scenario,
        policies: &[PolicyKind],
        start: usize,
    ) -> Result<TimelineDoc> {
        let replay = timelines(set, scenario, policies, start)?;
        let offset = replay.offset;
        let first = &set[0].trace;
        let span = replay
            .runs
            .iter()
            .map(|r| r.ticks.len())
            .max()
            .unwrap_or(0)
            .max(replay.deadline_ticks);
        let start_time = first
            .start
            .checked_add(time::Duration::seconds(
                (offset as u64).saturating_mul(first.tick_seconds) as i64,
            ))
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default();
        let pools: Vec<PoolLine> = set
            .iter()
            .enumerate()
            .map(|(k, p)| PoolLine {
                letter: letter(k),
                instance_type: p.pool.instance_type.clone(),
                location: p.pool.location(),
                spot_usd_per_hour: p.spot.usd_per_hour_f64(),
                throughput: p.throughput,
                available: (offset..offset + span)
                    .map(|t| p.trace.available.get(t).copied().unwrap_or(false))
                    .collect(),
            })
            .collect();
        Ok(TimelineDoc {
            traces: traces.to_string(),
            job_hours: scenario.job_hours,
            deadline_hours: scenario.deadline_hours,
            changeover_hours: scenario.changeover_hours,
            start,
            starts: scenario.starts,
            offset,
            start_time,
            tick_seconds: first.tick_seconds,
            pools,
            runs: replay.runs,
        })
    }
}
