//! Tables for people, JSON and CSV for scripts.

use std::io::Write;

use clap::ValueEnum;
use gpufleet::{Error, ErrorKind};
use serde::Serialize;

use crate::shared::Failure;

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

/// Prints `items` as an aligned table, a row each as `row` writes it:
/// left-aligned text, right-aligned columns whose header starts with `>`.
pub fn table<T>(
    out: &mut impl Write,
    headers: &[&str],
    items: impl IntoIterator<Item = T>,
    row: impl FnMut(T) -> Vec<String>,
) -> std::io::Result<()> {
    // Outside text (tags, names) cannot move the cursor or forge a row.
    let rows: Vec<Vec<String>> = items
        .into_iter()
        .map(row)
        .map(gpufleet::report::printable_cells)
        .collect();
    let right: Vec<bool> = headers.iter().map(|h| h.starts_with('>')).collect();
    let headers: Vec<&str> = headers.iter().map(|h| h.trim_start_matches('>')).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
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
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    Ok(())
}

/// A row's fields in the order its type declares them (a `serde_json::Map`
/// would sort them): the row is written as JSON and read back as a list of
/// pairs.
fn ordered_fields(row: &impl Serialize) -> Result<Vec<(String, serde_json::Value)>, Failure> {
    struct Pairs;
    impl<'de> serde::de::Visitor<'de> for Pairs {
        type Value = Vec<(String, serde_json::Value)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(pair) = map.next_entry::<String, serde_json::Value>()? {
                out.push(pair);
            }
            Ok(out)
        }
    }
    let text = serde_json::to_string(row).map_err(|e| write_failed(e.into()))?;
    let mut de = serde_json::Deserializer::from_str(&text);
    serde::Deserializer::deserialize_map(&mut de, Pairs)
        .map_err(|e| Failure::Error(Error::new(ErrorKind::Unexpected, format!("a CSV row: {e}"))))
}

/// Prints `rows` as RFC 4180 CSV with a header row of their field names.
/// Text, numbers and booleans are cells as they are; a list of strings is one
/// cell joined with `; `; anything nested is its compact JSON; null is empty.
pub fn csv_rows(out: &mut impl Write, rows: &[impl Serialize]) -> Result<(), Failure> {
    let mut w = csv::Writer::from_writer(out);
    let fail = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(io) => write_failed(io),
        other => Failure::Error(Error::new(ErrorKind::Unexpected, format!("CSV: {other:?}"))),
    };
    for (i, row) in rows.iter().enumerate() {
        let fields = ordered_fields(row)?;
        if i == 0 {
            w.write_record(fields.iter().map(|(k, _)| k.as_str()))
                .map_err(fail)?;
        }
        let cells: Vec<String> = fields
            .into_iter()
            .map(|(_, v)| match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s,
                serde_json::Value::Array(items)
                    if items.iter().all(serde_json::Value::is_string) =>
                {
                    items
                        .iter()
                        .filter_map(serde_json::Value::as_str)
                        .collect::<Vec<_>>()
                        .join("; ")
                }
                other @ (serde_json::Value::Array(_) | serde_json::Value::Object(_)) => {
                    other.to_string()
                }
                other => other.to_string(),
            })
            .collect();
        // Outside text (tags, names, errors) as on the terminal: control
        // characters and bidirectional overrides escaped, never raw in a
        // file a spreadsheet or a terminal shows.
        let cells = gpufleet::report::printable_cells(cells);
        w.write_record(&cells).map_err(fail)?;
    }
    w.flush().map_err(write_failed)
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
