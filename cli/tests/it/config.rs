//! `gpufleet config show`: the configuration file, the environment and
//! the flags layered, each value with where it came from, secrets hidden
//! (also when the file does not parse).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use support::{stderr as err, FakeEnv};

use serde_json::Value;

use crate::support;

#[test]
fn config_show_layers_file_env_and_flags_and_hides_secrets() {
    let env = FakeEnv::new("op", "config");
    std::fs::write(
        env.dir.join("gpufleet.toml"),
        "owner = \"file-owner\"\nclouds = [\"aws\", \"gcp\"]\nttl = \"12h\"\n[tags]\nteam = \"file-team\"\nproject = \"llm\"\n[azure]\ntoken = \"eyJhbGciOi.SECRET.TOKEN\"\n",
    )
    .unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
    let o = c
        .args(["config", "show", "-o", "json"])
        .env("GPUFLEET_CONFIG", env.dir.join("gpufleet.toml"))
        .env("GPUFLEET_TEAM", "env-team")
        .env_remove("GPUFLEET_OWNER")
        .env_remove("GPUFLEET_PROVIDER")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let get = |k: &str| support::row(&rows, "key", k);
    assert_eq!(get("owner")["value"], "file-owner");
    assert_eq!(get("owner")["from"], "file");
    assert_eq!(get("tags.team")["value"], "env-team");
    assert_eq!(get("tags.team")["from"], "env GPUFLEET_TEAM");
    assert_eq!(get("tags.project")["value"], "llm");
    assert_eq!(get("clouds")["value"], "aws,gcp");
    assert_eq!(get("ttl")["value"], "12h");
    assert_eq!(get("azure.token")["value"], "***");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("SECRET"));
    // A flag beats the environment.
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["--provider", "fake", "config", "show", "-o", "json"])
        .env("GPUFLEET_CONFIG", env.dir.join("gpufleet.toml"))
        .env("GPUFLEET_PROVIDER", "live")
        .output()
        .unwrap();
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let provider = support::row(&rows, "key", "provider");
    assert_eq!(provider["value"], "fake");
    assert_eq!(provider["from"], "flag");
    // With no owner configured and no $USER or $LOGNAME (cron, systemd, CI
    // containers), the owner is the account this runs as, not "unknown".
    std::fs::write(env.dir.join("no-owner.toml"), "clouds = [\"aws\"]\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["config", "show", "-o", "json"])
        .env("GPUFLEET_CONFIG", env.dir.join("no-owner.toml"))
        .env_remove("GPUFLEET_OWNER")
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .unwrap();
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let owner = support::row(&rows, "key", "owner")["value"].clone();
    let account =
        String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    assert_eq!(owner, account.trim(), "{rows}");
    // A bad file, and a missing one, are named.
    std::fs::write(env.dir.join("gpufleet.toml"), "owner = 3\nbogus = true\n").unwrap();
    for file in ["gpufleet.toml", "missing.toml"] {
        let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["config", "show"])
            .env("GPUFLEET_CONFIG", env.dir.join(file))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{file}");
        assert!(err(&o).contains(file), "{}", err(&o));
    }
}

#[test]
fn a_config_that_fails_to_parse_never_shows_its_token() {
    let env = FakeEnv::new("op", "config-secret");
    let token = "eyJhbGciOi.ZZSECRETZZ.TOKEN";
    // Every kind of parse error, each with the token on or near the bad line.
    let files = [
        // Unterminated string.
        format!("[azure]\ntoken = \"{token}\n"),
        // A token where a list belongs.
        format!("[azure]\nregions = \"{token}\"\n"),
        // A list where a string belongs.
        format!("[azure]\ntoken = [\"{token}\"]\n"),
        // A token where a known word belongs.
        format!("provider = \"{token}\"\n"),
        // Bad syntax after the token.
        format!("[azure]\ntoken = \"{token}\" trailing\n"),
        // A duplicate key.
        format!("[azure]\ntoken = \"{token}\"\ntoken = \"{token}\"\n"),
        // A bare token as a key.
        format!("{token}\n"),
    ];
    for (i, text) in files.iter().enumerate() {
        let path = env.dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["config", "show"])
            .env("GPUFLEET_CONFIG", &path)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap();
        let (out, e) = (String::from_utf8_lossy(&o.stdout), err(&o));
        assert_eq!(o.status.code(), Some(2), "file {i}: {e}");
        assert!(
            !e.contains("ZZSECRETZZ") && !out.contains("ZZSECRETZZ"),
            "file {i} echoed its token: {e}"
        );
        assert!(
            e.contains(&format!("bad-{i}.toml")) || e.contains("provider:"),
            "file {i}: {e}"
        );
        // A parse error names the line; a value the file parsed but gpufleet
        // refuses names its setting.
        assert!(
            e.contains("line ") || e.contains("provider:"),
            "file {i} names no line or setting: {e}"
        );
    }
}

