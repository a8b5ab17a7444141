//! SVG charts for `simulate --plot` and `mix --plot`, drawn with `plotters`
//! (its SVG backend: text is SVG `<text>`, so no font files are needed).

use std::path::Path;

use gpufleet_core::advisor::mix::{DemandProfile, MixReport};
use gpufleet_core::{Error, ErrorKind};
use plotters::prelude::*;

use gpufleet_core::sim::{ScenarioResult, ServeReport};

/// Series colours, colour-blind safe (Okabe-Ito).
const COLOURS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(0, 0, 0),
];

fn failed(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("cannot draw {}: {e}", path.display()),
    )
}

/// The charts' coordinate system: f64 on both axes.
type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A chart on `root` with the house layout (caption, margins, label areas).
fn chart<'a, 'b>(
    path: &Path,
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: String,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<Chart<'a, 'b>, Error> {
    ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(x, y)
        .map_err(|e| failed(path, e))
}

/// Draws the legend (upper right) and writes the file.
fn finish<'a, 'b: 'a>(
    path: &Path,
    root: &DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    chart: &mut Chart<'a, 'b>,
) -> Result<(), Error> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(path, e))?;
    root.present().map_err(|e| failed(path, e))
}

/// Checks the plot's path before any work: an `.svg` file in a directory
/// that exists.
pub fn check_path(path: &Path) -> Result<(), Error> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(Error::invalid_input(format!(
            "invalid --plot {}: expected a file name ending in .svg",
            path.display()
        )));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = dir {
        if !d.is_dir() {
            return Err(Error::invalid_input(format!(
                "invalid --plot {}: the directory {} does not exist",
                path.display(),
                d.display()
            )));
        }
    }
    Ok(())
}

/// Cost relative to the optimum per policy (one series each) across the
/// scenarios, in the order they ran; the optimum is the line at 1.
pub fn simulate_svg(path: &Path, rows: &[ScenarioResult]) -> Result<(), Error> {
    let mut policies: Vec<String> = Vec::new();
    for r in rows {
        for p in &r.results {
            if p.policy != "optimal" && !policies.contains(&p.policy) {
                policies.push(p.policy.clone());
            }
        }
    }
    let finite = |v: f64| v.is_finite().then_some(v);
    let top = rows
        .iter()
        .flat_map(|r| r.results.iter().filter_map(|p| finite(p.cost_vs_optimum)))
        .fold(1.0f64, f64::max);
    // Head room for the legend.
    let y_max = (1.0 + (top - 1.0) * 1.3).max(1.1);
    let n = rows.len().max(1);
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(path, e))?;
    let caption = if rows.len() == 1 {
        format!(
            "cost / optimum: {} h job, {} h deadline, {} pool(s)",
            rows[0].job_hours,
            rows[0].deadline_hours,
            rows[0].pools.len()
        )
    } else {
        format!("cost / optimum per policy over {} scenarios", rows.len())
    };
    let mut chart = chart(path, &root, caption, 0.5..(n as f64 + 0.5), 0.95..y_max)?;
    chart
        .configure_mesh()
        .x_desc("scenario (in the order run)")
        .y_desc("mean cost / optimum")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()
        .map_err(|e| failed(path, e))?;
    chart
        .draw_series(LineSeries::new(
            [(0.5, 1.0), (n as f64 + 0.5, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| failed(path, e))?
        .label("optimal (clairvoyant)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (i, policy) in policies.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<(f64, f64)> = rows
            .iter()
            .enumerate()
            .filter_map(|(k, r)| {
                r.results
                    .iter()
                    .find(|p| &p.policy == policy)
                    .and_then(|p| finite(p.cost_vs_optimum))
                    .map(|v| ((k + 1) as f64, v))
            })
            .collect();
        if rows.len() > 1 {
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(1)))
                .map_err(|e| failed(path, e))?;
        }
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 3, colour.filled())))
            .map_err(|e| failed(path, e))?
            .label(policy.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled()));
    }
    finish(path, &root, &mut chart)
}

