//! Where a verb acts, and how its clouds are opened.

use std::sync::Arc;

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::ledger::Ledger;
use gpufleet_core::{Cloud, Error};
use time::OffsetDateTime;

use crate::config::{Config, ProviderKind};
use crate::controller::{Controller, ControllerConfig};
use crate::executor::{Executor, LaunchTemplate};
use crate::fake_script::read_script;
use crate::fake_script::ScriptLine;
use crate::fake_script::ScriptedPacer;
use crate::fleet::Fleet;
use crate::pacer::{ManualPacer, Pacer, RealTime};

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

    /// The ledger when there is one already (in memory, always): for what
    /// only records beside a listing, and never creates a ledger to do so.
    pub async fn existing_ledger(&self) -> Result<Option<Arc<dyn Ledger>>, Error> {
        match self {
            Site::InMemory(_, m) => Ok(Some(m.ledger.clone())),
            Site::Configured(cfg) => {
                if crate::ledgers::open_read_only(&cfg.ledger).await?.is_none() {
                    return Ok(None);
                }
                cfg.open_ledger().await.map(Some)
            }
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
    /// `job_id` (empty for `jobs serve`) as `drive` says, with the config's
    /// placer, TTL and resource tags.
    ///
    /// On the fake cloud its launches use the fake image, and it waits by
    /// moving the fake clock for one job (`job_id`, with the fleet's script
    /// or the one in `GPUFLEET_FAKE_SCRIPT`: see [`crate::fake_script`]),
    /// or in real time for `jobs serve` (an empty `job_id`) and on real
    /// clouds; on the local provider its nodes are processes here.
    pub async fn controller(
        &self,
        fleet: &Fleet,
        job_id: &str,
        drive: ControllerConfig,
    ) -> Result<Controller, Error> {
        let cfg = self.config();
        let exec = Arc::new(
            Executor::new(
                fleet.providers.clone(),
                self.ledger().await?,
                fleet.clock.clone(),
            )
            .with_placer(cfg.placer()),
        );
        let mut base = LaunchTemplate {
            nodes: 1,
            ttl: cfg.ttl,
            tags: cfg.resource_tags(),
            ..LaunchTemplate::default()
        };
        let pacer: Arc<dyn Pacer> = match (&fleet.fake_clock, cfg.provider) {
            (Some(clock), ProviderKind::Fake) => {
                for p in &fleet.providers {
                    base.images.insert(p.cloud(), "fake-image".into());
                }
                if job_id.is_empty() {
                    // `jobs serve`: the shared fake cloud runs in real time.
                    Arc::new(RealTime)
                } else {
                    Arc::new(ScriptedPacer::new(
                        ManualPacer::new(clock.clone(), fleet.fakes().cloned().collect()),
                        fleet.saver(),
                        fleet.now,
                        match fleet.script() {
                            Some(s) => s.to_vec(),
                            None => read_script()?,
                        },
                        job_id,
                    ))
                }
            }
            _ => Arc::new(RealTime),
        };
        let mut drive = drive;
        if cfg.provider == ProviderKind::Local {
            // Processes on this machine: any image, reports through a file
            // (a heartbeat every 2 s), polled at least that often.
            for p in &fleet.providers {
                base.images.insert(p.cloud(), "local".into());
            }
            base.node = crate::workload::Node::Local;
            drive.poll = drive.poll.min(std::time::Duration::from_secs(u64::from(
                crate::workload::LOCAL_BEAT_SECS,
            )));
        }
        let ctl = Controller::new(exec, base, pacer).with_config(drive);
        // The interruption queue, where set for a live AWS: heard within
        // seconds; without it (or when it cannot be opened now) the polls
        // and the nodes' own reports still see every interruption.
        let aws = fleet.providers.iter().any(|p| p.cloud() == Cloud::Aws);
        if !aws || cfg.provider != ProviderKind::Live {
            return Ok(ctl);
        }
        Ok(ctl.with_events(crate::clouds::event_feeds(cfg).await))
    }

    /// The executor `launch` uses: `fleet`'s clouds, this site's ledger, the
    /// config's placer, and launch keys scoped to the owner and that ledger
    /// ([`crate::executor::launch_scope`]: another owner's `--name` never
    /// reuses this one's keys or groups; in one ledger the name's job is
    /// one, so another owner's launch under it is refused, never adopted).
    pub async fn launcher(&self, fleet: &Fleet) -> Result<Executor, Error> {
        let cfg = self.config();
        let ledger = self.ledger().await?;
        let scope = crate::executor::launch_scope(&cfg.owner, &ledger.location());
        Ok(
            Executor::new(fleet.providers.clone(), ledger, fleet.clock.clone())
                .with_placer(cfg.placer())
                .with_key_scope(scope),
        )
    }

    /// Whether the site is the fake cloud (where a script may play).
    pub fn is_fake(&self) -> bool {
        self.config().provider == ProviderKind::Fake
    }
}
