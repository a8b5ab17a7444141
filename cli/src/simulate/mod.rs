//! `gpufleet simulate`: replay spot availability traces through the placer and
//! baseline policies.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use gpufleet::runtime::verbs::simulate::{simulate, Progress, Replay, Traces};
use gpufleet::sim::grid;
use gpufleet::sim::{PolicyKind, Scenario};

use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

mod serve;
mod timeline;

fn parse_starts(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (1..=gpufleet::sim::MAX_STARTS as i64).contains(&n) => Ok(n as usize),
        _ => Err(format!(
            "invalid number of starts '{s}': expected a whole number from 1 to {}",
            gpufleet::sim::MAX_STARTS
        )),
    }
}

fn parse_start(s: &str) -> Result<usize, String> {
    s.trim().parse::<usize>().map_err(|_| {
        format!("invalid start '{s}': expected a whole number from 0 to one less than --starts")
    })
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!(
            "invalid utilization '{s}': expected more than 0 and at most 1, such as 0.7"
        )),
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "invalid rate '{s}': expected requests per minute, 0 or more, such as 600"
        )),
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!(
            "invalid request time '{s}': expected seconds, more than 0 and at most 3600, such as 2"
        )),
    }
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "invalid number '{s}': expected hours, such as 24 or 0.5"
        )),
    }
}

/// Arguments of `gpufleet simulate`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  gpufleet simulate --traces data/traces/2022-10-26T22-05 --job-hours 48 --deadline-hours 72\n  gpufleet simulate --grid --traces data/traces/2022-10-26T22-05 --pools data/traces/2022-10-26T22-05/pools-any-of.csv\n  gpufleet simulate --serve --traces data/traces/many-pools --instance-type p3.2xlarge"
)]
pub struct SimulateArgs {
    /// Directory of availability traces (`index,time,preempted`, 1 = no spot).
    #[arg(long, value_name = "DIR", allow_hyphen_values = true)]
    traces: PathBuf,

    /// The pools manifest (`file,cloud,region,zone,instance_type,on_demand_price,spot_price`);
    /// default `DIR/pools.csv`.
    #[arg(long, value_name = "FILE", allow_hyphen_values = true)]
    pools: Option<PathBuf>,

    /// Only pools of these instance types (comma-separated; required when the
    /// manifest has several). Several types make an any-of job: the
    /// manifest's `throughput` column converts the work between them.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    instance_type: Vec<String>,

    /// Only the pool in this zone (a single-pool scenario).
    #[arg(long, allow_hyphen_values = true)]
    zone: Option<String>,

    /// Hours of work.
    #[arg(long, default_value = "24", value_parser = parse_positive, allow_hyphen_values = true)]
    job_hours: f64,

    /// Hours from start to deadline.
    #[arg(long, default_value = "36", value_parser = parse_positive, allow_hyphen_values = true)]
    deadline_hours: f64,

    /// Hours per start, restart or move (no progress, paid).
    #[arg(long, default_value = "0.1667", value_parser = parse_positive, allow_hyphen_values = true)]
    changeover_hours: f64,

    /// Start offsets spread over the traces (1 to 10000).
    #[arg(long, default_value_t = 50, value_parser = parse_starts, allow_hyphen_values = true)]
    starts: usize,

    /// Policies (comma-separated); by default every one but the diagnostic
    /// gpufleet-known-rates and SkyPilot's recovery strategies
    /// (skypilot-failover, skypilot-eager-next-region, and each with -od for
    /// on-demand in the resource set). With --serve: on-demand, spot-only,
    /// spothedge, gpufleet (all by default).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    policies: Vec<String>,

    /// Run the benchmark grid instead: every instance type, all its zones and
    /// each zone alone (with a `throughput` column: the manifest's first two
    /// types together, then all of them, as any-of jobs), job lengths
    /// 12/24/48 h, deadlines 1.25/1.5/2x the job, changeovers 10/30 min.
    // The grid chooses the pools and the jobs itself: the flags that
    // choose them for one scenario were silently ignored beside it.
    #[arg(
        long,
        conflicts_with_all = ["instance_type", "zone", "job_hours", "deadline_hours", "changeover_hours"]
    )]
    grid: bool,

    /// Also draw cost relative to the optimum per policy and scenario as an
    /// SVG chart here.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,

    /// Instead of the means, replay start START (0-based, of --starts) and
    /// show where each policy ran at every tick, beside each pool's
    /// availability: the drill-down behind a scenario's figure.
    #[arg(long, value_name = "START", value_parser = parse_start, allow_hyphen_values = true, conflicts_with_all = ["grid", "plot"])]
    timeline: Option<usize>,

    /// Replay a service instead of a job: its replicas minute by minute
    /// against a request rate, for on-demand, spot only, SpotHedge and
    /// gpufleet's own policy (docs/serving.md).
    #[arg(
        long,
        conflicts_with_all = ["grid", "timeline", "job_hours", "deadline_hours", "changeover_hours", "starts"]
    )]
    serve: bool,

    /// With --serve: the service file whose [replicas], [autoscale] and
    /// [spot] are replayed (default: up to 16 replicas of 4 requests in
    /// flight, all on spot with one extra).
    #[arg(
        long,
        value_name = "FILE",
        requires = "serve",
        allow_hyphen_values = true
    )]
    service: Option<std::path::PathBuf>,

    /// With --serve: requests per minute from a CSV (`requests` or
    /// `minute,requests` per row, from the traces' start, repeated) instead
    /// of the diurnal profile.
    #[arg(long, value_name = "FILE.csv", requires = "serve", conflicts_with_all = ["peak_rpm", "trough_rpm"], allow_hyphen_values = true)]
    demand: Option<std::path::PathBuf>,

    /// With --serve: the diurnal profile's requests per minute at 16:00 UTC.
    #[arg(long, default_value = "1200", value_parser = parse_rate, requires = "serve", allow_hyphen_values = true)]
    peak_rpm: f64,

    /// With --serve: the diurnal profile's requests per minute at 04:00 UTC.
    #[arg(long, default_value = "120", value_parser = parse_rate, requires = "serve", allow_hyphen_values = true)]
    trough_rpm: f64,

    /// With --serve: the mean seconds a request is in flight.
    #[arg(long, default_value = "2", value_parser = parse_seconds, requires = "serve", allow_hyphen_values = true)]
    request_seconds: f64,

    /// With --serve: the share of a replica's capacity its target_in_flight
    /// is (Knative's default target utilisation, 0.7).
    #[arg(long, default_value = "0.7", value_parser = parse_fraction, requires = "serve", allow_hyphen_values = true)]
    utilization: f64,

    /// With --serve: minutes from a replica's launch to ready.
    #[arg(long, value_name = "MINUTES", default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1440), requires = "serve", allow_hyphen_values = true)]
    cold_start: u32,
}

