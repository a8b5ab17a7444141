//! The controller's settings, the serving loop's settings and report and a
//! job's outcome (the pacer, real time or a test's clock, is
//! [`crate::pacer`]).

use super::*;
pub use crate::names::default_holder;
pub use crate::pacer::{ManualPacer, Pacer, RealTime};

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// How often the instances are read (default 60 s: an interruption the
    /// node could not report is acted on within a minute).
    pub poll: Duration,
    /// A node whose last heartbeat is older than this is treated as failed
    /// (default 10 min).
    pub heartbeat_grace: Duration,
    /// A node launched with a workload on a provider that runs boot scripts
    /// ([`gpufleet_core::Capabilities::runs_boot_script`]) and still without
    /// a first heartbeat this long after its launch is treated as one whose
    /// job failed to start: its boot script did not run, or cannot write its
    /// tags (no CLI on the image, no identity allowed to tag it). Default 20
    /// min: a GPU VM's boot, drivers and cloud-init, with room to spare.
    /// Zero turns the check off: a silent node's job is then estimated from
    /// run time, as on a provider that runs no boot script (for images that
    /// cannot report, knowingly).
    pub boot_grace: Duration,
    /// How often the policy is asked whether moving pays (default 30 min).
    pub move_review: Duration,
    /// Placement keeps being retried (capacity, quota, outages) this long
    /// before the job fails (default 24 h).
    pub give_up_after: Duration,
    /// Polls between orphan sweeps while running (default 10): from the
    /// listing of the job's region the poll read, so a sweep costs no call
    /// of its own.
    pub sweep_every: u64,
    /// How long a job's lease lasts unless renewed (default 30 s): another
    /// controller takes over a dead one's jobs this long after its last
    /// renewal. At least 3 s (renewed every third of it).
    pub lease_ttl: Duration,
    /// Who holds the leases: unique per process (default
    /// `host:pid:random`).
    pub holder: String,
}

/// How long a launch may take before its controller's first poll extends
/// its instances' expiry (the providers' default launch limit, which waits
/// for the instances to be created).
pub const LAUNCH_ALLOWANCE: Duration = Duration::from_secs(20 * 60);

/// The longest move review: a year, which in practice never moves a
/// running job.
pub const MAX_MOVE_REVIEW: Duration = Duration::from_secs(365 * 86_400);

impl ControllerConfig {
    /// How far ahead the controller sets the expiry
    /// ([`gpufleet_core::tags::EXPIRES_AT`]) of the instances it drives, at
    /// every poll: the lease and two polls. An instance whose controller
    /// died is past its expiry within that, and `reap` (or any controller's
    /// reconciliation) terminates it then, instead of after an idle window;
    /// a job another controller takes over is re-extended at its first poll.
    pub fn expiry_window(&self) -> Duration {
        self.lease_ttl + self.poll * 2
    }

    /// How long a job, a region or an instance nobody asked about stays in
    /// a controller's shared reads (the board's listings, the ledger's
    /// newest records): three polls.
    pub(super) fn forget_after(&self) -> time::Duration {
        time::Duration::try_from(self.poll * 3).unwrap_or(time::Duration::HOUR)
    }

