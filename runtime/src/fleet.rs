//! The providers a command works with: the live clouds, or the fake cloud
//! whose state is kept in a file between commands (`--provider fake`),
//! opened from a [`Config`] as the CLI opens them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use gpufleet_core::clock::{Clock, ManualClock, SystemClock};
use gpufleet_core::fake::FakeCloud;
use gpufleet_core::layers::LayerExt;
use gpufleet_core::{Cloud, Error, OfferQuery, Pool, Price, Provider};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub use crate::clouds::{
    check_cloud, check_clouds, check_interruption_queue, event_feeds, interruption_queue,
    live_settings, CHECK_BUDGET,
};
use crate::config::{Config, ProviderKind};
use crate::factory::{self, Layers, Settings};
use crate::fake_script::read_script;
use crate::fake_store::{self, FakeSaver, SharedFakeLayer};

/// The time commands measure against: tests pin the fake cloud's clock with
/// `GPUFLEET_FAKE_NOW`; live clouds use real time.
pub fn now(cfg: &Config) -> Result<OffsetDateTime, Error> {
    let wall = OffsetDateTime::now_utc();
    if cfg.provider != ProviderKind::Fake {
        return Ok(wall);
    }
    match std::env::var("GPUFLEET_FAKE_NOW") {
        Ok(at) => OffsetDateTime::parse(&at, &Rfc3339).map_err(|_| {
            Error::invalid_input(format!(
                "invalid GPUFLEET_FAKE_NOW '{at}': expected RFC 3339"
            ))
        }),
        // The fake cloud's own clock, where a scripted run left it (ahead of
        // the wall clock): its ledger's records are stamped on it, so
        // `costs`, `ls` and the rest read them on it too.
        _ => Ok(fake_store::FakeStore::new(&cfg.fake_state)
            .load()
            .ok()
            .and_then(|f| f.now)
            .map_or(wall, |at| at.max(wall))),
    }
}

/// The enabled providers, layered with timeouts and retries.
pub struct Fleet {
    /// One per enabled cloud that could be opened.
    pub providers: Vec<Arc<dyn Provider>>,
    fakes: Vec<(Cloud, Arc<FakeCloud>)>,
    state_path: Option<PathBuf>,
    /// The time commands measure ages and costs against.
    pub now: OffsetDateTime,
    /// The clock: the fake cloud's (one for all its clouds), else the system's.
    pub clock: Arc<dyn Clock>,
    /// The fake cloud's clock, in fake mode.
    pub fake_clock: Option<ManualClock>,
    /// What opening skipped and why (a cloud not set up here), for the
    /// caller to show: one line each.
    pub warnings: Vec<String>,
    /// Clouds this command could not read (their check or a call failed):
    /// each is left out of everything after, so a cloud that does not
    /// answer costs at most its check budget, once. A command whose answer
    /// lacks one of them is partial.
    pub unread: Vec<Unread>,
    prices: HashMap<Pool, Option<Price>>,
    /// The `local` provider's runner, for `run --provider local`: its
    /// instances' processes live as long as this fleet.
    #[cfg(feature = "serve")]
    local: Option<Arc<crate::local::LocalCloud>>,
    /// The fake cloud's script for a job's drive, when given here rather
    /// than by `GPUFLEET_FAKE_SCRIPT`.
    script: Option<Vec<crate::fake_script::ScriptLine>>,
}

/// A cloud a command could not read: what failed and what to do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unread {
    /// The cloud.
    pub cloud: Cloud,
    /// What failed.
    pub problem: String,
    /// What to do about it.
    pub advice: String,
}

impl Unread {
    /// The one warning line a command prints for it.
    pub fn one_line(&self) -> String {
        if self.advice.is_empty() {
            format!("{} not read: {}", self.cloud, self.problem)
        } else {
            format!("{} not read: {}; {}", self.cloud, self.problem, self.advice)
        }
    }
}

