//! A job's secrets: references to the clouds' own secret stores, read by
//! the node at boot with its own identity. gpufleet never holds a value: the
//! ledger, the job file and the instance's user data carry the reference
//! alone.

use std::fmt;

use super::*;

/// Where one secret lives in one cloud's store.
///
/// Written in a job file as text:
///
/// | store | reference |
/// |---|---|
/// | AWS Secrets Manager | `arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME` or `secretsmanager:NAME` (the node's region) |
/// | AWS Systems Manager parameter (SecureString) | `arn:aws:ssm:REGION:ACCOUNT:parameter/NAME` or `ssm:NAME` (the node's region) |
/// | GCP Secret Manager | `projects/PROJECT/secrets/NAME` (latest version) or `projects/PROJECT/secrets/NAME/versions/VERSION` |
/// | Azure Key Vault | `https://VAULT.vault.azure.net/secrets/NAME` (latest version) or `.../secrets/NAME/VERSION` (also `vault.usgovcloudapi.net`, `vault.azure.cn`) |
/// | the fake cloud (tests) | `fake:NAME` |
///
/// ```
/// use gpufleet_core::placer::SecretRef;
/// use gpufleet_core::Cloud;
/// let r: SecretRef = "projects/ml-prod/secrets/hf-token".parse().unwrap();
/// assert_eq!(r.cloud(), Cloud::Gcp);
/// assert_eq!(r.to_string(), "projects/ml-prod/secrets/hf-token/versions/latest");
/// assert!("projects/ml prod/secrets/x".parse::<SecretRef>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "store", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SecretRef {
    /// An AWS Secrets Manager secret (its `SecretString`).
    AwsSecretsManager {
        /// The secret's name or ARN.
        secret_id: String,
        /// The region of an ARN; the node's own region otherwise.
        region: Option<String>,
    },
    /// An AWS Systems Manager parameter, decrypted (`WithDecryption`).
    AwsSsm {
        /// The parameter's name or ARN.
        name: String,
        /// The region of an ARN; the node's own region otherwise.
        region: Option<String>,
    },
    /// A GCP Secret Manager secret version.
    GcpSecretManager {
        /// The project that holds it.
        project: String,
        /// The secret's id.
        secret: String,
        /// A version number or `latest`.
        version: String,
    },
    /// An Azure Key Vault secret.
    AzureKeyVault {
        /// The vault's URL, `https://NAME.vault.azure.net`.
        vault: String,
        /// The secret's name.
        name: String,
        /// A version id; the latest when `None`.
        version: Option<String>,
    },
    /// A secret of the fake cloud, which has no store: for tests.
    Fake {
        /// Its name.
        name: String,
    },
}

/// The Key Vault DNS suffixes of Azure's clouds (public, US Government,
/// China).
const VAULT_SUFFIXES: [&str; 3] = [
    ".vault.azure.net",
    ".vault.usgovcloudapi.net",
    ".vault.azure.cn",
];

/// What the reference forms look like, for error messages.
const FORMS: &str = "arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME, secretsmanager:NAME, arn:aws:ssm:REGION:ACCOUNT:parameter/NAME, ssm:NAME, projects/PROJECT/secrets/NAME[/versions/VERSION], https://VAULT.vault.azure.net/secrets/NAME[/VERSION] or fake:NAME";

fn bad(text: &str, why: &str) -> Error {
    let shown: String = text.chars().take(200).collect();
    Error::invalid_input(format!(
        "invalid secret reference {shown:?}: {why}; expected one of {FORMS}"
    ))
}

/// Whether `s` is 1 to `max` characters, each ASCII alphanumeric or one of
/// `extra`.
fn made_of(s: &str, max: usize, extra: &str) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

/// An AWS region name such as `us-east-1`.
fn aws_region(s: &str) -> bool {
    made_of(s, 32, "-") && s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
}

