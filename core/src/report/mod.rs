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

#[cfg(test)]
mod tests {
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