/// `GPUFLEET_FAKE_LATENCY`: `OPERATION=DURATION[,…]` (e.g. `launch=3s`), how
/// long each call of the fake cloud takes, in real time: to try Ctrl-C and
/// timeouts against the fake.
fn fake_latency() -> Result<Vec<(gpufleet_core::Operation, std::time::Duration)>, Error> {
    let Ok(spec) = std::env::var("GPUFLEET_FAKE_LATENCY") else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |why: String| {
            Error::invalid_input(format!(
                "invalid GPUFLEET_FAKE_LATENCY entry '{part}': {why}"
            ))
        };
        let (op, d) = part
            .split_once('=')
            .ok_or_else(|| bad("expected OPERATION=DURATION, e.g. launch=3s".into()))?;
        let op = gpufleet_core::Operation::parse(op).map_err(|e| bad(e.message().to_string()))?;
        let d = gpufleet_core::placer::parse_duration(d.trim())
            .map_err(|e| bad(e.message().to_string()))?;
        out.push((op, d));
    }
    Ok(out)
}

impl Fleet {
    /// Opens the providers the config enables.
    pub async fn open(cfg: &Config) -> Result<Fleet, Error> {
        Self::open_as(cfg, false).await
    }

    /// Opens the providers for a controller that runs beside others (`jobs
    /// serve`): the fake cloud, if that is what the config names, is the one
    /// every such process shares through its state file, in real time.
    pub async fn open_shared(cfg: &Config) -> Result<Fleet, Error> {
        Self::open_as(cfg, true).await
    }

    /// No provider yet, on the system's clock.
    fn empty() -> Fleet {
        Fleet {
            providers: Vec::new(),
            fakes: Vec::new(),
            state_path: None,
            now: OffsetDateTime::now_utc(),
            clock: Arc::new(SystemClock),
            fake_clock: None,
            warnings: Vec::new(),
            unread: Vec::new(),
            prices: HashMap::new(),
            #[cfg(feature = "serve")]
            local: None,
            script: None,
        }
    }

    /// The fake clouds `fakes`, all on `clock`, living in this process only
    /// (nothing saved): a library user's own fake cloud (the Python
    /// bindings' `FakeCloud`), opened as `--provider fake` opens its own.
    pub async fn of_fakes(
        fakes: Vec<(Cloud, Arc<FakeCloud>)>,
        clock: ManualClock,
    ) -> Result<Fleet, Error> {
        let mut fleet = Fleet::empty();
        let layers = Layers::default();
        for (_, fake) in &fakes {
            fleet
                .providers
                .push(factory::open_with(Settings::Fake(fake.clone()), &layers).await?);
        }
        fleet.now = gpufleet_core::clock::Clock::now(&clock);
        fleet.clock = Arc::new(clock.clone());
        fleet.fake_clock = Some(clock);
        fleet.fakes = fakes;
        Ok(fleet)
    }

    /// Drives jobs on the fake cloud with `script` (see
    /// [`crate::fake_script`]) instead of `GPUFLEET_FAKE_SCRIPT`'s.
    pub fn with_script(mut self, script: Vec<crate::fake_script::ScriptLine>) -> Fleet {
        self.script = Some(script);
        self
    }

