//! The ledger of spend: every instance gpufleet starts, with its price and
//! capacity type when it started, and its end, whoever caused it.
//!
//! Spend is priced from these records alone: (end, or now while it runs,
//! minus start) × the price recorded at launch, to the second. It is never
//! priced from what is alive now, so an instance that ended keeps what it
//! cost, and a price that changed later does not rewrite the past.
//!
//! It counts instance-hours at the recorded price. It does not count disks,
//! network egress, support plans, taxes or credits: it is what gpufleet's
//! own decisions spent on compute, not the cloud's bill.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::tags;
use crate::Result;
use crate::{Capacity, Instance, InstanceId, Pool};
use crate::{Money, Price};

/// Who or what ended an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum EndedBy {
    /// `gpufleet terminate`.
    Terminate,
    /// `gpufleet reap` (idle or silent).
    Reap,
    /// `gpufleet reap` for an instance past its time to live.
    Ttl,
    /// A job controller (a job's end, a move, a restart, a roll-back, its
    /// orphan sweep).
    Controller,
    /// A launch rolled back (by the command that made it).
    Rollback,
    /// The cloud (a reclaim, an eviction, a failure) or someone outside
    /// gpufleet (the console, another tool): seen by a command that read the
    /// instance as ended or gone.
    Cloud,
}

impl EndedBy {
    /// Its name, as the ledger stores it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One instance gpufleet started, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceSpend {
    /// The cloud's identifier (the ledger's key, with the pool's cloud).
    pub id: InstanceId,
    /// Where it ran, and its capacity type.
    pub pool: Pool,
    /// The job it was started for (the launch key's job id).
    pub job_id: String,
    /// Its owner tag.
    #[serde(default)]
    pub owner: Option<String>,
    /// Its team tag.
    #[serde(default)]
    pub team: Option<String>,
    /// Its GPU model, where known (`A100-80GB`).
    #[serde(default)]
    pub gpu: Option<String>,
    /// Its GPUs.
    #[serde(default)]
    pub gpus: u32,
    /// Its price per hour when it started.
    pub price: Price,
    /// When it started (the cloud's launch time).
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it ended.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub ended_at: Option<OffsetDateTime>,
    /// Who ended it.
    #[serde(default)]
    pub ended_by: Option<EndedBy>,
    /// Why, in a line (the cloud's code, the command, the job's end).
    #[serde(default)]
    pub end_detail: String,
}

impl InstanceSpend {
    /// The record of `instance`, just started for `job_id` at `price` (its
    /// owner and team from its tags).
    pub fn started(instance: &Instance, job_id: &str, price: Price) -> Self {
        InstanceSpend {
            id: instance.id.clone(),
            pool: instance.pool.clone(),
            job_id: job_id.to_string(),
            owner: instance.tags.get(tags::OWNER).cloned(),
            team: instance.tags.get(tags::TEAM).cloned(),
            gpu: None,
            gpus: 0,
            price,
            started_at: instance.launched_at,
            ended_at: None,
            ended_by: None,
            end_detail: String::new(),
        }
    }

    /// With its GPUs.
    pub fn with_gpu(mut self, model: impl Into<String>, count: u32) -> Self {
        self.gpu = Some(model.into());
        self.gpus = count;
        self
    }

    /// Whether it was still running when last recorded.
    pub fn is_alive(&self) -> bool {
        self.ended_at.is_none()
    }

    /// Its capacity type.
    pub fn capacity(&self) -> Capacity {
        self.pool.capacity
    }

    /// Seconds it ran up to `now` (to its end if it ended).
    pub fn seconds(&self, now: OffsetDateTime) -> u64 {
        let end = self.ended_at.unwrap_or(now);
        (end - self.started_at).whole_seconds().max(0) as u64
    }

    /// Seconds of it that fall in `[from, to)`.
    pub fn seconds_within(&self, from: OffsetDateTime, to: OffsetDateTime) -> u64 {
        let start = self.started_at.max(from);
        let end = self.ended_at.unwrap_or(to).min(to);
        (end - start).whole_seconds().max(0) as u64
    }

    /// What it cost up to `now`: its seconds at its recorded price.
    pub fn cost(&self, now: OffsetDateTime) -> Result<Money> {
        self.price.cost_for_seconds(self.seconds(now))
    }
}

/// How an instance the ledger holds as alive ended, for
/// [`super::Ledger::record_instance_end`].
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceEnd {
    /// When.
    pub at: OffsetDateTime,
    /// Who or what.
    pub by: EndedBy,
    /// Why, in a line.
    pub detail: String,
}

impl InstanceEnd {
    /// An end at `at` by `by`, saying `detail`.
    pub fn new(at: OffsetDateTime, by: EndedBy, detail: impl Into<String>) -> Self {
        InstanceEnd {
            at,
            by,
            detail: detail.into(),
        }
    }
}
