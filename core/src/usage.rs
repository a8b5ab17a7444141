//! Measured GPU use: what a node's GPUs do, summarised where people and
//! tools look.
//!
//! The node agent (`gpufleet watch`) reads every GPU's utilisation and
//! memory through a [`GpuReader`] every few seconds and feeds the readings to
//! a [`UsageWindow`]. The window keeps a minute-by-minute record of the last
//! [`UsageWindow::window`] (15 minutes by default) and, for each of the
//! [`QUIET_LEVELS`], how long the GPUs have stayed under it. Its
//! [`GpuSummary`] goes onto the instance's own tags with the heartbeat, in
//! two label-safe values (they are GCP label values too: lowercase letters,
//! digits and `-`, at most 63 characters):
//!
//! | tag | example | meaning |
//! |-----|---------|---------|
//! | `gpufleet:gpu` | `t1767950000-w900-n8-u12-x34-m20480-c81920` | at Unix second `t`, over the last `w` seconds, `n` GPUs were `u` % utilised on average (the mean over GPUs and samples), `x` % at most (the busiest minute, mean over GPUs), held `m` MiB at most on one GPU, of `c` MiB each |
//! | `gpufleet:gpu-quiet` | `o190-1p0-2p0-5p190-10p190-20p190-50p190` | the agent has sampled for `o` minutes; the GPUs have stayed under 1 % for 0 minutes, under 5 % for 190, … (a minute counts as under a level when the mean of its samples over all GPUs is) |
//!
//! `reap --idle DUR --below PCT` reads the quiet ladder at the highest level
//! at or under PCT; the controller folds each summary into the job's
//! [`JobUsage`] in the ledger, which `jobs show` and `fit --from-job` read.
//!
//! The names and units follow the NVIDIA Management Library
//! (`nvmlDeviceGetUtilizationRates`: percent of the sample period a kernel
//! ran; `nvmlDeviceGetMemoryInfo`: bytes of framebuffer memory), which
//! `nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total` prints
//! in percent and MiB.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{Error, ErrorKind, Result};

/// The utilisation levels the quiet ladder is published for, in percent.
pub const QUIET_LEVELS: [u8; 6] = [1, 2, 5, 10, 20, 50];

/// The window a summary covers unless told otherwise.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(15 * 60);

/// The longest quiet time a tag holds, in minutes (99,999: 69 days).
const MAX_MINUTES: u64 = 99_999;

/// One GPU's reading at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuReading {
    /// The GPU's index on the node (`nvidia-smi`'s `index`).
    pub index: u32,
    /// Its UUID (`GPU-…`), where the reader knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Its product name (`NVIDIA A100-SXM4-80GB`), where the reader knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Percent of the last sample period a kernel was running (0..=100).
    pub utilization_pct: u8,
    /// Framebuffer memory in use, MiB.
    pub memory_used_mib: u64,
    /// Framebuffer memory in all, MiB.
    pub memory_total_mib: u64,
}

impl GpuReading {
    /// Checks the reading is possible (utilisation at most 100 %, used
    /// memory at most the total).
    pub fn validate(&self) -> Result<()> {
        if self.utilization_pct > 100 {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "GPU {}: utilisation {} % is over 100 %",
                    self.index, self.utilization_pct
                ),
            ));
        }
        if self.memory_total_mib == 0 || self.memory_used_mib > self.memory_total_mib {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "GPU {}: {} MiB used of {} MiB is not a possible reading",
                    self.index, self.memory_used_mib, self.memory_total_mib
                ),
            ));
        }
        Ok(())
    }
}

/// Where GPU readings come from: NVML, `nvidia-smi`, or a script in tests.
#[async_trait]
pub trait GpuReader: Send + Sync + fmt::Debug {
    /// What it reads through, for the log (`NVML 12.535`, `nvidia-smi`).
    fn source(&self) -> String;

    /// Every GPU's reading now. An empty list means the node has no GPU.
    async fn read(&self) -> Result<Vec<GpuReading>>;
}

/// Readings given in advance, one set per call; the last set repeats. For
/// tests of everything that consumes readings.
#[derive(Debug)]
pub struct ScriptedReader {
    sets: Mutex<VecDeque<Result<Vec<GpuReading>>>>,
    last: Mutex<Vec<GpuReading>>,
}

