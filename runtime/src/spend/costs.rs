//! The cost report (`gpufleet costs`, `ls --cost-by`): the ledger's spend
//! grouped, with the cost per completed job and the saving against the
//! catalog's on-demand prices.

use super::*;

/// How `gpufleet costs` groups spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostBy {
    /// The team tag.
    Team,
    /// The owner tag.
    Owner,
    /// The job.
    Job,
    /// The cloud.
    Cloud,
    /// The GPU model.
    Gpu,
    /// Spot or on-demand.
    Capacity,
    /// The UTC day the hours fell on (an instance's hours are split at
    /// midnight).
    Day,
}

impl CostBy {
    /// Every grouping, in the order `costs --help` lists them.
    pub const ALL: [CostBy; 7] = [
        CostBy::Team,
        CostBy::Owner,
        CostBy::Job,
        CostBy::Cloud,
        CostBy::Gpu,
        CostBy::Capacity,
        CostBy::Day,
    ];

    /// The name of the group's field in a row (`team`, `day`, ...).
    pub fn field(self) -> &'static str {
        match self {
            CostBy::Team => "team",
            CostBy::Owner => "owner",
            CostBy::Job => "job",
            CostBy::Cloud => "cloud",
            CostBy::Gpu => "gpu",
            CostBy::Capacity => "capacity",
            CostBy::Day => "day",
        }
    }
}

impl std::str::FromStr for CostBy {
    type Err = gpufleet_core::Error;

    /// A grouping by its field's name (`team`, `day`, ...); another is
    /// refused, naming the valid ones.
    fn from_str(s: &str) -> Result<CostBy> {
        CostBy::ALL
            .into_iter()
            .find(|b| b.field() == s.trim())
            .ok_or_else(|| {
                let valid: Vec<&str> = CostBy::ALL.iter().map(|b| b.field()).collect();
                gpufleet_core::Error::invalid_input(format!(
                    "unknown grouping '{s}'; valid: {}",
                    valid.join(", ")
                ))
            })
    }
}

/// One group of spend.
#[derive(Debug, Clone)]
pub struct CostRow {
    /// What it groups by.
    pub by: CostBy,
    /// The group (`ml`, `2026-11-29`, `(none)` for an untagged instance).
    pub key: String,
    /// Instances with hours in it.
    pub instances: usize,
    /// Of those, running now.
    pub running: usize,
    /// Instance-hours.
    pub hours: f64,
    /// What they cost at their recorded prices.
    pub cost: Money,
    /// What the hours whose on-demand price is known would have cost
    /// on-demand.
    pub on_demand: Money,
    /// What those same hours cost as run (what `on_demand` is compared
    /// with).
    pub priced_cost: Money,
    /// Hours with no known on-demand price (left out of the saving).
    pub unpriced_hours: f64,
    /// What the running ones cost per hour now.
    pub per_hour_now: Price,
}

impl CostRow {
    fn new(by: CostBy, key: String) -> Self {
        CostRow {
            by,
            key,
            instances: 0,
            running: 0,
            hours: 0.0,
            cost: Money::ZERO,
            on_demand: Money::ZERO,
            priced_cost: Money::ZERO,
            unpriced_hours: 0.0,
            per_hour_now: Price::ZERO,
        }
    }

    /// What the same hours cost less than on-demand (negative when they cost
    /// more).
    pub fn saving(&self) -> Result<Money> {
        self.on_demand
            .checked_sub(self.priced_cost)
            .ok_or_else(|| overflow("a saving"))
    }

    /// Counts `s` among its instances (and among those running, at its
    /// price, while it runs).
    fn count(&mut self, s: &InstanceSpend) -> Result<()> {
        self.instances += 1;
        if s.is_alive() {
            self.running += 1;
            self.per_hour_now = self
                .per_hour_now
                .checked_add(s.price)
                .ok_or_else(|| overflow("a price per hour"))?;
        }
        Ok(())
    }

    fn add(&mut self, part: &Part) -> Result<()> {
        self.hours += part.secs as f64 / 3600.0;
        self.cost = add(self.cost, part.cost)?;
        match part.on_demand {
            Some(od) => {
                self.on_demand = add(self.on_demand, od)?;
                self.priced_cost = add(self.priced_cost, part.cost)?;
            }
            None => self.unpriced_hours += part.secs as f64 / 3600.0,
        }
        Ok(())
    }
}

