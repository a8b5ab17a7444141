//! The documents gpufleet prints: one row type per command's
//! `--output json` (and CSV), built from the library's own results.
//!
//! These are library values, not CLI code, so that every front end gives
//! the same field names and the same rounding: the CLI serialises them, and
//! an embedding program (or the Python package's `to_dict()`) gets the same
//! document from the same call. Each field name is a stable schema,
//! documented beside the command (docs/placing.md, docs/advisor.md).

mod fit;
mod mix;
mod offers;
mod place;
mod timeline;

pub use fit::{ConfigRow, FitDoc, MemoryRow};
pub use mix::{recommendation, MixDoc, MixInput, MixOptionRow, MixTermRow};
pub use offers::{price_age, OfferRow};
pub use place::{plan_rows, shown, PlanRow};
pub use timeline::{letter, PoolLine, TimelineDoc, MAX_POOLS};

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// `x` rounded to `places` decimals, as the documents print figures.
pub fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}

/// A time as the documents print it: RFC 3339 (empty if it cannot be
/// formatted, which only a year past 9999 makes).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// An RFC 3339 time for a table: to the second (the JSON keeps the
/// fraction), `2026-11-28T13:09:36Z` rather than `…13:09:36.841420416Z`.
pub fn to_the_second(t: &str) -> String {
    match (t.find('.'), t.find(['Z', '+']).or_else(|| t.rfind('-'))) {
        (Some(dot), Some(zone)) if dot < zone => format!("{}{}", &t[..dot], &t[zone..]),
        _ => t.to_string(),
    }
}

/// A unit enum's serde name (`nv_link`, `infini_band`): the name its JSON
/// says, for a row that flattens it to a string.
pub(crate) fn enum_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// `text` fit for a terminal: control characters (C0, DEL, C1) and the
/// invisible direction controls (U+061C, U+200E, U+200F, U+202A to U+202E,
/// U+2066 to U+2069), which could move the cursor, recolour the terminal,
/// forge a table row or reverse what a reader sees, shown as escapes
/// (`\u{1b}`); with `keep_lines`, `\n` and `\t` stay as they are (a
/// message of several lines). What gpufleet prints of outside text (tags,
/// names, job files, flags) goes through it; JSON output escapes for itself.
pub fn printable(text: &str, keep_lines: bool) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| {
        (c.is_control() && !(keep_lines && (c == '\n' || c == '\t')))
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' if bad(c) => out.push_str("\\n"),
            '\t' if bad(c) => out.push_str("\\t"),
            c if bad(c) => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

pub use gpufleet_model::text::clipped;

/// Each cell of a table row [`printable`] on one line.
pub fn printable_cells(cells: Vec<String>) -> Vec<String> {
    cells
        .into_iter()
        .map(|c| match printable(&c, false) {
            std::borrow::Cow::Borrowed(_) => c,
            std::borrow::Cow::Owned(o) => o,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn outside_text_is_printed_escaped() {
        use super::printable;
        assert_eq!(printable("plain ü", false), "plain ü");
        assert_eq!(printable("a\u{1b}[31mred", false), "a\\u{1b}[31mred");
        assert_eq!(printable("ana\nforged row", false), "ana\\nforged row");
        assert_eq!(printable("two\nlines", true), "two\nlines");
        assert_eq!(printable("gpt\u{202e}txt.exe", true), "gpt\\u{202e}txt.exe");
    }

    use super::to_the_second;

    #[test]
    fn table_times_are_to_the_second() {
        assert_eq!(
            to_the_second("2026-11-28T13:09:36.841420416Z"),
            "2026-11-28T13:09:36Z"
        );
        assert_eq!(
            to_the_second("2026-11-28T13:09:36.5+01:00"),
            "2026-11-28T13:09:36+01:00"
        );
        assert_eq!(
            to_the_second("2026-11-28T13:09:36.5-05:00"),
            "2026-11-28T13:09:36-05:00"
        );
        assert_eq!(
            to_the_second("2026-11-28T13:09:36Z"),
            "2026-11-28T13:09:36Z"
        );
    }
}