/// Demand over time against the recommended commitment: the profile as a
/// step line, the committed instances as a horizontal line (what runs under
/// it is committed, above it on-demand or spot).
pub fn mix_svg(path: &Path, profile: &DemandProfile, report: &MixReport) -> Result<(), Error> {
    let mut t = 0.0f64;
    let mut steps: Vec<(f64, f64)> = Vec::with_capacity(profile.samples.len() * 2);
    for (hours, n) in &profile.samples {
        steps.push((t, *n));
        t += hours;
        steps.push((t, *n));
    }
    let end = t.max(1.0);
    let committed = f64::from(report.recommended.committed);
    let y_max = (report.peak.max(committed) * 1.3).max(1.0);
    let root = SVGBackend::new(path, (1000, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(path, e))?;
    let caption = format!(
        "demand vs. commitment: {} ({:.0}% saving, ${:.0} a month)",
        report.recommended.name,
        report.recommended.saving_share * 100.0,
        report.recommended.monthly_saving.as_usd_f64()
    );
    let mut chart = chart(path, &root, caption, 0.0..end, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("hours from the profile's start")
        .y_desc("instances")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| failed(path, e))?;
    chart
        .draw_series(AreaSeries::new(steps.clone(), 0.0, COLOURS[0].mix(0.25)))
        .map_err(|e| failed(path, e))?;
    chart
        .draw_series(LineSeries::new(steps, COLOURS[0].stroke_width(2)))
        .map_err(|e| failed(path, e))?
        .label("demand")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], COLOURS[0]));
    chart
        .draw_series(LineSeries::new(
            [(0.0, committed), (end, committed)],
            COLOURS[5].stroke_width(2),
        ))
        .map_err(|e| failed(path, e))?
        .label(format!(
            "committed: {} instance(s){}",
            report.recommended.committed,
            report
                .recommended
                .term
                .as_ref()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default()
        ))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], COLOURS[5]));
    chart
        .draw_series(LineSeries::new(
            [(0.0, report.mean), (end, report.mean)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| failed(path, e))?
        .label(format!("mean demand: {:.1}", report.mean))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    finish(path, &root, &mut chart)
}

/// A service replayed by `simulate --serve`: the replicas the load needed
/// per hour (an area) and each policy's ready capacity (a line each), the
/// legend with each policy's cost and share of minutes served.
pub fn serve_svg(path: &Path, report: &ServeReport) -> Result<(), Error> {
    let hours = report.hourly_needed.len().max(1) as f64;
    let top = report
        .results
        .iter()
        .flat_map(|r| r.hourly_ready.iter())
        .chain(report.hourly_needed.iter())
        .copied()
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(path, e))?;
    let caption = format!(
        "ready replicas vs. need per hour over {:.1} days ({} spot pools)",
        report.minutes as f64 / 1440.0,
        report.pools.len()
    );
    let mut chart = chart(path, &root, caption, 0.0..hours, 0.0..top * 1.45)?;
    chart
        .configure_mesh()
        .x_desc("hours from the traces' start")
        .y_desc("replicas (mean over the hour)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| failed(path, e))?;
    let need: Vec<(f64, f64)> = report
        .hourly_needed
        .iter()
        .enumerate()
        .map(|(h, v)| (h as f64, *v))
        .collect();
    chart
        .draw_series(AreaSeries::new(need, 0.0, BLACK.mix(0.12)))
        .map_err(|e| failed(path, e))?
        .label("needed by the load")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], BLACK.mix(0.12).filled()));
    for (i, r) in report.results.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<(f64, f64)> = r
            .hourly_ready
            .iter()
            .enumerate()
            .map(|(h, v)| (h as f64, *v))
            .collect();
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(1)))
            .map_err(|e| failed(path, e))?
            .label(format!(
                "{}: ${}, {:.2}% of minutes served",
                r.policy.as_str(),
                r.cost_usd.display(0),
                r.served_share * 100.0
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    finish(path, &root, &mut chart)
}
