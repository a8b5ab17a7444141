//! `gpufleet fit`: which GPU configurations hold a model, cheapest first.

use std::io::Write;

use clap::{Args, ValueEnum};
use gpufleet::advisor::fit::{
    fit, parse_params, preset, FitOptions, FitReport, FitRequest, Precision, TrainingMethod,
    Workload, DEFAULT_CONTEXT, DEFAULT_MAX_NODES,
};
use gpufleet::report::FitDoc;
use gpufleet::runtime::verbs::{
    self,
    fit::{Fitted, FromJob},
};
use gpufleet::{Cloud, Error, GpuModel, Snapshot};

use crate::args::parse_cloud;
use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Full fine-tuning or LoRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TrainingArg {
    /// Every parameter, Adam, mixed precision.
    Full,
    /// Low-rank adapters on frozen weights (QLoRA with --precision int4).
    Lora,
}

/// Arguments of `gpufleet fit`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet fit --model llama-3-70b --precision bf16\n  gpufleet fit --params 7B --training lora --cloud aws\n  gpufleet fit --from-job train-42-1a2b3c4d"
)]
pub struct FitArgs {
    /// Parameters: `7B`, `70b`, `1.3e9`, `350M`. Shape defaults to the nearest
    /// published dense model; give --model for a known family instead.
    #[arg(
        long,
        value_name = "COUNT",
        required_unless_present_any = ["model", "from_job"],
        allow_hyphen_values = true
    )]
    params: Option<String>,

    /// Right-size from what a job's GPUs did (its measured peak memory and
    /// utilisation in the ledger) instead of from a model's size.
    #[arg(
        long,
        value_name = "JOB",
        conflicts_with_all = [
            "params", "model", "training", "precision", "context", "batch", "layers",
            "kv_heads", "head_dim", "hidden", "no_activation_checkpointing"
        ]
    )]
    from_job: Option<String>,

    /// With --from-job: memory needed per GPU as a multiple of the measured
    /// peak (1.0 to 4.0; default 1.2).
    // Checked in `run`: clap does not require an argument that conflicts
    // with one given, so `requires = "from_job"` let `--params 7B --headroom
    // 2` through, and the value was silently ignored.
    #[arg(long, allow_hyphen_values = true)]
    headroom: Option<f64>,

    /// A known model (size and attention shape from its published config):
    /// llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b,
    /// llama-3.1-405b, mistral-7b, mixtral-8x7b, qwen2.5-7b, qwen2.5-72b.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,

    /// Weight precision: fp32, bf16, fp16, fp8, int8, int4.
    #[arg(long, default_value = "bf16")]
    precision: String,

    /// Train instead of serving: full or lora.
    #[arg(long, value_enum)]
    training: Option<TrainingArg>,

    /// Tokens per sequence (inference context, or training sequence length).
    #[arg(long, default_value_t = i64::from(DEFAULT_CONTEXT), allow_hyphen_values = true)]
    context: i64,

    /// Concurrent sequences (inference) or micro-batch per GPU (training).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    batch: i64,

    /// Transformer layers (overrides the model's).
    #[arg(long, allow_hyphen_values = true)]
    layers: Option<i64>,

    /// Key/value heads (overrides the model's; fewer than attention heads under GQA).
    #[arg(long, allow_hyphen_values = true)]
    kv_heads: Option<i64>,

    /// Dimension per attention head (overrides the model's).
    #[arg(long, allow_hyphen_values = true)]
    head_dim: Option<i64>,

    /// Hidden size (overrides the model's).
    #[arg(long, allow_hyphen_values = true)]
    hidden: Option<i64>,

    /// Keep every activation instead of recomputing them (training).
    #[arg(long)]
    no_activation_checkpointing: bool,

    /// Clouds to include (comma-separated): aws, gcp, azure.
    #[arg(long, value_delimiter = ',', value_parser = parse_cloud)]
    cloud: Vec<Cloud>,

    /// Regions to include (comma-separated).
    #[arg(long, value_delimiter = ',')]
    region: Vec<String>,

    /// Only these GPU models (comma-separated).
    #[arg(long, value_delimiter = ',')]
    gpu: Vec<String>,

    /// At most this many nodes per configuration.
    #[arg(long, default_value_t = DEFAULT_MAX_NODES)]
    max_nodes: u32,

    /// Show at most this many configurations (0 for all).
    #[arg(long, default_value_t = 15)]
    limit: usize,
}

fn positive(v: i64, what: &str) -> Result<u32, Error> {
    u32::try_from(v).ok().filter(|n| *n >= 1).ok_or_else(|| {
        Error::invalid_input(format!(
            "invalid {what} {v}: expected a whole number from 1 to {}",
            u32::MAX
        ))
    })
}

