//! Reading one setting: from the environment, a list of clouds, a
//! provider name, a duration, and where the files live by default.

use super::*;

pub(super) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

pub(super) fn parse_clouds(list: &[String], from: &str) -> Result<Vec<Cloud>, Error> {
    list.iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.parse::<Cloud>() {
            Ok(c) if c != Cloud::Fake => Ok(c),
            _ => Err(Error::invalid_input(format!(
                "{from}: unknown cloud {}; valid clouds: aws, gcp, azure",
                shown(s)
            ))),
        })
        .collect()
}

pub(super) fn parse_provider(s: &str, from: &str) -> Result<ProviderKind, Error> {
    match s.trim() {
        "live" => Ok(ProviderKind::Live),
        "fake" => Ok(ProviderKind::Fake),
        "local" => Ok(ProviderKind::Local),
        other => Err(Error::invalid_input(format!(
            "{from}: unknown provider {}; valid: live, fake, local",
            shown(other)
        ))),
    }
}

/// Whether a setting's value looks like a word someone meant to type there
/// (short, letters, digits, `-`, `_`, `.`), so an error may echo it.
pub(super) fn plain_word(v: &str) -> bool {
    v.len() <= 24
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A bad value for an error message: quoted when it is a plain word,
/// otherwise only its length (a token pasted into the wrong setting must
/// not reach a terminal or a log).
pub(super) fn shown(v: &str) -> String {
    if plain_word(v) {
        format!("'{v}'")
    } else {
        format!("(a {}-character value, not shown)", v.chars().count())
    }
}

/// A comma-separated list, its items trimmed, empty ones dropped.
pub(super) fn split_list(v: Option<String>) -> Vec<String> {
    v.map(|r| {
        r.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

pub(super) fn dur(s: &str, from: &str) -> Result<Duration, Error> {
    parse_duration(s).map_err(|e| Error::invalid_input(format!("{from}: {}", e.message())))
}

/// The default config file path: `$XDG_CONFIG_HOME/gpufleet/gpufleet.toml`,
/// else `~/.config/gpufleet/gpufleet.toml`, on every Unix (macOS included,
/// as gcloud, the aws CLI's peers and most command-line tools do); the
/// platform's config directory elsewhere.
pub fn default_path() -> Option<PathBuf> {
    config_home().map(|d| d.join("gpufleet").join("gpufleet.toml"))
}

pub(super) fn config_home() -> Option<PathBuf> {
    if cfg!(unix) {
        let var = |n: &str| {
            std::env::var_os(n)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("XDG_CONFIG_HOME")
            .filter(|p| p.is_absolute())
            .or_else(|| var("HOME").map(|h| h.join(".config")))
    } else {
        dirs::config_dir()
    }
}

/// The fake cloud's own ledger when none is configured: beside its state
/// file, named after it (`fake-cloud.json` → `fake-cloud.ledger.sqlite3`), so
/// one fake world keeps its instances and its jobs together and apart from
/// the real clouds' ledger.
pub(super) fn fake_ledger_beside(state: &std::path::Path) -> String {
    let stem = state
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "fake-cloud".into());
    state
        .with_file_name(format!("{stem}.ledger.sqlite3"))
        .display()
        .to_string()
}

pub(super) fn default_fake_state() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("gpufleet")
        .join("fake-cloud.json")
}
