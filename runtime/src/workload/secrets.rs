//! Reading a job's secrets on the node at boot: from AWS Secrets Manager
//! or Systems Manager, GCP Secret Manager or Azure Key Vault, with the
//! node's own identity, into the job's environment (saved readable by root
//! alone). The boot script carries each secret's reference, never a value,
//! and only shell builtins touch a value (no command line shows it).

use gpufleet_core::placer::Workload;
use gpufleet_core::{Cloud, Error, Result};

use super::quote;

/// An `awk` program that prints the JSON string at key `K` (a variable)
/// `D` levels deep in the document on its input, decoded (escapes,
/// `\uXXXX` and surrogate pairs to UTF-8), and exits 0; 1 when there is no
/// such key, 2 on a malformed escape or a NUL, 3 when the value is not a
/// string. POSIX awk (mawk, gawk, busybox), run with `LC_ALL=C` so `%c`
/// writes bytes. The document comes on stdin: a secret is never an
/// argument, where any process could read it.
const JSON_GET: &str = r#"function hex(h, i, n, c) { if (length(h) != 4) return -1; n = 0
  for (i = 1; i <= 4; i++) { c = index("0123456789abcdef", tolower(substr(h, i, 1))); if (c == 0) return -1; n = n * 16 + c - 1 }
  return n }
function utf8(n) { if (n < 128) return sprintf("%c", n)
  if (n < 2048) return sprintf("%c%c", 192 + int(n / 64), 128 + n % 64)
  if (n < 65536) return sprintf("%c%c%c", 224 + int(n / 4096), 128 + int(n / 64) % 64, 128 + n % 64)
  return sprintf("%c%c%c%c", 240 + int(n / 262144), 128 + int(n / 4096) % 64, 128 + int(n / 64) % 64, 128 + n % 64) }
{ doc = doc $0 "\n" }
END { n = length(doc); d = 0; i = 1; want = 0
  while (i <= n) { c = substr(doc, i, 1)
    if (c == "\"") { s = ""; i++
      while (i <= n) { c = substr(doc, i, 1)
        if (c == "\"") break
        if (c != "\\") { s = s c; i++; continue }
        e = substr(doc, i + 1, 1); i += 2
        if (e == "n") s = s "\n"; else if (e == "t") s = s "\t"; else if (e == "r") s = s "\r"
        else if (e == "b") s = s "\b"; else if (e == "f") s = s "\f"
        else if (e == "\"" || e == "\\" || e == "/") s = s e
        else if (e == "u") { u = hex(substr(doc, i, 4)); i += 4; if (u <= 0) exit 2
          if (u >= 55296 && u < 56320 && substr(doc, i, 2) == "\\u") { l = hex(substr(doc, i + 2, 4))
            if (l >= 56320 && l < 57344) { u = 65536 + (u - 55296) * 1024 + l - 56320; i += 6 } }
          s = s utf8(u) }
        else exit 2 }
      i++
      if (want) { printf "%s", s; exit 0 }
      if (d == D && s == K) { j = i; while (substr(doc, j, 1) ~ /[ \t\r\n]/) j++
        if (substr(doc, j, 1) == ":") { j++; while (substr(doc, j, 1) ~ /[ \t\r\n]/) j++
          if (substr(doc, j, 1) != "\"") exit 3
          i = j; want = 1 } }
      continue }
    if (c == "{" || c == "[") d++; else if (c == "}" || c == "]") d--
    i++ }
  exit 1 }"#;

