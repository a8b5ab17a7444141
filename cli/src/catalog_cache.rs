//! `gpufleet catalog refresh` and the local catalog cache `offers`, `place`
//! and `tf-external` read while it is fresher than `catalog_max_age`.
//!
//! The cache is the snapshot format (`core/src/catalog/snapshot.rs`) with a
//! `#fetched_at <RFC 3339>` comment, at `GPUFLEET_CATALOG_CACHE` or
//! `<platform data dir>/gpufleet/catalog-cache.txt`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use gpufleet::{Cloud, Error, ErrorKind, Offer, OfferQuery, Provider, Region, Snapshot};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::args::parse_cloud;
use crate::config::{Config, Flags, ProviderKind};
use crate::Failure;

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

/// The catalog commands read: the embedded snapshot, with the clouds in a
/// fresh cache replaced by the cache's offers. The note says which.
pub fn catalog(max_age: Duration) -> (Snapshot, Option<String>) {
    let embedded = Snapshot::embedded().clone();
    let p = path();
    let Ok(text) = std::fs::read_to_string(&p) else {
        return (embedded, None);
    };
    let fetched = text
        .lines()
        .find_map(|l| l.strip_prefix("#fetched_at "))
        .and_then(|t| OffsetDateTime::parse(t.trim(), &Rfc3339).ok());
    let Some(fetched) = fetched else {
        eprintln!(
            "warning: the catalog cache {} has no fetch time; ignoring it",
            p.display()
        );
        return (embedded, None);
    };
    let age = OffsetDateTime::now_utc() - fetched;
    if age > time::Duration::try_from(max_age).unwrap_or(time::Duration::MAX) {
        return (
            embedded,
            Some(format!(
                "the catalog cache is {} h old, older than catalog_max_age; using the embedded snapshot (refresh with 'gpufleet catalog refresh')",
                age.whole_hours()
            )),
        );
    }
    let cache = match Snapshot::parse(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "warning: the catalog cache {} is unreadable ({e}); ignoring it",
                p.display()
            );
            return (embedded, None);
        }
    };
    let cached: Vec<Cloud> = Cloud::REAL
        .into_iter()
        .filter(|c| cache.offers().iter().any(|o| o.pool.cloud == *c))
        .collect();
    let mut offers: Vec<Offer> = embedded
        .offers()
        .iter()
        .filter(|o| !cached.contains(&o.pool.cloud))
        .cloned()
        .collect();
    offers.extend(cache.offers().iter().cloned());
    let merged = Snapshot::from_fetched(offers, fetched);
    (
        merged,
        Some(format!(
            "{} from the catalog cache fetched {} min ago, the rest from the embedded snapshot",
            cached
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            age.whole_minutes()
        )),
    )
}

/// The catalog for a command: the config's `catalog_max_age` decides whether
/// the cache is used.
pub fn current(flags: &Flags) -> Result<(Snapshot, Option<String>), Error> {
    let cfg = Config::load(flags)?;
    Ok(catalog(cfg.catalog_max_age))
}

/// Arguments of `gpufleet catalog refresh`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet catalog refresh --cloud aws\n  gpufleet catalog refresh --cloud aws -o json"
)]
pub struct RefreshArgs {
    /// Clouds to fetch (comma-separated; default: the enabled ones).
    #[arg(long, value_delimiter = ',', value_parser = parse_cloud, allow_hyphen_values = true)]
    cloud: Vec<Cloud>,
}

/// Runs `gpufleet catalog refresh`.
pub fn refresh(
    args: RefreshArgs,
    flags: Flags,
    format: crate::output::OutputFormat,
) -> Result<(), Failure> {
    let cfg = Config::load(&flags)?;
    if cfg.provider == ProviderKind::Fake {
        return Err(Error::invalid_input(
            "catalog refresh fetches live catalogs; the fake cloud serves the embedded snapshot",
        )
        .into());
    }
    let clouds: Vec<Cloud> = if args.cloud.is_empty() {
        cfg.clouds.clone()
    } else {
        args.cloud.clone()
    };
    let rt = crate::runtime()?;
    let tty = std::io::stderr().is_terminal();
    rt.block_on(async {
        // One unit of progress per (cloud, region).
        let mut work: Vec<(Arc<dyn Provider>, Region)> = Vec::new();
        for cloud in &clouds {
            match cloud {
                Cloud::Aws => {
                    let c = cfg.aws()?;
                    let regions = c.regions.clone();
                    let p: Arc<dyn Provider> =
                        gpufleet::runtime::factory::open(gpufleet::runtime::factory::Settings::Aws(c)).await?;
                    work.extend(regions.into_iter().map(|r| (p.clone(), r)));
                }
                other => eprintln!("warning: no live {other} catalog in this release; {other} stays on the embedded snapshot"),
            }
        }
        if work.is_empty() {
            return Err(Error::invalid_input("nothing to refresh: no cloud with a live catalog is enabled").into());
        }
        let total = work.len();
        let mut offers = Vec::new();
        for (n, (p, region)) in work.into_iter().enumerate() {
            let label = format!("{} {}", p.cloud(), region);
            if tty {
                let done = n * 20 / total;
                eprint!("\r[{}{}] {}/{} {label:<30}", "#".repeat(done), " ".repeat(20 - done), n, total);
            }
            match p.offers(&OfferQuery::new().region(region.clone())).await {
                Ok(o) => {
                    if !tty {
                        eprintln!("{label}: {} offers ({}/{total})", o.len(), n + 1);
                    }
                    offers.extend(o);
                }
                Err(e) => {
                    if tty {
                        eprintln!();
                    }
                    return Err(Error::new(e.kind(), format!("{label}: {e}; the cache was not changed")).into());
                }
            }
        }
        if tty {
            eprintln!("\r[{}] {total}/{total} done{:<30}", "#".repeat(20), "");
        }
        let now = OffsetDateTime::now_utc();
        let snapshot = Snapshot::from_fetched(offers, now);
        let text = snapshot
            .to_text()
            .replacen('\n', &format!("\n#fetched_at {}\n", now.format(&Rfc3339).unwrap_or_default()), 1);
        let p = path();
        let io = |e: std::io::Error| Error::new(ErrorKind::Unexpected, format!("{}: {e}", p.display()));
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, &p).map_err(io)?;
        if format == crate::output::OutputFormat::Table {
            println!("{} offers cached in {}", snapshot.offers().len(), p.display());
        } else {
            crate::output::json(
                &mut std::io::stdout().lock(),
                &serde_json::json!({
                    "path": p.display().to_string(),
                    "offers": snapshot.offers().len(),
                    "fetched_at": now.format(&Rfc3339).unwrap_or_default(),
                }),
            )?;
        }
        Ok(())
    })
}
