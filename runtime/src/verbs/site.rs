//! Where a verb acts, and how its clouds are opened.

use std::sync::Arc;

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::ledger::Ledger;
use gpufleet_core::{Cloud, Error};
use time::OffsetDateTime;

use crate::config::{Config, ProviderKind};
use crate::controller::{Controller, ControllerConfig};
use crate::fake_script::ScriptLine;
use crate::fleet::Fleet;

/// Fake clouds a program holds in memory (the Python `FakeCloud`), on one
/// clock, recording in their own ledger.
#[derive(Debug)]
pub struct InMemory {
    /// The fake of each cloud.
    pub fakes: Vec<(Cloud, Arc<FakeCloud>)>,
    /// Their one clock, which a managed job's waits move.
    pub clock: ManualClock,
    /// Where their jobs are recorded.
    pub ledger: Arc<dyn Ledger>,
}

/// Where a verb acts: the clouds and ledger a [`Config`] names, or fake
/// clouds held in memory (with the settings that go with them).
#[derive(Debug, Clone)]
pub enum Site {
    /// The clouds and ledger of the config (live, fake or local).
    Configured(Config),
    /// Fake clouds in this process, with the config for everything else
    /// (owner, tags, placer).
    InMemory(Config, Arc<InMemory>),
}

/// How a verb opens its clouds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Every enabled cloud, as it is (a drive asks each again at every
    /// placement).
    Every,
    /// Each live cloud checked at once within its budget; one that does not
    /// answer is left out and named in [`Fleet::unread`]; an error when none
    /// answers.
    Checked,
    /// [`Opening::Checked`] going on when no cloud answers (each named): for
    /// what is done whatever answers (a job recorded, a cancel).
    Checking,
    /// For a controller beside others (`jobs serve`): the fake cloud is the
    /// shared one, in real time.
    Shared,
}

impl Site {
    /// The settings the verb acts with.
    pub fn config(&self) -> &Config {
        match self {
            Site::Configured(c) | Site::InMemory(c, _) => c,
        }
    }

    /// The clouds' time: the fake clock's, or the system's.
    pub fn now(&self) -> Result<OffsetDateTime, Error> {
        match self {
            Site::InMemory(_, m) => Ok(m.clock.now()),
            Site::Configured(cfg) => crate::fleet::now(cfg),
        }
    }

    /// The ledger the verb records in.
    pub async fn ledger(&self) -> Result<Arc<dyn Ledger>, Error> {
        match self {
            Site::InMemory(_, m) => Ok(m.ledger.clone()),
            Site::Configured(cfg) => cfg.open_ledger().await,
        }
    }

    /// The clouds, opened as `how` says. In-memory fakes are always all
    /// there; the fake cloud's script, where given, replaces
    /// `GPUFLEET_FAKE_SCRIPT`'s.
    pub async fn open(&self, how: Opening) -> Result<Fleet, Error> {
        self.open_with(how, None).await
    }

    /// [`Site::open`] with the fake cloud's script.
    pub async fn open_with(
        &self,
        how: Opening,
        script: Option<Vec<ScriptLine>>,
    ) -> Result<Fleet, Error> {
        let fleet = match self {
            Site::InMemory(_, m) => Fleet::of_fakes(m.fakes.clone(), m.clock.clone()).await?,
            Site::Configured(cfg) => match how {
                Opening::Every => Fleet::open(cfg).await?,
                Opening::Checked => Fleet::open_checked(cfg).await?,
                Opening::Checking => Fleet::open_checking(cfg).await?,
                Opening::Shared => Fleet::open_shared(cfg).await?,
            },
        };
        Ok(match script {
            Some(s) => fleet.with_script(s),
            None => fleet,
        })
    }

    /// The clouds a managed job is driven on: on the local provider a fresh
    /// run of its fakes (each instance's boot script a process on this
    /// machine, for as long as the fleet lives), else as `how` says.
    pub(crate) async fn open_for_jobs(
        &self,
        how: Opening,
        script: Option<Vec<ScriptLine>>,
    ) -> Result<Fleet, Error> {
        #[cfg(feature = "serve")]
        if let Site::Configured(cfg) = self {
            if cfg.provider == ProviderKind::Local {
                return Fleet::open_local(cfg).await;
            }
        }
        self.open_with(how, script).await
    }

    /// A managed-job controller over `fleet` and this site's ledger, driving
    /// `job_id` (empty for `jobs serve`) as `drive` says.
    pub async fn controller(
        &self,
        fleet: &Fleet,
        job_id: &str,
        drive: ControllerConfig,
    ) -> Result<Controller, Error> {
        match self {
            Site::InMemory(cfg, m) => {
                fleet
                    .controller_on(cfg, m.ledger.clone(), job_id, drive)
                    .await
            }
            Site::Configured(cfg) => fleet.controller(cfg, job_id, drive).await,
        }
    }

    /// Whether the site is the fake cloud (where a script may play).
    pub fn is_fake(&self) -> bool {
        self.config().provider == ProviderKind::Fake
    }
}