/// The shell functions that read secrets on `cloud`: `secret NAME REF DEPTH
/// KEY B64 FETCH…` runs `FETCH…` (up to three times) for the store's
/// answer, takes the string at `KEY` `DEPTH` levels deep (base64-decoded
/// when `B64` is set) and exports it as `NAME`, exactly (a trailing newline
/// kept); on failure it prints which secret could not be read (the
/// reference, never a value) and returns 1. Only builtins touch the value.
fn secret_functions(cloud: Cloud) -> String {
    let fetch = match cloud {
        // The aws CLI where the image has it, else the JSON API signed by
        // curl with the instance profile's credentials (on stdin). Endpoint
        // overrides as the SDKs read them.
        Cloud::Aws => {
            r#"aws_secret() {
  local md=http://169.254.169.254/latest t region=$3 domain ep ak="" sk="" tok="" target body
  t=$(curl -sf -m 5 -X PUT $md/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300') || return 1
  [ -n "$region" ] || region=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $t" $md/meta-data/placement/region) || return 1
  if command -v aws >/dev/null 2>&1; then
    case $1 in
      secretsmanager) aws secretsmanager get-secret-value --region "$region" --secret-id "$2" --output json ;;
      *) aws ssm get-parameter --region "$region" --name "$2" --with-decryption --output json ;;
    esac
    return
  fi
  aws_creds "$t" || return 1
  domain=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $t" $md/meta-data/services/domain) || domain=amazonaws.com
  case $1 in
    secretsmanager) ep=${AWS_ENDPOINT_URL_SECRETS_MANAGER:-}; target=secretsmanager.GetSecretValue; body="{\"SecretId\":\"$2\"}" ;;
    *) ep=${AWS_ENDPOINT_URL_SSM:-}; target=AmazonSSM.GetParameter; body="{\"Name\":\"$2\",\"WithDecryption\":true}" ;;
  esac
  ep=${ep:-${AWS_ENDPOINT_URL:-https://$1.$region.$domain}}
  { printf 'user = "%s:%s"\n' "$ak" "$sk"
    [ -z "$tok" ] || printf 'header = "X-Amz-Security-Token: %s"\n' "$tok"
  } | curl -sf -m 10 -K - --aws-sigv4 "aws:amz:$region:$1" -H "X-Amz-Target: $target" \
    -H 'Content-Type: application/x-amz-json-1.1' -d "$body" "${ep%/}/"
}"#
        }
        // Secret Manager's REST API with the service account's token from
        // the metadata server (on stdin); gcloud's endpoint override.
        Cloud::Gcp => {
            r#"gcp_secret() {
  local tok api
  tok=$(curl -sf -m 5 -H 'Metadata-Flavor: Google' http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
  [ -n "$tok" ] || return 1
  api=${CLOUDSDK_API_ENDPOINT_OVERRIDES_SECRETMANAGER:-https://secretmanager.googleapis.com/}
  printf 'Authorization: Bearer %s\n' "$tok" | curl -sf -m 10 -H @- "${api%/}/v1/projects/$1/secrets/$2/versions/$3:access"
}"#
        }
        // Key Vault's data plane with the managed identity's token for the
        // vault's own cloud (`https://vault.azure.net` and its sovereign
        // twins), through IMDS; the token on stdin.
        Cloud::Azure => {
            r#"azure_secret() {
  local host tok
  host=${1#https://}
  tok=$(curl -sf -m 5 -H Metadata:true "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://${host#*.}" | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
  [ -n "$tok" ] || return 1
  printf 'Authorization: Bearer %s\n' "$tok" | curl -sf -m 10 -H @- "$1/secrets/$2${3:+/$3}?api-version=7.4"
}"#
        }
        _ => "",
    };
    format!(
        r#"json_get() {{ LC_ALL=C awk -v K="$1" -v D="$2" '{JSON_GET}'; }}
{fetch}
secret() {{
  local _gf_name=$1 _gf_ref=$2 _gf_depth=$3 _gf_key=$4 _gf_b64=$5 _gf_doc="" _gf_v _gf_try
  shift 5
  for _gf_try in 1 2 3; do
    _gf_doc=$("$@") && [ -n "$_gf_doc" ] && break
    _gf_doc=""; [ "$_gf_try" = 3 ] || sleep $((_gf_try * 5))
  done
  if [ -z "$_gf_doc" ]; then
    echo "gpufleet: could not read secret $_gf_name from $_gf_ref: the store refused or did not answer (can the node's identity read it?)"
    return 1
  fi
  _gf_v=$(printf '%s' "$_gf_doc" | json_get "$_gf_key" "$_gf_depth" && printf x) || {{
    echo "gpufleet: secret $_gf_name from $_gf_ref: the answer holds no text value ($_gf_key)"; return 1; }}
  _gf_v=${{_gf_v%x}}
  if [ -n "$_gf_b64" ]; then
    _gf_v=$(printf '%s' "$_gf_v" | base64 -d && printf x) || {{ echo "gpufleet: secret $_gf_name from $_gf_ref: not base64"; return 1; }}
    _gf_v=${{_gf_v%x}}
  fi
  printf -v "$_gf_name" '%s' "$_gf_v"
  export "$_gf_name"
}}
"#
    )
}

