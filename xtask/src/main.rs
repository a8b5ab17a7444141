//! Project tasks.
//!
//! `cargo xtask catalog [--data DIR] [--out FILE]` rebuilds the embedded catalog
//! snapshot (`model/data/catalog.txt`) from the public data in `../shared/data`
//! and writes what it dropped or corrected to `model/data/catalog-report.txt`
//! (beside the snapshot) and GCP's committed-use prices to
//! `core/data/commitments.csv` (the advisor's).
//!
//! `cargo xtask audit [--db DIR]` checks `Cargo.lock` against a local RustSec
//! advisory database (default `../shared/advisory-db`), offline.
//!
//! `cargo xtask resample (--coarser N | --finer N) --out DIR [--traces DIR]`
//! writes the availability traces (default `data/traces`) at another tick
//! length, for measuring the placer on ticks it was not built on.
//!
//! `cargo xtask synth --regime R --out DIR [--pools N] [--types N] [--days D]
//! [--tick-seconds S] [--seed N]` writes generated availability traces (a
//! regime: stable, flaky, diurnal, storms, scarce or mixed) and their pools
//! manifest, for measuring the placer on regimes the 2022 traces do not have.

mod audit;
mod catalog;
mod docs;
#[cfg(test)]
mod layers;
mod msrv;
mod resample;
mod synth;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    match args.first().map(String::as_str) {
        Some("catalog") => {
            let mut data = root.join("../shared/data");
            let mut out = root.join("model/data/catalog.txt");
            // The commitments go to the advisor's data, or beside `--out`.
            let mut commitments = root.join("core/data/commitments.csv");
            let mut it = args[1..].iter();
            while let Some(flag) = it.next() {
                match (flag.as_str(), it.next()) {
                    ("--data", Some(v)) => data = PathBuf::from(v),
                    ("--out", Some(v)) => {
                        out = PathBuf::from(v);
                        commitments = out.with_file_name("commitments.csv");
                    }
                    _ => {
                        eprintln!("usage: cargo xtask catalog [--data DIR] [--out FILE]");
                        return ExitCode::from(2);
                    }
                }
            }
            finish(
                catalog::build(&data, &out, &commitments)
                    .map(|summary| format!("{summary}\n"))
                    .map_err(|e| format!("error: {e}\n")),
            )
        }
        Some("audit") => {
            let db = match (args.get(1).map(String::as_str), args.get(2)) {
                (Some("--db"), Some(d)) => PathBuf::from(d),
                (None, _) => root.join("../shared/advisory-db"),
                _ => {
                    eprintln!("usage: cargo xtask audit [--db DIR]");
                    return ExitCode::from(2);
                }
            };
            finish(audit::run(&root, &db))
        }
        Some("docs") => {
            let bad = docs::broken(&root);
            finish(if bad.is_empty() {
                Ok("every documentation link resolves\n".to_string())
            } else {
                Err(format!("broken links:\n{}\n", bad.join("\n")))
            })
        }
        Some("msrv") => finish(msrv::run(&root)),
        Some("resample") => {
            let usage = "usage: cargo xtask resample (--coarser N | --finer N) --out DIR [--traces DIR] (N from 2 to 100)";
            let (mut traces, mut out, mut change) = (root.join("data/traces"), None, None);
            let mut it = args[1..].iter();
            while let Some(flag) = it.next() {
                let value = it.next();
                let n = value
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|n| (2..=100).contains(n));
                match (flag.as_str(), value, n) {
                    ("--coarser", _, Some(n)) => change = Some(resample::Change::Coarser(n)),
                    ("--finer", _, Some(n)) => change = Some(resample::Change::Finer(n)),
                    ("--out", Some(v), _) => out = Some(PathBuf::from(v)),
                    ("--traces", Some(v), _) => traces = PathBuf::from(v),
                    _ => {
                        eprintln!(
                            "bad argument {flag} {}; {usage}",
                            value.map_or("", |v| v.as_str())
                        );
                        return ExitCode::from(2);
                    }
                }
            }
            let (Some(out), Some(change)) = (out, change) else {
                eprintln!("{usage}");
                return ExitCode::from(2);
            };
            finish(resample::run(&traces, &out, change).map_err(|e| format!("error: {e}\n")))
        }
        Some("synth") => match synth::parse(&args[1..]) {
            Ok((spec, out)) => finish(synth::run(&spec, &out).map_err(|e| format!("error: {e}\n"))),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("usage: cargo xtask catalog [--data DIR] [--out FILE] | cargo xtask audit [--db DIR] | cargo xtask msrv | cargo xtask docs | cargo xtask resample (--coarser N | --finer N) --out DIR | cargo xtask synth --regime R --out DIR");
            ExitCode::from(2)
        }
    }
}

/// Prints a task's report (to stdout when it passed, stderr when it did not)
/// and turns it into the exit code.
fn finish(report: Result<String, String>) -> ExitCode {
    match report {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(report) => {
            eprint!("{report}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// The committed snapshot is exactly what the generator makes from the
    /// shared data, so it can be rebuilt and reviewed.
    #[test]
    fn committed_snapshot_is_reproducible() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let data = root.join("../shared/data");
        if !data.join("skypilot_catalog").is_dir() {
            eprintln!(
                "SKIPPED: {} not found; cannot rebuild the catalog snapshot",
                data.display()
            );
            return;
        }
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let out = dir.join("catalog.txt");
        super::catalog::build(&data, &out, &dir.join("commitments.csv")).unwrap();
        for (name, committed) in [
            ("catalog.txt", "model/data/catalog.txt"),
            ("commitments.csv", "core/data/commitments.csv"),
        ] {
            let rebuilt = std::fs::read_to_string(dir.join(name)).unwrap();
            let committed_text = std::fs::read_to_string(root.join(committed)).unwrap();
            assert!(
                rebuilt == committed_text,
                "{committed} is stale: run `cargo xtask catalog`"
            );
        }
    }
}