/// Runs `gpufleet simulate`.
pub fn run(args: SimulateArgs, format: OutputFormat) -> Result<(), Failure> {
    if let Some(p) = &args.plot {
        gpufleet::runtime::plot::check_path(p)?;
    }
    let traces = Traces {
        dir: args.traces.clone(),
        manifest: args.pools.clone(),
    };
    let say = |notes: &[String]| {
        for note in notes {
            eprintln!("simulate: note: {note}");
        }
    };
    let timeline = args.timeline.filter(|_| !args.grid);
    // The pools of one instance type, for a service's replay (which reads
    // its own policies) or one start's timeline.
    let set = if args.serve || timeline.is_some() {
        let (set, note) = traces.choose(&args.instance_type, args.zone.as_deref())?;
        say(&note.into_iter().collect::<Vec<_>>());
        if args.serve {
            return serve::run(&args, &set, format);
        }
        Some(set)
    } else {
        None
    };
    let policies = args
        .policies
        .iter()
        .map(|p| PolicyKind::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    let scenario = Scenario {
        job_hours: args.job_hours,
        deadline_hours: args.deadline_hours,
        changeover_hours: args.changeover_hours,
        starts: args.starts,
    };
    if let (Some(start), Some(set)) = (timeline, &set) {
        let policies = if policies.is_empty() {
            PolicyKind::STANDARD.to_vec()
        } else {
            policies
        };
        return timeline::run(&args, set, &scenario, &policies, start, format);
    }
    let what = if args.grid {
        Replay::Grid {
            starts: args.starts,
        }
    } else {
        Replay::One {
            instance_types: args.instance_type.clone(),
            zone: args.zone.clone(),
            scenario,
        }
    };
    // A progress bar on a terminal, a line per finished scenario otherwise
    // (stderr: stdout stays the result).
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let bar = if args.grid && tty {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "simulate {bar:30} {pos}/{len} scenarios, {elapsed} so far, about {eta} left",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let progress = |p: &Progress| {
        bar.set_length(p.total as u64);
        bar.inc(1);
        if args.grid && !tty {
            let s = p.scenario;
            eprintln!(
                "simulate: {}/{} done ({} pools, job {} h, deadline {} h, changeover {:.2} h), {:.0} s so far",
                p.done,
                p.total,
                p.pools,
                s.job_hours,
                s.deadline_hours,
                s.changeover_hours,
                p.elapsed.as_secs_f64()
            );
        }
    };
    let done = simulate(&traces, &what, &policies, &progress)?;
    bar.finish_and_clear();
    say(&done.notes);
    let out_rows = done.rows;
    if let Some(path) = &args.plot {
        gpufleet::runtime::plot::simulate_svg(path, &out_rows)?;
        eprintln!("simulate: drew {}", path.display());
    }
    if args.grid {
        eprintln!(
            "simulate: {} scenarios in {:.0} s on {} threads",
            out_rows.len(),
            done.took.as_secs_f64(),
            done.threads
        );
    }
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json | OutputFormat::Csv => {
            json(&mut out, &out_rows)?;
        }
        OutputFormat::Table if args.grid => {
            writeln!(out, "{}", grid::summary(&out_rows)).map_err(io)?;
        }
        OutputFormat::Table => {
            for row in &out_rows {
                writeln!(
                    out,
                    "{} in {} | job {} h, deadline {} h, changeover {:.2} h, {} starts",
                    row.instance_type,
                    grid::zones_label(&row.pools),
                    row.job_hours,
                    row.deadline_hours,
                    row.changeover_hours,
                    row.starts
                )
                .map_err(io)?;
                table(
                    &mut out,
                    &[
                        "POLICY",
                        ">MEAN $",
                        ">P90 $",
                        ">VS OPTIMUM",
                        ">MISSES",
                        ">PREEMPTIONS",
                        ">MOVES",
                    ],
                    &row.results,
                    |r| {
                        vec![
                            r.policy.clone(),
                            format!("{:.2}", r.mean_cost_usd),
                            format!("{:.2}", r.p90_cost_usd),
                            format!("{:.3}", r.cost_vs_optimum),
                            r.deadline_misses.to_string(),
                            format!("{:.1}", r.mean_preemptions),
                            format!("{:.1}", r.mean_moves),
                        ]
                    },
                )
                .map_err(io)?;
                writeln!(out).map_err(io)?;
            }
        }
    }
    Ok(())
}
