//! What the ledger keeps of a managed job's definition
//! ([`Ledger::save_job_spec`](super::Ledger::save_job_spec)): its job file and
//! who it belongs to (the owner who submitted it), so that a command acting
//! on a job by id (`jobs cancel`, `jobs resume`) acts on its owner's only,
//! and a controller driving another owner's job (`jobs serve`) tags its
//! instances with that owner.

use serde::{Deserialize, Serialize};

use crate::placer::JobFile;
use crate::{Error, ErrorKind, Result};

/// A job's definition in the ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDefinition {
    /// Who submitted it (the config's owner); `None` for a job a ledger
    /// kept before owners were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The job file as submitted.
    pub file: JobFile,
}

impl JobDefinition {
    /// `file`, submitted by `owner`.
    pub fn new(file: JobFile, owner: impl Into<String>) -> Self {
        JobDefinition {
            owner: Some(owner.into()),
            file,
        }
    }

    /// The document the ledger keeps.
    pub fn to_doc(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("job definition: {e}")))
    }

    /// Reads a kept document: this type's, or a bare job file (what a
    /// ledger kept before owners were recorded: no owner).
    pub fn from_doc(job_id: &str, doc: &str) -> Result<Self> {
        let unreadable = |e: serde_json::Error| {
            Error::new(
                ErrorKind::Unexpected,
                format!("job {job_id}: stored job file unreadable: {e}"),
            )
        };
        let value: serde_json::Value = serde_json::from_str(doc).map_err(unreadable)?;
        if value.get("file").is_some_and(serde_json::Value::is_object) {
            serde_json::from_value(value).map_err(unreadable)
        } else {
            Ok(JobDefinition {
                owner: None,
                file: serde_json::from_value(value).map_err(unreadable)?,
            })
        }
    }

    /// Whether `who` may act on the job as its owner: the job is theirs,
    /// or it has no recorded owner.
    pub fn owned_by(&self, who: &str) -> bool {
        self.owner.as_deref().is_none_or(|o| o == who)
    }
}

/// The error for acting on another owner's job without `--any-owner`.
pub fn not_your_job(job_id: &str, owner: &str, who: &str, verb: &str) -> Error {
    Error::invalid_input(format!(
        "job {job_id} is {owner}'s, not {who}'s: nothing was done; `{verb} --any-owner` {}",
        "acts on another owner's job"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_reads_back_and_a_bare_job_file_has_no_owner() {
        let file = JobFile::new(2.0, "A10G", 1).named("ft");
        let d = JobDefinition::new(file.clone(), "alice");
        let back = JobDefinition::from_doc("j", &d.to_doc().unwrap()).unwrap();
        assert_eq!(back.owner.as_deref(), Some("alice"));
        assert!(back.owned_by("alice") && !back.owned_by("bob"));
        let legacy = serde_json::to_string(&file).unwrap();
        let old = JobDefinition::from_doc("j", &legacy).unwrap();
        assert_eq!(old.owner, None);
        assert!(old.owned_by("bob"));
        let e = JobDefinition::from_doc("j", "{").unwrap_err();
        assert!(
            e.message().contains("job j: stored job file unreadable"),
            "{e}"
        );
    }
}
