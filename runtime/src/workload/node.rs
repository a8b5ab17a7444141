//! The node's side of each cloud, in shell: how a gpufleet node writes
//! tags on its own instance (`report key value [key value …]`, which never
//! fails its caller: a report that cannot be written is retried at the next
//! beat) and how it tells, with `curl` alone, that it is about to be taken
//! (`notice_pending`), for a node whose image has no `gpufleet` to run the
//! watch agent. One table, one row per cloud: the boot script reads it
//! through [`node_side`], which refuses a cloud without a row (the model's
//! `Cloud` is non-exhaustive), never a node that cannot report or see a
//! notice. Adding a cloud adds its row here.
//!
//! The table is in the runtime rather than in each provider crate so that
//! a build without a cloud's SDK (the Python package's default, a fake-cloud
//! test) still writes that cloud's boot script whole.

use gpufleet_core::{Cloud, Error, ErrorKind, Result};

/// One cloud's node pieces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeSide {
    /// The cloud.
    pub(crate) cloud: Cloud,
    /// Defines `report`.
    pub(crate) reporter: &'static str,
    /// Defines `notice_pending`.
    pub(crate) notice_check: &'static str,
}

/// Aws's `report`.
///
/// The aws CLI where the image has it (the Deep Learning AMIs);
/// elsewhere the EC2 Query API's CreateTags, signed by curl itself
/// (`--aws-sigv4`, curl 7.75 or newer) with the instance profile's
/// credentials from IMDS. Those reach curl on stdin (`-K -`), never
/// on its command line, where any process could read them. The
/// endpoint honours AWS_ENDPOINT_URL_EC2 and AWS_ENDPOINT_URL, as the
/// SDKs and the CLI do.
const AWS_REPORTER: &str = r#"aws_creds() {
  local md=http://169.254.169.254/latest role cred k v
  role=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $1" $md/meta-data/iam/security-credentials/ | head -n 1) || return 1
  [ -n "$role" ] || return 1
  cred=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $1" "$md/meta-data/iam/security-credentials/$role") || return 1
  # The document's string fields as `key value` lines (sed is given the
  # document on stdin, never the secrets as arguments).
  while read -r k v; do
    case "$k" in AccessKeyId) ak=$v ;; SecretAccessKey) sk=$v ;; Token) tok=$v ;; esac
  done < <(printf '%s\n' "$cred" | tr ',{}' '\n\n\n' | sed -n 's/^ *"\([A-Za-z]*\)" *: *"\([^"]*\)".*/\1 \2/p')
  [ -n "$ak" ] && [ -n "$sk" ]
}
report() {
  local md=http://169.254.169.254/latest t id region
  t=$(curl -sf -m 5 -X PUT $md/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300') || return 0
  id=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $t" $md/meta-data/instance-id) || return 0
  region=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $t" $md/meta-data/placement/region) || return 0
  if command -v aws >/dev/null 2>&1; then
    local tags=()
    while [ $# -ge 2 ]; do tags+=("Key=$1,Value=$2"); shift 2; done
    aws ec2 create-tags --region "$region" --resources "$id" --tags "${tags[@]}" >/dev/null 2>&1 || true
    return 0
  fi
  local ak="" sk="" tok="" domain ep n=1 form=()
  aws_creds "$t" || return 0
  domain=$(curl -sf -m 5 -H "X-aws-ec2-metadata-token: $t" $md/meta-data/services/domain) || domain=amazonaws.com
  ep=${AWS_ENDPOINT_URL_EC2:-${AWS_ENDPOINT_URL:-https://ec2.$region.$domain}}
  form=(--data-urlencode Action=CreateTags --data-urlencode Version=2016-11-15 --data-urlencode "ResourceId.1=$id")
  while [ $# -ge 2 ]; do
    form+=(--data-urlencode "Tag.$n.Key=$1" --data-urlencode "Tag.$n.Value=$2"); n=$((n + 1)); shift 2
  done
  { printf 'user = "%s:%s"\n' "$ak" "$sk"
    [ -z "$tok" ] || printf 'header = "X-Amz-Security-Token: %s"\n' "$tok"
  } | curl -sf -m 10 -K - --aws-sigv4 "aws:amz:$region:ec2" "${form[@]}" "${ep%/}/" >/dev/null 2>&1 || true
}"#;

/// Aws's `notice_pending`.
const AWS_NOTICE: &str = r#"notice_pending() {
  local t
  t=$(curl -sf -m 2 -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') || return 1
  curl -sf -m 2 -o /dev/null -H "X-aws-ec2-metadata-token: $t" http://169.254.169.254/latest/meta-data/spot/instance-action
}"#;

/// Gcp's `report`.
///
/// gcloud where the image has it (Compute Engine's public images);
/// elsewhere the Compute API itself with the VM's service-account
/// token from the metadata server: read the labels and their
/// fingerprint, merge ours in, `setLabels` (once more if another
/// writer changed them meanwhile). Label keys and values are
/// lowercase letters, digits, `-` and `_`, so the JSON needs no
/// parser. The token goes to curl on stdin. gcloud's endpoint
/// override (`CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`) is honoured.
const GCP_REPORTER: &str = r#"report() {
  local md=http://metadata.google.internal/computeMetadata/v1 name zone
  name=$(curl -sf -m 5 -H 'Metadata-Flavor: Google' $md/instance/name) || return 0
  zone=$(curl -sf -m 5 -H 'Metadata-Flavor: Google' $md/instance/zone) || return 0
  zone=${zone##*/}
  if command -v gcloud >/dev/null 2>&1; then
    local labels=""
    while [ $# -ge 2 ]; do labels="${labels:+$labels,}$(printf %s "$1" | tr ':' '-')=$2"; shift 2; done
    gcloud compute instances add-labels "$name" --zone "$zone" --labels="$labels" --quiet >/dev/null 2>&1 || true
    return 0
  fi
  local project tok api url ours="" keys="|" cur fp kv new pair try k
  project=$(curl -sf -m 5 -H 'Metadata-Flavor: Google' $md/project/project-id) || return 0
  tok=$(curl -sf -m 5 -H 'Metadata-Flavor: Google' $md/instance/service-accounts/default/token | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
  [ -n "$tok" ] || return 0
  api=${CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE:-https://compute.googleapis.com/compute/v1/}
  url="${api%/}/projects/$project/zones/$zone/instances/$name"
  while [ $# -ge 2 ]; do
    k=$(printf %s "$1" | tr ':' '-'); ours="$ours,\"$k\":\"$2\""; keys="$keys$k|"; shift 2
  done
  for try in 1 2; do
    cur=$(printf 'Authorization: Bearer %s\n' "$tok" | curl -sf -m 10 -H @- "$url?fields=labels,labelFingerprint" | tr -d ' \t\r\n') || return 0
    fp=$(printf %s "$cur" | sed -n 's/.*"labelFingerprint":"\([^"]*\)".*/\1/p')
    kv=$(printf %s "$cur" | sed -n 's/.*"labels":{\([^}]*\)}.*/\1/p')
    new=""
    local IFS=,
    for pair in $kv; do
      k=${pair%%:*}; k=${k//\"/}
      case "$keys" in *"|$k|"*) ;; *) new="$new,$pair" ;; esac
    done
    unset IFS
    new="$new$ours"
    printf 'Authorization: Bearer %s\n' "$tok" | curl -sf -m 10 -X POST -H @- -H 'Content-Type: application/json' \
      -d "{\"labels\":{${new#,}},\"labelFingerprint\":\"$fp\"}" "$url/setLabels" >/dev/null 2>&1 && return 0
  done
  return 0
}"#;

/// Gcp's `notice_pending`.
const GCP_NOTICE: &str = r#"notice_pending() {
  local md=http://metadata.google.internal/computeMetadata/v1/instance
  [ "$(curl -sf -m 2 -H 'Metadata-Flavor: Google' $md/preempted)" = TRUE ] && return 0
  [ "$(curl -sf -m 2 -H 'Metadata-Flavor: Google' $md/maintenance-event)" = TERMINATE_ON_HOST_MAINTENANCE ]
}"#;

/// Azure's `report`.
///
/// The Resource Manager's tags API with the VM's managed identity,
/// through IMDS and curl alone: the az CLI is on few images. The
/// token goes to curl on stdin, not on its command line.
const AZURE_REPORTER: &str = r#"report() {
  local md=http://169.254.169.254/metadata rid env arm tok tags="" sep=""
  rid=$(curl -sf -m 5 -H Metadata:true "$md/instance/compute/resourceId?api-version=2021-02-01&format=text") || return 0
  env=$(curl -sf -m 5 -H Metadata:true "$md/instance/compute/azEnvironment?api-version=2021-02-01&format=text" | tr '[:upper:]' '[:lower:]')
  case "$env" in
    azureusgovernmentcloud) arm=https://management.usgovcloudapi.net ;;
    azurechinacloud) arm=https://management.chinacloudapi.cn ;;
    *) arm=https://management.azure.com ;;
  esac
  tok=$(curl -sf -m 5 -H Metadata:true "$md/identity/oauth2/token?api-version=2018-02-01&resource=$arm/" | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
  [ -n "$tok" ] || return 0
  while [ $# -ge 2 ]; do tags="$tags$sep\"$1\":\"$2\""; sep=,; shift 2; done
  printf 'Authorization: Bearer %s\n' "$tok" | curl -sf -m 10 -X PATCH -H @- -H 'Content-Type: application/json' \
    -d "{\"operation\":\"Merge\",\"properties\":{\"tags\":{$tags}}}" \
    "$arm$rid/providers/Microsoft.Resources/tags/default?api-version=2021-04-01" >/dev/null 2>&1 || true
}"#;

/// Azure's `notice_pending`.
const AZURE_NOTICE: &str = r#"notice_pending() {
  local md=http://169.254.169.254/metadata name ev
  name=$(curl -sf -m 2 -H Metadata:true "$md/instance/compute/name?api-version=2021-02-01&format=text") || return 1
  ev=$(curl -sf -m 2 -H Metadata:true "$md/scheduledevents?api-version=2020-07-01") || return 1
  printf %s "$ev" | tr '{' '\n' | grep -E '"EventType" *: *"(Preempt|Terminate)"' | grep -qF "\"$name\""
}"#;

/// The fake cloud's `report`: the tags as lines on stdout (its instances
/// run no boot script, and are never given notice by their metadata).
const FAKE_REPORTER: &str = r#"report() {
  while [ $# -ge 2 ]; do printf 'report %s=%s\n' "$1" "$2"; shift 2; done
}"#;

/// Every cloud's node pieces.
pub(crate) const NODE_SIDES: [NodeSide; 4] = [
    NodeSide {
        cloud: Cloud::Aws,
        reporter: AWS_REPORTER,
        notice_check: AWS_NOTICE,
    },
    NodeSide {
        cloud: Cloud::Gcp,
        reporter: GCP_REPORTER,
        notice_check: GCP_NOTICE,
    },
    NodeSide {
        cloud: Cloud::Azure,
        reporter: AZURE_REPORTER,
        notice_check: AZURE_NOTICE,
    },
    NodeSide {
        cloud: Cloud::Fake,
        reporter: FAKE_REPORTER,
        notice_check: "notice_pending() { return 1; }",
    },
];

/// `cloud`'s `report` and `notice_pending`; a cloud the table has no row
/// for is refused.
pub(crate) fn node_side(cloud: Cloud) -> Result<(&'static str, &'static str)> {
    NODE_SIDES
        .iter()
        .find(|n| n.cloud == cloud)
        .map(|n| (n.reporter, n.notice_check))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("no node script for {cloud}: its row in runtime/src/workload/node.rs says how its node reports and sees a notice"),
            )
        })
}
