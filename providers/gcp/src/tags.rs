//! gpufleet tags on Compute Engine (labels, and the exact tags in metadata), and names derived from keys.
//!
//! Labels allow only lowercase letters, digits, `_` and `-` (keys start with
//! a letter), at most 63 characters: `gpufleet:job` becomes `gpufleet-job`,
//! values are lowercased with other characters as `_`, and the expiry time
//! becomes Unix seconds. Labels are for filtering and cost reports; the exact
//! tags travel in the instance metadata item [`TAGS_METADATA_KEY`] (JSON), or
//! in a resource policy's description, and are what gpufleet reads back.

use gpufleet_model::{fnv1a64, tags, TagFilter, Tags};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The metadata item that holds an instance's exact tags as JSON.
pub(crate) const TAGS_METADATA_KEY: &str = "gpufleet-tags";

/// The label that holds a hash of the idempotency key.
pub(crate) const KEY_LABEL: &str = "gpufleet-key";

/// The prefix of a resource policy description that holds its tags.
pub(crate) const DESCRIPTION_PREFIX: &str = "gpufleet-tags:";

fn clean(s: &str, keep_first_letter: bool) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' {
                c
            } else if keep_first_letter {
                '-'
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    if keep_first_letter && !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert(0, 'k');
        out.truncate(63);
    }
    out
}

/// A label key for a tag key.
pub(crate) fn label_key(key: &str) -> String {
    clean(key, true)
}

/// A label value for a tag.
pub(crate) fn label_value(key: &str, value: &str) -> String {
    if key == tags::EXPIRES_AT {
        if let Ok(t) = OffsetDateTime::parse(value, &Rfc3339) {
            return t.unix_timestamp().to_string();
        }
    }
    clean(value, false)
}

/// The labels for a set of tags.
pub(crate) fn to_labels(tags: &Tags) -> std::collections::HashMap<String, String> {
    tags.iter()
        .map(|(k, v)| (label_key(k), label_value(k, v)))
        .collect()
}

/// A list filter (`labels.k = "v" AND …`) that narrows to instances that may
/// match; the exact tags are compared after reading them back.
pub(crate) fn label_filter(filter: &TagFilter) -> String {
    filter
        .0
        .iter()
        .map(|(k, v)| format!("labels.{} = \"{}\"", label_key(k), label_value(k, v)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// Tags read back from labels, for resources without the metadata copy.
pub(crate) fn from_labels(labels: &std::collections::HashMap<String, String>) -> Tags {
    let known = [
        tags::MANAGED,
        tags::JOB,
        tags::OWNER,
        tags::TEAM,
        tags::IDEMPOTENCY_KEY,
        tags::PROJECT,
        tags::HEARTBEAT,
        tags::PROGRESS,
        tags::EXIT,
        tags::NOTICE,
        tags::GPU,
        tags::GPU_QUIET,
        tags::EXPIRES_AT,
    ];
    labels
        .iter()
        .map(|(k, v)| {
            let tag = known
                .iter()
                .find(|t| label_key(t) == *k)
                .map_or_else(|| k.clone(), |t| t.to_string());
            let value = if tag == tags::EXPIRES_AT {
                v.parse::<i64>()
                    .ok()
                    .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
                    .and_then(|t| t.format(&Rfc3339).ok())
                    .unwrap_or_else(|| v.clone())
            } else {
                v.clone()
            };
            (tag, value)
        })
        .collect()
}

/// A `requestId` (a UUID, as Compute Engine requires) derived from the key
/// and the instance index, so a retried insert is recognised by the API.
pub(crate) fn request_id(key: &str, index: u32) -> String {
    let a = fnv1a64(format!("{key}/{index}/a").as_bytes());
    let b = fnv1a64(format!("{key}/{index}/b").as_bytes());
    // Version 8 (custom) UUID layout with the RFC 4122 variant.
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_8000;
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_valid_and_read_back() {
        let mut t = Tags::new();
        t.insert(tags::JOB.into(), "Train Llama/7B".into());
        t.insert(tags::EXPIRES_AT.into(), "2026-11-22T10:00:00Z".into());
        let l = to_labels(&t);
        assert_eq!(l["gpufleet-job"], "train_llama_7b");
        assert_eq!(l["gpufleet-expires-at"], "1795341600");
        let back = from_labels(&l);
        assert_eq!(back[tags::EXPIRES_AT], "2026-11-22T10:00:00Z");
        assert_eq!(label_key("9lives"), "k9lives");
    }

    #[test]
    fn derived_ids_are_stable() {
        let id = request_id("abc", 0);
        assert_eq!(id.len(), 36);
        assert_eq!(id, request_id("abc", 0));
        assert_ne!(id, request_id("abc", 1));
        assert_eq!(&id[14..15], "8");
        let key = gpufleet_model::IdempotencyKey::new("abc").unwrap();
        assert_eq!(key.fingerprint(), "e71fa2190541574b");
        assert_eq!(key.resource_name(2), "gf-e71fa2190541574b-2");
    }
}