    async fn open_as(cfg: &Config, shared: bool) -> Result<Fleet, Error> {
        let mut fleet = Fleet::empty();
        let layers = Layers::default();
        match cfg.provider {
            ProviderKind::Local => {
                return Err(Error::new(
                    gpufleet_core::ErrorKind::Unsupported,
                    "the local provider's instances live inside the `gpufleet run` or `gpufleet serve` that made them, so only those two open it (`jobs ls`, `jobs show`, `costs` and `serve ls` read its ledger with --provider local); use --provider fake for this command",
                ))
            }
            ProviderKind::Fake => {
                fleet.now = if shared {
                    OffsetDateTime::now_utc()
                } else {
                    now(cfg)?
                };
                let store = fake_store::FakeStore::new(&cfg.fake_state);
                let mut saved = store.load()?;
                let clock = ManualClock::new(fleet.now);
                let latency = fake_latency()?;
                for cloud in &cfg.clouds {
                    let fake = Arc::new(FakeCloud::from_snapshot(*cloud).with_clock(clock.clone()));
                    for (op, d) in &latency {
                        fake.set_latency(*op, *d);
                    }
                    if let Some(state) = saved.clouds.remove(cloud.as_str()) {
                        fake.import_state(state);
                    }
                    let mut provider =
                        factory::open_with(Settings::Fake(fake.clone()), &layers).await?;
                    if shared {
                        provider = provider.layer(SharedFakeLayer::new(
                            store.clone(),
                            *cloud,
                            fake.clone(),
                            clock.clone(),
                        ));
                    }
                    fleet.providers.push(provider);
                    fleet.fakes.push((*cloud, fake));
                }
                fleet.clock = Arc::new(clock.clone());
                fleet.fake_clock = Some(clock);
                fleet.state_path = Some(cfg.fake_state.clone());
            }
            ProviderKind::Live => {
                // A cloud that is not set up is skipped with one line saying
                // what to do (the same line `gpufleet check` prints), before
                // any SDK call could retry its way through a credentials
                // chain; if none is left, that is the error.
                let mut skipped: Vec<String> = Vec::new();
                for cloud in &cfg.clouds {
                    let Some(opened) = live_settings(cfg, *cloud).await? else {
                        fleet.warnings.push(format!(
                            "no live {cloud} provider; {cloud} is skipped (use --provider fake to try the workflow)"
                        ));
                        continue;
                    };
                    match opened {
                        Ok(settings) => fleet
                            .providers
                            .push(factory::open_with(settings, &layers).await?),
                        Err(c) => skipped.push(c.one_line()),
                    }
                }
                if fleet.providers.is_empty() && !skipped.is_empty() {
                    return Err(Error::new(
                        gpufleet_core::ErrorKind::Unauthenticated,
                        format!(
                            "no cloud is usable from here:\n  {}\n(`--provider fake` tries every command without a cloud)",
                            skipped.join("\n  ")
                        ),
                    ));
                }
                fleet
                    .warnings
                    .extend(skipped.into_iter().map(|why| format!("skipped {why}")));
            }
        }
        if fleet.providers.is_empty() {
            return Err(Error::invalid_input(
                "no provider is enabled: set clouds in the config or GPUFLEET_CLOUDS",
            ));
        }
        Ok(fleet)
    }

    /// Opens the providers the config enables and checks each live cloud at
    /// once, as `gpufleet check` does, within [`CHECK_BUDGET`]: a cloud that
    /// fails is left out, in [`Fleet::unread`], so the command goes on with
    /// the others. For commands that read several clouds (`ls`, `reap`,
    /// `terminate`, `reconcile`, `costs`). An error when no cloud answers.
    pub async fn open_checked(cfg: &Config) -> Result<Fleet, Error> {
        let fleet = Self::open_checking(cfg).await?;
        if cfg.provider == ProviderKind::Live && fleet.providers.is_empty() {
            return Err(Error::new(
                gpufleet_core::ErrorKind::Unavailable,
                format!(
                    "no cloud answered:\n  {}",
                    fleet
                        .unread
                        .iter()
                        .map(Unread::one_line)
                        .collect::<Vec<_>>()
                        .join("\n  ")
                ),
            ));
        }
        Ok(fleet)
    }

    /// [`Fleet::open_checked`], without the error when no cloud answers
    /// (every cloud is then in [`Fleet::unread`]): for what must be done
    /// whatever answers, such as recording a job's cancel.
    pub async fn open_checking(cfg: &Config) -> Result<Fleet, Error> {
        let mut fleet = Self::open_as(cfg, false).await?;
        if cfg.provider == ProviderKind::Live {
            let clouds: Vec<Cloud> = fleet.providers.iter().map(|p| p.cloud()).collect();
            let checks = futures::future::join_all(
                clouds.iter().map(|c| check_cloud(cfg, *c, CHECK_BUDGET)),
            )
            .await;
            for c in checks.into_iter().filter(|c| !c.usable) {
                fleet.leave_out(Unread {
                    cloud: c.cloud,
                    problem: c.problem.clone().unwrap_or_else(|| "not usable".into()),
                    advice: c.advice.clone().unwrap_or_default(),
                });
            }
        }
        Ok(fleet)
    }

    /// Leaves a cloud out of the rest of the command, saying why.
    pub fn leave_out(&mut self, why: Unread) {
        self.providers.retain(|p| p.cloud() != why.cloud);
        if !self.unread.iter().any(|u| u.cloud == why.cloud) {
            self.unread.push(why);
        }
    }