impl ScriptedReader {
    /// A reader that returns `sets` in order, then the last one forever.
    pub fn new(sets: impl IntoIterator<Item = Result<Vec<GpuReading>>>) -> Self {
        ScriptedReader {
            sets: Mutex::new(sets.into_iter().collect()),
            last: Mutex::new(Vec::new()),
        }
    }

    /// `gpus` identical GPUs at `util` percent holding `used` of `total` MiB.
    pub fn steady(gpus: u32, util: u8, used: u64, total: u64) -> Self {
        ScriptedReader::new([Ok(uniform(gpus, util, used, total))])
    }
}

/// `gpus` identical readings.
pub fn uniform(gpus: u32, util: u8, used: u64, total: u64) -> Vec<GpuReading> {
    (0..gpus)
        .map(|index| GpuReading {
            index,
            uuid: None,
            name: None,
            utilization_pct: util,
            memory_used_mib: used,
            memory_total_mib: total,
        })
        .collect()
}

#[async_trait]
impl GpuReader for ScriptedReader {
    fn source(&self) -> String {
        "scripted".into()
    }

    async fn read(&self) -> Result<Vec<GpuReading>> {
        let next = self.sets.lock().map_err(poisoned)?.pop_front();
        let mut last = self.last.lock().map_err(poisoned)?;
        match next {
            Some(Ok(set)) => {
                *last = set.clone();
                Ok(set)
            }
            Some(Err(e)) => Err(e),
            None => Ok(last.clone()),
        }
    }
}

fn poisoned<T>(_: T) -> Error {
    Error::new(ErrorKind::Unexpected, "a reader's lock was poisoned")
}

/// One minute of samples.
#[derive(Debug, Clone, Copy)]
struct Minute {
    /// Unix minute.
    at: i64,
    /// Sum of the samples' mean utilisation over GPUs, percent.
    util_sum: f64,
    samples: u32,
    /// The most memory one GPU held, MiB.
    peak_mib: u64,
}

impl Minute {
    fn mean(&self) -> f64 {
        self.util_sum / f64::from(self.samples.max(1))
    }
}

/// A node's recent GPU use: the last [`window`](Self::window) minute by
/// minute, and how long its GPUs have stayed under each of the
/// [`QUIET_LEVELS`]. Memory is bounded by the window, not by uptime.
#[derive(Debug, Clone)]
pub struct UsageWindow {
    window: Duration,
    minutes: VecDeque<Minute>,
    /// When the first sample was taken.
    first: Option<OffsetDateTime>,
    last: Option<OffsetDateTime>,
    /// For each level, the end of the last complete minute whose mean was at
    /// or over it.
    last_busy: [Option<i64>; QUIET_LEVELS.len()],
    gpus: u32,
    total_mib: u64,
}

impl Default for UsageWindow {
    fn default() -> Self {
        UsageWindow::new(DEFAULT_WINDOW)
    }
}

impl UsageWindow {
    /// A window of `window` (rounded up to whole minutes, at least one).
    pub fn new(window: Duration) -> Self {
        let mins = window.as_secs().div_ceil(60).max(1);
        UsageWindow {
            window: Duration::from_secs(mins * 60),
            minutes: VecDeque::new(),
            first: None,
            last: None,
            last_busy: [None; QUIET_LEVELS.len()],
            gpus: 0,
            total_mib: 0,
        }
    }

