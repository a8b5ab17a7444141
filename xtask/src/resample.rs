//! `cargo xtask resample`: the availability traces at another tick length, for
//! measuring the placer on ticks it was not built on.
//!
//! Coarser by `n`: each run of `n` ticks becomes one, at the first one's time,
//! unavailable if any of the `n` was (what a poller every `n` ticks that
//! remembers any interruption would record). Finer by `n`: each tick becomes
//! `n` with the same flag, spread evenly up to the next tick's time. Every
//! other file (the manifests) is copied as it is, so relative paths between
//! the trace directories still resolve.

use std::fs;
use std::path::Path;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// How to change the tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `n` ticks become one.
    Coarser(usize),
    /// One tick becomes `n`.
    Finer(usize),
}

/// One trace (`index,time,preempted`) at the new tick length.
pub fn trace(text: &str, change: Change) -> Result<String, String> {
    let mut rows: Vec<(OffsetDateTime, bool)> = Vec::new();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    for (line, row) in reader.records().enumerate() {
        let row = row.map_err(|e| format!("line {}: {e}", line + 2))?;
        let (Some(at), Some(flag)) = (row.get(1), row.get(2)) else {
            return Err(format!("line {}: expected index,time,preempted", line + 2));
        };
        let at = OffsetDateTime::parse(at, &Rfc3339)
            .map_err(|e| format!("line {}: time '{at}': {e}", line + 2))?;
        let preempted = match flag {
            "0" => false,
            "1" => true,
            other => return Err(format!("line {}: preempted '{other}'", line + 2)),
        };
        rows.push((at, preempted));
    }
    let out: Vec<(OffsetDateTime, bool)> = match change {
        Change::Coarser(n) => rows
            .chunks_exact(n.max(1))
            .map(|run| (run[0].0, run.iter().any(|(_, p)| *p)))
            .collect(),
        Change::Finer(n) => {
            let n = n.max(1);
            let mut out = Vec::with_capacity(rows.len() * n);
            for (i, (at, p)) in rows.iter().enumerate() {
                let next = match (rows.get(i + 1), i.checked_sub(1)) {
                    (Some((next, _)), _) => *next - *at,
                    (None, Some(prev)) => *at - rows[prev].0,
                    (None, None) => time::Duration::minutes(10),
                };
                out.extend((0..n).map(|j| (*at + next * j as f64 / n as f64, *p)));
            }
            out
        }
    };
    let rows = out
        .iter()
        .map(|(at, p)| Ok((at.format(&Rfc3339).map_err(|e| e.to_string())?, !p)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(gpufleet_core::sim::format_trace(rows))
}

/// Every trace directory under `from`, resampled into `to`.
pub fn run(from: &Path, to: &Path, change: Change) -> Result<String, String> {
    let (mut traces, mut copied) = (0, 0);
    let dirs = fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for dir in dirs {
        let dir = dir.map_err(|e| e.to_string())?.path();
        if !dir.is_dir() {
            continue;
        }
        let Some(name) = dir.file_name() else {
            continue;
        };
        let out = to.join(name);
        fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        for file in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let file = file.map_err(|e| e.to_string())?.path();
            let Some(fname) = file.file_name() else {
                continue;
            };
            let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let written = if text.starts_with("index,time,preempted") {
                traces += 1;
                trace(&text, change).map_err(|e| format!("{}: {e}", file.display()))?
            } else {
                copied += 1;
                text
            };
            fs::write(out.join(fname), written).map_err(|e| format!("{}: {e}", out.display()))?;
        }
    }
    Ok(format!(
        "{traces} traces resampled ({change:?}) and {copied} other files copied into {}\n",
        to.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MINUTES: &str = "index,time,preempted\n\
        0,2022-10-26T22:05:04.000Z,0\n\
        1,2022-10-26T22:15:04.000Z,1\n\
        2,2022-10-26T22:25:04.000Z,0\n\
        3,2022-10-26T22:35:04.000Z,0\n\
        4,2022-10-26T22:45:04.000Z,0\n\
        5,2022-10-26T22:55:04.000Z,0\n\
        6,2022-10-26T23:05:04.000Z,1\n";

    #[test]
    fn coarser_ticks_remember_any_interruption_and_drop_a_partial_tail() {
        assert_eq!(
            trace(TEN_MINUTES, Change::Coarser(3)).unwrap(),
            "index,time,preempted\n0,2022-10-26T22:05:04Z,1\n1,2022-10-26T22:35:04Z,0\n"
        );
    }

    #[test]
    fn finer_ticks_split_evenly_up_to_the_next_tick() {
        let out = trace(TEN_MINUTES, Change::Finer(2)).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 15);
        assert_eq!(lines[2], "1,2022-10-26T22:10:04Z,0");
        assert_eq!(lines[3], "2,2022-10-26T22:15:04Z,1");
        assert_eq!(lines[14], "13,2022-10-26T23:10:04Z,1");
    }

    #[test]
    fn a_bad_row_is_named() {
        let e = trace("index,time,preempted\n0,yesterday,0\n", Change::Coarser(2)).unwrap_err();
        assert!(e.contains("line 2") && e.contains("yesterday"), "{e}");
        let e = trace(
            "index,time,preempted\n0,2022-10-26T22:05:04Z,2\n",
            Change::Coarser(2),
        )
        .unwrap_err();
        assert!(e.contains("preempted '2'"), "{e}");
    }
}