impl Serialize for CostRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let saving = self.saving().map_err(serde::ser::Error::custom)?;
        let mut m = s.serialize_map(Some(10))?;
        m.serialize_entry(self.by.field(), &self.key)?;
        m.serialize_entry("instances", &self.instances)?;
        m.serialize_entry("running", &self.running)?;
        m.serialize_entry("hours", &round(self.hours, 3))?;
        m.serialize_entry("cost_usd", &self.cost.as_usd_f64())?;
        m.serialize_entry("on_demand_usd", &self.on_demand.as_usd_f64())?;
        m.serialize_entry("saving_usd", &saving.as_usd_f64())?;
        m.serialize_entry("unpriced_hours", &round(self.unpriced_hours, 3))?;
        m.serialize_entry("per_hour_now_usd", &self.per_hour_now.usd_per_hour_f64())?;
        m.end()
    }
}

pub(super) fn round(x: f64, places: i32) -> f64 {
    gpufleet_core::report::round(x, places)
}

fn overflow(what: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} overflows the money type (past $9.2 trillion)"),
    )
}

fn add(a: Money, b: Money) -> Result<Money> {
    a.checked_add(b).ok_or_else(|| overflow("a sum of spend"))
}

/// Part of one instance's time in one group.
struct Part {
    secs: u64,
    cost: Money,
    on_demand: Option<Money>,
}

/// Spend over a window, grouped: what `gpufleet costs` prints.
#[derive(Debug, Clone, Serialize)]
pub struct CostReport {
    /// What it groups by.
    #[serde(serialize_with = "by_field")]
    pub by: CostBy,
    /// The window's start (RFC 3339).
    pub since: String,
    /// Its end: now (RFC 3339).
    pub until: String,
    /// One row per group, dearest first.
    pub rows: Vec<CostRow>,
    /// All of it.
    pub total: CostRow,
    /// Managed jobs that succeeded in the window.
    pub completed_jobs: usize,
    /// The cost per completed job ([`crate::jobs::per_completed_job`], as
    /// `jobs ls` says it): every job's spend in the window (those that
    /// succeeded, failed, were cancelled or still run, and launch-only
    /// ones; services' spend is not a job's) over the number that
    /// succeeded in it.
    #[serde(serialize_with = "usd")]
    pub cost_per_completed_job: Option<Money>,
    /// Another figure, not the cost per completed job: the mean spend of
    /// the jobs that succeeded in the window, every placement of theirs
    /// included (hours before the window too), what a success cost without
    /// the jobs that did not succeed.
    #[serde(serialize_with = "usd")]
    pub mean_cost_of_a_succeeded_job: Option<Money>,
}

fn by_field<S: serde::Serializer>(by: &CostBy, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(by.field())
}

fn usd<S: serde::Serializer>(m: &Option<Money>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_some(&m.as_usd_f64()),
        None => s.serialize_none(),
    }
}

/// The UTC midnight after `t`.
fn next_midnight(t: OffsetDateTime) -> OffsetDateTime {
    let day = t.to_offset(time::UtcOffset::UTC).date();
    day.next_day()
        .map(|d| d.midnight().assume_utc())
        .unwrap_or(t)
}

/// The prefix of the job id a service's spend is recorded under
/// (`service:NAME`): a service's, not a job's.
const SERVICE_SPEND: &str = "service:";

