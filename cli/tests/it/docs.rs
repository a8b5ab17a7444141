//! The docs' examples run (issue 79: they had drifted from the commands):
//! every `gpufleet` command of the README's and docs/' shell blocks that
//! needs nothing from outside runs as written, from the repository's root,
//! and succeeds: `place`, `fit`, `offers` and `simulate` on the embedded
//! catalog and the repository's traces, and every `--provider fake` command
//! in the order the docs give them, on a fresh fake cloud. (Each of the
//! others, which need a cloud, a file of the reader's or a running job, is
//! parsed by the CLI's own test, `every_doc_example_parses`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use support::FakeEnv;

use crate::support;

#[test]
fn the_docs_examples_that_need_nothing_outside_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let env = FakeEnv::new("docs", "examples");
    let mut ran = Vec::new();
    for (file, ex) in gpufleet_testkit::docs::examples(&root) {
        let args: Vec<&str> = ex.split_whitespace().skip(1).collect();
        let offline = matches!(
            args.first(),
            Some(&"place" | &"fit" | &"offers" | &"simulate")
        );
        let fake = args.starts_with(&["--provider", "fake"]);
        let outside = args.iter().any(|a| {
            *a == "ID"
                || a.contains('$')
                || a.contains("--live")
                || *a == "--grid"
                || *a == "--from-job"
                // A file of the reader's (job.toml, usage.csv) or one the
                // example writes (--plot): not run.
                || ((a.ends_with(".toml") || a.ends_with(".csv") || a.ends_with(".svg") || a.contains('/'))
                    && !root.join(a).exists())
        });
        if !(offline || fake) || outside {
            continue;
        }
        // One fake cloud for the doc's whole sequence, at a fixed time.
        let mut c = env.command("2026-01-09T18:00:00Z", &[]);
        let fake_args: Vec<&str> = if fake {
            args[2..].to_vec()
        } else {
            args.clone()
        };
        c.args(&fake_args)
            .current_dir(&root)
            .stdin(std::process::Stdio::null());
        let o = c.output().unwrap();
        assert!(
            matches!(o.status.code(), Some(0)),
            "{file}: `{ex}` exited {:?}: {}",
            o.status.code(),
            support::stderr(&o)
        );
        ran.push(ex);
    }
    assert!(ran.len() >= 12, "{ran:#?}");
}
