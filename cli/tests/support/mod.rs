//! What the CLI's end-to-end tests share: running the built `gpufleet`, its
//! output, and a scratch directory removed on drop.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

/// `gpufleet ARGS` on the embedded catalog, logs off.
pub fn gpufleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .env_remove("GPUFLEET_LOG")
        .output()
        .expect("run gpufleet")
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output as JSON, after checking the command succeeded.
pub fn json(o: &Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// A scratch directory with an empty `gpufleet.toml`, removed on drop.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new `$TMP/gpufleet-PREFIX-NAME-XXXXXX`.
    pub fn new(prefix: &str, name: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpufleet-{prefix}-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("gpufleet.toml"), "").unwrap();
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// The words of `line` (split at whitespace), for command lines written as
/// one string.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}
