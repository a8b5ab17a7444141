//! The names gpufleet makes: text cut to what idempotency keys and
//! resource names allow, and this process's name for the leases it holds.

use gpufleet_core::fnv1a64;
use time::OffsetDateTime;

/// Keeps the characters idempotency keys and resource names allow, at most
/// `max` of them.
pub(crate) fn sanitize(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    if out.is_empty() {
        out.push_str("job");
    }
    out
}

/// A name for this process's leases: host, pid and a random part (a
/// restarted process never shares its predecessor's name).
pub fn default_holder() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
    let pid = std::process::id();
    let tag = fnv1a64(format!("{host}:{pid}:{nanos}").as_bytes()) as u32;
    format!("{}:{pid}:{tag:08x}", sanitize(&host, 32))
}