impl SecretRef {
    /// The cloud whose store holds it.
    pub fn cloud(&self) -> Cloud {
        match self {
            SecretRef::AwsSecretsManager { .. } | SecretRef::AwsSsm { .. } => Cloud::Aws,
            SecretRef::GcpSecretManager { .. } => Cloud::Gcp,
            SecretRef::AzureKeyVault { .. } => Cloud::Azure,
            SecretRef::Fake { .. } => Cloud::Fake,
        }
    }

    /// The store's name, for people: `AWS Secrets Manager`, ….
    pub fn store(&self) -> &'static str {
        match self {
            SecretRef::AwsSecretsManager { .. } => "AWS Secrets Manager",
            SecretRef::AwsSsm { .. } => "AWS Systems Manager Parameter Store",
            SecretRef::GcpSecretManager { .. } => "GCP Secret Manager",
            SecretRef::AzureKeyVault { .. } => "Azure Key Vault",
            SecretRef::Fake { .. } => "the fake cloud",
        }
    }

    /// The reference read from an AWS ARN.
    fn from_arn(text: &str) -> Result<SecretRef> {
        // arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE
        let parts: Vec<&str> = text.splitn(6, ':').collect();
        let [_, partition, service, region, account, resource] = parts[..] else {
            return Err(bad(text, "an ARN has six parts separated by ':'"));
        };
        if !matches!(partition, "aws" | "aws-cn" | "aws-us-gov") {
            return Err(bad(
                text,
                "the ARN's partition is not aws, aws-cn or aws-us-gov",
            ));
        }
        if !aws_region(region) {
            return Err(bad(text, "the ARN names no region"));
        }
        if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad(text, "the ARN's account is not 12 digits"));
        }
        match service {
            "secretsmanager" => {
                let name = resource.strip_prefix("secret:").unwrap_or("");
                if !made_of(name, 512, "/_+=.@-") {
                    return Err(bad(text, "the ARN names no secret (secret:NAME)"));
                }
                Ok(SecretRef::AwsSecretsManager {
                    secret_id: text.to_string(),
                    region: Some(region.to_string()),
                })
            }
            "ssm" => {
                let name = resource.strip_prefix("parameter").unwrap_or("");
                if !name.starts_with('/') || !made_of(&name[1..], 2048, "/_.-") {
                    return Err(bad(text, "the ARN names no parameter (parameter/NAME)"));
                }
                Ok(SecretRef::AwsSsm {
                    name: text.to_string(),
                    region: Some(region.to_string()),
                })
            }
            _ => Err(bad(
                text,
                "an AWS secret lives in secretsmanager or ssm, not in this service",
            )),
        }
    }

    /// The reference read from a Key Vault URL.
    fn from_vault_url(text: &str) -> Result<SecretRef> {
        let rest = text.strip_prefix("https://").unwrap_or_default();
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = host.to_ascii_lowercase();
        let Some(vault) = VAULT_SUFFIXES.iter().find_map(|s| host.strip_suffix(s)) else {
            return Err(bad(
                text,
                "a Key Vault URL's host ends in .vault.azure.net, .vault.usgovcloudapi.net or .vault.azure.cn",
            ));
        };
        if !(3..=24).contains(&vault.len()) || !made_of(vault, 24, "-") {
            return Err(bad(text, "a vault name is 3 to 24 letters, digits and '-'"));
        }
        let path = path.trim_end_matches('/');
        let mut parts = path.split('/');
        let (Some("secrets"), Some(name), version, None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad(
                text,
                "the URL's path is /secrets/NAME or /secrets/NAME/VERSION",
            ));
        };
        if !made_of(name, 127, "-") {
            return Err(bad(
                text,
                "a Key Vault secret name is 1 to 127 letters, digits and '-'",
            ));
        }
        if let Some(v) = version {
            if v.len() != 32 || !v.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad(
                    text,
                    "a Key Vault secret version is 32 hexadecimal digits",
                ));
            }
        }
        Ok(SecretRef::AzureKeyVault {
            vault: format!("https://{host}"),
            name: name.to_string(),
            version: version.map(str::to_string),
        })
    }

    /// The reference read from a Secret Manager resource name.
    fn from_gcp_name(text: &str) -> Result<SecretRef> {
        let parts: Vec<&str> = text.split('/').collect();
        let (project, secret, version) = match parts[..] {
            ["projects", p, "secrets", s] => (p, s, "latest"),
            ["projects", p, "secrets", s, "versions", v] => (p, s, v),
            _ => {
                return Err(bad(
                    text,
                    "a Secret Manager name is projects/PROJECT/secrets/NAME or projects/PROJECT/secrets/NAME/versions/VERSION",
                ))
            }
        };
        if !made_of(project, 30, "-") {
            return Err(bad(text, "a project id is letters, digits and '-'"));
        }
        if !made_of(secret, 255, "_-") {
            return Err(bad(
                text,
                "a secret id is 1 to 255 letters, digits, '_' and '-'",
            ));
        }
        if version != "latest" && !made_of(version, 20, "") {
            return Err(bad(text, "a version is a number or latest"));
        }
        Ok(SecretRef::GcpSecretManager {
            project: project.to_string(),
            secret: secret.to_string(),
            version: version.to_string(),
        })
    }
}