    /// Checks the settings against their ranges: a poll of 1 s to 1 h; a
    /// heartbeat grace of at least the poll; a boot grace from the poll to
    /// 24 h, or 0 for none; a move review from the poll to
    /// [`MAX_MOVE_REVIEW`]; a lease of 3 s to 1 h. An error names the
    /// setting as `named` calls it (the CLI: its flag), given its field name
    /// (`poll`, `heartbeat_grace`, `boot_grace`, `move_review`, `lease_ttl`).
    pub fn check(&self, named: impl Fn(&'static str) -> String) -> Result<()> {
        use gpufleet_core::placer::format_duration as d;
        let bad = |setting: &'static str, value: Duration, why: String| {
            Err(Error::invalid_input(format!(
                "invalid {} {}: {why}",
                named(setting),
                d(value)
            )))
        };
        if self.poll < Duration::from_secs(1) || self.poll > Duration::from_secs(3600) {
            return bad(
                "poll",
                self.poll,
                "poll every 1s to 1h (an interruption is acted on within one poll)".into(),
            );
        }
        if self.heartbeat_grace < self.poll {
            return bad(
                "heartbeat_grace",
                self.heartbeat_grace,
                format!("it must be at least the poll interval ({})", d(self.poll)),
            );
        }
        if !self.boot_grace.is_zero()
            && (self.boot_grace < self.poll || self.boot_grace > Duration::from_secs(86_400))
        {
            return bad("boot_grace", self.boot_grace, format!(
                "from the poll interval ({}) to 24h (a GPU VM boots and starts its boot script in minutes), or 0 for no check",
                d(self.poll)
            ));
        }
        if self.move_review < self.poll || self.move_review > MAX_MOVE_REVIEW {
            return bad("move_review", self.move_review, format!(
                "from the poll interval ({}) to 365d (a review runs on a poll; 365d never moves a running job)",
                d(self.poll)
            ));
        }
        if self.lease_ttl < Duration::from_secs(3) || self.lease_ttl > Duration::from_secs(3600) {
            return bad(
                "lease_ttl",
                self.lease_ttl,
                "a lease lasts 3s to 1h (renewed every third of it)".into(),
            );
        }
        Ok(())
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            poll: Duration::from_secs(60),
            heartbeat_grace: Duration::from_secs(600),
            boot_grace: Duration::from_secs(1200),
            move_review: Duration::from_secs(1800),
            give_up_after: Duration::from_secs(24 * 3600),
            sweep_every: 10,
            lease_ttl: Duration::from_secs(30),
            holder: default_holder(),
        }
    }
}

/// How [`Controller::serve`] shares out jobs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// At most this many jobs driven at once (default 256).
    pub max_jobs: usize,
    /// How often free and expired leases are looked for (default: the poll
    /// interval, so a dead controller's jobs move within its lease time and
    /// one poll).
    pub claim_every: Duration,
    /// At most this many leases taken per look (default 16).
    pub claim_batch: usize,
    /// How often the ledger is reconciled with the clouds (the ends they
    /// caused, launches left unfinished; see [`crate::spend::Apply::SERVE`]);
    /// `None` never (default 5 min).
    pub reconcile_every: Option<Duration>,
    /// The owner whose unknown managed instances a reconciliation reports,
    /// and whose jobs it drives (unless `any_owner`; a job kept before
    /// owners were recorded is anyone's). Empty: every owner's.
    pub owner: String,
    /// Drive every owner's jobs (`jobs serve --any-owner`): a shared
    /// controller, whose launches carry each job's owner.
    pub any_owner: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_jobs: 256,
            claim_every: Duration::from_secs(60),
            claim_batch: 16,
            reconcile_every: Some(Duration::from_secs(300)),
            owner: String::new(),
            any_owner: false,
        }
    }
}

/// What a serving controller did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServeReport {
    /// Leases taken.
    pub claimed: u64,
    /// Of those, leases another controller held before (taken over).
    pub taken_over: u64,
    /// Jobs driven to their end.
    pub ended: u64,
    /// Jobs whose lease was lost to another controller.
    pub lost: u64,
    /// Jobs whose driving stopped on an error (their leases lapse and a
    /// later claim retries them).
    pub errors: u64,
    /// Leases given up on stopping.
    pub released: u64,
    /// Reconciliations run.
    pub reconciliations: u64,
    /// Instance ends they recorded (the clouds ended them).
    pub reconciled_ends: u64,
    /// Launch-only jobs they failed (left placing or launching).
    pub reconciled_stuck: u64,
}

/// How a job ended (or stands, for [`Controller::status`]).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The job.
    pub job_id: String,
    /// Its state.
    pub state: JobState,
    /// Why, in a line.
    pub detail: String,
    /// Reference hours of work done.
    pub progress_hours: f64,
    /// Reference hours of work in all.
    pub total_hours: f64,
}
