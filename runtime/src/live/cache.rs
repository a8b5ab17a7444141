//! The local catalog cache: `gpufleet catalog refresh` writes it, and
//! `offers`, `place` and `tf-external` read it while it is fresher than
//! `catalog_max_age` ([`current`]). Each (cloud, region) remembers when and
//! from where it was fetched, so a stand-in's catalog is never taken for the
//! cloud's.

use futures::StreamExt;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpufleet_core::{Cloud, Error, ErrorKind, Offer, OfferQuery, Provider, Region, Snapshot};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::config::{Config, ProviderKind};

/// Where the cache lives.
pub fn path() -> PathBuf {
    match std::env::var("GPUFLEET_CATALOG_CACHE") {
        Ok(p) if !p.trim().is_empty() => PathBuf::from(p),
        _ => dirs::data_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("gpufleet")
            .join("catalog-cache.txt"),
    }
}

/// The cache as read: its offers, and when and from where (the cloud's
/// [`Config::catalog_source`]) each (cloud, region) was fetched.
struct Cache {
    offers: Vec<Offer>,
    fetched: BTreeMap<(Cloud, String), (OffsetDateTime, String)>,
}

/// Reads the cache file: `#fetched CLOUD REGION TIME [SOURCE]` lines say
/// when and from where each region was fetched (no source: the cloud's
/// default endpoints; a cache written before those lines has one
/// `#fetched_at` for all). `Ok(None)`: no cache.
fn read_cache(p: &std::path::Path) -> Result<Option<Cache>, String> {
    let Ok(text) = std::fs::read_to_string(p) else {
        return Ok(None);
    };
    let snapshot = Snapshot::parse(&text).map_err(|e| e.to_string())?;
    let mut fetched = BTreeMap::new();
    let mut all_at = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("#fetched ") {
            let mut w = rest.split_whitespace();
            if let (Some(c), Some(r), Some(t)) = (w.next(), w.next(), w.next()) {
                if let (Ok(c), Ok(t)) = (c.parse::<Cloud>(), OffsetDateTime::parse(t, &Rfc3339)) {
                    let source = w.next().unwrap_or("default").to_string();
                    fetched.insert((c, r.to_string()), (t, source));
                }
            }
        } else if let Some(t) = line.strip_prefix("#fetched_at ") {
            all_at = OffsetDateTime::parse(t.trim(), &Rfc3339).ok();
        }
    }
    if fetched.is_empty() {
        let Some(at) = all_at else {
            return Err("it has no fetch time".into());
        };
        for o in snapshot.offers() {
            fetched.insert(
                (o.pool.cloud, o.pool.region.to_string()),
                (at, "default".to_string()),
            );
        }
    }
    Ok(Some(Cache {
        offers: snapshot.offers().to_vec(),
        fetched,
    }))
}

