//! Instances as the operator commands show them: the table and JSON rows of `ls`, `launch`, `terminate` and `reap`, their costs, and the launch spinner.

use std::io::{IsTerminal, Write};

pub(crate) use gpufleet::runtime::report::InstanceRow;
use gpufleet::runtime::verbs::instances::Ended;
use gpufleet::{Error, ErrorKind};

use crate::output::{json, table, write_failed, OutputFormat};
use crate::shared::Failure;

/// Table cells of an instance row.
pub(crate) trait Cells {
    /// The cells, in [`HEADERS`]' order.
    fn cells(&self) -> Vec<String>;
}

impl Cells for InstanceRow {
    fn cells(&self) -> Vec<String> {
        let money = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
        vec![
            self.id.clone(),
            self.cloud.clone(),
            match &self.zone {
                Some(z) => format!("{}/{z}", self.region),
                None => self.region.clone(),
            },
            self.instance_type.clone(),
            self.capacity.to_string(),
            self.state.clone(),
            format!("{:.1}h", self.age_hours),
            self.price_per_hour_usd
                .map_or("-".into(), |x| format!("{x:.4}")),
            money(self.cost_so_far_usd),
            self.gpu_util_pct.map_or("-".into(), |u| format!("{u}%")),
            match (self.gpu_memory_peak_mib, self.gpu_memory_total_mib) {
                (Some(p), Some(t)) => {
                    format!("{:.1}/{:.0} GiB", p as f64 / 1024.0, t as f64 / 1024.0)
                }
                _ => "-".into(),
            },
            self.job.clone().unwrap_or_else(|| "-".into()),
            self.owner.clone().unwrap_or_else(|| "-".into()),
            self.team.clone().unwrap_or_else(|| "-".into()),
        ]
    }
}

pub(crate) const HEADERS: [&str; 14] = [
    "ID",
    "CLOUD",
    "LOCATION",
    "INSTANCE TYPE",
    "CAPACITY",
    "STATE",
    ">AGE",
    ">$/HOUR",
    ">COST SO FAR $",
    ">GPU%",
    ">GPU MEM PEAK",
    "JOB",
    "OWNER",
    "TEAM",
];

pub(crate) fn print_instances(
    rows: &[InstanceRow],
    format: OutputFormat,
    extra: Option<&str>,
) -> Result<(), Failure> {
    let io = write_failed;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => json(&mut out, &rows)?,
        OutputFormat::Csv => crate::output::csv_rows(&mut out, rows)?,
        OutputFormat::Table => {
            let mut headers: Vec<&str> = HEADERS.to_vec();
            if let Some(h) = extra {
                headers.push(h);
            }
            table(&mut out, &headers, rows, |r| {
                let mut c = r.cells();
                if extra.is_some() {
                    c.push(r.reason.clone().unwrap_or_default());
                }
                c
            })
            .map_err(io)?;
        }
    }
    Ok(())
}

/// An `indicatif` spinner on stderr when it is a terminal (hidden
/// otherwise), cleared when dropped.
pub(crate) struct Spinner(indicatif::ProgressBar);

impl Spinner {
    pub(crate) fn start(message: String) -> Spinner {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Spinner(indicatif::ProgressBar::hidden());
        }
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        b.set_message(message);
        b.enable_steady_tick(std::time::Duration::from_millis(120));
        Spinner(b)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A sum of USD amounts for display: starts at +0.0 (`Iterator::sum` of no
/// floats is -0.0, which prints as `$-0.00`).
pub(crate) fn usd_sum(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(0.0, |a, b| a + b)
}

/// Asks on the terminal whether to go ahead (refused where stdin is not
/// one: `--yes` says so instead).
pub fn confirm(what: &str) -> Result<bool, Error> {
    if !std::io::stdin().is_terminal() {
        return Err(Error::invalid_input(format!(
            "refusing to {what} without --yes: stdin is not a terminal to confirm on"
        )));
    }
    eprint!("{what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

/// Reports what a terminate or reap did, in the table or as JSON; an
/// instance not terminated makes the command fail.
pub fn finish_terminate(ended: Ended, format: OutputFormat) -> Result<(), Failure> {
    let doc = &ended.doc;
    if format == OutputFormat::Table {
        for id in &doc.terminated {
            println!("terminated {id}");
        }
        for id in &doc.groups_deleted {
            println!("deleted placement group {id}");
        }
        for (id, e) in &doc.failed {
            eprintln!("failed to terminate {id}: {e}");
        }
        for (id, e) in &doc.groups_left {
            eprintln!("placement group {id} left for a later `gpufleet reap --yes`: {e}");
        }
        for (cloud, e) in &doc.groups_unchecked {
            eprintln!(
                "warning: {cloud} placement groups were not listed, so none was deleted (a later `gpufleet reap --yes` deletes the empty ones): {e}"
            );
        }
    } else {
        json(&mut std::io::stdout().lock(), doc)?;
    }
    match ended.failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