    /// The window a summary covers.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Adds the readings taken at `at`. Readings out of order (older than
    /// the last) and impossible readings are refused; an empty set (no GPU)
    /// is kept as such.
    pub fn add(&mut self, at: OffsetDateTime, readings: &[GpuReading]) -> Result<()> {
        if self.last.is_some_and(|l| at < l) {
            return Err(Error::invalid_input(format!(
                "a GPU sample at {at} is older than the last one"
            )));
        }
        for r in readings {
            r.validate()?;
        }
        self.first.get_or_insert(at);
        self.last = Some(at);
        self.gpus = readings.len() as u32;
        if readings.is_empty() {
            return Ok(());
        }
        self.total_mib = readings
            .iter()
            .map(|r| r.memory_total_mib)
            .max()
            .unwrap_or(0);
        let util = readings
            .iter()
            .map(|r| f64::from(r.utilization_pct))
            .sum::<f64>()
            / readings.len() as f64;
        let peak = readings
            .iter()
            .map(|r| r.memory_used_mib)
            .max()
            .unwrap_or(0);
        let minute = at.unix_timestamp().div_euclid(60);
        match self.minutes.back_mut() {
            Some(m) if m.at == minute => {
                m.util_sum += util;
                m.samples += 1;
                m.peak_mib = m.peak_mib.max(peak);
            }
            _ => {
                // The minute before is complete: it counts for the ladder.
                if let Some(done) = self.minutes.back().copied() {
                    self.close(done);
                }
                self.minutes.push_back(Minute {
                    at: minute,
                    util_sum: util,
                    samples: 1,
                    peak_mib: peak,
                });
            }
        }
        let keep = (self.window.as_secs() / 60) as i64;
        while self.minutes.front().is_some_and(|m| m.at <= minute - keep) {
            self.minutes.pop_front();
        }
        Ok(())
    }

    fn close(&mut self, m: Minute) {
        let mean = m.mean();
        for (i, level) in QUIET_LEVELS.iter().enumerate() {
            if mean >= f64::from(*level) {
                self.last_busy[i] = Some((m.at + 1) * 60);
            }
        }
    }

    /// The summary as of the last sample; `None` before any.
    pub fn summary(&self) -> Option<GpuSummary> {
        let at = self.last?;
        let first = self.first?;
        let observed = (at - first).whole_seconds().max(0);
        let (mut sum, mut n, mut max, mut peak) = (0.0, 0u32, 0.0f64, 0u64);
        for m in &self.minutes {
            sum += m.util_sum;
            n += m.samples;
            max = max.max(m.mean());
            peak = peak.max(m.peak_mib);
        }
        let current = self.minutes.back().copied();
        let quiet = QUIET_LEVELS
            .iter()
            .enumerate()
            .map(|(i, level)| {
                // The running minute counts as soon as it is over the level.
                let busy_now = current.is_some_and(|m| m.mean() >= f64::from(*level));
                let secs = if busy_now || self.gpus == 0 {
                    0
                } else {
                    match self.last_busy[i] {
                        Some(end) => (at.unix_timestamp() - end).max(0),
                        None => observed,
                    }
                };
                (*level, minutes(secs))
            })
            .collect();
        Some(GpuSummary {
            at,
            window_secs: (self.window.as_secs()).min(observed.max(0) as u64 + 60) as u32,
            gpus: self.gpus,
            mean_util_pct: if n == 0 {
                0
            } else {
                (sum / f64::from(n)).round() as u8
            },
            max_util_pct: max.round() as u8,
            peak_memory_mib: peak,
            memory_total_mib: self.total_mib,
            observed_minutes: minutes(observed),
            quiet,
        })
    }
}

fn minutes(secs: i64) -> u32 {
    (secs.max(0) as u64 / 60).min(MAX_MINUTES) as u32
}

/// What a node's GPUs did lately, as its agent publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// When the last sample was taken.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The seconds the figures cover (the window, or less on a new node).
    pub window_secs: u32,
    /// GPUs on the node (0: the agent sees none).
    pub gpus: u32,
    /// Mean utilisation over GPUs and samples, percent.
    pub mean_util_pct: u8,
    /// The busiest minute's mean over GPUs, percent.
    pub max_util_pct: u8,
    /// The most memory one GPU held, MiB.
    pub peak_memory_mib: u64,
    /// Memory of one GPU, MiB.
    pub memory_total_mib: u64,
    /// How long the agent has sampled, minutes.
    pub observed_minutes: u32,
    /// For each of the [`QUIET_LEVELS`], how many minutes the GPUs have
    /// stayed under it.
    pub quiet: Vec<(u8, u32)>,
}

impl GpuSummary {
    /// The value of the `gpufleet:gpu` tag.
    pub fn tag_value(&self) -> String {
        format!(
            "t{}-w{}-n{}-u{}-x{}-m{}-c{}",
            self.at.unix_timestamp(),
            self.window_secs,
            self.gpus,
            self.mean_util_pct,
            self.max_util_pct,
            self.peak_memory_mib,
            self.memory_total_mib
        )
    }

