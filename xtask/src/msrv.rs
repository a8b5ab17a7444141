//! `cargo xtask msrv`: the workspace's `rust-version` is exactly the
//! highest `rust-version` a locked dependency declares (from `cargo
//! metadata`), so it neither promises a toolchain the lock cannot
//! build with nor asks for more than it needs.

use std::path::Path;
use std::process::Command;

use semver::Version;

fn parse(v: &str) -> Option<Version> {
    let parts = v.split('.').count();
    let full = match parts {
        1 => format!("{v}.0.0"),
        2 => format!("{v}.0"),
        _ => v.to_string(),
    };
    Version::parse(&full).ok()
}

/// Checks; the report, or what is wrong.
pub fn run(root: &Path) -> Result<String, String> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata output: {e}"))?;
    let members: Vec<&str> = doc["workspace_members"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m.as_str()).collect())
        .unwrap_or_default();
    let mut ours: Option<Version> = None;
    let mut highest: Option<(Version, String)> = None;
    for p in doc["packages"].as_array().into_iter().flatten() {
        let Some(rv) = p["rust_version"].as_str().and_then(parse) else {
            continue;
        };
        let id = p["id"].as_str().unwrap_or("");
        if members.contains(&id) {
            ours = Some(ours.map_or(rv.clone(), |o: Version| o.max(rv)));
        } else if highest.as_ref().is_none_or(|(h, _)| rv > *h) {
            let name = format!(
                "{} {}",
                p["name"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?")
            );
            highest = Some((rv, name));
        }
    }
    let ours = ours.ok_or("the workspace declares no rust-version")?;
    let Some((need, who)) = highest else {
        return Ok(format!("rust-version {ours}; no dependency declares one\n"));
    };
    if ours == need {
        Ok(format!(
            "rust-version {ours} = the highest a locked dependency needs ({who})\n"
        ))
    } else if ours < need {
        Err(format!(
            "rust-version {ours} is below what {who} needs ({need}): raise it in Cargo.toml\n"
        ))
    } else {
        Err(format!(
            "rust-version {ours} is above what the lock needs ({need}, {who}): lower it, or say why in Cargo.toml\n"
        ))
    }
}
