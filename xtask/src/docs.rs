//! The documentation's links resolve: every relative link in `README.md`,
//! `ARCHITECTURE.md` and `docs/*.md` names a file in the repository, and
//! every `#anchor` a heading in it (GitHub's anchor rules).

use std::path::{Path, PathBuf};

fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let t = l.trim_start_matches('#');
            (l.starts_with('#') && t.starts_with(' ')).then(|| anchor(t))
        })
        .collect()
}

/// Links `[text](target)` in markdown, skipping code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(j) = after.find(')') else { break };
            out.push(after[..j].to_string());
            rest = &after[j..];
        }
    }
    out
}

/// Every broken link, as `file: target`.
pub fn broken(root: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    if let Ok(rd) = std::fs::read_dir(root.join("docs")) {
        for e in rd.flatten() {
            if e.path().extension().and_then(|x| x.to_str()) == Some("md") {
                files.push(e.path());
            }
        }
    }
    let mut bad = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            bad.push(format!("{}: unreadable", f.display()));
            continue;
        };
        for t in links(&text) {
            if t.contains("://") || t.starts_with("mailto:") {
                continue;
            }
            let (path, frag) = t.split_once('#').unwrap_or((t.as_str(), ""));
            let target = if path.is_empty() {
                f.clone()
            } else {
                f.parent().unwrap_or(root).join(path)
            };
            if !target.exists() {
                bad.push(format!("{}: {t} (no such file)", f.display()));
                continue;
            }
            if !frag.is_empty() && target.extension().and_then(|x| x.to_str()) == Some("md") {
                let body = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&body).iter().any(|a| a == frag) {
                    bad.push(format!("{}: {t} (no such heading)", f.display()));
                }
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documentation_link_resolves() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let bad = broken(&root);
        assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    }

    #[test]
    fn anchors_follow_githubs_rules() {
        assert_eq!(
            anchor(" Measured GPU use: the node agent, `reap --below`, `fit --from-job`"),
            "measured-gpu-use-the-node-agent-reap---below-fit---from-job"
        );
        assert_eq!(links("see [a](b.md#c) and ```x```"), vec!["b.md#c"]);
    }
}
