//! Job ids: derived from the job file's name, readable, bounded, checked.

use super::*;

/// The job's id for a job file: its name and a hash of its contents, so the
/// same command run again drives the same job.
pub fn job_id_for(file: &JobFile) -> Result<String> {
    let doc = serde_json::to_string(file)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("job file: {e}")))?;
    let name = file.name.as_deref().unwrap_or("job");
    Ok(format!(
        "{}-{:08x}",
        readable_prefix(name, 32),
        fnv1a64(doc.as_bytes()) as u32
    ))
}

/// The readable start of an id made from `name`: at most `max` lower-case
/// letters, digits and `-`, or `job` when nothing of the name survives.
pub(super) fn readable_prefix(name: &str, max: usize) -> String {
    let prefix = sanitize(name, max);
    if prefix.trim_matches('-').is_empty() {
        "job".into()
    } else {
        prefix
    }
}

/// The job id for a name given on the command line: the name itself when it
/// is a valid id, else a readable prefix of it and a 64-bit hash of all of
/// it (`训练🚀…` and names longer than 64 bytes get an id, never a panic, and
/// two names that share a prefix never share an id).
pub fn job_id_for_name(name: &str) -> String {
    if IdempotencyKey::is_valid(name) {
        return name.to_string();
    }
    format!(
        "{}-{:016x}",
        readable_prefix(name, 40),
        fnv1a64(name.as_bytes())
    )
}

/// Checks a job id: 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
pub fn check_job_id(id: &str) -> Result<()> {
    if !IdempotencyKey::is_valid(id) {
        let shown: String = id.chars().take(64).collect();
        return Err(Error::invalid_input(format!(
            "invalid job id '{shown}': use 1 to 64 ASCII letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}