    /// Leaves out the cloud whose call failed with `e`.
    pub fn failed(&mut self, cloud: Cloud, e: &Error) {
        self.leave_out(Unread {
            cloud,
            problem: e.to_string(),
            advice: match e.kind() {
                gpufleet_core::ErrorKind::Unauthenticated
                | gpufleet_core::ErrorKind::PermissionDenied => {
                    format!("fix the {cloud} credentials or permissions (`gpufleet check`)")
                }
                _ => "try again; `gpufleet check` says whether it answers".to_string(),
            },
        });
    }

    /// The clouds read so far (those not left out).
    pub fn read_clouds(&self) -> Vec<Cloud> {
        self.providers.iter().map(|p| p.cloud()).collect()
    }

    /// The managed instances matching `filter` in every cloud still read,
    /// each cloud listed at once; a cloud whose listing fails is left out
    /// ([`Fleet::unread`]) and the others' instances are returned. Sorted
    /// by id.
    pub async fn managed(
        &mut self,
        filter: &gpufleet_core::TagFilter,
    ) -> Vec<gpufleet_core::Instance> {
        let providers = self.providers.clone();
        let mut out = Vec::new();
        for (cloud, got) in crate::reap::list_managed(&providers, filter).await {
            match got {
                Ok(v) => out.extend(v),
                Err(e) => self.failed(cloud, &e),
            }
        }
        out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        out
    }

