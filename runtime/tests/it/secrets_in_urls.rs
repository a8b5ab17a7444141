//! No part of a ledger password in any message (issue 78): every URL form
//! (userinfo holding `@`, `:`, percent-escapes and characters that must be
//! escaped; the query's `password=`; several hosts) through every path that
//! can fail on it: the check of a location, opening to write and to read,
//! the evidence `place` reads, a connection to a server that answers
//! nonsense, and `config show`'s rows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::time::Duration;

use gpufleet_runtime::config::{Config, ConfigKey, Flags};
use gpufleet_runtime::ledgers;
use gpufleet_runtime::postgres::{PgLedger, PgOptions};

/// A listener on 127.0.0.1 that answers every connection with bytes no
/// PostgreSQL server sends, then closes it: a connection fails at once
/// (not as a refused one, which the ledger retries), after the driver has
/// its host, port and user.
fn nonsense_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(200) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 512];
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 400 Not PostgreSQL\r\n\r\n");
        }
    });
    port
}

/// Every run of at least four characters of `secret`, raw and as a URL
/// carries it (percent-encoded), that `text` shows.
fn leaked(text: &str, secret: &str) -> Vec<String> {
    let mut forms = vec![secret.to_string()];
    let encoded: String = secret
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    forms.push(encoded);
    let mut out = Vec::new();
    for f in forms {
        let chars: Vec<char> = f.chars().collect();
        for w in chars.windows(4) {
            let piece: String = w.iter().collect();
            if text.contains(&piece) && !out.contains(&piece) {
                out.push(piece);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_part_of_a_password_reaches_any_message() {
    let port = nonsense_server();
    // (URL, the password it carries). Every password's every four
    // characters are absent from the rest of its URL, so any of them in a
    // message came from the password.
    let cases: Vec<(String, &str)> = vec![
        (
            format!("postgres://fleet:a@VerySecretTail@127.0.0.1:{port}/db"),
            "a@VerySecretTail",
        ),
        (
            format!("postgresql://fleet:Qz9:Wk7:Xv5@127.0.0.1:{port}/db"),
            "Qz9:Wk7:Xv5",
        ),
        (
            format!("postgres://fleet:Hk2%40Lm4%3APq6@127.0.0.1:{port}/db?sslmode=disable"),
            "Hk2@Lm4:Pq6",
        ),
        (
            format!("postgres://fleet:Jb8@@Rt3@127.0.0.1:{port},127.0.0.2:{port}/db"),
            "Jb8@@Rt3",
        ),
        (
            format!("postgres://fleet:Ny5/Ks7?Gc2#Tf4@127.0.0.1:{port}/db"),
            "Ny5/Ks7?Gc2#Tf4",
        ),
        (
            format!("postgres://fleet:Wu1%ZZVe9@127.0.0.1:{port}/db"),
            "Wu1%ZZVe9",
        ),
        (
            format!("postgres://127.0.0.1:{port}/db?user=fleet&password=Mx3Bd7Zr2"),
            "Mx3Bd7Zr2",
        ),
        (
            format!("postgres://fleet:Çé9ĦŁ4ß@127.0.0.1:{port}/db"),
            "Çé9ĦŁ4ß",
        ),
        // Mistyped, so not a URL: still masked.
        (
            format!("postgres:/fleet:Ld6Pw0Ys@127.0.0.1:{port}/db"),
            "Ld6Pw0Ys",
        ),
        (
            format!("postgresql:fleet:Gh3Jk5Tq@127.0.0.1:{port}/db"),
            "Gh3Jk5Tq",
        ),
        (
            "sqlite://fleet:Vb8Nm2Cx@db/gpufleet".to_string(),
            "Vb8Nm2Cx",
        ),
        ("mysql://fleet:Rw4Ty6Ui@db/gpufleet".to_string(), "Rw4Ty6Ui"),
        (
            "host=127.0.0.1 user=fleet password=Op1Kl3Zx".to_string(),
            "Op1Kl3Zx",
        ),
    ];
    let opts = || PgOptions {
        connect_timeout: Duration::from_secs(2),
        reconnect_for: Duration::ZERO,
        ..PgOptions::default()
    };
    for (url, secret) in &cases {
        let mut said = Vec::new();
        if let Err(e) = ledgers::check_location(url) {
            said.push(format!("check: {e} / {e:?}"));
        }
        said.push(format!("shown: {}", ledgers::shown(url)));
        if ledgers::is_postgres_url(url) {
            match PgLedger::connect_with(url, opts()).await {
                Ok(_) => panic!("{url}: connected to a server that is not PostgreSQL"),
                Err(e) => said.push(format!("connect: {e} / {e:?}")),
            }
        } else {
            // Only where it cannot become a file: these are all refused.
            match ledgers::open(url).await {
                Ok(_) => panic!("{url}: opened as a ledger"),
                Err(e) => said.push(format!("open: {e} / {e:?}")),
            }
            match ledgers::open_read_only(url).await {
                Ok(_) => panic!("{url}: opened as a ledger"),
                Err(e) => said.push(format!("read: {e} / {e:?}")),
            }
        }
        let flags = Flags::default().with(ConfigKey::Ledger, url.clone());
        match Config::load(&flags) {
            Ok(cfg) => {
                for (k, v, o) in cfg.rows() {
                    said.push(format!("config {k} = {v} ({o})"));
                }
                said.push(format!("config debug: {cfg:?}"));
            }
            Err(e) => said.push(format!("config: {e} / {e:?}")),
        }
        let text = said.join("\n");
        let pieces = leaked(&text, secret);
        assert!(
            pieces.is_empty(),
            "{url}: the password's {pieces:?} shown in:\n{text}"
        );
        // And what is shown still says what failed.
        assert!(text.contains("127.0.0.1") || text.contains("db"), "{text}");
    }
}

/// A password with `@` is the password, not part of the host: the
/// connection reaches the host and port after the last `@` (here, the
/// nonsense server, which the driver then rejects for what it answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_sign_in_a_password_still_reaches_the_right_host() {
    let port = nonsense_server();
    let url = format!("postgres://fleet:a@b@127.0.0.1:{port}/db?sslmode=disable");
    let e = PgLedger::connect_with(
        &url,
        PgOptions {
            connect_timeout: Duration::from_secs(2),
            reconnect_for: Duration::ZERO,
            ..PgOptions::default()
        },
    )
    .await
    .expect_err("not PostgreSQL");
    let text = e.to_string();
    assert!(
        text.contains(&format!("postgres://fleet@127.0.0.1:{port}/db")),
        "{text}"
    );
    // Reserved characters not escaped are refused, naming the fix.
    let e = ledgers::check_location(&format!("postgres://fleet:pa/ss@127.0.0.1:{port}/db"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("percent-encoded"), "{e}");
}