/// Builds the request from the arguments.
fn request(args: &FitArgs) -> Result<FitRequest, Error> {
    let mut r = match (&args.model, &args.params) {
        (Some(m), p) => {
            let r = FitRequest::preset(preset(m)?);
            match p {
                Some(p) => r.with_params(parse_params(p)?, p),
                None => r,
            }
        }
        (None, Some(p)) => FitRequest::params(parse_params(p)?, p)?,
        (None, None) => {
            return Err(Error::invalid_input(
                "give --params (such as 7B) or --model (such as llama-3-8b)",
            ))
        }
    };
    r = r.with_precision(Precision::parse(&args.precision)?);
    let context = positive(args.context, "context")?;
    let batch = positive(args.batch, "batch")?;
    r = r.with_workload(match args.training {
        None => Workload::Inference { context, batch },
        Some(t) => Workload::Training {
            method: match t {
                TrainingArg::Full => TrainingMethod::Full,
                TrainingArg::Lora => TrainingMethod::Lora,
            },
            context,
            batch,
            activation_checkpointing: !args.no_activation_checkpointing,
        },
    });
    if let Some(v) = args.layers {
        r = r.with_layers(positive(v, "layers")?);
    }
    if let Some(v) = args.kv_heads {
        r = r.with_kv_heads(positive(v, "kv-heads")?);
    }
    if let Some(v) = args.head_dim {
        r = r.with_head_dim(positive(v, "head-dim")?);
    }
    if let Some(v) = args.hidden {
        r = r.with_hidden(positive(v, "hidden")?);
    }
    Ok(r)
}

/// Runs `gpufleet fit` on the embedded catalog.
pub fn run(
    args: FitArgs,
    flags: gpufleet::runtime::config::Flags,
    format: OutputFormat,
) -> Result<(), Failure> {
    if let Some(job) = &args.from_job {
        return from_job(job, &args, flags, format);
    }
    if let Some(h) = args.headroom {
        return Err(Error::invalid_input(format!(
            "--headroom {h} applies to --from-job only (a multiple of the measured peak); sizing a model from its parameters adds its own headroom line"
        ))
        .into());
    }
    let snapshot = Snapshot::embedded();
    let req = request(&args)?;
    let mut gpus = Vec::new();
    for g in &args.gpu {
        gpus.push(GpuModel::parse(g).map_err(|e| Error::invalid_input(e.to_string()))?);
    }
    let options = FitOptions {
        clouds: args.cloud.clone(),
        regions: snapshot.known_regions(&args.cloud, &args.region)?,
        gpus,
        max_nodes: args.max_nodes,
    };
    let (offers, left_out) =
        gpufleet::advisor::compatible::compatible_offers(snapshot.offers(), None, &options.gpus);
    let mut report = fit(&req, &offers, &options)?;
    let total = report.configs.len();
    if args.limit > 0 {
        report.configs.truncate(args.limit);
    }
    print(&report, format)?;
    if report.configs.is_empty() {
        return Err(Failure::NothingMatched(format!(
            "nothing in the catalog holds {:.1} GiB: {} instance types are too small even split over {} node(s); {}",
            report.total_gib,
            report.too_small,
            args.max_nodes,
            report.levers(args.max_nodes)
        )));
    }
    if format == OutputFormat::Table {
        eprintln!(
            "{} of {total} configurations that hold the model, from the embedded catalog snapshot; formulas in docs/advisor.md",
            report.configs.len()
        );
        if !left_out.is_empty() {
            eprintln!(
                "left out (--gpu MODEL includes one): {}",
                left_out.join("; ")
            );
        }
    }
    Ok(())
}

fn print(report: &FitReport, format: OutputFormat) -> Result<(), Failure> {
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    let doc = FitDoc::from(report);
    match format {
        OutputFormat::Json => json(&mut out, &doc)?,
        OutputFormat::Csv => crate::output::csv_rows(&mut out, &doc.configs)?,
        OutputFormat::Table => {
            let (context, batch, what) = match report.workload {
                Workload::Inference { context, batch } => (context, batch, "inference".to_string()),
                Workload::Training {
                    method,
                    context,
                    batch,
                    ..
                } => (
                    context,
                    batch,
                    format!(
                        "{} training",
                        if method == TrainingMethod::Full {
                            "full"
                        } else {
                            "LoRA"
                        }
                    ),
                ),
            };
            let a = report.architecture;
            writeln!(
                out,
                "{:.2}B params, {}, {what}, {context} tokens x batch {batch}; {} layers, hidden {}, {} KV heads x {}",
                report.params / 1e9,
                report.precision.as_str(),
                a.layers,
                a.hidden,
                a.kv_heads,
                a.head_dim
            )
            .map_err(io)?;
            let lines = report.memory.lines.iter().map(|l| {
                vec![
                    l.item.clone(),
                    format!("{:.2}", l.gib),
                    if l.sharded { "split" } else { "per GPU" }.to_string(),
                    l.formula.clone(),
                    l.basis.to_string(),
                ]
            });
            let total = vec![
                "total on one GPU".into(),
                format!("{:.2}", report.total_gib),
                String::new(),
                String::new(),
                String::new(),
            ];
            table(
                &mut out,
                &["MEMORY", ">GIB", "SHARING", "FORMULA", "FROM"],
                lines.chain([total]),
                |row| row,
            )
            .map_err(io)?;
            if !doc.configs.is_empty() {
                writeln!(out).map_err(io)?;
                table(
                    &mut out,
                    &[
                        "CLOUD",
                        "INSTANCE TYPE",
                        "GPUS/NODE",
                        ">NODES",
                        "LAYOUT",
                        ">GIB/GPU NEED/HAVE",
                        ">ON-DEMAND $/H",
                        ">SPOT $/H",
                        "REGION",
                    ],
                    &report.configs,
                    |c| {
                        vec![
                            c.cloud.to_string(),
                            c.instance_type.clone(),
                            format!("{}x{}", c.gpus_per_node, c.gpu),
                            c.nodes.to_string(),
                            c.layout.clone(),
                            format!("{:.1}/{}", c.need_per_gpu_gib, c.gpu_memory_gib),
                            c.on_demand_per_hour
                                .map_or("-".into(), |p| p.display(4).to_string()),
                            c.spot_per_hour
                                .map_or("-".into(), |p| p.display(4).to_string()),
                            c.region.to_string(),
                        ]
                    },
                )
                .map_err(io)?;
            }
        }
    }
    Ok(())
}