/// The lines that read `workload`'s secrets on `cloud` at boot, each from
/// its reference there; none of them holds a value.
pub(super) fn secret_reads(workload: &Workload, cloud: Cloud) -> Result<String> {
    use gpufleet_core::placer::SecretRef;
    let mut out = String::new();
    for (name, refs) in &workload.secrets {
        let r = refs.get(&cloud).ok_or_else(|| {
            Error::invalid_input(format!(
                "secret {name} has no reference in {}: the job cannot run there",
                cloud.title()
            ))
        })?;
        let args = match r {
            SecretRef::AwsSecretsManager { secret_id, region } => format!(
                "1 SecretString '' aws_secret secretsmanager {} {}",
                quote(secret_id),
                quote(region.as_deref().unwrap_or_default())
            ),
            SecretRef::AwsSsm {
                name: param,
                region,
            } => format!(
                "2 Value '' aws_secret ssm {} {}",
                quote(param),
                quote(region.as_deref().unwrap_or_default())
            ),
            SecretRef::GcpSecretManager {
                project,
                secret,
                version,
            } => format!(
                "2 data b64 gcp_secret {} {} {}",
                quote(project),
                quote(secret),
                quote(version)
            ),
            SecretRef::AzureKeyVault {
                vault,
                name: secret,
                version,
            } => format!(
                "1 value '' azure_secret {} {} {}",
                quote(vault),
                quote(secret),
                quote(version.as_deref().unwrap_or_default())
            ),
            // The fake cloud runs no script.
            _ => continue,
        };
        out.push_str(&format!(
            "secret {name} {} {args} || {{ report gpufleet:exit {SECRETS_EXIT}; exit 78; }}\n",
            quote(&r.to_string())
        ));
    }
    if out.is_empty() {
        return Ok(out);
    }
    Ok(format!("{}{out}", secret_functions(cloud)))
}

