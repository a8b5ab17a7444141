//! A `moto_server` per test on 127.0.0.1 ([`Moto`]), and where the binary
//! is, making it when it is nowhere: `MOTO_SERVER`, the
//! venv under `target/moto-venv` (made here on first use with `python3 -m
//! venv` and pip, once per checkout, under a lock so parallel test binaries
//! wait for one install), or `PATH`. Shared by every test that runs moto
//! (in gpufleet-testkit), so `cargo test` on a fresh machine runs the
//! emulator tests too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on at the moment, on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A running `moto_server` on 127.0.0.1, killed on drop.
pub struct Moto {
    child: Child,
    /// Its endpoint, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Starts a fresh moto, or `None` (with a loud message) when it is not
    /// installed and `GPUFLEET_REQUIRE_MOTO` is unset. CI sets it: there a
    /// missing moto fails the run.
    pub fn start() -> Option<Moto> {
        Moto::start_with(&[])
    }

    /// [`start`](Moto::start) with these environment variables set for the
    /// server (`INITIAL_NO_AUTH_ACTION_COUNT` turns on its IAM
    /// authentication, which checks every request's SigV4 signature, after
    /// that many requests).
    pub fn start_with(env: &[(&str, &str)]) -> Option<Moto> {
        let bin = match moto_binary() {
            Ok(b) => b,
            Err(why) => {
                assert!(
                    std::env::var_os("GPUFLEET_REQUIRE_MOTO").is_none(),
                    "GPUFLEET_REQUIRE_MOTO is set but moto_server is not available: {why}"
                );
                eprintln!("\n*** SKIPPED: {why} ***\n");
                return None;
            }
        };
        let port = free_port();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not start in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    }
}

/// The moto release the tests are written against.
pub const MOTO_REQUIREMENT: &str = "moto[server]==5.2.5";

fn workspace_target() -> PathBuf {
    // CARGO_TARGET_DIR when set, else <workspace>/target (tests run with the
    // crate's directory as their working directory; walk up to the lock).
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    let mut dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    loop {
        if dir.join("Cargo.lock").exists() {
            return dir.join("target");
        }
        if !dir.pop() {
            return PathBuf::from("target");
        }
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.exists())
    })
}

/// Makes the venv under `lock` (a directory only one process can create).
fn provision(venv: &Path) -> Result<(), String> {
    let python = on_path("python3").ok_or("python3 is not on PATH")?;
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let out = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    eprintln!(
        "moto_server not found: installing {MOTO_REQUIREMENT} into {} (once)",
        venv.display()
    );
    run(
        Command::new(python).args(["-m", "venv"]).arg(venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            MOTO_REQUIREMENT,
        ]),
        "pip install moto",
    )
}

/// `MOTO_SERVER`, the checkout's venv (made if missing), or `PATH`; why
/// not, when none.
pub fn moto_binary() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("MOTO_SERVER") {
        return Ok(PathBuf::from(p));
    }
    let target = workspace_target();
    let venv = target.join("moto-venv");
    let bin = venv.join("bin/moto_server");
    if bin.exists() {
        return Ok(bin);
    }
    if let Some(p) = on_path("moto_server") {
        return Ok(p);
    }
    if std::env::var_os("GPUFLEET_NO_MOTO_INSTALL").is_some() {
        return Err("moto_server not found and GPUFLEET_NO_MOTO_INSTALL is set".into());
    }
    let _ = std::fs::create_dir_all(&target);
    let lock = target.join("moto-venv.lock");
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        match std::fs::create_dir(&lock) {
            Ok(()) => {
                let result = if bin.exists() {
                    Ok(())
                } else {
                    let _ = std::fs::remove_dir_all(&venv);
                    provision(&venv)
                };
                if result.is_err() {
                    let _ = std::fs::remove_dir_all(&venv);
                }
                let _ = std::fs::remove_dir(&lock);
                return result.map(|()| bin);
            }
            Err(_) if bin.exists() => return Ok(bin),
            Err(_) => {
                // Another test binary is installing; a lock older than the
                // longest install is left over from a killed run.
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(900));
                if stale {
                    let _ = std::fs::remove_dir(&lock);
                    continue;
                }
                if Instant::now() >= deadline {
                    return Err("waited 15 minutes for another moto install".into());
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}