    /// The value of the `gpufleet:gpu-quiet` tag.
    pub fn quiet_tag_value(&self) -> String {
        let mut s = format!("o{}", self.observed_minutes);
        for (level, mins) in &self.quiet {
            s.push_str(&format!("-{level}p{mins}"));
        }
        s
    }

    /// Reads a summary back from an instance's tags; `None` when there is
    /// none or it cannot be read (a node of another version, a hand edit).
    pub fn from_tags(tags: &crate::Tags) -> Option<GpuSummary> {
        let main = tags.get(crate::tags::GPU)?;
        let mut s = GpuSummary::parse(main)?;
        if let Some(q) = tags.get(crate::tags::GPU_QUIET) {
            s.parse_quiet(q);
        }
        Some(s)
    }

    /// Parses a `gpufleet:gpu` value (the quiet ladder stays empty).
    pub fn parse(value: &str) -> Option<GpuSummary> {
        let mut s = GpuSummary {
            at: OffsetDateTime::UNIX_EPOCH,
            window_secs: 0,
            gpus: 0,
            mean_util_pct: 0,
            max_util_pct: 0,
            peak_memory_mib: 0,
            memory_total_mib: 0,
            observed_minutes: 0,
            quiet: Vec::new(),
        };
        let mut seen_at = false;
        for part in value.trim().split('-') {
            let (key, num) = part.split_at_checked(1)?;
            let n: u64 = num.parse().ok()?;
            match key {
                "t" => {
                    s.at = OffsetDateTime::from_unix_timestamp(i64::try_from(n).ok()?).ok()?;
                    seen_at = true;
                }
                "w" => s.window_secs = u32::try_from(n).ok()?,
                "n" => s.gpus = u32::try_from(n).ok()?,
                "u" => s.mean_util_pct = u8::try_from(n).ok().filter(|v| *v <= 100)?,
                "x" => s.max_util_pct = u8::try_from(n).ok().filter(|v| *v <= 100)?,
                "m" => s.peak_memory_mib = n,
                "c" => s.memory_total_mib = n,
                // Fields a later agent adds are skipped.
                _ => {}
            }
        }
        seen_at.then_some(s)
    }

    fn parse_quiet(&mut self, value: &str) {
        let mut quiet = Vec::new();
        for part in value.trim().split('-') {
            if let Some(o) = part.strip_prefix('o') {
                if let Ok(n) = o.parse() {
                    self.observed_minutes = n;
                }
            } else if let Some((level, mins)) = part.split_once('p') {
                if let (Ok(l), Ok(m)) = (level.parse::<u8>(), mins.parse::<u32>()) {
                    quiet.push((l, m));
                }
            }
        }
        quiet.sort_unstable();
        self.quiet = quiet;
    }

    /// How long the GPUs have stayed under `below` percent as far as the
    /// summary can tell: the quiet time of the highest published level at
    /// or under `below`, and that level. `None` when no level is at or
    /// under it, or the node published no ladder.
    pub fn quiet_under(&self, below: u8) -> Option<(u8, Duration)> {
        self.quiet
            .iter()
            .rfind(|(level, _)| *level <= below)
            .map(|(level, mins)| (*level, Duration::from_secs(u64::from(*mins) * 60)))
    }

    /// Memory used at the peak as a share of one GPU's, percent.
    pub fn peak_memory_pct(&self) -> Option<f64> {
        (self.memory_total_mib > 0)
            .then(|| self.peak_memory_mib as f64 * 100.0 / self.memory_total_mib as f64)
    }
}

