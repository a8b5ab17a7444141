//! `cargo xtask audit`: checks `Cargo.lock` against a local copy of the RustSec
//! advisory database (`../shared/advisory-db` by default), offline.
//!
//! An advisory applies to a locked crate when its version matches none of the
//! advisory's `patched` and `unaffected` requirements. Vulnerabilities and
//! `unsound` notices fail the audit; `unmaintained` and other informational
//! notices are reported as warnings. `xtask/audit-ignore.txt` lists advisory
//! ids accepted on purpose, each with its reason.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use semver::{Version, VersionReq};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Lock {
    #[serde(default)]
    package: Vec<LockedPackage>,
}

#[derive(Debug, Deserialize)]
struct LockedPackage {
    name: String,
    version: String,
    source: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AdvisoryFile {
    advisory: Advisory,
    #[serde(default)]
    versions: Versions,
}

#[derive(Debug, Deserialize)]
struct Advisory {
    id: String,
    package: String,
    #[serde(default)]
    informational: Option<String>,
    #[serde(default)]
    withdrawn: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Versions {
    #[serde(default)]
    patched: Vec<String>,
    #[serde(default)]
    unaffected: Vec<String>,
}

/// One advisory that applies to a locked crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// RUSTSEC id.
    pub id: String,
    /// Crate and version.
    pub package: String,
    /// Locked version.
    pub version: String,
    /// `vulnerability`, `unsound`, `unmaintained`, `notice`.
    pub kind: String,
    /// The advisory's title.
    pub title: String,
}

impl Finding {
    /// Whether it fails the audit.
    pub fn is_error(&self) -> bool {
        matches!(self.kind.as_str(), "vulnerability" | "unsound")
    }
}

fn front_matter(text: &str) -> Option<(&str, &str)> {
    let start = text.find("```toml")? + "```toml".len();
    let end = start + text[start..].find("```")?;
    let rest = &text[end + 3..];
    let title = rest
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or("");
    Some((&text[start..end], title))
}

/// Whether `version` matches a RustSec requirement list entry such as
/// `">= 0.22.4, < 0.23.0"` or `"^1.2"`.
fn matches(req: &str, version: &Version) -> bool {
    VersionReq::parse(req).is_ok_and(|r| r.matches(version))
}

/// The advisories in `db` that apply to the crates in `lock_text`.
pub fn audit(lock_text: &str, db: &Path) -> Result<Vec<Finding>, String> {
    let lock: Lock = toml::from_str(lock_text).map_err(|e| format!("Cargo.lock: {e}"))?;
    let mut findings = Vec::new();
    for p in lock.package.iter().filter(|p| {
        p.source
            .as_deref()
            .is_some_and(|s| s.starts_with("registry+"))
    }) {
        let dir = db.join("crates").join(&p.name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let Ok(version) = Version::parse(&p.version) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        files.sort();
        for f in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "md"))
        {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            let Some((toml_text, title)) = front_matter(&text) else {
                return Err(format!("{}: no ```toml front matter", f.display()));
            };
            let adv: AdvisoryFile =
                toml::from_str(toml_text).map_err(|e| format!("{}: {e}", f.display()))?;
            if adv.advisory.withdrawn.is_some() || adv.advisory.package != p.name {
                continue;
            }
            let safe = adv
                .versions
                .patched
                .iter()
                .chain(&adv.versions.unaffected)
                .any(|r| matches(r, &version));
            if safe {
                continue;
            }
            findings.push(Finding {
                id: adv.advisory.id.clone(),
                package: p.name.clone(),
                version: p.version.clone(),
                kind: adv
                    .advisory
                    .informational
                    .clone()
                    .unwrap_or_else(|| "vulnerability".into()),
                title: title.to_string(),
            });
        }
    }
    findings.sort_by(|a, b| a.id.cmp(&b.id));
    findings.dedup();
    Ok(findings)
}

/// Reads `audit-ignore.txt`: `RUSTSEC-YYYY-NNNN  reason` per line.
pub fn ignored(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (id, why) = l.split_once(char::is_whitespace)?;
            Some((id.to_string(), why.trim().to_string()))
        })
        .collect()
}

/// Runs the audit and renders the report; `Err` when it fails.
pub fn run(root: &Path, db: &Path) -> Result<String, String> {
    if !db.join("crates").is_dir() {
        return Err(format!("no advisory database at {}", db.display()));
    }
    let lock =
        std::fs::read_to_string(root.join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    let ignore =
        ignored(&std::fs::read_to_string(root.join("xtask/audit-ignore.txt")).unwrap_or_default());
    let findings = audit(&lock, db)?;
    let packages = lock.matches("[[package]]").count();
    let mut out = String::new();
    let mut errors = 0;
    for f in &findings {
        let status = match (ignore.get(&f.id), f.is_error()) {
            (Some(why), _) => format!("ignored ({why})"),
            (None, true) => {
                errors += 1;
                "ERROR".to_string()
            }
            (None, false) => "warning".to_string(),
        };
        let _ = writeln!(
            out,
            "{status}: {} {} {} ({}): {}",
            f.id, f.package, f.version, f.kind, f.title
        );
    }
    let _ = writeln!(
        out,
        "audited {packages} locked packages against {}: {} advisories apply, {errors} failing",
        db.display(),
        findings.len()
    );
    if errors > 0 {
        Err(out)
    } else {
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_affected_version_is_found_and_a_patched_one_is_not() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let crate_dir = dir.join("crates/leaky");
        std::fs::create_dir_all(&crate_dir).unwrap();
        std::fs::write(
            crate_dir.join("RUSTSEC-2099-0001.md"),
            "```toml\n[advisory]\nid = \"RUSTSEC-2099-0001\"\npackage = \"leaky\"\ndate = \"2099-01-01\"\n\n[versions]\npatched = [\">= 1.2.0\", \">= 1.1.5, < 1.2.0\"]\nunaffected = [\"< 1.0.0\"]\n```\n\n# Leaks memory\n",
        )
        .unwrap();
        let lock = |v: &str| {
            format!("version = 4\n\n[[package]]\nname = \"leaky\"\nversion = \"{v}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n")
        };
        let found = audit(&lock("1.1.4"), dir).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].title, "Leaks memory");
        assert!(found[0].is_error());
        assert!(audit(&lock("1.1.5"), dir).unwrap().is_empty());
        assert!(audit(&lock("1.3.0"), dir).unwrap().is_empty());
        assert!(audit(&lock("0.9.0"), dir).unwrap().is_empty());
    }

    /// Against the real database: a known-vulnerable rustls is caught, and the
    /// committed Cargo.lock passes.
    #[test]
    fn the_real_database_catches_a_known_advisory_and_passes_our_lock() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let db = root.join("../shared/advisory-db");
        if !db.join("crates").is_dir() {
            eprintln!("SKIPPED: no advisory database at {}", db.display());
            return;
        }
        let old = "version = 4\n\n[[package]]\nname = \"rustls\"\nversion = \"0.23.4\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n";
        let found = audit(old, &db).unwrap();
        assert!(
            found.iter().any(|f| f.id == "RUSTSEC-2024-0336"),
            "{found:?}"
        );
        let report = run(&root, &db);
        assert!(report.is_ok(), "{}", report.unwrap_err());
    }
}
