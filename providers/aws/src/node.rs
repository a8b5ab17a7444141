//! The node's side of EC2, in shell: what a gpufleet node runs on its
//! own instance to report to the controller (tags) and to see an
//! interruption coming, with `curl` alone where the image has no cloud CLI.
//! The runtime's boot script includes these for an instance of this cloud;
//! they live here, beside the API calls the controller makes, so adding a
//! cloud is one crate.

/// `report key value [key value …]`: writes the tags on the node's own
/// instance in one call, and never fails the caller (a report that cannot
/// be written is retried at the next beat).
///
/// The aws CLI where the image has it (the Deep Learning AMIs);
/// elsewhere the EC2 Query API's CreateTags, signed by curl itself
/// (`--aws-sigv4`, curl 7.75 or newer) with the instance profile's
/// credentials from IMDS. Those reach curl on stdin (`-K -`), never
/// on its command line, where any process could read them. The
/// endpoint honours AWS_ENDPOINT_URL_EC2 and AWS_ENDPOINT_URL, as the
/// SDKs and the CLI do.
pub const REPORTER: &str = r#"aws_creds() {
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

/// `notice_pending`: true when the cloud has given this node notice that it
/// will be taken (its metadata service says so), read with `curl` alone.
pub const NOTICE_CHECK: &str = r#"notice_pending() {
  local t
  t=$(curl -sf -m 2 -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') || return 1
  curl -sf -m 2 -o /dev/null -H "X-aws-ec2-metadata-token: $t" http://169.254.169.254/latest/meta-data/spot/instance-action
}"#;