/// Issue 63: a ledger setting that cannot be what it says (a mistyped
/// PostgreSQL URL, a libpq keyword string) is refused (exit 2) with the
/// password masked and nothing created; a URL with userinfo is masked by
/// `config show`; a new SQLite ledger and its directory are private (0600,
/// 0700).
#[test]
fn a_mistyped_ledger_url_is_refused_masked_and_a_new_ledger_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = FakeEnv::new("op", "ledger-url");
    std::fs::write(env.dir.join("none.toml"), "").unwrap();
    for bad in [
        "postgres:/gf:PW-secret@127.0.0.1/db",
        "postgres//gf:PW-secret@127.0.0.1/db",
        "postgresql:gf:PW-secret@127.0.0.1/db",
        "host=127.0.0.1 dbname=gf user=gf password=PW-secret",
    ] {
        for args in [&["jobs", "ls"][..], &["config", "show"][..]] {
            let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
                .args(args)
                .current_dir(&*env.dir)
                .env("GPUFLEET_LEDGER", bad)
                .env("GPUFLEET_CONFIG", env.dir.join("none.toml"))
                .output()
                .unwrap();
            let all = format!("{}{}", err(&o), String::from_utf8_lossy(&o.stdout));
            assert_eq!(o.status.code(), Some(2), "{bad} {args:?}: {all}");
            assert!(!all.contains("PW-secret"), "{bad}: {all}");
            assert!(all.contains("invalid ledger"), "{bad}: {all}");
        }
    }
    let made: Vec<_> = std::fs::read_dir(&*env.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("postgres") || n.starts_with("host"))
        .collect();
    assert!(made.is_empty(), "a file was made of a URL: {made:?}");
    // config show masks userinfo in any URL.
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["config", "show", "-o", "json"])
        .env("GPUFLEET_CONFIG", env.dir.join("none.toml"))
        .env("AWS_ENDPOINT_URL", "http://u:EP-secret@127.0.0.1:9")
        .env(
            "GPUFLEET_LEDGER",
            "postgres://gf:p%40ss%2Fword@127.0.0.1/db",
        )
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        !out.contains("EP-secret") && !out.contains("word@") && !out.contains("ss%2F"),
        "{out}"
    );
    assert!(out.contains("http://u:***@127.0.0.1:9"), "{out}");
    // A password with '/' left unescaped cannot be split from the host
    // with certainty: refused (exit 2), masked, naming the fix.
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["config", "show", "-o", "json"])
        .env("GPUFLEET_CONFIG", env.dir.join("none.toml"))
        .env("GPUFLEET_LEDGER", "postgres://gf:p@ss/word@127.0.0.1/db")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("percent-encoded") && !e.contains("ss/word"),
        "{e}"
    );
    // A new SQLite ledger in a new directory: private.
    let ledger = env.dir.join("private").join("ledger.sqlite3");
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["--provider", "fake", "run", "--job"])
        .arg(env.dir.join("missing.toml"))
        .env("GPUFLEET_LEDGER", &ledger)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let o = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["reconcile", "--yes"])
        .env("GPUFLEET_PROVIDER", "fake")
        .env("GPUFLEET_FAKE_STATE", env.dir.join("fake.json"))
        .env("GPUFLEET_LEDGER", &ledger)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&ledger), 0o600, "{}", err(&o));
    assert_eq!(mode(ledger.parent().unwrap()), 0o700);
}
