//! `gpufleet mix`: how much of a demand profile to commit to, run on-demand
//! and run on spot.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use gpufleet::advisor::mix::{
    commitment_terms, parse_profile, recommend, MixChoice, MixOption, MixReport, MixRequest,
};
use gpufleet::advisor::Basis;
use gpufleet::{Cloud, Error, GpuRequirement, Price, Region, Snapshot};
use serde::Serialize;

use crate::args::{known_regions, parse_cloud, parse_gpu, parse_price};
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

fn parse_share(s: &str) -> Result<f64, Error> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(Error::invalid_input(format!(
            "invalid interruptible share '{s}': expected a fraction from 0 to 1 (0.3) or a percentage (30%)"
        ))),
    }
}

fn parse_discount(s: &str, flag: &str) -> Result<f64, Error> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(x) if (0.0..100.0).contains(&x) => Ok(x / 100.0),
        _ => Err(Error::invalid_input(format!(
            "invalid {flag} '{s}': expected a percentage off on-demand from 0 to 99.9, such as 35"
        ))),
    }
}

/// Runs `gpufleet mix`.
pub fn run(args: MixArgs, format: OutputFormat) -> Result<(), Failure> {
    if let Some(p) = &args.plot {
        crate::plot::check_path(p)?;
    }
    let snapshot = Snapshot::embedded();
    let share = parse_share(&args.interruptible_share)?;
    if share == 0.0 {
        if let Some(p) = &args.spot_price {
            return Err(Error::invalid_input(format!(
                "--spot-price {p} has no effect: no demand tolerates interruption, so none runs on spot; give --interruptible-share too (such as 30%)"
            ))
            .into());
        }
    }
    let discounts = (
        args.discount_1y
            .as_deref()
            .map(|d| parse_discount(d, "--discount-1y"))
            .transpose()?,
        args.discount_3y
            .as_deref()
            .map(|d| parse_discount(d, "--discount-3y"))
            .transpose()?,
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
    let region = known_regions(&clouds, std::slice::from_ref(&args.region), snapshot)?
        .into_iter()
        .next()
        .unwrap_or_else(|| Region::new(args.region.clone()));
    let prices = MixChoice {
        cloud: args.cloud,
        region: region.clone(),
        instance_type: args.instance_type.clone(),
        gpu: args.gpu.clone(),
        on_demand_price: args.on_demand_price,
        spot_price: args.spot_price,
    }
    .prices(snapshot.offers())?;
    let (cloud, name) = (prices.cloud, prices.instance_type.clone());
    let terms = commitment_terms(cloud, &name, &region, prices.request.on_demand, discounts)?;
    let request = MixRequest {
        interruptible_share: share,
        interruptible_basis: if args.interruptible_share == "0" {
            Basis::Default(
                "nothing tolerates interruption unless --interruptible-share says so".into(),
            )
        } else {
            Basis::UserInput(format!(
                "--interruptible-share {}",
                args.interruptible_share
            ))
        },
        terms,
        ..prices.request
    };
    let report = recommend(&profile, &request)?;
    if let Some(p) = &args.plot {
        crate::plot::mix_svg(p, &profile, &report)?;
        eprintln!("mix: drew {}", p.display());
    }
    print(&report, cloud, &name, &region, &args.profile, format)
}

/// One option as `--output json` prints it (stable schema).
#[derive(Debug, Serialize)]
struct OptionRow<'a> {
    name: &'a str,
    term: Option<&'a str>,
    committed: u32,
    committed_utilisation: Option<f64>,
    on_demand_instance_hours: f64,
    spot_instance_hours: f64,
    cost_over_profile_usd: f64,
    monthly_usd: f64,
    monthly_saving_usd: f64,
    saving_share: f64,
}

impl<'a> OptionRow<'a> {
    fn new(o: &'a MixOption) -> Self {
        OptionRow {
            name: &o.name,
            term: o.term.as_deref(),
            committed: o.committed,
            committed_utilisation: o.committed_utilisation,
            on_demand_instance_hours: o.on_demand_instance_hours,
            spot_instance_hours: o.spot_instance_hours,
            cost_over_profile_usd: o.cost.as_usd_f64(),
            monthly_usd: o.monthly.as_usd_f64(),
            monthly_saving_usd: o.monthly_saving.as_usd_f64(),
            saving_share: o.saving_share,
        }
    }
}

#[derive(Debug, Serialize)]
struct Input {
    name: &'static str,
    value: String,
    source: String,
}

#[derive(Debug, Serialize)]
struct TermRow {
    term: String,
    hourly_usd: f64,
    discount: f64,
    break_even_utilisation: f64,
    source: String,
}

