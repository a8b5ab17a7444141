//! Connection URLs: recognised, checked (with the bad part named), and
//! shown with the password masked.

use super::*;

/// What gpufleet takes out of the URL before the driver parses it.
pub(super) struct Parsed {
    pub(super) config: tokio_postgres::Config,
    pub(super) verify: Verify,
    pub(super) root_cert: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verify {
    /// Encrypt (when the server offers it) without checking the certificate.
    None,
    /// Check the chain, not the host name.
    Ca,
    /// Check the chain and the host name.
    Full,
}

pub(super) fn bad_url(why: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!(
        "invalid PostgreSQL ledger URL: {why}; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE]"
    ))
}

/// A URL's user and password, taken out (percent-decoded) before the driver
/// parses the rest, so that neither ever reaches its parser or its messages.
struct Userinfo {
    /// The URL without them: `postgres://HOST[:PORT]/DB?…`.
    rest: String,
    user: Option<String>,
    password: Option<Vec<u8>>,
}

/// Splits the userinfo off `url` as RFC 3986 reads it: the authority runs
/// to the first `/`, `?` or `#` after `://`, and its userinfo to the last
/// `@` in it (so an `@` or `:` in a password is kept whole). An `@` after
/// the authority means a reserved character in the password was not
/// escaped (`postgres://u:pa/ss@h/db`): refused asking for percent-encoding,
/// as splitting there would put part of the password in the host.
fn split_userinfo(url: &str) -> Result<Userinfo> {
    let Some((scheme, after)) = url.split_once("://") else {
        return Err(bad_url("no scheme"));
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, tail) = after.split_at(end);
    if tail.contains('@') {
        return Err(bad_url(
            "an '@' after the host: a user, password or option holding '@', '/', '?' or '#' must be percent-encoded (%40, %2F, %3F, %23)",
        ));
    }
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return Ok(Userinfo {
            rest: url.to_string(),
            user: None,
            password: None,
        });
    };
    let decode = |part: &str, what: &str| -> Result<Vec<u8>> {
        // A '%' must start an escape of two hex digits.
        let b = part.as_bytes();
        let well_formed = b.iter().enumerate().all(|(i, c)| {
            *c != b'%'
                || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        });
        if !well_formed {
            return Err(bad_url(format!(
                "the {what} holds a '%' that is not a percent-escape (write '%' as %25)"
            )));
        }
        Ok(percent_encoding::percent_decode_str(part).collect())
    };
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(decode(p, "password")?)),
        None => (userinfo, None),
    };
    let user = String::from_utf8(decode(user, "user")?)
        .map_err(|_| bad_url("the user is not UTF-8 once decoded"))?;
    Ok(Userinfo {
        rest: format!("{scheme}://{host}{tail}"),
        user: (!user.is_empty()).then_some(user),
        password,
    })
}

pub(super) fn parse_url(url: &str) -> Result<Parsed> {
    let info = split_userinfo(url)?;
    let (base, query) = match info.rest.split_once('?') {
        Some((b, q)) => (b, q),
        None => (info.rest.as_str(), ""),
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut mode = "prefer".to_string();
    let mut root_cert = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "sslmode" => mode = v.to_ascii_lowercase(),
            "sslrootcert" => root_cert = Some(std::path::PathBuf::from(v)),
            _ => kept.push(kv),
        }
    }
    let (ssl, verify) = match mode.as_str() {
        "disable" => (SslMode::Disable, Verify::None),
        "prefer" | "allow" => (SslMode::Prefer, Verify::None),
        "require" if root_cert.is_some() => (SslMode::Require, Verify::Ca),
        "require" => (SslMode::Require, Verify::None),
        "verify-ca" => (SslMode::Require, Verify::Ca),
        "verify-full" => (SslMode::Require, Verify::Full),
        other => {
            return Err(bad_url(format!(
                "unknown sslmode '{other}' (valid: disable, allow, prefer, require, verify-ca, verify-full)"
            )))
        }
    };
    let rebuilt = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    // The driver's own message may quote the URL: it is not passed on.
    let mut config: tokio_postgres::Config =
        rebuilt.parse().map_err(|e: tokio_postgres::Error| {
            let text = e.to_string();
            let why = if text.contains("unknown option") || text.contains("invalid value") {
                text.split(':').next().unwrap_or("unreadable").to_string()
            } else {
                "unreadable".to_string()
            };
            bad_url(why)
        })?;
    config.ssl_mode(ssl);
    if let Some(user) = &info.user {
        config.user(user);
    }
    if let Some(password) = &info.password {
        config.password(password);
    }
    if config.get_hosts().is_empty() {
        return Err(bad_url("no host"));
    }
    Ok(Parsed {
        config,
        verify,
        root_cert,
    })
}

/// `postgres://user@host:port/db`: where the ledger is, without secrets.
pub(super) fn shown(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    format!(
        "postgres://{user}{}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}