impl std::str::FromStr for SecretRef {
    type Err = Error;
    fn from_str(text: &str) -> Result<SecretRef> {
        let text = text.trim();
        if text.starts_with("arn:") {
            return SecretRef::from_arn(text);
        }
        if let Some(name) = text.strip_prefix("secretsmanager:") {
            if !made_of(name, 512, "/_+=.@-") {
                return Err(bad(
                    text,
                    "a Secrets Manager name is letters, digits and /_+=.@-",
                ));
            }
            return Ok(SecretRef::AwsSecretsManager {
                secret_id: name.to_string(),
                region: None,
            });
        }
        if let Some(name) = text.strip_prefix("ssm:") {
            if !made_of(name, 2048, "/_.-") {
                return Err(bad(text, "a parameter name is letters, digits and /_.-"));
            }
            return Ok(SecretRef::AwsSsm {
                name: name.to_string(),
                region: None,
            });
        }
        if text.starts_with("projects/") {
            return SecretRef::from_gcp_name(text);
        }
        if text.starts_with("https://") {
            return SecretRef::from_vault_url(text);
        }
        if let Some(name) = text.strip_prefix("fake:") {
            if !made_of(name, 256, "/_.-") {
                return Err(bad(
                    text,
                    "a fake secret's name is letters, digits and /_.-",
                ));
            }
            return Ok(SecretRef::Fake {
                name: name.to_string(),
            });
        }
        Err(bad(
            text,
            "not a reference to a secret store gpufleet reads",
        ))
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::AwsSecretsManager { secret_id, .. } if secret_id.starts_with("arn:") => {
                f.write_str(secret_id)
            }
            SecretRef::AwsSecretsManager { secret_id, .. } => {
                write!(f, "secretsmanager:{secret_id}")
            }
            SecretRef::AwsSsm { name, .. } if name.starts_with("arn:") => f.write_str(name),
            SecretRef::AwsSsm { name, .. } => write!(f, "ssm:{name}"),
            SecretRef::GcpSecretManager {
                project,
                secret,
                version,
            } => write!(f, "projects/{project}/secrets/{secret}/versions/{version}"),
            SecretRef::AzureKeyVault {
                vault,
                name,
                version,
            } => match version {
                Some(v) => write!(f, "{vault}/secrets/{name}/{v}"),
                None => write!(f, "{vault}/secrets/{name}"),
            },
            SecretRef::Fake { name } => write!(f, "fake:{name}"),
        }
    }
}

/// One secret of a job file: one reference (its cloud told by its form) or
/// one per cloud (`{ aws = "…", gcp = "…", azure = "…" }`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretFile {
    /// One reference.
    One(String),
    /// A reference per cloud name.
    PerCloud(BTreeMap<String, String>),
}

