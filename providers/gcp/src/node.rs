//! The node's side of Compute Engine, in shell: what a gpufleet node runs on its
//! own instance to report to the controller (tags) and to see an
//! interruption coming, with `curl` alone where the image has no cloud CLI.
//! The runtime's boot script includes these for an instance of this cloud;
//! they live here, beside the API calls the controller makes, so adding a
//! cloud is one crate.

/// `report key value [key value …]`: writes the tags on the node's own
/// instance in one call, and never fails the caller (a report that cannot
/// be written is retried at the next beat).
///
/// gcloud where the image has it (Compute Engine's public images);
/// elsewhere the Compute API itself with the VM's service-account
/// token from the metadata server: read the labels and their
/// fingerprint, merge ours in, `setLabels` (once more if another
/// writer changed them meanwhile). Label keys and values are
/// lowercase letters, digits, `-` and `_`, so the JSON needs no
/// parser. The token goes to curl on stdin. gcloud's endpoint
/// override (`CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`) is honoured.
pub const REPORTER: &str = r#"report() {
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

/// `notice_pending`: true when the cloud has given this node notice that it
/// will be taken (its metadata service says so), read with `curl` alone.
pub const NOTICE_CHECK: &str = r#"notice_pending() {
  local md=http://metadata.google.internal/computeMetadata/v1/instance
  [ "$(curl -sf -m 2 -H 'Metadata-Flavor: Google' $md/preempted)" = TRUE ] && return 0
  [ "$(curl -sf -m 2 -H 'Metadata-Flavor: Google' $md/maintenance-event)" = TERMINATE_ON_HOST_MAINTENANCE ]
}"#;
