//! `gpufleet offers`.

use clap::{Args, ValueEnum};
use gpufleet::catalog::{sort_offers, OfferSort};
use gpufleet::report::{price_age, OfferRow};
use gpufleet::{Capacity, Cloud, Error, GpuRequirement, Offer, OfferQuery, Price, Snapshot};

use crate::args::{parse_cloud, parse_gib, parse_gpu, parse_price};
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Which capacity types to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CapacityArg {
    /// Spot only.
    Spot,
    /// On-demand only.
    OnDemand,
    /// Both.
    Any,
}

/// How to order offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortArg {
    /// Cheapest instance-hour first.
    Price,
    /// Cheapest GPU-hour first.
    PricePerGpu,
}

/// Arguments of `gpufleet offers`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet offers --gpu H100:8 --capacity spot\n  gpufleet offers --gpu A100 --min-gpu-memory 80 --region us-east-1 -o csv\n  gpufleet offers --cloud aws --live --gpu A10G:1"
)]
pub struct OffersArgs {
    /// A GPU model, optionally with an exact count per instance: `H100:8`, `T4`,
    /// `a100-80gb:4`. Repeat for any of several.
    #[arg(long, value_name = "MODEL[:COUNT]", value_parser = parse_gpu, allow_hyphen_values = true)]
    gpu: Vec<GpuRequirement>,

    /// At least this much memory per GPU, in GiB.
    #[arg(long, value_name = "GIB", value_parser = parse_gib, allow_hyphen_values = true)]
    min_gpu_memory: Option<u32>,

    /// Clouds to include (comma-separated): aws, gcp, azure (default: the
    /// enabled ones, `clouds` in the config).
    #[arg(long, value_delimiter = ',', value_parser = parse_cloud, allow_hyphen_values = true)]
    cloud: Vec<Cloud>,

    /// Regions to include (comma-separated), as each cloud names them.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    region: Vec<String>,

    /// Capacity type.
    #[arg(long, value_enum, default_value_t = CapacityArg::Any, allow_hyphen_values = true)]
    capacity: CapacityArg,

    /// At most this hourly price per instance, in USD.
    #[arg(long, value_name = "USD", value_parser = parse_price, allow_hyphen_values = true)]
    max_price: Option<Price>,

    /// Sort order.
    #[arg(long, value_enum, default_value_t = SortArg::Price, allow_hyphen_values = true)]
    sort: SortArg,

    /// Show at most this many offers (0 for all).
    #[arg(long, default_value_t = 20, allow_hyphen_values = true)]
    limit: usize,

    /// Ask the clouds' APIs (credentials and endpoints from the usual places:
    /// the AWS default chain, `AWS_ENDPOINT_URL`, …) instead of the embedded
    /// snapshot; a cloud that cannot be reached falls back to the snapshot with
    /// a warning. Live catalogs: AWS.
    #[arg(long)]
    live: bool,
}

/// Builds the query from the arguments, checking regions against the catalog.
fn query(args: &OffersArgs, snapshot: &Snapshot) -> Result<OfferQuery, Error> {
    let mut q = OfferQuery::new();
    q.clouds = args.cloud.clone();
    q.gpus = args.gpu.clone();
    q.min_gpu_memory_gib = args.min_gpu_memory;
    q.capacity = match args.capacity {
        CapacityArg::Spot => Some(Capacity::Spot),
        CapacityArg::OnDemand => Some(Capacity::OnDemand),
        CapacityArg::Any => None,
    };
    q.max_price = args.max_price;
    q.regions = snapshot.known_regions(&args.cloud, &args.region)?;
    Ok(q)
}

/// The live offers of the clouds asked for (all three when none), each
/// opened with the settings `gpufleet check` would use and narrowed to the
/// regions asked for; a cloud that cannot be used is served from the
/// snapshot, with a warning saying why.
fn live_offers(
    q: &OfferQuery,
    snapshot: &Snapshot,
    cfg: &gpufleet::runtime::config::Config,
) -> Result<(Vec<Offer>, usize), Failure> {
    let live = crate::shared::runtime()?
        .block_on(gpufleet::runtime::live::live_offers_for(cfg, q, snapshot))?;
    for note in &live.notes {
        eprintln!("warning: {note}");
    }
    crate::shared::warn_dropped(&live.dropped, 3);
    Ok((live.offers, live.notes.len()))
}