/// A job's measured GPU use over its life, folded from its nodes'
/// summaries by the controller and kept in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    /// GPUs per instance.
    pub gpus: u32,
    /// Instances the job ran on at once.
    pub instances: u32,
    /// The instance type it last ran on.
    pub instance_type: String,
    /// Seconds of measurement folded in (per instance, summed).
    pub observed_secs: u64,
    /// Utilisation percent × seconds, summed (the mean is this over
    /// [`observed_secs`](Self::observed_secs)).
    pub util_pct_secs: u64,
    /// The busiest minute seen, percent.
    pub max_util_pct: u8,
    /// The most memory one GPU held, MiB.
    pub peak_memory_mib: u64,
    /// Memory of one GPU where it ran, MiB.
    pub memory_total_mib: u64,
    /// The newest summary folded in.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl JobUsage {
    /// Mean utilisation, percent; `None` before any measurement.
    pub fn mean_util_pct(&self) -> Option<f64> {
        (self.observed_secs > 0).then(|| self.util_pct_secs as f64 / self.observed_secs as f64)
    }

    /// Folds in a summary newer than `since` (the previous summary folded
    /// for that instance; `None` for the first), weighting it by the time it
    /// newly covers. Returns whether anything changed.
    pub fn fold(
        usage: &mut Option<JobUsage>,
        summary: &GpuSummary,
        since: Option<OffsetDateTime>,
        instance_type: &str,
        instances: u32,
    ) -> bool {
        if summary.gpus == 0 || since.is_some_and(|s| summary.at <= s) {
            return false;
        }
        let covered = match since {
            Some(s) => (summary.at - s).whole_seconds().max(0) as u64,
            None => u64::from(summary.window_secs),
        }
        .min(u64::from(summary.window_secs));
        let u = usage.get_or_insert_with(|| JobUsage {
            gpus: summary.gpus,
            instances,
            instance_type: instance_type.to_string(),
            observed_secs: 0,
            util_pct_secs: 0,
            max_util_pct: 0,
            peak_memory_mib: 0,
            memory_total_mib: summary.memory_total_mib,
            updated_at: summary.at,
        });
        u.gpus = summary.gpus;
        u.instances = instances.max(1);
        u.instance_type = instance_type.to_string();
        u.observed_secs = u.observed_secs.saturating_add(covered);
        u.util_pct_secs = u
            .util_pct_secs
            .saturating_add(covered.saturating_mul(u64::from(summary.mean_util_pct)));
        u.max_util_pct = u.max_util_pct.max(summary.max_util_pct);
        u.peak_memory_mib = u.peak_memory_mib.max(summary.peak_memory_mib);
        u.memory_total_mib = summary.memory_total_mib;
        u.updated_at = u.updated_at.max(summary.at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_767_950_000 - 1_767_950_000 % 60 + secs).unwrap()
    }

    fn feed(w: &mut UsageWindow, from: i64, to: i64, every: i64, util: u8, used: u64) {
        let mut s = from;
        while s < to {
            w.add(t(s), &uniform(8, util, used, 81_920)).unwrap();
            s += every;
        }
    }

    #[test]
    fn a_window_summarises_the_last_minutes_and_the_ladder_counts_quiet_time() {
        let mut w = UsageWindow::default();
        // An hour of work at 60 %, then three hours at 2 %.
        feed(&mut w, 0, 3600, 10, 60, 70_000);
        feed(&mut w, 3600, 4 * 3600, 10, 2, 20_000);
        let s = w.summary().unwrap();
        assert_eq!(s.gpus, 8);
        assert_eq!(s.mean_util_pct, 2);
        assert_eq!(s.max_util_pct, 2);
        // The window no longer holds the busy hour's memory.
        assert_eq!(s.peak_memory_mib, 20_000);
        assert_eq!(s.memory_total_mib, 81_920);
        assert_eq!(s.window_secs, 900);
        assert_eq!(s.observed_minutes, 239);
        let q = |level| s.quiet.iter().find(|(l, _)| *l == level).unwrap().1;
        assert_eq!(q(1), 0);
        assert_eq!(q(2), 0);
        // Under 5 % since the busy hour ended (minus the sample's minute).
        assert!((178..=180).contains(&q(5)), "{:?}", s.quiet);
        assert_eq!(q(5), q(50));
        assert_eq!(s.quiet_under(5).unwrap().0, 5);
        assert_eq!(s.quiet_under(7).unwrap().0, 5);
        assert!(s.quiet_under(0).is_none());
    }

    #[test]
    fn tags_round_trip_and_stay_gcp_label_safe() {
        let mut w = UsageWindow::default();
        feed(&mut w, 0, 7200, 10, 3, 12_345);
        let s = w.summary().unwrap();
        let mut tags = crate::Tags::new();
        tags.insert(crate::tags::GPU.into(), s.tag_value());
        tags.insert(crate::tags::GPU_QUIET.into(), s.quiet_tag_value());
        for v in tags.values() {
            assert!(v.len() <= 63, "{v}");
            assert!(
                v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{v}"
            );
        }
        let back = GpuSummary::from_tags(&tags).unwrap();
        assert_eq!(back, s);
        // A value from elsewhere is no summary.
        tags.insert(crate::tags::GPU.into(), "busy".into());
        assert!(GpuSummary::from_tags(&tags).is_none());
        assert!(GpuSummary::parse("t1-u101").is_none());
        // Longest values still fit.
        let big = GpuSummary {
            at: t(0),
            window_secs: 86_400,
            gpus: 16,
            mean_util_pct: 100,
            max_util_pct: 100,
            peak_memory_mib: 196_608,
            memory_total_mib: 196_608,
            observed_minutes: 99_999,
            quiet: QUIET_LEVELS.iter().map(|l| (*l, 99_999)).collect(),
        };
        assert!(big.tag_value().len() <= 63, "{}", big.tag_value());
        assert!(
            big.quiet_tag_value().len() <= 63,
            "{}",
            big.quiet_tag_value()
        );
    }

    #[test]
    fn a_blip_resets_the_ladder_and_no_gpu_is_never_quiet() {
        let mut w = UsageWindow::default();
        feed(&mut w, 0, 3600, 10, 0, 0);
        feed(&mut w, 3600, 3660, 10, 40, 1000);
        feed(&mut w, 3660, 3600 + 600, 10, 0, 0);
        let s = w.summary().unwrap();
        assert_eq!(s.quiet_under(5).unwrap().1, Duration::from_secs(8 * 60));
        assert_eq!(s.max_util_pct, 40);
        let mut none = UsageWindow::default();
        none.add(t(0), &[]).unwrap();
        none.add(t(3600), &[]).unwrap();
        let s = none.summary().unwrap();
        assert_eq!(s.gpus, 0);
        assert!(s.quiet.iter().all(|(_, m)| *m == 0));
    }

    #[test]
    fn impossible_or_out_of_order_readings_are_refused() {
        let mut w = UsageWindow::default();
        assert!(w.add(t(0), &uniform(1, 101, 1, 2)).is_err());
        assert!(w.add(t(0), &uniform(1, 1, 3, 2)).is_err());
        w.add(t(60), &uniform(1, 1, 1, 2)).unwrap();
        assert!(w.add(t(0), &uniform(1, 1, 1, 2)).is_err());
    }

    #[test]
    fn job_usage_weights_each_summary_by_the_time_it_newly_covers() {
        let s = |at: i64, util: u8, peak: u64| GpuSummary {
            at: t(at),
            window_secs: 900,
            gpus: 4,
            mean_util_pct: util,
            max_util_pct: util,
            peak_memory_mib: peak,
            memory_total_mib: 40_960,
            observed_minutes: 0,
            quiet: Vec::new(),
        };
        let mut u = None;
        assert!(JobUsage::fold(&mut u, &s(900, 80, 30_000), None, "p4d", 1));
        // A minute later: only that minute is new.
        assert!(JobUsage::fold(
            &mut u,
            &s(960, 20, 10_000),
            Some(t(900)),
            "p4d",
            1
        ));
        // The same summary again adds nothing.
        assert!(!JobUsage::fold(
            &mut u,
            &s(960, 20, 10_000),
            Some(t(960)),
            "p4d",
            1
        ));
        let u = u.unwrap();
        assert_eq!(u.observed_secs, 960);
        let mean = u.mean_util_pct().unwrap();
        assert!((mean - (80.0 * 900.0 + 20.0 * 60.0) / 960.0).abs() < 1e-9);
        assert_eq!(u.peak_memory_mib, 30_000);
        assert_eq!(u.max_util_pct, 80);
    }

    #[tokio::test]
    async fn a_scripted_reader_plays_its_sets_then_repeats_the_last() {
        let r = ScriptedReader::new([
            Ok(uniform(2, 10, 1, 2)),
            Err(Error::new(ErrorKind::Unavailable, "driver busy")),
            Ok(uniform(2, 90, 2, 2)),
        ]);
        assert_eq!(r.read().await.unwrap()[0].utilization_pct, 10);
        assert!(r.read().await.is_err());
        assert_eq!(r.read().await.unwrap()[0].utilization_pct, 90);
        assert_eq!(r.read().await.unwrap()[1].utilization_pct, 90);
    }
}
