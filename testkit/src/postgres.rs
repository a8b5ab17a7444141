//! A throwaway PostgreSQL server for tests: `initdb` in a temporary
//! directory, started on 127.0.0.1 on a free port, removed afterwards.
//!
//! The binaries are Debian's (`/usr/lib/postgresql/15/bin`, else
//! `pg_config --bindir`, else `GPUFLEET_PG_BIN`). Without them the tests that
//! need a server are skipped with a message, unless
//! `GPUFLEET_REQUIRE_POSTGRES=1` (set by `.ci/run`), which makes them fail.
//! As root (CI's containers) the server runs as the `postgres` user, since
//! PostgreSQL refuses to run as root.
//!
//! [`shared`] is one server per test binary (each test takes its own
//! database); a watchdog stops it and removes its directory once the test
//! process is gone, however it ended. [`PgServer::start`] is a server of the
//! test's own (restart tests), stopped and removed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// A running throwaway server.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    owned: bool,
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPUFLEET_PG_BIN") {
        return Some(PathBuf::from(p));
    }
    let debian = PathBuf::from("/usr/lib/postgresql/15/bin");
    if debian.join("initdb").exists() {
        return Some(debian);
    }
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dir.join("initdb").exists().then_some(dir)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Whether tests must fail rather than skip without PostgreSQL.
fn required() -> bool {
    std::env::var("GPUFLEET_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
}

fn skip(why: &str) -> Option<PgServer> {
    if required() {
        panic!("GPUFLEET_REQUIRE_POSTGRES=1 but {why}");
    }
    eprintln!("skipped: {why} (install Debian's postgresql-15, or set GPUFLEET_PG_BIN)");
    None
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl PgServer {
    /// A server of the caller's own; `None` (skipped) without the binaries.
    pub fn start() -> Option<PgServer> {
        Self::boot(true)
    }

    fn boot(owned: bool) -> Option<PgServer> {
        let Some(bin) = bin_dir() else {
            return skip("no PostgreSQL binaries (initdb)");
        };
        let dir = std::env::temp_dir().join(format!(
            "gpufleet-pg-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            time::OffsetDateTime::now_utc().unix_timestamp_nanos() % 1_000_000_000
        ));
        std::fs::create_dir_all(dir.join("data")).unwrap_or_else(|e| panic!("{e}"));
        let as_postgres = is_root();
        let server = PgServer {
            dir,
            bin,
            port: free_port(),
            as_postgres,
            owned,
        };
        if as_postgres {
            server.must(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&server.dir),
            );
        }
        server.must(
            server
                .pg("initdb")
                .args([
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                    "-D",
                ])
                .arg(server.data()),
        );
        server.start_again();
        if !owned {
            server.watchdog();
        }
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command for the PostgreSQL binary `name`, as `postgres` when root.
    fn pg(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// A client program (`createdb`, `psql`) aimed at this server as the
    /// `postgres` user.
    fn client(&self, name: &str) -> Command {
        let mut c = self.pg(name);
        let port = self.port.to_string();
        c.args(["-h", "127.0.0.1", "-U", "postgres", "-p", &port]);
        c
    }

    fn must(&self, cmd: &mut Command) {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?}: {}\n{}\nlog: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300",
            self.port,
            self.dir.display()
        );
        self.must(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-o", &opts, "-l"])
                .arg(self.dir.join("log"))
                .args(["-w", "-t", "60", "start"])
                .stdout(Stdio::null()),
        );
    }

    /// Stops the server (fast: open connections are closed).
    pub fn stop(&self) {
        self.must(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "fast", "-w", "stop"])
                .stdout(Stdio::null()),
        );
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory (data and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for database `db` (no TLS: the throwaway server has none).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }

    /// Creates a new empty database and returns its URL.
    pub fn fresh_db(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        self.must(self.client("createdb").arg(&name).stdout(Stdio::null()));
        self.url(&name)
    }

    /// Runs SQL with psql against `db`.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        self.try_psql(db, sql)
            .unwrap_or_else(|e| panic!("psql {sql}: {e}"))
    }

    /// Runs SQL with psql against `db`: its output, or its error.
    pub fn try_psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = self
            .client("psql")
            .args(["-d", db, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("psql: {e}"));
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).to_string());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Stops the server and removes its directory once this process is gone.
    fn watchdog(&self) {
        let script = r#"
            owner="$1"; dir="$2"
            while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
            pid=$(head -1 "$dir/data/postmaster.pid" 2>/dev/null)
            [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null
            sleep 1
            rm -rf "$dir"
        "#;
        let spawned = Command::new("sh")
            .args(["-c", script, "watchdog"])
            .arg(std::process::id().to_string())
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            eprintln!("warning: no watchdog for the test server: {e}");
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.owned {
            let _ = self
                .pg("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The test binary's server, started on first use; `None` when skipped.
pub fn shared() -> Option<&'static PgServer> {
    static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
    SERVER.get_or_init(|| PgServer::boot(false)).as_ref()
}

/// A fresh database on the shared server, as a URL; `None` when skipped.
pub fn fresh_url() -> Option<String> {
    shared().map(PgServer::fresh_db)
}
