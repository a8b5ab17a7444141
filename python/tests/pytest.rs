//! The Python package (this crate) built with maturin into a virtualenv in
//! `target/py-venv` (made here on a fresh machine, with maturin, pytest and
//! mypy from PyPI, pinned) and its pytest suite run against the `gpufleet`
//! binary of the same build (beside this test's own executable: `cargo
//! test --workspace` builds it first; its tests are skipped when it is not
//! there): the package's placer and catalog agree with the CLI's. Skipped
//! when there is no `python3`, unless `GPUFLEET_REQUIRE_PYTHON` is set (as
//! `.ci/run` sets it). A test binary of its own, so its build of the
//! extension never runs beside other tests: cargo runs test binaries one
//! after another.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const MATURIN: &str = "maturin==1.16.0";
const PYTEST: &str = "pytest==8.3.5";
const MYPY: &str = "mypy==1.13.0";

fn run(what: &str, c: &mut Command) -> String {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_python_package_passes_its_pytest_suite() {
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // target/debug/deps/pytest-… → target/debug/gpufleet
    let cli = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(|d| d.join("gpufleet")))
        .filter(|p| p.exists());
    assert!(
        cli.is_some() || std::env::var_os("GPUFLEET_REQUIRE_PYTHON").is_none(),
        "GPUFLEET_REQUIRE_PYTHON is set and no gpufleet binary is beside this test: run it with `cargo test --workspace`"
    );
    let has_python = Command::new("python3").arg("--version").output().is_ok();
    if !has_python {
        assert!(
            std::env::var_os("GPUFLEET_REQUIRE_PYTHON").is_none(),
            "GPUFLEET_REQUIRE_PYTHON is set and there is no python3"
        );
        eprintln!("no python3: the Python package's tests are skipped");
        return;
    }
    let target = root.join("target");
    let venv = target.join("py-venv");
    let bin = venv.join("bin");
    // Everything the build and pip write outside target/ goes to a
    // directory of its own there, not the tests' temporary directory.
    let tmp = target.join("py-build").join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    if ["pytest", "maturin", "mypy"]
        .iter()
        .any(|tool| !bin.join(tool).exists())
    {
        run(
            "python3 -m venv",
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
        );
        run(
            "pip install maturin pytest mypy",
            Command::new(bin.join("pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    MATURIN,
                    PYTEST,
                    MYPY,
                ])
                .env("TMPDIR", &tmp),
        );
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // A target directory of its own: this test runs while cargo holds the
    // workspace's, and the extension is built with its own features.
    run(
        "maturin develop",
        Command::new(bin.join("maturin"))
            .arg("develop")
            .arg("--manifest-path")
            .arg(root.join("python").join("Cargo.toml"))
            // The fake cloud and the SQLite ledger, not the live clouds'
            // SDKs: what the tests drive, at a fraction of the build.
            .args(["--no-default-features", "--features", "runtime"])
            .env("VIRTUAL_ENV", &venv)
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", target.join("py-build"))
            .env("TMPDIR", &tmp),
    );
    let said = run(
        "pytest python/tests",
        Command::new(bin.join("pytest"))
            .args(["-q", "-p", "no:cacheprovider"])
            .arg(root.join("python").join("tests"))
            .current_dir(&root)
            .env("PATH", &path)
            .env("GPUFLEET_BIN", cli.as_deref().unwrap_or(Path::new("")))
            .env("TMPDIR", &tmp)
            .env_remove("GPUFLEET_CONFIG")
            .env_remove("GPUFLEET_LEDGER"),
    );
    // Where the suite must run whole, none of it is skipped (the CLI
    // comparisons skip without a CLI binary).
    assert!(
        std::env::var_os("GPUFLEET_REQUIRE_PYTHON").is_none() || !said.contains("skipped"),
        "pytest skipped tests:\n{said}"
    );
    eprintln!("{said}");
    // The package's types (its stubs and annotations) hold under mypy
    // --strict.
    run(
        "mypy --strict",
        Command::new(bin.join("mypy"))
            .args(["--strict", "--cache-dir"])
            .arg(target.join("py-build").join("mypy-cache"))
            .arg(root.join("python").join("pysrc").join("gpufleet"))
            .current_dir(&root)
            .env("TMPDIR", &tmp),
    );
}
