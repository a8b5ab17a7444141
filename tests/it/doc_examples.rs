//! The job files the documentation shows parse as job files: a reader who
//! copies one gets a job, not an error. The managed-jobs example once put
//! `run`, `setup`, `checkpoint` and `env` after `[[gpu]]`, where TOML makes
//! them fields of the GPU option, and `place --job` refused it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet::placer::JobFile;

/// Every fenced `toml` block of `text`, with the line it starts on.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match open.as_mut() {
            None if line.trim_start().starts_with("```toml") => open = Some((n + 1, String::new())),
            None => {}
            Some(_) if line.trim_start().starts_with("```") => out.extend(open.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

#[test]
fn the_job_files_in_the_docs_parse() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut pages: Vec<std::path::PathBuf> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.push(format!("{root}/README.md").into());
    let mut jobs = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, block) in toml_blocks(&text) {
            // A job file holds its work and its GPU options.
            if !(block.contains("\nhours =") && block.contains("[[gpu]]")) {
                continue;
            }
            let file = JobFile::from_toml(&block)
                .unwrap_or_else(|e| panic!("{}:{line}: {e}", page.display()));
            file.into_spec()
                .unwrap_or_else(|e| panic!("{}:{line}: {e}", page.display()));
            jobs += 1;
        }
    }
    assert!(jobs >= 2, "only {jobs} job files found in the docs");
}

#[test]
fn the_service_files_in_the_docs_and_examples_parse() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = 0;
    for entry in std::fs::read_dir(format!("{root}/examples/services")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            gpufleet::serve::ServiceSpec::from_toml(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            files += 1;
        }
    }
    let page = format!("{root}/docs/serving.md");
    let text = std::fs::read_to_string(&page).unwrap();
    for (line, block) in toml_blocks(&text) {
        // A whole service file names its server and how it is known ready.
        if !(block.contains("\nrun =") || block.starts_with("run ="))
            || !block.contains("readiness")
        {
            continue;
        }
        gpufleet::serve::ServiceSpec::from_toml(&block)
            .unwrap_or_else(|e| panic!("{page}:{line}: {e}"));
        files += 1;
    }
    assert!(files >= 2, "only {files} service files found");
}