/// The catalog commands read: the embedded snapshot, with each (cloud,
/// region) the cache fetched less than `max_age` ago, from where the cloud
/// is reached now (`source`), replaced by the cache's offers for it. The
/// note says which, and which were fetched from elsewhere (a stand-in's
/// prices are not the cloud's).
pub fn catalog(max_age: Duration, source: impl Fn(Cloud) -> String) -> (Snapshot, Option<String>) {
    let embedded = Snapshot::embedded().clone();
    let p = path();
    let cache = match read_cache(&p) {
        Ok(Some(c)) => c,
        Ok(None) => return (embedded, None),
        Err(why) => {
            return (
                embedded,
                Some(format!(
                    "the catalog cache {} is unusable ({why}); using the embedded snapshot",
                    p.display()
                )),
            )
        }
    };
    let now = OffsetDateTime::now_utc();
    let limit = time::Duration::try_from(max_age).unwrap_or(time::Duration::MAX);
    let sources: BTreeMap<Cloud, String> = cache
        .fetched
        .keys()
        .map(|(c, _)| (*c, source(*c)))
        .collect();
    let here = |c: &Cloud, from: &String| sources.get(c) == Some(from);
    let mut elsewhere: BTreeMap<Cloud, (usize, &str)> = BTreeMap::new();
    for ((c, _), (at, from)) in &cache.fetched {
        if now - *at <= limit && !here(c, from) {
            elsewhere.entry(*c).or_insert((0, from.as_str())).0 += 1;
        }
    }
    let elsewhere_note = (!elsewhere.is_empty()).then(|| {
        let list = |f: &dyn Fn(&Cloud, &(usize, &str)) -> String| {
            elsewhere
                .iter()
                .map(|(c, e)| f(c, e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "the catalog cache's {} came from {}, not from where {} reached now",
            list(&|c, (n, _)| format!("{c} ({n} region{})", if *n == 1 { "" } else { "s" })),
            list(&|_, (_, from)| from.to_string()),
            if elsewhere.len() == 1 {
                "it is"
            } else {
                "they are"
            }
        )
    });
    let fresh: BTreeMap<&(Cloud, String), &OffsetDateTime> = cache
        .fetched
        .iter()
        .filter(|((c, _), (at, from))| now - *at <= limit && here(c, from))
        .map(|(k, (at, _))| (k, at))
        .collect();
    if fresh.is_empty() {
        return (
            embedded,
            Some(match elsewhere_note {
                Some(e) => format!("the embedded snapshot ({e})"),
                None => "the catalog cache is older than catalog_max_age; using the embedded snapshot (refresh with 'gpufleet catalog refresh')"
                    .into(),
            }),
        );
    }
    let is_fresh = |o: &Offer| fresh.contains_key(&(o.pool.cloud, o.pool.region.to_string()));
    let mut offers: Vec<Offer> = embedded
        .offers()
        .iter()
        .filter(|o| !is_fresh(o))
        .cloned()
        .collect();
    offers.extend(cache.offers.iter().filter(|o| is_fresh(o)).cloned());
    let oldest = fresh.values().map(|t| **t).min().unwrap_or(now);
    let merged = Snapshot::from_fetched(offers, oldest);
    let mut per_cloud: BTreeMap<Cloud, usize> = BTreeMap::new();
    for (c, _) in fresh.keys() {
        *per_cloud.entry(*c).or_default() += 1;
    }
    let note = format!(
        "{} from the catalog cache (the oldest fetched {} min ago), the rest from the embedded snapshot",
        per_cloud
            .iter()
            .map(|(c, n)| format!("{c} ({n} region{})", if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", "),
        (now - oldest).whole_minutes()
    );
    (
        merged,
        Some(match elsewhere_note {
            Some(e) => format!("{note} ({e})"),
            None => note,
        }),
    )
}

/// The catalog for a command: the config's `catalog_max_age` decides whether
/// the cache is used.
pub fn current(cfg: &Config) -> (Snapshot, Option<String>) {
    catalog(cfg.catalog_max_age, |c| cfg.catalog_source(c))
}

/// What a [`refresh`] did.
#[derive(Debug, Clone)]
pub struct Refreshed {
    /// The cache file written.
    pub path: PathBuf,
    /// When the regions were fetched.
    pub fetched_at: OffsetDateTime,
    /// The (cloud, region)s fetched now.
    pub refreshed: Vec<(Cloud, String)>,
    /// Offers fetched now (after implausible prices were dropped).
    pub offers_refreshed: usize,
    /// Offers the cache holds in all.
    pub offers: usize,
    /// Regions the cache holds in all.
    pub regions: usize,
    /// Live prices dropped as implausible, each described.
    pub dropped: Vec<String>,
    /// What was skipped and why (a cloud not set up here, an old cache that
    /// could not be read), one line each.
    pub warnings: Vec<String>,
    /// Which regions were chosen where none were configured, one line per
    /// cloud.
    pub notes: Vec<String>,
    /// (cloud, region)s that could not be fetched, with why: their cached
    /// offers are kept as they were. Not empty: a partial refresh.
    pub failed: Vec<(Cloud, String, String)>,
    /// Clouds set up here that did not answer their check (within
    /// [`crate::clouds::CHECK_BUDGET`]): not refreshed, a partial refresh.
    pub unread: Vec<Cloud>,
}

/// How many regions are fetched at once.
pub const REFRESH_CONCURRENCY: usize = 4;

/// One step of a [`refresh`], for a progress display: which (cloud,
/// region) is being fetched (`done` of `total` so far), or, once fetched,
/// how many offers it had.
#[derive(Debug, Clone)]
pub enum Progress {
    /// The work is known: `total` regions.
    Started {
        /// How many regions will be fetched.
        total: usize,
    },
    /// `label` (`aws us-east-1`) is being fetched.
    Fetching {
        /// `CLOUD REGION`.
        label: String,
    },
    /// `label` answered with `offers` offers; `done` of `total` are.
    Fetched {
        /// `CLOUD REGION`.
        label: String,
        /// Its offers, implausible ones dropped.
        offers: usize,
        /// Regions fetched so far.
        done: usize,
        /// Regions to fetch.
        total: usize,
    },
}

/// Fetches the live catalogs of `clouds` (the enabled ones when empty), one
/// (cloud, region) at a time, and merges them into the cache: the regions
/// fetched now replace theirs, the others keep what they had and when. A
/// cloud that is not set up is skipped with a warning; any failed region
/// leaves the cache as it was.
pub async fn refresh(
    cfg: &Config,
    clouds: &[Cloud],
    mut progress: impl FnMut(Progress),
) -> Result<Refreshed, Error> {
    if cfg.provider == ProviderKind::Fake {
        return Err(Error::invalid_input(
            "catalog refresh fetches live catalogs; the fake cloud serves the embedded snapshot",
        ));
    }
    let clouds = cfg.clouds_or_enabled(clouds);
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    let mut unread = Vec::new();
    // One unit of work per (cloud, region).
    let mut work: Vec<(Arc<dyn Provider>, Region)> = Vec::new();
    for cloud in &clouds {
        let Some(opened) = crate::clouds::live_settings(cfg, *cloud).await? else {
            warnings.push(format!(
                "no live {cloud} catalog; {cloud} stays on the embedded snapshot"
            ));
            continue;
        };
        // Checked first, within the check budget: a cloud that does not
        // answer costs that much, not a catalog timeout per region.
        let opened = match opened {
            Ok(settings) => {
                let c = crate::clouds::check_cloud(cfg, *cloud, crate::clouds::CHECK_BUDGET).await;
                if c.usable {
                    Ok(settings)
                } else {
                    unread.push(*cloud);
                    Err(c)
                }
            }
            Err(c) => Err(c),
        };
        match opened {
            Ok(settings) => {
                let mut regions = settings.regions();
                if regions.is_empty() {
                    // None configured: where the embedded catalog sells GPUs.
                    let mut sold: Vec<Region> = Snapshot::embedded()
                        .offers()
                        .iter()
                        .filter(|o| o.pool.cloud == *cloud && o.instance_type.gpu.is_some())
                        .map(|o| o.pool.region.clone())
                        .collect();
                    sold.sort();
                    sold.dedup();
                    notes.push(format!(
                        "{cloud}: no regions configured; refreshing the {} where the embedded catalog has GPU offers: {}",
                        sold.len(),
                        sold.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                    regions = sold;
                }
                let p = crate::factory::open(settings.with_regions(&regions)).await?;
                work.extend(regions.into_iter().map(|r| (p.clone(), r)));
            }
            Err(c) => warnings.push(format!("skipped {}", c.one_line())),
        }
    }
    if work.is_empty() {
        return Err(Error::new(
            ErrorKind::Unauthenticated,
            "nothing to refresh: none of the clouds asked for is usable from here (`gpufleet check` says why)",
        ));
    }
    let total = work.len();
    progress(Progress::Started { total });
    let reference = Snapshot::embedded();
    let mut fetched: Vec<(Cloud, Region, Vec<Offer>)> = Vec::new();
    let mut failed: Vec<(Cloud, String, String)> = Vec::new();
    let mut dropped_all = Vec::new();
    // A few regions at once; each one's outcome as it comes.
    let mut answers = futures::stream::iter(work.into_iter().map(|(p, region)| async move {
        let got = p.offers(&OfferQuery::new().region(region.clone())).await;
        (p.cloud(), region, got)
    }))
    .buffer_unordered(REFRESH_CONCURRENCY);
    let mut n = 0;
    while let Some((cloud, region, got)) = answers.next().await {
        n += 1;
        let label = format!("{cloud} {region}");
        progress(Progress::Fetching {
            label: label.clone(),
        });
        match got {
            Ok(o) => {
                let (o, dropped) = gpufleet_core::catalog::plausible::plausible(o, reference);
                progress(Progress::Fetched {
                    label,
                    offers: o.len(),
                    done: n,
                    total,
                });
                dropped_all.extend(dropped);
                fetched.push((cloud, region, o));
            }
            Err(e) => {
                progress(Progress::Fetched {
                    label,
                    offers: 0,
                    done: n,
                    total,
                });
                failed.push((cloud, region.to_string(), e.to_string()));
            }
        }
    }
    if fetched.is_empty() {
        let why: Vec<String> = failed
            .iter()
            .take(3)
            .map(|(c, r, e)| format!("{c} {r}: {e}"))
            .collect();
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "no region could be fetched ({}); the cache was not changed",
                why.join("; ")
            ),
        ));
    }
    let now = OffsetDateTime::now_utc();
    let p = path();
    let mut cache = match read_cache(&p) {
        Ok(Some(c)) => c,
        Ok(None) => Cache {
            offers: Vec::new(),
            fetched: BTreeMap::new(),
        },
        Err(why) => {
            warnings.push(format!(
                "the old catalog cache is unusable ({why}); starting a new one"
            ));
            Cache {
                offers: Vec::new(),
                fetched: BTreeMap::new(),
            }
        }
    };
    let refreshed: Vec<(Cloud, String)> = fetched
        .iter()
        .map(|(c, r, _)| (*c, r.to_string()))
        .collect();
    cache
        .offers
        .retain(|o| !refreshed.contains(&(o.pool.cloud, o.pool.region.to_string())));
    for (c, r, o) in fetched {
        cache
            .fetched
            .insert((c, r.to_string()), (now, cfg.catalog_source(c)));
        cache.offers.extend(o);
    }
    let snapshot = Snapshot::from_fetched(cache.offers, now);
    let mut header = format!("#fetched_at {}\n", now.format(&Rfc3339).unwrap_or_default());
    for ((c, r), (at, from)) in &cache.fetched {
        let at = at.format(&Rfc3339).unwrap_or_default();
        header.push_str(&match from.as_str() {
            "default" => format!("#fetched {c} {r} {at}\n"),
            _ => format!("#fetched {c} {r} {at} {from}\n"),
        });
    }
    let text = snapshot.to_text().replacen('\n', &format!("\n{header}"), 1);
    let io = |e: std::io::Error| Error::new(ErrorKind::Unexpected, format!("{}: {e}", p.display()));
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = p.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, &p).map_err(io)?;
    Ok(Refreshed {
        offers_refreshed: refreshed_count(&snapshot, &refreshed),
        offers: snapshot.offers().len(),
        regions: cache.fetched.len(),
        path: p,
        fetched_at: now,
        refreshed,
        dropped: dropped_all,
        warnings,
        notes,
        failed,
        unread,
    })
}

fn refreshed_count(s: &Snapshot, refreshed: &[(Cloud, String)]) -> usize {
    s.offers()
        .iter()
        .filter(|o| refreshed.contains(&(o.pool.cloud, o.pool.region.to_string())))
        .count()
}