/// A job's secrets: for each environment variable, its reference in each
/// cloud that has one.
pub type Secrets = BTreeMap<String, BTreeMap<Cloud, SecretRef>>;

/// Names a job's `env` and `[secrets]` may not set, with why: bash gives
/// them a meaning of its own (the boot script would run differently, or the
/// value would not arrive), or the node sets them for the job's user.
/// `GPUFLEET_` names are gpufleet's, and `_gf_` names the boot script's own
/// variables. `PATH` is allowed: its value goes before the node's own.
pub const RESERVED_ENV_NAMES: &[(&str, &str)] = &[
    ("IFS", "bash splits words with it"),
    ("BASH_ENV", "bash runs the file it names"),
    ("ENV", "sh runs the file it names"),
    ("SHELLOPTS", "it sets bash's options"),
    ("BASHOPTS", "it sets bash's options"),
    ("CDPATH", "it changes where cd goes"),
    ("GLOBIGNORE", "it changes how bash expands names"),
    ("PS4", "bash evaluates it when tracing"),
    ("POSIXLY_CORRECT", "it changes how bash behaves"),
    ("TMOUT", "bash exits after it"),
    ("OPTIND", "bash's getopts owns it"),
    ("OPTARG", "bash's getopts owns it"),
    ("OPTERR", "bash's getopts owns it"),
    ("PPID", "bash keeps it read-only"),
    ("UID", "bash keeps it read-only"),
    ("EUID", "bash keeps it read-only"),
    ("SHLVL", "bash keeps it"),
    ("PWD", "bash keeps it"),
    ("OLDPWD", "bash keeps it"),
    ("RANDOM", "bash gives it a value of its own"),
    ("SRANDOM", "bash gives it a value of its own"),
    ("SECONDS", "bash gives it a value of its own"),
    ("LINENO", "bash gives it a value of its own"),
    ("EPOCHSECONDS", "bash gives it a value of its own"),
    ("EPOCHREALTIME", "bash gives it a value of its own"),
    ("FUNCNAME", "bash gives it a value of its own"),
    ("GROUPS", "bash gives it a value of its own"),
    ("PIPESTATUS", "bash gives it a value of its own"),
    ("HOME", "the node sets it to the job's user's home"),
    ("USER", "the node sets it for the job's user"),
    ("LOGNAME", "the node sets it for the job's user"),
    ("SHELL", "the node sets it for the job's user"),
];

/// Checks an environment variable's name: letters, digits and `_`, not
/// starting with a digit, and none of [`RESERVED_ENV_NAMES`], `BASH_…`,
/// `GPUFLEET_…` or `_gf_…`.
pub(super) fn check_env_name(what: &str, name: &str) -> Result<()> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        let shown: String = name.chars().take(64).collect();
        return Err(Error::invalid_input(format!(
            "invalid {what} name '{shown}': use letters, digits and '_', not starting with a digit"
        )));
    }
    let why = if let Some((_, why)) = RESERVED_ENV_NAMES.iter().find(|(n, _)| *n == name) {
        why.to_string()
    } else if name.starts_with("BASH_") || name == "BASH" || name == "BASHPID" {
        "bash gives BASH names a meaning of their own".to_string()
    } else if name.starts_with("GPUFLEET_") {
        "GPUFLEET_ names are gpufleet's own (the node sets GPUFLEET_JOB_ID, GPUFLEET_CLOUD, ...)"
            .to_string()
    } else if name.to_ascii_lowercase().starts_with("_gf_") {
        "_gf_ names are the boot script's own".to_string()
    } else {
        return Ok(());
    };
    Err(Error::invalid_input(format!(
        "invalid {what} name '{name}': {why}; choose another name (PATH is allowed: its value goes before the node's own)"
    )))
}

/// Checks a secret's name: as an environment variable's
/// ([`check_env_name`]), and not `PATH` (whose value the node puts before
/// its own, which a secret's cannot be).
pub(super) fn check_secret_name(name: &str) -> Result<()> {
    check_env_name("secret", name)?;
    if name == "PATH" {
        return Err(Error::invalid_input(
            "invalid secret name 'PATH': PATH is set in env (its value goes before the node's own), not read as a secret",
        ));
    }
    Ok(())
}

