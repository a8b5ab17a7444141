//! `cargo xtask synth`: a directory of generated availability traces and their
//! pools manifest ([`gpufleet_core::sim::generate`]), which `gpufleet
//! simulate --traces DIR` reads like the measured ones.

use std::fs;
use std::path::Path;

use gpufleet_core::sim::{generate, GenerateSpec, Regime};

/// The usage line.
pub const USAGE: &str = "usage: cargo xtask synth --regime (stable|flaky|diurnal|storms|scarce|mixed) --out DIR [--pools N (1-1000, default 6)] [--types N (1-4, default 3)] [--days D (default 21)] [--tick-seconds S (default 600)] [--seed N (default 1)]";

/// Reads the flags after `synth`: the spec and the directory, or what is wrong
/// with them.
pub fn parse(args: &[String]) -> Result<(GenerateSpec, String), String> {
    let mut spec = GenerateSpec::default();
    let (mut regime, mut out) = (None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            return Err(format!("{flag} needs a value; {USAGE}"));
        };
        let number = |what: &str| format!("invalid {what} '{value}'; {USAGE}");
        match flag.as_str() {
            "--regime" => regime = Some(Regime::parse(value).map_err(|e| e.to_string())?),
            "--out" => out = Some(value.clone()),
            "--pools" => spec.pools = value.parse().map_err(|_| number("--pools"))?,
            "--types" => spec.types = value.parse().map_err(|_| number("--types"))?,
            "--days" => spec.days = value.parse().map_err(|_| number("--days"))?,
            "--tick-seconds" => {
                spec.tick_seconds = value.parse().map_err(|_| number("--tick-seconds"))?
            }
            "--seed" => spec.seed = value.parse().map_err(|_| number("--seed"))?,
            other => return Err(format!("unknown flag {other}; {USAGE}")),
        }
    }
    let (Some(regime), Some(out)) = (regime, out) else {
        return Err(USAGE.to_string());
    };
    spec.regime = regime;
    Ok((spec, out))
}

/// Writes the directory; the report names what was written.
pub fn run(spec: &GenerateSpec, out: &str) -> Result<String, String> {
    let generated = generate(spec).map_err(|e| e.to_string())?;
    write(Path::new(out), &generated.manifest, &generated.traces)?;
    Ok(format!(
        "{}: {} {} pools of {} types, {} days of {}-second ticks, seed {}\n",
        out,
        spec.regime.name(),
        spec.pools,
        spec.types,
        spec.days,
        spec.tick_seconds,
        spec.seed
    ))
}

fn write(out: &Path, manifest: &str, traces: &[(String, String)]) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", out.display());
    fs::create_dir_all(out).map_err(err)?;
    for (name, text) in traces {
        fs::write(out.join(name), text).map_err(err)?;
    }
    fs::write(out.join("pools.csv"), manifest).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn writes_a_directory_simulate_reads() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("flaky");
        let (spec, to) = parse(&args(&format!(
            "--regime flaky --out {} --pools 4 --types 2 --days 2 --tick-seconds 195",
            out.display()
        )))
        .unwrap();
        let report = run(&spec, &to).unwrap();
        assert!(report.contains("flaky 4 pools of 2 types"), "{report}");
        let manifest = fs::read_to_string(out.join("pools.csv")).unwrap();
        let pools = gpufleet_core::sim::parse_manifest(&manifest, |f| {
            Ok(fs::read_to_string(out.join(f)).unwrap())
        })
        .unwrap();
        assert_eq!(pools.len(), 4);
        assert_eq!(pools[3].trace.tick_seconds, 195);
    }

    #[test]
    fn bad_flags_are_named() {
        let e = parse(&args("--regime calm --out x")).unwrap_err();
        assert!(e.contains("unknown regime 'calm'"), "{e}");
        let e = parse(&args("--regime flaky --out x --pools many")).unwrap_err();
        assert!(e.contains("invalid --pools 'many'"), "{e}");
        let (spec, out) = parse(&args("--regime flaky --out x --pools 0")).unwrap();
        let e = run(&spec, &out).unwrap_err();
        assert!(
            e.contains("invalid pool count 0: expected 1 to 1000"),
            "{e}"
        );
        let e = parse(&args("--regime flaky")).unwrap_err();
        assert!(e.starts_with("usage:"), "{e}");
    }
}
