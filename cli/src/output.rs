//! Tables for people, JSON and CSV for scripts.

use std::io::Write;

use clap::ValueEnum;
use gpufleet::{Error, ErrorKind};
use serde::Serialize;

use crate::Failure;

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// A JSON document with a documented, stable schema.
    Json,
    /// Comma-separated values with a header row.
    Csv,
}

/// Prints rows as an aligned table: left-aligned text, right-aligned columns
/// whose header starts with `>`.
pub fn table(out: &mut impl Write, headers: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let right: Vec<bool> = headers.iter().map(|h| h.starts_with('>')).collect();
    let headers: Vec<&str> = headers.iter().map(|h| h.trim_start_matches('>')).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if right[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s
    };
    writeln!(out, "{}", line(&headers))?;
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    Ok(())
}

/// Quotes a CSV field when it needs it.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A failure to write the output (a closed pipe, a full disk).
pub fn write_failed(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Failure::ClosedPipe;
    }
    Failure::Error(Error::new(
        ErrorKind::Unexpected,
        format!("writing output: {e}"),
    ))
}

/// Prints `value` as pretty JSON and a newline.
pub fn json(out: &mut impl Write, value: &impl Serialize) -> Result<(), Failure> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(|e| write_failed(e.into()))?;
    writeln!(out).map_err(write_failed)
}