/// Groups the spend of `spend` in `[since, now)` by `by`, each instance's
/// hours at its recorded price and, for the saving, at `on_demand`'s price
/// for its pool (its own price when it ran on-demand); `jobs` are every job
/// record, for the cost per completed job.
pub fn cost_report(
    spend: &[InstanceSpend],
    jobs: &[JobRecord],
    by: CostBy,
    since: OffsetDateTime,
    now: OffsetDateTime,
    on_demand: &dyn Fn(&InstanceSpend) -> Option<Price>,
) -> Result<CostReport> {
    let mut groups: BTreeMap<String, CostRow> = BTreeMap::new();
    let mut total = CostRow::new(by, "total".into());
    let mut job_spend: HashMap<&str, Money> = HashMap::new();
    for s in spend {
        let od_price = match s.capacity() {
            Capacity::OnDemand => Some(s.price),
            Capacity::Spot => on_demand(s),
        };
        // The parts of its time: one, or one per UTC day.
        let mut spans = Vec::new();
        let (mut from, to) = (s.started_at.max(since), s.ended_at.unwrap_or(now).min(now));
        while from < to {
            let cut = if by == CostBy::Day {
                next_midnight(from).min(to)
            } else {
                to
            };
            spans.push((from, cut));
            from = cut;
        }
        let mut counted: HashSet<String> = HashSet::new();
        for (a, b) in spans {
            let secs = (b - a).whole_seconds().max(0) as u64;
            let part = Part {
                secs,
                cost: s.price.cost_for_seconds(secs)?,
                on_demand: od_price.map(|p| p.cost_for_seconds(secs)).transpose()?,
            };
            let key = match by {
                CostBy::Team => s.team.clone().unwrap_or_else(|| "(none)".into()),
                CostBy::Owner => s.owner.clone().unwrap_or_else(|| "(none)".into()),
                CostBy::Job => s.job_id.clone(),
                CostBy::Cloud => s.pool.cloud.to_string(),
                CostBy::Gpu => s.gpu.clone().unwrap_or_else(|| "(unknown)".into()),
                CostBy::Capacity => s.capacity().as_str().to_string(),
                CostBy::Day => a.date().to_string(),
            };
            let row = groups
                .entry(key.clone())
                .or_insert_with(|| CostRow::new(by, key.clone()));
            row.add(&part)?;
            total.add(&part)?;
            if counted.insert(key) {
                row.count(s)?;
            }
            if !s.job_id.starts_with(SERVICE_SPEND) {
                let j = job_spend.entry(s.job_id.as_str()).or_insert(Money::ZERO);
                *j = add(*j, part.cost)?;
            }
        }
        if s.seconds_within(since, now) > 0 || s.is_alive() {
            total.count(s)?;
        }
    }
    // Jobs: the newest record of each, and which succeeded in the window.
    let mut latest: HashMap<&str, &JobRecord> = HashMap::new();
    for r in jobs {
        latest.insert(r.job_id.as_str(), r);
    }
    let succeeded: Vec<&str> = latest
        .values()
        .filter(|r| r.state == JobState::Succeeded && r.at >= since)
        .map(|r| r.job_id.as_str())
        .collect();
    let completed_jobs = succeeded.len();
    // Every job's spend in the window, and the jobs that succeeded in it
    // (one with no spend in the window still counts as done).
    let mut per_job: Vec<(Money, bool)> = job_spend
        .iter()
        .map(|(job, m)| (*m, succeeded.contains(job)))
        .collect();
    per_job.extend(
        succeeded
            .iter()
            .filter(|j| !job_spend.contains_key(*j))
            .map(|_| (Money::ZERO, true)),
    );
    let cost_per = crate::jobs::per_completed_job(per_job)?;
    let mean_succeeded = if completed_jobs == 0 {
        None
    } else {
        let mut done = Money::ZERO;
        for s in spend
            .iter()
            .filter(|s| succeeded.contains(&s.job_id.as_str()))
        {
            done = add(done, s.cost(now)?)?;
        }
        Some(Money::from_micros(done.micros() / completed_jobs as i64))
    };
    let mut rows: Vec<CostRow> = groups.into_values().collect();
    if by == CostBy::Day {
        rows.sort_by(|a, b| a.key.cmp(&b.key));
    } else {
        rows.sort_by(|a, b| b.cost.cmp(&a.cost).then(a.key.cmp(&b.key)));
    }
    Ok(CostReport {
        by,
        since: gpufleet_core::report::rfc3339(since),
        until: gpufleet_core::report::rfc3339(now),
        rows,
        total,
        completed_jobs,
        cost_per_completed_job: cost_per,
        mean_cost_of_a_succeeded_job: mean_succeeded,
    })
}

/// The on-demand price of each (cloud, region, instance type) in `offers`
/// (the cheapest, zones aside): what a spot instance's hours would have
/// cost on-demand, for the saving [`cost_report`] shows.
pub fn on_demand_prices(offers: &[Offer]) -> HashMap<(Cloud, String, String), Price> {
    let mut out: HashMap<(Cloud, String, String), Price> = HashMap::new();
    for o in offers
        .iter()
        .filter(|o| o.pool.capacity == Capacity::OnDemand)
    {
        let key = (
            o.pool.cloud,
            o.pool.region.to_string(),
            o.pool.instance_type.clone(),
        );
        let p = out.entry(key).or_insert(o.price);
        if o.price < *p {
            *p = o.price;
        }
    }
    out
}

/// The on-demand price of `s`'s pool in `prices` ([`on_demand_prices`]).
pub fn on_demand_of(
    prices: &HashMap<(Cloud, String, String), Price>,
    s: &InstanceSpend,
) -> Option<Price> {
    prices
        .get(&(
            s.pool.cloud,
            s.pool.region.to_string(),
            s.pool.instance_type.clone(),
        ))
        .copied()
}

/// The cost report of `ledger` over `[since, now)` grouped `by` (no ledger
/// yet is no spend), the saving priced at the current catalog's on-demand
/// prices (the cache `catalog refresh` keeps, else the embedded snapshot).
pub async fn ledger_costs(
    cfg: &crate::config::Config,
    ledger: Option<&dyn Ledger>,
    by: CostBy,
    since: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<CostReport> {
    let (spend, jobs) = match ledger {
        Some(l) => (l.spend(Some(since)).await?, l.jobs().await?),
        None => (Vec::new(), Vec::new()),
    };
    let (catalog, _) = crate::live::cache::current(cfg);
    let prices = on_demand_prices(catalog.offers());
    cost_report(&spend, &jobs, by, since, now, &|s| on_demand_of(&prices, s))
}