/// `fit --from-job`: the cheapest configuration that holds what the job
/// measurably used.
fn from_job(
    job: &str,
    args: &FitArgs,
    flags: gpufleet::runtime::config::Flags,
    format: OutputFormat,
) -> Result<(), Failure> {
    let cfg = gpufleet::runtime::config::Config::load(&flags)?;
    let req = FromJob {
        clouds: args.cloud.clone(),
        regions: args.region.clone(),
        gpus: args.gpu.clone(),
        headroom: args.headroom,
        limit: args.limit,
    };
    let site = crate::shared::site(&cfg);
    let fitted = crate::shared::runtime()?.block_on(verbs::fit::from_job(&site, job, &req))?;
    let (doc, usage) = match fitted {
        Fitted::NotMeasured(why) => return Err(Failure::NothingMatched(why)),
        Fitted::Fitted { doc, usage } => (doc, usage),
    };
    let (report, left_out) = (&doc.report, &doc.left_out);
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &doc)?,
        _ => {
            if format == OutputFormat::Csv {
                crate::output::csv_rows(&mut out, &report.options)?;
            } else {
                table(
                    &mut out,
                    &[
                        "INSTANCE TYPE",
                        "CLOUD",
                        "LOCATION",
                        "GPUS",
                        ">GIB/GPU",
                        ">$/HOUR",
                        ">TIME",
                        ">BUSY THERE",
                        ">$/MONTH",
                        ">SAVES $/MONTH",
                    ],
                    &report.options,
                    |o| {
                        vec![
                            format!(
                                "{}{}",
                                o.instance_type,
                                if o.current { " (now)" } else { "" }
                            ),
                            o.cloud.clone(),
                            o.location.clone(),
                            format!("{}x {}", o.gpus, o.gpu),
                            o.gpu_memory_gib.to_string(),
                            format!("{:.4}", o.price_per_hour.usd_per_hour_f64()),
                            o.slowdown.map_or("?".into(), |s| format!("{s:.2}x")),
                            o.expected_util_pct
                                .map_or("?".into(), |u| format!("{u:.0}%")),
                            format!("{:.0}", o.monthly_usd),
                            o.saving_monthly_usd
                                .map_or("-".into(), |s| format!("{s:.0}")),
                        ]
                    },
                )
                .map_err(write_failed)?;
                let mean = usage.mean_util_pct().unwrap_or(0.0);
                eprintln!(
                    "job {job} ran on {} x {} ({} GPU(s) each): {mean:.0}% busy on average, peak {:.1} of {:.0} GiB per GPU over {:.1} h measured",
                    usage.instances,
                    usage.instance_type,
                    usage.gpus,
                    usage.peak_memory_mib as f64 / 1024.0,
                    usage.memory_total_mib as f64 / 1024.0,
                    usage.observed_secs as f64 / 3600.0
                );
                eprintln!("{}", report.finding);
                if !left_out.is_empty() {
                    eprintln!(
                        "left out, as GPUs this job cannot move to (--gpu MODEL includes one): {}",
                        left_out.join("; ")
                    );
                }
                if report.options.iter().any(|o| o.slowdown.is_none()) {
                    eprintln!("TIME ?: the throughput table has no figure for that GPU, so how long the job would take there is not estimated (shown only because the job is not compute-bound)");
                }
                match &report.current {
                    Some(c) => eprintln!(
                        "{} {} costs ${:.0} a month run continuously; savings are against that ({} prices from the catalog)",
                        c.instance_type,
                        doc.capacity,
                        c.monthly_usd,
                        doc.capacity
                    ),
                    None => eprintln!(
                        "{} is not in the catalog: no saving can be given",
                        usage.instance_type
                    ),
                }
            }
        }
    }
    if report.options.is_empty() {
        return Err(Failure::NothingMatched(format!(
            "nothing in the catalog has {} GPU(s) of {:.1} GiB or more within the filters",
            usage.gpus, report.need_per_gpu_gib
        )));
    }
    Ok(())
}
