//! Outside text as messages and logs quote it.

/// At most `max` characters of `text` (outside text quoted in a message or
/// a log line: a metadata value, a tag), with `…` and the length left out
/// when it was longer, so that nothing outside can put megabytes on a line.
pub fn clipped(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    let n = text.chars().count();
    if n <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let head: String = text.chars().take(max).collect();
    std::borrow::Cow::Owned(format!("{head}… ({} more characters)", n - max))
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_outside_text_is_clipped() {
        assert_eq!(super::clipped("abc", 5), "abc");
        let big = "x".repeat(5_000_000);
        let c = super::clipped(&big, 80);
        assert!(
            c.len() < 120 && c.ends_with("(4999920 more characters)"),
            "{c}"
        );
    }
}
