//! Durations as people write them: `90s`, `30m`, `1.5h`, `2d`, `1h30m`.

use std::time::Duration;

use crate::{Error, Result};

/// Parses a duration such as `30m`, `1.5h`, `2d`, `1h30m` or `45s`. A bare
/// number is refused: the unit is part of the meaning.
pub fn parse_duration(input: &str) -> Result<Duration> {
    let err = |why: &str| {
        Error::invalid_input(format!(
            "invalid duration '{input}': {why}; use a number with a unit (ms, s, m, h, d), such as 90s, 30m, 1.5h, 2d or 1h30m"
        ))
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("it is empty"));
    }
    let mut total = 0.0_f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("a number has no unit"))?;
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err("bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match rest[..unit_len].trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            _ => return Err(err("unknown unit")),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > 3.2e8 {
        return Err(err("too long"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration compactly: `45s`, `30m`, `1h30m`, `2d3h`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, mins, secs) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    let mut out = String::new();
    for (v, u) in [(days, "d"), (hours, "h"), (mins, "m"), (secs, "s")] {
        if v > 0 {
            out.push_str(&format!("{v}{u}"));
        }
    }
    if out.is_empty() {
        // Under a second: in milliseconds (`10ms`), not "0s".
        match d.subsec_millis() {
            0 => "0s".into(),
            ms => format!("{ms}ms"),
        }
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(format_duration(Duration::from_millis(10)), "10ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        for bad in ["", "30", "m", "3x", "-1h", "1..2h", "h30"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains("invalid duration"), "{bad}: {e}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }
}
