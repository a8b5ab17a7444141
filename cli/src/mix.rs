//! `gpufleet mix`: how much of a demand profile to commit to, run on-demand
//! and run on spot.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use gpufleet::advisor::mix::{
    parse_discount, parse_profile, parse_share, MixAsk, MixChoice, MixReport,
};
use gpufleet::report::{recommendation, MixDoc};
use gpufleet::{Cloud, Error, GpuRequirement, Price, Region, Snapshot};

use crate::args::{parse_cloud, parse_gpu, parse_price};
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Arguments of `gpufleet mix`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet mix --profile demand.csv --gpu A100:8 --region us-east-1\n  gpufleet mix --profile demand.csv --gpu H100:8 --region us-east-1 --discount-1y 30 --discount-3y 50"
)]
pub struct MixArgs {
    /// Demand profile: CSV `time,instances` (RFC 3339 or Unix seconds),
    /// hourly or finer, at least a week.
    #[arg(long, value_name = "FILE")]
    profile: PathBuf,

    /// Also draw the demand over time against the recommended commitment as
    /// an SVG chart here.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,

    /// The instance type the demand runs on.
    #[arg(long, required_unless_present = "gpu", conflicts_with = "gpu")]
    instance_type: Option<String>,

    /// Or: the cheapest on-demand instance type with this GPU in the region
    /// (`MODEL[:COUNT]`).
    #[arg(long, value_name = "MODEL[:COUNT]", value_parser = parse_gpu)]
    gpu: Option<GpuRequirement>,

    /// The region it runs in.
    #[arg(long)]
    region: String,

    /// The cloud, when the instance type name is ambiguous.
    #[arg(long, value_parser = parse_cloud)]
    cloud: Option<Cloud>,

    /// Share of the demand that tolerates interruption: a fraction (0.3) or a
    /// percentage (30%).
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    interruptible_share: String,

    /// 1-year commitment discount off on-demand, in percent (default: GCP's
    /// published committed-use price; 30 % assumed for AWS and Azure).
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true)]
    discount_1y: Option<String>,

    /// 3-year commitment discount off on-demand, in percent (default: GCP's
    /// published committed-use price; 50 % assumed for AWS and Azure).
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true)]
    discount_3y: Option<String>,

    /// Your on-demand price per hour in USD, instead of the catalog's.
    #[arg(long, value_name = "USD", value_parser = parse_price)]
    on_demand_price: Option<Price>,

    /// Your spot price per hour in USD, instead of the catalog's.
    #[arg(long, value_name = "USD", value_parser = parse_price)]
    spot_price: Option<Price>,
}

/// Runs `gpufleet mix`.
pub fn run(args: MixArgs, format: OutputFormat) -> Result<(), Failure> {
    if let Some(p) = &args.plot {
        gpufleet::runtime::plot::check_path(p)?;
    }
    let snapshot = Snapshot::embedded();
    let share = match args.interruptible_share.trim() {
        "0" => None,
        s => Some((
            parse_share(s, "interruptible share")?,
            format!("--interruptible-share {s}"),
        )),
    };
    let discount =
        |d: &Option<String>, flag: &str| d.as_deref().map(|d| parse_discount(d, flag)).transpose();
    let discounts = (
        discount(&args.discount_1y, "--discount-1y")?,
        discount(&args.discount_3y, "--discount-3y")?,
    );
    let text = std::fs::read_to_string(&args.profile).map_err(|e| {
        Error::invalid_input(format!(
            "cannot read the demand profile {}: {e}",
            args.profile.display()
        ))
    })?;
    let profile = parse_profile(&text)
        .map_err(|e| Error::invalid_input(format!("{}: {e}", args.profile.display())))?;
    let clouds: Vec<Cloud> = args.cloud.into_iter().collect();
    let region = snapshot
        .known_regions(&clouds, std::slice::from_ref(&args.region))?
        .into_iter()
        .next()
        .unwrap_or_else(|| Region::new(args.region.clone()));
    let advice = MixAsk {
        choice: MixChoice {
            cloud: args.cloud,
            region,
            instance_type: args.instance_type.clone(),
            gpu: args.gpu.clone(),
            on_demand_price: args.on_demand_price,
            spot_price: args.spot_price,
        },
        interruptible_share: share,
        discounts,
    }
    .advise(snapshot.offers(), &profile)?;
    let (report, cloud, name, region) = (
        advice.report,
        advice.cloud,
        advice.instance_type,
        advice.region,
    );
    if let Some(p) = &args.plot {
        gpufleet::runtime::plot::mix_svg(p, &profile, &report)?;
        eprintln!("mix: drew {}", p.display());
    }
    print(&report, cloud, &name, &region, &args.profile, format)
}

fn print(
    r: &MixReport,
    cloud: Cloud,
    name: &str,
    region: &Region,
    profile: &std::path::Path,
    format: OutputFormat,
) -> Result<(), Failure> {
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    let doc = MixDoc::new(r, cloud, region, name, &profile.display().to_string());
    match format {
        OutputFormat::Csv => crate::output::csv_rows(&mut out, &doc.options)?,
        OutputFormat::Json => json(&mut out, &doc)?,
        OutputFormat::Table => {
            writeln!(out, "{name} in {region} ({cloud})").map_err(io)?;
            table(&mut out, &["INPUT", "VALUE", "FROM"], &doc.inputs, |i| {
                vec![i.name.to_string(), i.value.clone(), i.source.clone()]
            })
            .map_err(io)?;
            writeln!(out).map_err(io)?;
            table(
                &mut out,
                &["TERM", ">$/HOUR", ">DISCOUNT", ">BREAK-EVEN BUSY", "FROM"],
                doc.terms.iter().zip(&r.break_even),
                |(t, b)| {
                    vec![
                        t.term.clone(),
                        b.hourly.display(4).to_string(),
                        format!("{:.1}%", t.discount * 100.0),
                        format!("{:.1}%", t.break_even_utilisation * 100.0),
                        t.source.clone(),
                    ]
                },
            )
            .map_err(io)?;
            writeln!(out).map_err(io)?;
            table(
                &mut out,
                &[
                    "OPTION",
                    ">COMMITTED",
                    ">COMMIT BUSY",
                    ">ON-DEMAND INST-H",
                    ">SPOT INST-H",
                    ">$/MONTH",
                    ">SAVED $/MONTH",
                    ">SAVED",
                ],
                &r.options,
                |o| {
                    vec![
                        format!("{}{}", o.name, if o == &r.recommended { " *" } else { "" }),
                        o.committed.to_string(),
                        o.committed_utilisation
                            .map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
                        format!("{:.0}", o.on_demand_instance_hours),
                        format!("{:.0}", o.spot_instance_hours),
                        o.monthly.display(2).to_string(),
                        o.monthly_saving.display(2).to_string(),
                        format!("{:.1}%", o.saving_share * 100.0),
                    ]
                },
            )
            .map_err(io)?;
            let rec = &r.recommended;
            writeln!(
                out,
                "\nrecommended: {}; ${} a month, {:.1}% less than all on-demand",
                recommendation(rec),
                rec.monthly.display(2),
                rec.saving_share * 100.0
            )
            .map_err(io)?;
        }
    }
    Ok(())
}
