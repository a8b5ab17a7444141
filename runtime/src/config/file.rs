//! The configuration file (`config.toml`): its sections, read strictly
//! (an unknown key is an error naming it and its line), with values kept
//! out of the error messages.

use super::*;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) provider: Option<String>,
    pub(super) clouds: Option<Vec<String>>,
    pub(super) owner: Option<String>,
    pub(super) ttl: Option<String>,
    pub(super) catalog_max_age: Option<String>,
    pub(super) ledger: Option<String>,
    #[serde(default)]
    pub(super) tags: BTreeMap<String, String>,
    pub(super) aws: Option<AwsSection>,
    pub(super) gcp: Option<GcpSection>,
    pub(super) azure: Option<AzureSection>,
    pub(super) fake: Option<FakeSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AwsSection {
    pub(super) regions: Option<Vec<String>>,
    pub(super) endpoint_url: Option<String>,
    pub(super) price_list: Option<bool>,
    pub(super) interruption_queue: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GcpSection {
    pub(super) project: Option<String>,
    pub(super) regions: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AzureSection {
    pub(super) subscription_id: Option<String>,
    pub(super) regions: Option<Vec<String>>,
    pub(super) token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FakeSection {
    pub(super) state: Option<PathBuf>,
}

pub(super) fn read_file(path: &Path) -> Result<FileConfig, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid_input(format!("cannot read config file '{}': {e}", path.display()))
    })?;
    toml::from_str(&text).map_err(|e| {
        Error::invalid_input(format!(
            "config file '{}'{}: {}",
            path.display(),
            position(&text, &e),
            redact_values(e.message())
        ))
    })
}

/// ` at line L, column C` of a TOML error, from its span (the offending
/// text itself is never shown: a config file holds tokens).
pub(super) fn position(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return String::new();
    };
    let before = text.get(..span.start.min(text.len())).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" at line {line}, column {column}")
}

/// A parser message with the values it quotes replaced by `…`: serde names
/// the offending value (`invalid type: string "…"`, `unknown variant
/// `…``); what it expected, and an unknown key's name, stay.
pub(super) fn redact_values(message: &str) -> String {
    if message.starts_with("unknown field") {
        // `unknown field `x`, expected one of ...`: a key, not a value.
        return message.to_string();
    }
    let (head, tail) = match message.find(", expected") {
        Some(i) => message.split_at(i),
        None => (message, ""),
    };
    let mut out = String::with_capacity(message.len());
    let mut quote: Option<char> = None;
    for c in head.chars() {
        match quote {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            None if c == '"' || c == '`' || c == '\'' => {
                out.push(c);
                quote = Some(c);
            }
            None => out.push(c),
        }
    }
    if let Some(q) = quote {
        // An unterminated quote: nothing after it is shown.
        out.push('…');
        out.push(q);
    }
    out.push_str(tail);
    out
}