#[derive(Debug, Serialize)]
struct MixDoc<'a> {
    cloud: String,
    region: &'a str,
    instance_type: &'a str,
    profile_hours: f64,
    peak_instances: f64,
    mean_instances: f64,
    inputs: Vec<Input>,
    terms: Vec<TermRow>,
    options: Vec<OptionRow<'a>>,
    recommended: OptionRow<'a>,
}

fn inputs(r: &MixReport, profile: &std::path::Path) -> Vec<Input> {
    let q = &r.request;
    let mut v = vec![
        Input {
            name: "demand profile",
            value: format!(
                "{:.0} h, peak {:.1}, mean {:.2} instances",
                r.profile_hours, r.peak, r.mean
            ),
            source: format!("user input: {}", profile.display()),
        },
        Input {
            name: "on-demand price",
            value: format!("${}/h", q.on_demand),
            source: q.on_demand_basis.to_string(),
        },
    ];
    match (q.spot, &q.spot_basis) {
        (Some(p), Some(b)) => v.push(Input {
            name: "spot price",
            value: format!("${p}/h"),
            source: b.to_string(),
        }),
        _ => v.push(Input {
            name: "spot price",
            value: "none".into(),
            source: "catalog: not sold as spot here; interruptible demand runs on-demand".into(),
        }),
    }
    if let Some(b) = &q.spot_overhead_basis {
        v.push(Input {
            name: "spot rework",
            value: format!("+{:.1}%", q.spot_overhead * 100.0),
            source: b.to_string(),
        });
    }
    v.push(Input {
        name: "interruptible share",
        value: format!("{:.0}%", q.interruptible_share * 100.0),
        source: q.interruptible_basis.to_string(),
    });
    v
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
    let terms: Vec<TermRow> = r
        .break_even
        .iter()
        .map(|b| TermRow {
            term: b.term.clone(),
            hourly_usd: b.hourly.usd_per_hour_f64(),
            discount: b.discount,
            break_even_utilisation: b.break_even_utilisation,
            source: b.basis.to_string(),
        })
        .collect();
    match format {
        OutputFormat::Csv => {
            let rows: Vec<OptionRow<'_>> = r.options.iter().map(OptionRow::new).collect();
            crate::output::csv_rows(&mut out, &rows)?;
        }
        OutputFormat::Json => {
            let doc = MixDoc {
                cloud: cloud.to_string(),
                region: region.as_str(),
                instance_type: name,
                profile_hours: r.profile_hours,
                peak_instances: r.peak,
                mean_instances: r.mean,
                inputs: inputs(r, profile),
                terms,
                options: r.options.iter().map(OptionRow::new).collect(),
                recommended: OptionRow::new(&r.recommended),
            };
            json(&mut out, &doc)?;
        }
        OutputFormat::Table => {
            writeln!(out, "{name} in {region} ({cloud})").map_err(io)?;
            table(
                &mut out,
                &["INPUT", "VALUE", "FROM"],
                inputs(r, profile),
                |i| vec![i.name.to_string(), i.value, i.source],
            )
            .map_err(io)?;
            writeln!(out).map_err(io)?;
            table(
                &mut out,
                &["TERM", ">$/HOUR", ">DISCOUNT", ">BREAK-EVEN BUSY", "FROM"],
                terms.iter().zip(&r.break_even),
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

/// What the recommended option does, in words, from its own hours: the
/// line named on-demand and spot whatever the option held (an all-committed
/// option, or spot dearer than on-demand, has neither).
fn recommendation(rec: &gpufleet::advisor::mix::MixOption) -> String {
    // Under half an instance-hour over the profile is none.
    let on_demand = rec.on_demand_instance_hours >= 0.5;
    let spot = rec.spot_instance_hours >= 0.5;
    if rec.committed == 0 {
        return match (on_demand, spot) {
            (true, true) => {
                "commit to nothing: the firm demand on-demand, the interruptible share on spot"
            }
            (false, true) => "commit to nothing: all of it on spot",
            _ => "commit to nothing: all of it on-demand",
        }
        .into();
    }
    let commit = format!(
        "commit to {} instance(s){}",
        rec.committed,
        rec.term
            .as_deref()
            .map(|t| format!(" for {t}"))
            .unwrap_or_default()
    );
    let rest = match (on_demand, spot) {
        (true, true) => ", the rest of the firm demand on-demand, the interruptible share on spot",
        (true, false) => ", the rest on-demand",
        (false, true) => ", the interruptible demand above it on spot",
        (false, false) => ", which covers all of it",
    };
    format!("{commit}{rest}")
}