/// What a node reports as its exit (`gpufleet:exit`) when it could not
/// read the job's secrets: nothing ran.
pub const SECRETS_EXIT: &str = "secrets";

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::tests::{between, only, real_curl, shim, shimmed};
    use super::*;
    use gpufleet_core::placer::JobSpec;
    use gpufleet_testkit::aws::moto;
    use std::process::{Command, Stdio};

    /// The awks a node may have, of those on this machine: mawk (Debian,
    /// Ubuntu), gawk (Amazon Linux, RHEL), busybox (minimal images).
    fn awks() -> Vec<&'static str> {
        let found = |cmd: &str| {
            Command::new("sh")
                .args(["-c", &format!("{cmd} 'BEGIN {{ exit 0 }}'")])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        ["mawk", "gawk", "busybox awk"]
            .into_iter()
            .filter(|a| found(a))
            .collect()
    }

    /// `json_get KEY DEPTH` run by bash with `awk` on `doc`: its status and
    /// output.
    fn json_get(awk: &str, doc: &str, key: &str, depth: u32) -> (i32, Vec<u8>) {
        use std::io::Write;
        let script = format!(
            "awk() {{ {awk} \"$@\"; }}\n{}\njson_get {key} {depth}\n",
            secret_functions(Cloud::Fake)
        );
        let mut child = Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(doc.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (out.status.code().unwrap_or(-1), out.stdout)
    }

    /// The decoder the node uses on the stores' answers, with no JSON tool
    /// on the image: escapes, `\u` escapes to UTF-8 (a surrogate pair to one
    /// character), the key at its own depth only (a value or a nested tag
    /// named like it is not it), pretty-printed documents; a missing key, a
    /// NUL and a value that is not a string are failures, not an empty
    /// secret.
    #[test]
    fn json_get_decodes_what_the_stores_answer() {
        let awks = awks();
        assert!(!awks.is_empty(), "no awk on this machine");
        for awk in awks {
            decodes_with(awk);
        }
    }

    fn decodes_with(awk: &str) {
        eprintln!("with {awk}");
        let json_get = |doc: &str, key: &str, depth: u32| json_get(awk, doc, key, depth);
        let sm = r#"{"ARN":"arn:aws:secretsmanager:us-east-1:123456789012:secret:w","Name":"SecretString","SecretString":"p@ss \"w\\o\/rd\"\n\u00e9\u20AC\ud83d\ude00 $(id) `x` end\n","VersionId":"v-1"}"#;
        assert_eq!(
            json_get(sm, "SecretString", 1),
            (
                0,
                "p@ss \"w\\o/rd\"\né€😀 $(id) `x` end\n".as_bytes().to_vec()
            )
        );
        let ssm = "{\n  \"Parameter\" : {\n    \"Name\" : \"Value\",\n    \"Type\" : \"SecureString\",\n    \"Value\" : \"s3cr3t\\ttab\",\n    \"Version\" : 1\n  }\n}\n";
        assert_eq!(json_get(ssm, "Value", 2), (0, b"s3cr3t\ttab".to_vec()));
        let kv = r#"{"tags":{"value":"wrong"},"attributes":{"enabled":true},"value":"right","id":"https://kv-1.vault.azure.net/secrets/s/0123"}"#;
        assert_eq!(json_get(kv, "value", 1), (0, b"right".to_vec()));
        assert_eq!(json_get(r#"{"value":""}"#, "value", 1), (0, Vec::new()));
        assert_eq!(json_get(kv, "missing", 1).0, 1);
        assert_eq!(json_get(r#"{"value":"a\u0000b"}"#, "value", 1).0, 2);
        assert_eq!(json_get(r#"{"value":"a\qb"}"#, "value", 1).0, 2);
        assert_eq!(json_get(r#"{"value":7}"#, "value", 1).0, 3);
    }

    /// A secret named as one of the reading function's own variables once
    /// was (`name`, `v`, `key`, `ref`, `doc`, `try`, `depth`, `b64`) or as
    /// the script's (`D`, `U`, `H`) arrives exported exactly, and no value
    /// is printed (`[secrets] name = ...` used to run `export 'VALUE'`,
    /// whose error carried the value to the console).
    #[test]
    fn a_secret_named_as_the_scripts_own_variables_arrives_exactly() {
        let names = [
            "name", "v", "key", "ref", "doc", "try", "depth", "b64", "D", "U", "H", "shift",
        ];
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("seen");
        let mut script = format!(
            "set -u\n{}\nstore() {{ printf '{{\"value\":\"%s\"}}' \"$1\"; }}\n",
            secret_functions(Cloud::Fake)
        );
        for n in names {
            script.push_str(&format!(
                "secret {n} 'ref-{n}' 1 value '' store 'S3cr3t-{n}-Val' || exit 7\n"
            ));
        }
        for n in names {
            script.push_str(&format!(
                "export -p | grep -q '^declare -x {n}=' || exit 8\nprintf '%s\\0' \"${n}\" >> '{}'\n",
                out.display()
            ));
        }
        let o = Command::new("bash").args(["-c", &script]).output().unwrap();
        let printed =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{:?}: {printed}", o.status);
        assert!(!printed.contains("S3cr3t"), "a value printed: {printed}");
        let seen = std::fs::read(&out).unwrap();
        let seen: Vec<String> = seen
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).to_string())
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(seen[i], format!("S3cr3t-{n}-Val"), "{n}");
        }
    }

    /// A job with one secret in every store.
    fn job() -> JobSpec {
        JobSpec::from_toml(
            r#"
            hours = 1
            run = "python train.py"
            [[gpu]]
            model = "T4"
            [secrets]
            HF_TOKEN = { aws = "secretsmanager:ml/hf", gcp = "projects/ml-prod/secrets/hf", azure = "https://ml-kv.vault.azure.net/secrets/hf" }
            "#,
        )
        .unwrap()
    }

    /// A value no shell quoting survives by accident: quotes, a command
    /// substitution, a backslash, non-ASCII, and a trailing newline.
    const VALUE: &str = "line 'one'\n\"two\" $(touch /tmp/gpufleet-pwned) \\ é\n";

    /// Runs `reads` (the secret lines for `cloud`) after the store's
    /// functions, by bash with a `curl` shim answering the token and the
    /// store from `store` (a shell `case` body), `report` recorded: the
    /// status, what the script printed, and the calls made.
    fn boot(cloud: Cloud, store: &str, env: &[(&str, &str)]) -> (i32, String, String, Vec<u8>) {
        boot_with(&job().workload, cloud, store, env, None)
    }

    /// [`boot`] for `workload`, with `PATH` holding only `tools` (linked)
    /// beside the shims when given.
    fn boot_with(
        workload: &Workload,
        cloud: Cloud,
        store: &str,
        env: &[(&str, &str)],
        tools: Option<&[&str]>,
    ) -> (i32, String, String, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.log");
        let out = dir.path().join("value");
        shim(
            dir.path(),
            "curl",
            &format!(
                "echo \"args: $*\" >> '{log}'\ncase \"$*\" in\n*oauth2/token*|*service-accounts/default/token*) echo '{{\"access_token\":\"tok-secret-1\",\"expires_in\":3599}}' ;;\n{store}\n*) exit 22 ;;\nesac",
                log = log.display()
            ),
        );
        shim(dir.path(), "sleep", "exit 0");
        let reads = secret_reads(workload, cloud).unwrap();
        let script = format!(
            "set -u\n{}\nreport() {{ echo \"report $*\" >> '{log}'; }}\n{reads}printf '%s' \"$HF_TOKEN\" > '{out}'\nexport -p | grep -q 'declare -x HF_TOKEN=' || exit 9\n",
            super::super::reporter(cloud),
            log = log.display(),
            out = out.display()
        );
        let mut c = Command::new("bash");
        c.args(["-c", &script])
            .env(
                "PATH",
                match tools {
                    Some(tools) => only(dir.path(), tools),
                    None => shimmed(dir.path()),
                },
            )
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(&log).unwrap_or_default(),
            std::fs::read(&out).unwrap_or_default(),
        )
    }

    /// GCP and Azure: the node reads the secret with its own identity (the
    /// metadata server's token, handed to curl on stdin), from the store's
    /// REST API as its reference says (gcloud's endpoint override honoured),
    /// into the exported environment exactly, trailing newline and all; no
    /// command line carries the token or the value. A store that refuses
    /// (403) is asked three times, then the script names the secret and its
    /// reference, reports `gpufleet:exit secrets` and exits 78: nothing of
    /// the job runs without its secrets.
    #[test]
    fn gcp_and_azure_secrets_reach_the_environment_and_no_command_line() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(VALUE);
        let escaped = serde_json::to_string(VALUE).unwrap();
        let gcp_doc = format!(
            r#"{{"name":"projects/123/secrets/hf/versions/4","payload":{{"data":"{b64}","dataCrc32c":"1234"}}}}"#
        );
        let kv_doc = format!(
            r#"{{"value":{escaped},"id":"https://ml-kv.vault.azure.net/secrets/hf/0123456789abcdef0123456789abcdef","attributes":{{"enabled":true}},"tags":{{"value":"not-it"}}}}"#
        );
        let answer = |url: &str, doc: &str| {
            format!("*{url}*) echo \"stdin: $(cat)\" >> \"${{0%/*}}/calls.log\"; cat <<'DOC'\n{doc}\nDOC\n;;")
        };
        for (cloud, url, env, doc) in [
            (
                Cloud::Gcp,
                "https://secretmanager.googleapis.com/v1/projects/ml-prod/secrets/hf/versions/latest:access",
                vec![],
                &gcp_doc,
            ),
            (
                Cloud::Gcp,
                "http://127.0.0.1:9/v1/projects/ml-prod/secrets/hf/versions/latest:access",
                vec![("CLOUDSDK_API_ENDPOINT_OVERRIDES_SECRETMANAGER", "http://127.0.0.1:9/")],
                &gcp_doc,
            ),
            (
                Cloud::Azure,
                "https://ml-kv.vault.azure.net/secrets/hf?api-version=7.4",
                vec![],
                &kv_doc,
            ),
        ] {
            let (code, printed, calls, value) = boot(cloud, &answer(url, doc), &env);
            assert_eq!(code, 0, "{cloud}: {printed}\n{calls}");
            assert_eq!(String::from_utf8_lossy(&value), VALUE, "{cloud}: {calls}");
            assert!(calls.contains("stdin: Authorization: Bearer tok-secret-1"), "{calls}");
            for line in calls.lines().filter(|l| l.starts_with("args:")) {
                assert!(!line.contains("tok-secret-1"), "the token on a command line: {line}");
                assert!(!line.contains("pwned") && !line.contains(&b64), "the value on a command line: {line}");
            }
            if cloud == Cloud::Azure {
                assert!(calls.contains("resource=https://vault.azure.net"), "{calls}");
            }
            assert!(!printed.contains("pwned"), "{printed}");

            // The store refuses: three asks, then a clear failure.
            let (code, printed, calls, _) = boot(cloud, &format!("*{url}*) exit 22 ;;"), &env);
            assert_eq!(code, 78, "{printed}\n{calls}");
            assert_eq!(calls.matches(url).count(), 3, "{calls}");
            assert!(calls.contains("report gpufleet:exit secrets"), "{calls}");
            assert!(
                printed.contains("could not read secret HF_TOKEN from ")
                    && printed.contains(&job().workload.secrets["HF_TOKEN"][&cloud].to_string()),
                "{printed}"
            );
        }
        assert!(!std::path::Path::new("/tmp/gpufleet-pwned").exists());
    }

    /// AWS on an image without the aws CLI: Secrets Manager's
    /// GetSecretValue and Systems Manager's GetParameter (a SecureString,
    /// decrypted), signed by curl with the instance profile's temporary
    /// credentials (served by a `curl` shim as IMDS does), against
    /// moto_server with IAM authentication on, so every signature is checked
    /// and a wrong one refused. The values arrive exact; with a wrong
    /// secret key the node asks three times and fails the boot (78) naming
    /// the secret; no command line shows a credential or a value.
    #[test]
    fn aws_secrets_are_read_signed_as_moto_checks_it() {
        let Some(real_curl) = real_curl() else {
            eprintln!("*** SKIPPED: no curl on PATH ***");
            return;
        };
        // Five requests free of authentication set up the role, its
        // credentials and the two secrets; every later one is checked.
        let Some(moto) = moto::Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "5")]) else {
            return;
        };
        let call = |service: &str, target: Option<&str>, body: &[(&str, &str)]| -> String {
            let mut c = Command::new(&real_curl);
            c.args(["-s", "-m", "30", &format!("{}/", moto.url), "-H"]).arg(format!(
                "Authorization: AWS4-HMAC-SHA256 Credential=setup/20261128/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"
            ));
            match target {
                Some(target) => {
                    let doc: serde_json::Map<String, serde_json::Value> = body
                        .iter()
                        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
                        .collect();
                    c.args(["-H", &format!("X-Amz-Target: {target}")])
                        .args(["-H", "Content-Type: application/x-amz-json-1.1", "-d"])
                        .arg(serde_json::Value::Object(doc).to_string());
                }
                None => {
                    for (k, v) in body {
                        c.arg("--data-urlencode").arg(format!("{k}={v}"));
                    }
                }
            }
            String::from_utf8(c.output().unwrap().stdout).unwrap()
        };
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let allow = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["secretsmanager:GetSecretValue","ssm:GetParameter","kms:Decrypt"],"Resource":"*"}]}"#;
        call(
            "iam",
            None,
            &[
                ("Action", "CreateRole"),
                ("RoleName", "node-role"),
                ("AssumeRolePolicyDocument", trust),
                ("Version", "2010-05-08"),
            ],
        );
        call(
            "iam",
            None,
            &[
                ("Action", "PutRolePolicy"),
                ("RoleName", "node-role"),
                ("PolicyName", "read-secrets"),
                ("PolicyDocument", allow),
                ("Version", "2010-05-08"),
            ],
        );
        let assumed = call(
            "sts",
            None,
            &[
                ("Action", "AssumeRole"),
                ("RoleArn", "arn:aws:iam::123456789012:role/node-role"),
                ("RoleSessionName", "node"),
                ("Version", "2011-06-15"),
            ],
        );
        let created = call(
            "secretsmanager",
            Some("secretsmanager.CreateSecret"),
            &[("Name", "ml/hf"), ("SecretString", VALUE)],
        );
        assert!(created.contains("ml/hf"), "{created}");
        let put = call(
            "ssm",
            Some("AmazonSSM.PutParameter"),
            &[
                ("Name", "/ml/wandb"),
                ("Value", "wandb-s3cr3t"),
                ("Type", "SecureString"),
            ],
        );
        assert!(put.contains("Version"), "{put}");
        let (ak, sk, tok) = (
            between(&assumed, "<AccessKeyId>"),
            between(&assumed, "<SecretAccessKey>"),
            between(&assumed, "<SessionToken>"),
        );
        assert!(
            !ak.is_empty() && !sk.is_empty() && !tok.is_empty(),
            "{assumed}"
        );

        let spec = JobSpec::from_toml(
            "hours = 1\nrun = \"x\"\n[[gpu]]\nmodel = \"T4\"\n[secrets]\nHF_TOKEN = \"secretsmanager:ml/hf\"\nWANDB_API_KEY = \"arn:aws:ssm:us-east-1:123456789012:parameter/ml/wandb\"\n",
        )
        .unwrap();
        let imds = |secret: &str| {
            let doc = format!(
                "{{\n  \"Code\" : \"Success\",\n  \"Type\" : \"AWS-HMAC\",\n  \"AccessKeyId\" : \"{ak}\",\n  \"SecretAccessKey\" : \"{secret}\",\n  \"Token\" : \"{tok}\",\n  \"Expiration\" : \"2026-11-28T23:00:00Z\"\n}}"
            );
            format!(
                "*169.254.169.254*api/token*) echo imds-token ;;\n*169.254.169.254*placement/region*) echo us-east-1 ;;\n*169.254.169.254*services/domain*) echo amazonaws.com ;;\n*169.254.169.254*security-credentials/node-role*) cat <<'DOC'\n{doc}\nDOC\n;;\n*169.254.169.254*security-credentials/*) echo node-role ;;\n*169.254.169.254*) exit 22 ;;\n*) exec '{curl}' \"$@\" ;;",
                curl = real_curl.display()
            )
        };
        let tools: &[&str] = &["bash", "head", "sed", "tr", "cat", "awk", "grep"];
        let env = [("AWS_ENDPOINT_URL", moto.url.as_str())];
        let (code, printed, calls, value) =
            boot_with(&spec.workload, Cloud::Aws, &imds(sk), &env, Some(tools));
        assert_eq!(code, 0, "{printed}\n{calls}");
        assert_eq!(String::from_utf8_lossy(&value), VALUE, "{calls}");
        assert!(
            calls.contains("--aws-sigv4 aws:amz:us-east-1:secretsmanager"),
            "{calls}"
        );
        assert!(
            calls.contains("--aws-sigv4 aws:amz:us-east-1:ssm"),
            "{calls}"
        );
        for secret in [sk, tok, "wandb-s3cr3t", "pwned"] {
            assert!(
                !calls.contains(secret),
                "{secret:?} on a command line:\n{calls}"
            );
        }

        // The wandb value itself, read on its own.
        let only_wandb = JobSpec::from_toml(
            "hours = 1\nrun = \"x\"\n[[gpu]]\nmodel = \"T4\"\n[secrets]\nHF_TOKEN = \"ssm:/ml/wandb\"\n",
        )
        .unwrap();
        let (code, printed, _, value) = boot_with(
            &only_wandb.workload,
            Cloud::Aws,
            &imds(sk),
            &env,
            Some(tools),
        );
        assert_eq!((code, value), (0, b"wandb-s3cr3t".to_vec()), "{printed}");

        // Signed with a wrong secret key: moto refuses, the boot fails.
        let (code, printed, calls, value) = boot_with(
            &spec.workload,
            Cloud::Aws,
            &imds("wrong-secret"),
            &env,
            Some(tools),
        );
        assert_eq!(code, 78, "{printed}\n{calls}");
        assert!(value.is_empty());
        assert!(
            printed.contains("could not read secret HF_TOKEN from secretsmanager:ml/hf"),
            "{printed}"
        );
        assert!(calls.contains("report gpufleet:exit secrets"), "{calls}");
    }

    /// The whole boot script of a job with secrets in every store, on each
    /// cloud: the references are in it, the reading comes before the saved
    /// environment and before `setup`, it passes `bash -n`, and it stays
    /// under EC2's 16 KiB user-data limit with room to spare.
    #[test]
    fn the_boot_script_carries_references_within_the_limit() {
        let mut w = job().workload;
        w.setup = Some("pip install -r requirements.txt".into());
        w.checkpoint = Some("kill -USR1 1".into());
        let more = JobSpec::from_toml(
            r#"
            hours = 1
            run = "x"
            [[gpu]]
            model = "T4"
            [secrets]
            WANDB_API_KEY = { aws = "arn:aws:ssm:us-west-2:123456789012:parameter/ml/wandb", gcp = "projects/ml-prod/secrets/wandb/versions/7", azure = "https://ml-kv.vault.azure.net/secrets/wandb/0123456789abcdef0123456789abcdef" }
            "#,
        )
        .unwrap();
        w.secrets.extend(more.workload.secrets);
        for cloud in Cloud::REAL {
            let s = super::super::boot_script(&w, cloud, "job-1", 1, Some("ssh-ed25519 AAAA x"))
                .unwrap();
            for r in w.secrets.values().map(|refs| refs[&cloud].to_string()) {
                assert!(
                    s.contains(&format!("'{r}'")),
                    "{cloud}: {r} not in the script"
                );
            }
            let read = s.find("secret HF_TOKEN ").unwrap();
            assert!(read < s.find("export -p > \"$_gf_d/env.sh\"").unwrap());
            assert!(read < s.find("setup.sh\" ||").unwrap_or(usize::MAX));
            eprintln!("{cloud}: {} bytes", s.len());
            assert!(s.len() < 14 * 1024, "{cloud}: {} bytes", s.len());
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), &s).unwrap();
            let st = Command::new("bash")
                .arg("-n")
                .arg(file.path())
                .status()
                .unwrap();
            assert!(st.success(), "bash -n failed for {cloud}");
        }
        // A cloud the job has no reference in is refused, not read blind.
        let e = secret_reads(&w, Cloud::Fake).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("no reference in fake"), "{e}");
    }

    /// GCP and Azure against the stores' REST stand-ins with the real curl:
    /// the metadata service's token (played by a `curl` shim, which also
    /// sends the vault's host to the stand-in) reaches the store as a bearer
    /// header read from curl's stdin, and the value arrives exact; with a
    /// token the store does not accept it refuses (403, 401) and the boot
    /// fails naming the secret.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gcp_and_azure_secrets_are_read_from_the_rest_stand_ins() {
        let Some(real_curl) = real_curl() else {
            eprintln!("*** SKIPPED: no curl on PATH ***");
            return;
        };
        let server = wiremock::MockServer::start().await;
        gpufleet_testkit::secrets::secret_manager(
            &server,
            "ml-prod",
            "hf",
            4,
            VALUE.as_bytes(),
            "ya29.node",
        )
        .await;
        gpufleet_testkit::secrets::key_vault(&server, "hf", VALUE, "kv-node").await;
        let uri = server.uri();
        for (cloud, token, ok) in [
            (Cloud::Gcp, "ya29.node", true),
            (Cloud::Gcp, "ya29.other", false),
            (Cloud::Azure, "kv-node", true),
            (Cloud::Azure, "kv-other", false),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("calls.log");
            let out = dir.path().join("value");
            let curl = dir.path().join("curl");
            std::fs::write(
                &curl,
                format!(
                    "#!/bin/bash\necho \"args: $*\" >> '{log}'\ncase \"$*\" in\n*oauth2/token*|*service-accounts/default/token*) echo '{{\"access_token\":\"{token}\",\"expires_in\":3599}}'; exit 0 ;;\n*169.254.169.254*|*metadata.google.internal*) exit 22 ;;\nesac\nargs=()\nfor a in \"$@\"; do args+=(\"${{a/https:\\/\\/ml-kv.vault.azure.net/{uri}}}\"); done\nexec '{real}' \"${{args[@]}}\"\n",
                    log = log.display(),
                    real = real_curl.display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&curl, std::fs::Permissions::from_mode(0o755)).unwrap();
            shim(dir.path(), "sleep", "exit 0");
            let reads = secret_reads(&job().workload, cloud).unwrap();
            let script = format!(
                "set -u\nreport() {{ echo \"report $*\" >> '{log}'; }}\n{reads}printf '%s' \"$HF_TOKEN\" > '{out}'\n",
                log = log.display(),
                out = out.display()
            );
            let (path, endpoint) = (shimmed(dir.path()), format!("{uri}/"));
            let o = tokio::task::spawn_blocking(move || {
                Command::new("bash")
                    .args(["-c", &script])
                    .env("PATH", path)
                    .env("CLOUDSDK_API_ENDPOINT_OVERRIDES_SECRETMANAGER", endpoint)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap()
            })
            .await
            .unwrap();
            let printed = String::from_utf8_lossy(&o.stdout).to_string();
            let calls = std::fs::read_to_string(&log).unwrap_or_default();
            if ok {
                assert_eq!(o.status.code(), Some(0), "{cloud}: {printed}\n{calls}");
                assert_eq!(std::fs::read_to_string(&out).unwrap(), VALUE, "{cloud}");
            } else {
                assert_eq!(o.status.code(), Some(78), "{cloud}: {printed}\n{calls}");
                assert!(
                    printed.contains("could not read secret HF_TOKEN"),
                    "{printed}"
                );
                assert!(!out.exists());
            }
            for line in calls.lines().filter(|l| l.starts_with("args:")) {
                assert!(!line.contains(token), "the token on a command line: {line}");
            }
        }
    }
}