    /// The instance `id` names in the clouds still read: by gpufleet's id
    /// (`us-east-1/i-0abc…`), or by the id the cloud's console shows
    /// (`i-0abc…`, a VM's name) among the managed instances, refused when
    /// several share it. A cloud that fails to answer is left out
    /// ([`Fleet::unread`]). `listed` keeps the managed instances between
    /// calls, so finding several console ids lists the clouds once.
    pub async fn find(
        &mut self,
        id: &str,
        listed: &mut Option<Vec<gpufleet_core::Instance>>,
    ) -> Result<Option<gpufleet_core::Instance>, Error> {
        let whole = gpufleet_core::InstanceId::new(id.to_string());
        for p in self.providers.clone() {
            match p.instance(&whole).await {
                Ok(i) => return Ok(Some(i)),
                Err(e) if e.kind() == gpufleet_core::ErrorKind::NotFound => {}
                Err(e) => self.failed(p.cloud(), &e),
            }
        }
        if id.contains('/') {
            return Ok(None);
        }
        if listed.is_none() {
            *listed = Some(self.managed(&gpufleet_core::TagFilter::managed()).await);
        }
        let all = listed.as_deref().unwrap_or_default();
        let hits: Vec<&gpufleet_core::Instance> = all
            .iter()
            .filter(|i| i.id.as_str().rsplit('/').next() == Some(id))
            .collect();
        match hits.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((*one).clone())),
            many => Err(Error::invalid_input(format!(
                "instance {id} is ambiguous: {}; give the whole id",
                many.iter()
                    .map(|i| i.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// As [`Fleet::find`], for an instance gpufleet manages: one that is not
    /// found is [`gpufleet_core::ErrorKind::NotFound`] saying what ids look
    /// like (and which clouds were not read), one without gpufleet's managed
    /// tag is refused as not gpufleet's, left alone.
    pub async fn find_managed(
        &mut self,
        id: &str,
        listed: &mut Option<Vec<gpufleet_core::Instance>>,
    ) -> Result<gpufleet_core::Instance, Error> {
        use gpufleet_core::{tags, ErrorKind};
        let Some(i) = self.find(id, listed).await? else {
            let unread: Vec<&str> = self.unread.iter().map(|u| u.cloud.as_str()).collect();
            let place = if unread.is_empty() {
                "any enabled cloud".to_string()
            } else {
                format!("the clouds read ({} not read)", unread.join(", "))
            };
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no instance {id} in {place}; gpufleet's ids look like us-east-1/i-0abc… (AWS), us-central1-a/gf-0123abcd (GCP) or gpufleet/gf-0123abcd-0 (Azure), as `gpufleet ls` shows them"),
            ));
        };
        if i.tags.get(tags::MANAGED).map(String::as_str) != Some("true") {
            let cloud = i.pool.cloud;
            return Err(Error::invalid_input(format!(
                "instance {id} ({cloud}) is not managed by gpufleet (no {} tag): it is not gpufleet's and was left alone; terminate it with the {cloud} console or CLI if you mean to",
                tags::MANAGED
            )));
        }
        Ok(i)
    }

    /// The `local` provider for `gpufleet run`: the fake clouds of `cfg`'s
    /// clouds with each instance's boot script run as a process on this
    /// machine, under `local/jobs/` beside the fake cloud's state (each
    /// instance's directory and log there), for as long as this fleet
    /// lives. The controller made from it (the verbs' `Site::controller`) runs in
    /// real time and launches local nodes ([`crate::workload::Node::Local`]).
    #[cfg(feature = "serve")]
    pub async fn open_local(cfg: &Config) -> Result<Fleet, Error> {
        let dir = crate::local::root(cfg).join("jobs");
        let local = crate::local::LocalCloud::start(crate::local::LocalCloud::fakes(), &dir)?;
        // This run says it lives; what a killed run left alive in the
        // ledger is ended now.
        let runs = crate::local::runs_dir(cfg);
        local.keep_alive(&runs)?;
        match cfg.open_ledger().await {
            Ok(l) => {
                if let Err(e) = crate::local::settle_ended_runs(
                    l.as_ref(),
                    &runs,
                    local.run_id().as_deref(),
                    true,
                )
                .await
                {
                    tracing::warn!(error = %e, "could not record the ends of earlier local runs");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not open the local ledger to settle earlier runs")
            }
        }
        // The fake cloud's script, in real time from now.
        local.play(read_script()?)?;
        let providers = local
            .providers()
            .into_iter()
            .filter(|p| cfg.clouds.contains(&p.cloud()))
            .collect();
        Ok(Fleet {
            providers,
            local: Some(Arc::new(local)),
            ..Fleet::empty()
        })
    }

    /// The `local` provider's runner, when this fleet is one
    /// ([`Fleet::open_local`]): drive its fakes (capacity, interruptions).
    #[cfg(feature = "serve")]
    pub fn local(&self) -> Option<&Arc<crate::local::LocalCloud>> {
        self.local.as_ref()
    }

    /// The provider of `cloud`.
    pub fn provider(&self, cloud: Cloud) -> Result<&Arc<dyn Provider>, Error> {
        gpufleet_core::provider_for(&self.providers, cloud)
    }

    /// What saves the fake cloud's state (a no-op for live clouds), to hand
    /// to a task that outlives this borrow.
    pub fn saver(&self) -> FakeSaver {
        FakeSaver::new(self.state_path.clone(), self.fakes.clone())
    }

    /// Saves the fake cloud's state (a no-op for live clouds), atomically.
    pub fn save(&self) -> Result<(), Error> {
        self.saver().save()
    }
}

impl Fleet {
    /// The fake cloud's script given to [`Fleet::with_script`], if any.
    pub fn script(&self) -> Option<&[crate::fake_script::ScriptLine]> {
        self.script.as_deref()
    }

    /// The fake clouds (empty for live clouds).
    pub fn fakes(&self) -> impl Iterator<Item = &Arc<FakeCloud>> {
        self.fakes.iter().map(|(_, f)| f)
    }

    /// The hourly price of a pool (the cheapest plausible offer for it:
    /// a live price under the floor `offers --live` applies is no price),
    /// cached.
    pub async fn price(&mut self, pool: &Pool) -> Option<Price> {
        if let Some(p) = self.prices.get(pool) {
            return *p;
        }
        let q = OfferQuery::new()
            .region(pool.region.clone())
            .instance_type(pool.instance_type.clone())
            .capacity(pool.capacity);
        let price = match self.provider(pool.cloud) {
            Ok(p) => p.offers(&q).await.ok().and_then(|offers| {
                let (offers, _) = gpufleet_core::catalog::plausible::plausible(
                    offers,
                    gpufleet_core::Snapshot::embedded(),
                );
                let same_zone = offers
                    .iter()
                    .filter(|o| o.pool == *pool)
                    .map(|o| o.price)
                    .min();
                same_zone.or_else(|| offers.iter().map(|o| o.price).min())
            }),
            Err(_) => None,
        };
        self.prices.insert(pool.clone(), price);
        price
    }
}
