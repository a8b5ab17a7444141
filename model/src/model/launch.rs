//! Launch requests: what to launch where, with what access and boot script, and how a retried launch resumes.

use std::time::Duration;

use derive_setters::Setters;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::{Error, Result};

use super::*;

/// A request to launch instances into one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Setters)]
#[setters(generate = false, prefix = "with_", strip_option)]
pub struct LaunchRequest {
    /// Where.
    pub pool: Pool,
    /// How many instances (1 to 1000).
    #[setters(generate)]
    pub count: u32,
    /// The machine image (AMI id, GCE image URL, Azure image reference).
    pub image: String,
    /// A placement group to launch into.
    #[setters(generate)]
    pub placement_group: Option<PlacementGroupId>,
    /// Tags for cost attribution; gpufleet adds [`tags::MANAGED`] and the key.
    pub tags: Tags,
    /// Makes the launch safe to retry.
    pub idempotency_key: IdempotencyKey,
    /// How long the instances may live; past it the reaper terminates them.
    #[serde(with = "opt_secs", default)]
    #[setters(generate)]
    pub ttl: Option<Duration>,
    /// A script the instance runs at first boot, as plain text: EC2 `UserData`,
    /// the GCE `startup-script` metadata item, Azure `customData` (each
    /// provider encodes it as its API wants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[setters(generate, into)]
    pub boot_script: Option<String>,
    /// How the instance is reached and what it may do: SSH key, network,
    /// firewall, disk and identity.
    #[serde(default, skip_serializing_if = "Access::is_empty")]
    pub access: Access,
}

/// The largest boot script gpufleet sends: EC2's `UserData` limit of 16 KiB
/// (GCE metadata allows 256 KiB, Azure `customData` 64 KiB once encoded).
pub const MAX_BOOT_SCRIPT: usize = 16 * 1024;

/// How a launched instance is reached and what it may do. Every field is
/// optional; a cloud's default applies where one is absent.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// An OpenSSH public key (`ssh-ed25519 AAAA… comment`) to install for the
    /// login user: an EC2 key pair name is not needed, the boot script adds it.
    pub ssh_public_key: Option<String>,
    /// The subnet (EC2 `subnet-…`, GCE subnetwork URL or name, Azure subnet
    /// resource id).
    pub subnet: Option<String>,
    /// Security groups (EC2 `sg-…`), network tags (GCE) or a network security
    /// group id (Azure, first entry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// The boot disk size in GiB.
    pub disk_gb: Option<u32>,
    /// The identity the node acts as: an EC2 instance profile name or ARN, a
    /// GCE service account e-mail, an Azure user-assigned identity id. The
    /// node writes its heartbeat and progress tags with it.
    pub identity: Option<String>,
}

impl Access {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Access::default()
    }

    /// Checks the settings, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if let Some(key) = &self.ssh_public_key {
            let mut parts = key.split_whitespace();
            let kind = parts.next().unwrap_or_default();
            let body = parts.next().unwrap_or_default();
            let known = [
                "ssh-ed25519",
                "ssh-rsa",
                "ecdsa-sha2-nistp256",
                "ecdsa-sha2-nistp384",
                "ecdsa-sha2-nistp521",
                "sk-ssh-ed25519@openssh.com",
            ];
            if !known.contains(&kind) || body.is_empty() || key.contains('\n') || key.contains('\'')
            {
                let shown: String = kind.chars().take(32).collect();
                return Err(Error::invalid_input(format!(
                    "invalid ssh_public_key starting '{shown}': give one OpenSSH public key line ({})",
                    known.join(", ")
                )));
            }
        }
        if let Some(gb) = self.disk_gb {
            if !(10..=65_536).contains(&gb) {
                return Err(Error::invalid_input(format!(
                    "invalid disk_gb {gb}: a boot disk is 10 to 65536 GiB"
                )));
            }
        }
        for (what, value) in [("subnet", &self.subnet), ("identity", &self.identity)] {
            if let Some(v) = value {
                if v.trim().is_empty() || v.len() > 1024 || v.chars().any(char::is_whitespace) {
                    return Err(Error::invalid_input(format!(
                        "invalid {what} '{v}': give one identifier without spaces"
                    )));
                }
            }
        }
        for g in &self.security_groups {
            if g.trim().is_empty() || g.len() > 1024 || g.chars().any(char::is_whitespace) {
                return Err(Error::invalid_input(format!(
                    "invalid security group '{g}': give one identifier without spaces"
                )));
            }
        }
        Ok(())
    }
}

/// Where a launch stands against the instances that already carry its key
/// (see [`LaunchRequest::resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// None exist: launch them all.
    Fresh,
    /// This many of the request's instances exist: create the rest.
    Partial(usize),
    /// All exist: the launch is done; return them.
    Done,
}

impl LaunchRequest {
    /// One instance of `pool` from `image`, with the given key.
    pub fn new(pool: Pool, image: impl Into<String>, idempotency_key: IdempotencyKey) -> Self {
        LaunchRequest {
            pool,
            count: 1,
            image: image.into(),
            placement_group: None,
            tags: Tags::new(),
            idempotency_key,
            ttl: None,
            boot_script: None,
            access: Access::default(),
        }
    }

