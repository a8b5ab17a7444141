//! The rules ARCHITECTURE.md states that a program can check: what the CLI
//! and the Python bindings may call (the runtime's verbs, not the fleet,
//! controllers or executor they orchestrate), what the provider crates
//! depend on (the model, not core), and how the runtime's modules import
//! each other (the verbs on top, and no import circle larger than the one
//! measured when the rule was written).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The names the front ends may not use: orchestration lives in
/// `runtime::verbs`.
pub const FRONT_END_FORBIDDEN: [&str; 5] = [
    "Fleet::open",
    "Controller::",
    "jobs::submit",
    "Executor",
    "ServiceController",
];

/// Every `.rs` file under `dir`, with its text.
pub fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                if let Ok(text) = std::fs::read_to_string(&p) {
                    out.push((p.display().to_string(), text));
                }
            }
        }
    }
    out.sort();
    out
}

/// The runtime's top-level modules and which others each names
/// (`crate::NAME`), tests included.
pub fn runtime_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = sources(src);
    let module_of = |path: &str| -> Option<String> {
        let rel = Path::new(path).strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?.to_string();
        Some(first.trim_end_matches(".rs").to_string())
    };
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| module_of(p))
        .filter(|m| m != "lib")
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in &files {
        let Some(m) = module_of(path).filter(|m| m != "lib") else {
            continue;
        };
        let entry = graph.entry(m.clone()).or_default();
        for other in &modules {
            if other != &m && text.contains(&format!("crate::{other}")) {
                entry.insert(other.clone());
            }
        }
    }
    graph
}

/// The modules directly under `src/path` (a `serve/` of the runtime) and
/// which of their siblings each names: `crate::PATH::NAME`, or `super::NAME`
/// from the module's own file (`super::super::NAME` one level further
/// down).
pub fn submodule_imports(src: &Path, path: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = src.join(path);
    let files = sources(&dir);
    let place = |p: &str| -> Option<(String, usize)> {
        let rel = Path::new(p).strip_prefix(&dir).ok()?;
        let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
        let first = parts.first()?.trim_end_matches(".rs").to_string();
        // `x.rs` and `x/mod.rs` see the siblings through `super::`; a file
        // inside `x/` through `super::super::`.
        let depth = if parts.len() == 1 || parts.last() == Some(&"mod.rs") {
            1
        } else {
            parts.len()
        };
        Some((first, depth))
    };
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| place(p).map(|(m, _)| m))
        .filter(|m| m != "mod")
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (p, text) in &files {
        let Some((m, depth)) = place(p).filter(|(m, _)| m != "mod") else {
            continue;
        };
        let up = "super::".repeat(depth);
        let entry = graph.entry(m.clone()).or_default();
        for other in modules.iter().filter(|o| **o != m) {
            let full = format!("crate::{}::{other}", path.replace('/', "::"));
            if text.contains(&full) || text.contains(&format!("{up}{other}")) {
                entry.insert(other.clone());
            }
        }
    }
    graph
}

/// The modules on an import circle with `m` (`m` itself included when it
/// is on one).
pub fn circle_of(graph: &BTreeMap<String, BTreeSet<String>>, m: &str) -> BTreeSet<String> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<String> = graph.get(from).into_iter().flatten().cloned().collect();
        while let Some(n) = stack.pop() {
            if seen.insert(n.clone()) {
                stack.extend(graph.get(&n).into_iter().flatten().cloned());
            }
        }
        seen
    };
    let down = reach(m);
    down.iter()
        .filter(|n| reach(n).contains(m))
        .cloned()
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn the_cli_and_python_only_convert() {
        for dir in ["cli/src", "python/src"] {
            for (path, text) in sources(&root().join(dir)) {
                for name in FRONT_END_FORBIDDEN {
                    assert!(
                        !text.contains(name),
                        "{path} uses {name}: a front end calls runtime::verbs, which orchestrates"
                    );
                }
            }
        }
    }

    #[test]
    fn the_providers_build_on_the_model_not_core() {
        for p in ["aws", "gcp", "azure", "metadata"] {
            let toml = std::fs::read_to_string(root().join("providers").join(p).join("Cargo.toml"))
                .unwrap();
            let deps = toml
                .split("[dependencies]")
                .nth(1)
                .map(|t| t.split("\n[").next().unwrap_or(t))
                .unwrap_or("");
            assert!(
                !deps.contains("gpufleet-core") && !deps.contains("gpufleet-runtime"),
                "providers/{p} depends on core or the runtime; it builds on gpufleet-model"
            );
        }
    }

    #[test]
    fn the_verbs_are_the_runtimes_top_and_no_module_imports_in_a_circle() {
        let graph = runtime_imports(&root().join("runtime/src"));
        assert!(graph.contains_key("verbs") && graph.contains_key("fleet"));
        for (m, uses) in &graph {
            assert!(
                m == "verbs" || !uses.contains("verbs"),
                "runtime/src/{m} imports the verbs: they are the top of the runtime"
            );
        }
        // The ledger's dispatcher and its two backends share the location
        // helpers (the default path, the URL mask): the one circle allowed.
        let ledgers: BTreeSet<String> = ["ledgers", "postgres", "sqlite"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for m in graph.keys() {
            let circle = circle_of(&graph, m);
            if ledgers.contains(m) {
                assert!(
                    circle.is_subset(&ledgers),
                    "{m} imports in a circle: {circle:?}"
                );
            } else {
                assert!(
                    circle.is_empty(),
                    "runtime/src/{m} is on an import circle with {circle:?}: each module \
                     imports only those below it (ARCHITECTURE.md, the runtime's layers)"
                );
            }
        }
    }

    #[test]
    fn the_service_modules_import_in_one_direction() {
        let graph = submodule_imports(&root().join("runtime/src"), "serve");
        // The edges are read (the controller keeps its book), and none
        // leads back.
        assert!(graph["controller"].contains("book") && graph["book"].contains("status"));
        for m in graph.keys() {
            let circle = circle_of(&graph, m);
            assert!(
                circle.is_empty(),
                "runtime/src/serve/{m} is on an import circle with {circle:?}"
            );
        }
    }

    #[test]
    fn a_circle_is_found() {
        let g: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec!["a"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(circle_of(&g, "a").len(), 3);
        assert!(circle_of(&g, "d").is_empty());
    }
}
