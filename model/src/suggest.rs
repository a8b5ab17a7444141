//! "Did you mean" suggestions for names typed by people.

use crate::error::{Error, ErrorKind, Result};

/// Levenshtein edit distance between two strings, compared
/// case-insensitively (`strsim`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(&a.to_lowercase(), &b.to_lowercase())
}

/// The candidates nearest to `input`, best first: at most `max` of them, and only
/// those within a distance that still looks like a typo (or that contain the input).
pub fn nearest<'a, I>(input: &str, candidates: I, max: usize) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let lower = input.to_lowercase();
    let limit = (input.chars().count() / 2).max(2);
    // Score: edit distance, then whether the candidate extends what was typed
    // (`H10` -> `H100` before `A10`), then the name, so the order is stable.
    let mut scored: Vec<(usize, bool, &'a str)> = candidates
        .into_iter()
        .filter_map(|c| {
            let cl = c.to_lowercase();
            let d = edit_distance(input, c);
            let contains = !lower.is_empty() && cl.contains(&lower);
            let d = if contains { d.min(1) } else { d };
            (d <= limit || contains).then_some((d, !cl.starts_with(&lower), c))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.2 == b.2);
    scored.into_iter().take(max).map(|(_, _, c)| c).collect()
}

/// Checks that `name` is one of `valid`, or fails naming the nearest valid names.
pub fn check_known<'a, I>(what: &str, name: &str, valid: I) -> Result<()>
where
    I: IntoIterator<Item = &'a str> + Clone,
{
    if valid.clone().into_iter().any(|v| v == name) {
        return Ok(());
    }
    let near = nearest(name, valid.clone(), 3);
    let mut all: Vec<&str> = valid.into_iter().collect();
    all.sort_unstable();
    all.dedup();
    let listed = if all.len() > 12 {
        format!("{} and {} more", all[..12].join(", "), all.len() - 12)
    } else {
        all.join(", ")
    };
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", near.join(", "))
    };
    Err(Error::new(
        ErrorKind::InvalidInput,
        format!("unknown {what} '{name}'{hint}; known: {listed}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_and_nearest() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("H100", "h100"), 0);
        assert_eq!(
            nearest("H10", ["H100", "H200", "A10", "T4"], 3),
            vec!["H100", "A10", "H200"]
        );
        assert!(nearest("zzzzzzzz", ["H100"], 3).is_empty());
    }
}