    /// Adds a tag.
    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// [`LaunchRequest::validate`], and the pool is in `cloud`: what every
    /// provider checks before its first request.
    pub fn validate_for(&self, cloud: Cloud) -> Result<()> {
        self.validate()?;
        if self.pool.cloud != cloud {
            return Err(Error::invalid_input(format!(
                "pool {} is on {}: the {} provider launches only {} pools",
                self.pool,
                self.pool.cloud.title(),
                cloud.title(),
                cloud.title()
            )));
        }
        Ok(())
    }

    /// Checks the request is well formed, naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if !(1..=1000).contains(&self.count) {
            return Err(Error::invalid_input(format!(
                "invalid instance count {}: launch 1 to 1000 instances",
                self.count
            )));
        }
        if self.image.trim().is_empty() {
            return Err(Error::invalid_input(
                "missing image: give an AMI id, GCE image or Azure image reference",
            ));
        }
        if let Some(ttl) = self.ttl {
            if ttl.is_zero() {
                return Err(Error::invalid_input(
                    "invalid ttl 0s: a time to live must be positive",
                ));
            }
        }
        if let Some(script) = &self.boot_script {
            if script.len() > MAX_BOOT_SCRIPT {
                return Err(Error::invalid_input(format!(
                    "boot script of {} bytes is too long: at most {MAX_BOOT_SCRIPT} bytes (EC2's UserData limit); fetch a longer setup from the script",
                    script.len()
                )));
            }
        }
        self.access.validate()?;
        for (k, v) in &self.tags {
            if k.is_empty() || k.len() > 128 || v.len() > 256 {
                return Err(Error::invalid_input(format!(
                    "invalid tag '{k}={v}': keys are 1 to 128 characters, values at most 256"
                )));
            }
        }
        Ok(())
    }

    /// The tags as they go on the instances: the caller's, plus the managed
    /// marker, the idempotency key and the expiry.
    pub fn effective_tags(&self, now: OffsetDateTime) -> Tags {
        let mut tags = self.tags.clone();
        tags.insert(tags::MANAGED.into(), "true".into());
        tags.insert(
            tags::IDEMPOTENCY_KEY.into(),
            self.idempotency_key.to_string(),
        );
        tags.insert(tags::LAUNCH_COUNT.into(), self.count.to_string());
        if let Some(expiry) = self.expires_at(now) {
            tags.insert(tags::EXPIRES_AT.into(), tags::format_time(expiry));
        }
        tags
    }

    /// What a provider does with the instances it already holds under this
    /// request's key, for a provider that launches all of them in one call:
    /// `Ok(false)` when there are none (launch), `Ok(true)` when they are this
    /// request's (a retry: return them), and an error naming the earlier
    /// launch when the key was used for a different request (another count,
    /// instance type, region, or zone when this request names one).
    pub fn replayed(&self, existing: &[Instance]) -> Result<bool> {
        match self.resume(existing)? {
            Resume::Fresh => Ok(false),
            Resume::Done => Ok(true),
            Resume::Partial(_) => Err(self.reused(existing)),
        }
    }

    /// What a provider that creates a launch's instances one by one does with
    /// those it already holds under this request's key: [`Resume::Fresh`]
    /// when there are none, [`Resume::Done`] when all are there, and
    /// [`Resume::Partial`] when an earlier attempt of this same request was
    /// cut off part-way (its instances are progress: the missing ones are
    /// created). A key used for a different request (more instances, another
    /// type, region, or zone when this request names one) is an error naming
    /// the earlier launch.
    pub fn resume(&self, existing: &[Instance]) -> Result<Resume> {
        if existing.is_empty() {
            return Ok(Resume::Fresh);
        }
        let same_pool = existing.iter().all(|i| {
            i.pool
                .instance_type
                .eq_ignore_ascii_case(&self.pool.instance_type)
                && i.pool.region == self.pool.region
                && i.pool.capacity == self.pool.capacity
                && (self.pool.zone.is_none() || i.pool.zone == self.pool.zone)
        });
        let zones: std::collections::BTreeSet<_> = existing.iter().map(|i| &i.pool.zone).collect();
        let n = existing.len();
        let other_count = existing.iter().any(|i| {
            i.tags
                .get(tags::LAUNCH_COUNT)
                .is_some_and(|c| c.parse::<u32>().ok() != Some(self.count))
        });
        if !same_pool || other_count || zones.len() > 1 || n > self.count as usize {
            return Err(self.reused(existing));
        }
        Ok(if n == self.count as usize {
            Resume::Done
        } else {
            Resume::Partial(n)
        })
    }

    fn reused(&self, existing: &[Instance]) -> Error {
        let (kind, place) = existing
            .first()
            .map(|i| (i.pool.instance_type.clone(), i.pool.location()))
            .unwrap_or_default();
        Error::invalid_input(format!(
            "idempotency key '{}' was already used to launch {} instance(s) of {kind} in {place}; use a new key for a different request",
            self.idempotency_key,
            existing.len(),
        ))
        .with_context("code", "IdempotentParameterMismatch")
    }

    /// When instances launched now expire.
    pub fn expires_at(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.ttl
            .and_then(|ttl| time::Duration::try_from(ttl).ok())
            .and_then(|ttl| now.checked_add(ttl))
    }
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_secs))
    }
}
