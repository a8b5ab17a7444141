//! Small helpers every provider's builder shares: lists and endpoints read from
//! strings, values read from the INI files the clouds' CLIs keep their
//! settings in, and a secret wrapper whose `Debug` hides the value.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::Region;

/// A secret (token, key). Its `Debug` and `Display` print `***`; read it with
/// [`Secret::expose`] only where it is sent.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Something a caller hands a provider builder ready-made (an SDK
/// configuration, a credential), shared by reference. Its `Debug` prints
/// only `Injected(..)` (a credential's contents are never shown), and two
/// are equal when they hold the very same object.
pub struct Injected<T: ?Sized>(std::sync::Arc<T>);

impl<T: ?Sized> Injected<T> {
    /// Wraps a shared object.
    pub fn new(value: std::sync::Arc<T>) -> Self {
        Injected(value)
    }

    /// The object.
    pub fn get(&self) -> &std::sync::Arc<T> {
        &self.0
    }
}

impl<T: ?Sized> Clone for Injected<T> {
    fn clone(&self) -> Self {
        Injected(self.0.clone())
    }
}

impl<T: ?Sized> fmt::Debug for Injected<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Injected(..)")
    }
}

impl<T: ?Sized> PartialEq for Injected<T> {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T: ?Sized> Eq for Injected<T> {}

/// Splits a comma-separated list of regions (`us-east-1,us-west-2`), trimming
/// blanks and dropping empty entries.
pub fn parse_regions(list: &str) -> Vec<Region> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Region::new)
        .collect()
}

/// Checks an endpoint override is an `http://` or `https://` URL with a host,
/// and returns it without a trailing slash. `setting` names the option or
/// variable in the error.
pub fn parse_endpoint(setting: &str, value: &str) -> Result<String> {
    let v = value.trim();
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace) => {
            Ok(v.trim_end_matches('/').to_string())
        }
        _ => Err(Error::invalid_input(format!(
            "invalid {setting} '{value}': expected an http:// or https:// URL such as http://127.0.0.1:5000"
        ))),
    }
}

/// The value of `key` in `[section]` of an INI file as gcloud and the az CLI
/// write their configuration (Python's `configparser`: `key = value`, `#`
/// and `;` comments, keys in any case); `None` when absent or empty.
pub fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('#') || l.starts_with(';') || l.is_empty() {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = s.trim().to_string();
            continue;
        }
        if current == section {
            if let Some((k, v)) = l.split_once('=') {
                if k.trim().eq_ignore_ascii_case(key) {
                    let v = v.trim();
                    return (!v.is_empty()).then(|| v.to_string());
                }
            }
        }
    }
    None
}

/// Reads an environment variable, treating an empty value as unset.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_secrets() {
        assert_eq!(
            parse_endpoint("X", "http://127.0.0.1:5000/").unwrap(),
            "http://127.0.0.1:5000"
        );
        let e = parse_endpoint("AWS_ENDPOINT_URL", "127.0.0.1:5000").unwrap_err();
        assert!(
            e.to_string()
                .contains("invalid AWS_ENDPOINT_URL '127.0.0.1:5000'"),
            "{e}"
        );
        assert!(parse_endpoint("X", "https://").is_err());
        assert_eq!(format!("{:?}", Secret::new("AKIAFAKE")), "Secret(***)");
        assert_eq!(
            parse_regions(" us-east-1, ,us-west-2"),
            vec![Region::new("us-east-1"), Region::new("us-west-2")]
        );
    }

    #[test]
    fn ini_values_are_read_from_their_section() {
        let text = "[core]\naccount = ana@example.com\nproject = my-proj\n\n[compute]\nzone = us-central1-a\nproject = not-this\n";
        assert_eq!(
            ini_value(text, "core", "project").as_deref(),
            Some("my-proj")
        );
        assert_eq!(
            ini_value(text, "core", "account").as_deref(),
            Some("ana@example.com")
        );
        assert_eq!(
            ini_value(text, "compute", "zone").as_deref(),
            Some("us-central1-a")
        );
        assert_eq!(ini_value(text, "core", "zone"), None);
        assert_eq!(ini_value("[core]\nproject =\n", "core", "project"), None);
    }
}
