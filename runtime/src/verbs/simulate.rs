//! `simulate`: availability traces replayed through the placer and the
//! baseline policies, for one job scenario or the standard grid (every pool
//! set against every scenario, on every core), each finished scenario told
//! to the caller's progress callback.
//!
//! This is CPU work, run on the calling thread (and rayon's for a grid):
//! an async caller runs it off its runtime's threads
//! (`tokio::task::spawn_blocking`), Python with the GIL released.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpufleet_core::sim::grid::{Cell, Grid, ScenarioResult};
use gpufleet_core::sim::{PolicyKind, Scenario, SimPool};
use gpufleet_core::Error;

/// Which pools a replay reads: the traces' directory and its manifest.
#[derive(Debug, Clone)]
pub struct Traces {
    /// The directory of availability traces.
    pub dir: PathBuf,
    /// The pools manifest (default `DIR/pools.csv`).
    pub manifest: Option<PathBuf>,
}

impl Traces {
    /// The traces in `dir`, with its own `pools.csv`.
    pub fn new(dir: impl Into<PathBuf>) -> Traces {
        Traces {
            dir: dir.into(),
            manifest: None,
        }
    }

    /// Every pool the manifest names, read with its trace, and a note when
    /// the traces do not start together (one line).
    pub fn load(&self) -> Result<(Vec<SimPool>, Option<String>), Error> {
        let manifest = self
            .manifest
            .clone()
            .unwrap_or_else(|| self.dir.join("pools.csv"));
        let all = gpufleet_core::sim::load(&manifest, &self.dir)?;
        let note = gpufleet_core::sim::alignment_note(&all);
        Ok((all, note))
    }

    /// The pools of one instance type (of `types`, or the only one there
    /// is), in `zone` when given: what one job could run on.
    pub fn choose(
        &self,
        types: &[String],
        zone: Option<&str>,
    ) -> Result<(Vec<SimPool>, Option<String>), Error> {
        let (all, note) = self.load()?;
        Ok((gpufleet_core::sim::choose(all, types, zone)?, note))
    }
}

/// What to replay.
#[derive(Debug, Clone)]
pub enum Replay {
    /// One job scenario on the pools of one instance type.
    One {
        /// The instance types to choose from (none: the only one).
        instance_types: Vec<String>,
        /// Only this zone's pools.
        zone: Option<String>,
        /// The job.
        scenario: Scenario,
    },
    /// The standard grid over every pool set, `starts` starts each.
    Grid {
        /// Start times per scenario.
        starts: usize,
    },
}

/// One scenario finished, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Scenarios finished so far (this one included).
    pub done: usize,
    /// Scenarios in all.
    pub total: usize,
    /// The pools this one ran on.
    pub pools: usize,
    /// Its scenario.
    pub scenario: Scenario,
    /// Time since the replay began.
    pub elapsed: Duration,
}

/// What a replay found.
#[derive(Debug)]
pub struct Simulated {
    /// One row per scenario, in the grid's order, each with every policy's
    /// result.
    pub rows: Vec<ScenarioResult>,
    /// What to say beside it (traces that do not start together, times
    /// rounded to the traces' tick), one line each.
    pub notes: Vec<String>,
    /// How long it took.
    pub took: Duration,
    /// The threads it ran on (1 for one scenario).
    pub threads: usize,
}

/// Replays `what` on `traces` for `policies` (none: the standard ones),
/// telling `progress` of each finished scenario (from any thread, in the
/// order they finish). A grid runs its scenarios on every core (rayon),
/// each independent; the rows keep the grid's order.
pub fn simulate(
    traces: &Traces,
    what: &Replay,
    policies: &[PolicyKind],
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<Simulated, Error> {
    let policies = if policies.is_empty() {
        PolicyKind::STANDARD.to_vec()
    } else {
        policies.to_vec()
    };
    let (grid, note) = match what {
        Replay::Grid { starts } => {
            let (all, note) = traces.load()?;
            (Grid::standard(&all, *starts), note)
        }
        Replay::One {
            instance_types,
            zone,
            scenario,
        } => {
            let (set, note) = traces.choose(instance_types, zone.as_deref())?;
            (Grid::single(set, *scenario), note)
        }
    };
    let mut notes: Vec<String> = note.into_iter().collect();
    notes.extend(grid.rounding_notes()?);
    let work = grid.cells();
    let total = work.len();
    let started = Instant::now();
    let done = AtomicUsize::new(0);
    let label = traces.dir.display().to_string();
    let one = |cell: &Cell<'_>| -> Result<ScenarioResult, Error> {
        let row = cell.run(&policies, &label)?;
        progress(&Progress {
            done: done.fetch_add(1, Ordering::SeqCst) + 1,
            total,
            pools: cell.pools.len(),
            scenario: *cell.scenario,
            elapsed: started.elapsed(),
        });
        Ok(row)
    };
    let (rows, threads) = if matches!(what, Replay::Grid { .. }) {
        use rayon::prelude::*;
        let rows = work.par_iter().map(one).collect::<Result<Vec<_>, _>>()?;
        (rows, rayon::current_num_threads())
    } else {
        (work.iter().map(one).collect::<Result<Vec<_>, _>>()?, 1)
    };
    Ok(Simulated {
        rows,
        notes,
        took: started.elapsed(),
        threads,
    })
}