/// The secrets of a job file, checked: each name a valid environment
/// variable that `env` does not also set, each reference well formed and of
/// the cloud it is written under.
pub(super) fn read_secrets(
    file: &BTreeMap<String, SecretFile>,
    env: &BTreeMap<String, String>,
) -> Result<Secrets> {
    let mut out = Secrets::new();
    for (name, refs) in file {
        check_secret_name(name)?;
        if env.contains_key(name) {
            return Err(Error::invalid_input(format!(
                "{name} is both in env and in [secrets]: keep one (a secret's value is read by the node, an env value is stored and sent in clear)"
            )));
        }
        let mut by_cloud = BTreeMap::new();
        match refs {
            SecretFile::One(text) => {
                let r: SecretRef = text.parse().map_err(|e: Error| {
                    Error::invalid_input(format!("[secrets] {name}: {}", e.message()))
                })?;
                by_cloud.insert(r.cloud(), r);
            }
            SecretFile::PerCloud(map) => {
                if map.is_empty() {
                    return Err(Error::invalid_input(format!(
                        "[secrets] {name}: give a reference for at least one of aws, gcp, azure"
                    )));
                }
                for (cloud, text) in map {
                    let cloud: Cloud = cloud.parse().map_err(|e: crate::ParseCloudError| {
                        Error::invalid_input(format!("[secrets] {name}: {e}"))
                    })?;
                    let r: SecretRef = text.parse().map_err(|e: Error| {
                        Error::invalid_input(format!("[secrets] {name}.{cloud}: {}", e.message()))
                    })?;
                    if r.cloud() != cloud {
                        return Err(Error::invalid_input(format!(
                            "[secrets] {name}.{cloud}: {r} is a secret in {}, not in {}",
                            r.store(),
                            cloud.title()
                        )));
                    }
                    by_cloud.insert(cloud, r);
                }
            }
        }
        out.insert(name.clone(), by_cloud);
    }
    Ok(out)
}

/// The clouds a job with `secrets` may run on: those where every secret has
/// a reference. With `clouds` given, each of them must be such a cloud;
/// without, they are the answer (an error when there is none).
pub(super) fn clouds_for_secrets(secrets: &Secrets, clouds: &[Cloud]) -> Result<Vec<Cloud>> {
    if secrets.is_empty() {
        return Ok(clouds.to_vec());
    }
    let missing = |cloud: Cloud| -> Vec<&str> {
        secrets
            .iter()
            .filter(|(_, refs)| !refs.contains_key(&cloud))
            .map(|(n, _)| n.as_str())
            .collect()
    };
    if !clouds.is_empty() {
        for &cloud in clouds {
            let m = missing(cloud);
            if !m.is_empty() {
                return Err(Error::invalid_input(format!(
                    "the job may run on {cloud} but [secrets] has no {cloud} reference for {}: add one (e.g. {}.{cloud} = \"…\") or leave {cloud} out of clouds",
                    m.join(", "),
                    m[0]
                )));
            }
        }
        return Ok(clouds.to_vec());
    }
    let every: Vec<Cloud> = [Cloud::Aws, Cloud::Gcp, Cloud::Azure, Cloud::Fake]
        .into_iter()
        .filter(|c| missing(*c).is_empty())
        .collect();
    if every.is_empty() {
        let shown: Vec<String> = secrets
            .iter()
            .map(|(n, refs)| {
                let cs: Vec<&str> = refs.keys().map(|c| c.as_str()).collect();
                format!("{n} in {}", cs.join(", "))
            })
            .collect();
        return Err(Error::invalid_input(format!(
            "no cloud has a reference for every secret ({}): give each secret a reference in a cloud they share",
            shown.join("; ")
        )));
    }
    Ok(every)
}