/// Runs `gpufleet offers` on the embedded catalog.
pub fn run(
    mut args: OffersArgs,
    flags: gpufleet::runtime::config::Flags,
    format: OutputFormat,
) -> Result<(), Failure> {
    let cfg = gpufleet::runtime::config::Config::load(&flags)?;
    // The fake cloud never reaches a real one: `--live` used to ask the real
    // clouds' APIs with whatever credentials were at hand.
    if args.live && cfg.provider == gpufleet::runtime::config::ProviderKind::Fake {
        return Err(Error::invalid_input(
            "--live asks the clouds' APIs, and --provider fake never reaches a real cloud: the fake cloud serves the embedded snapshot (drop --live, or use --provider live)",
        )
        .into());
    }
    let (catalog, note) = gpufleet::runtime::live::cache::current(&cfg);
    let snapshot = &catalog;
    args.cloud = cfg.clouds_or_enabled(&args.cloud);
    let q = query(&args, snapshot)?;
    // Clouds asked live that were served from the snapshot: a partial answer.
    let mut not_live = 0;
    let mut offers = if args.live {
        let (offers, unread) = live_offers(&q, snapshot, &cfg)?;
        not_live = unread;
        offers
    } else {
        snapshot.query(&q)
    };
    let total = offers.len();
    sort_offers(
        &mut offers,
        match args.sort {
            SortArg::Price => OfferSort::Price,
            SortArg::PricePerGpu => OfferSort::PricePerGpu,
        },
    );
    if args.limit > 0 {
        offers.truncate(args.limit);
    }
    let rows: Vec<OfferRow> = offers.iter().map(OfferRow::from).collect();
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => {
            json(&mut out, &rows)?;
        }
        OutputFormat::Csv => crate::output::csv_rows(&mut out, &rows)?,
        OutputFormat::Table if !rows.is_empty() => {
            let now = time::OffsetDateTime::now_utc();
            table(
                &mut out,
                &[
                    "CLOUD",
                    "REGION",
                    "ZONE",
                    "INSTANCE TYPE",
                    "GPUS",
                    ">GPU MEM",
                    ">VCPU",
                    ">RAM",
                    "CAPACITY",
                    ">$/HOUR",
                    ">$/GPU-HOUR",
                    "INTERRUPT",
                    ">PRICE AGE",
                    "SOURCE",
                ],
                rows.iter().zip(&offers),
                |(r, o)| {
                    vec![
                        r.cloud.clone(),
                        r.region.clone(),
                        r.zone.clone().unwrap_or_else(|| "-".into()),
                        r.instance_type.clone(),
                        format!("{}x{}", r.gpu_count, r.gpu_model),
                        format!("{}G", r.gpu_memory_gib),
                        r.vcpus.to_string(),
                        format!("{:.0}G", r.memory_gib),
                        r.capacity.to_string(),
                        o.price.display(4).to_string(),
                        o.price_per_gpu().display(4).to_string(),
                        r.interruption_bucket.unwrap_or("-").to_string(),
                        price_age(o.observed_at, now),
                        r.source.clone(),
                    ]
                },
            )
            .map_err(io)?;
            drop(out);
            eprintln!(
                "{} of {total} matching offers, from {} (PRICE AGE: since gpufleet fetched the price, or published it for the embedded catalog; `catalog refresh` fetches today's)",
                rows.len(),
                if args.live {
                    "the live APIs where reachable".to_string()
                } else {
                    note.clone().unwrap_or_else(|| "the embedded catalog snapshot".into())
                }
            );
        }
        OutputFormat::Table => {}
    }
    if rows.is_empty() {
        // A model the catalog does not sell at all says so, with what it has.
        let sold: std::collections::BTreeSet<String> = snapshot
            .offers()
            .iter()
            .filter_map(|o| o.instance_type.gpu.as_ref().map(|g| g.model.to_string()))
            .collect();
        let absent: Vec<String> = args
            .gpu
            .iter()
            .map(|g| g.model.to_string())
            .filter(|m| !sold.contains(m))
            .collect();
        if !absent.is_empty() {
            return Err(Failure::NothingMatched(format!(
                "no instance type in {} has {} (it has {}); `catalog refresh` fetches the live catalogs",
                note.as_deref().unwrap_or("the embedded catalog snapshot"),
                absent.join(", "),
                sold.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        return Err(Failure::NothingMatched(
            "no offers match; loosen --gpu, --min-gpu-memory, --region, --capacity or --max-price"
                .into(),
        ));
    }
    if not_live > 0 {
        return Err(Failure::Partial(format!(
            "partial answer: {not_live} cloud(s) not read live, shown from the snapshot (exit 4)"
        )));
    }
    Ok(())
}
