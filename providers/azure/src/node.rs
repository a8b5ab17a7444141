//! The node's side of Azure, in shell: what a gpufleet node runs on its
//! own instance to report to the controller (tags) and to see an
//! interruption coming, with `curl` alone where the image has no cloud CLI.
//! The runtime's boot script includes these for an instance of this cloud;
//! they live here, beside the API calls the controller makes, so adding a
//! cloud is one crate.

/// `report key value [key value …]`: writes the tags on the node's own
/// instance in one call, and never fails the caller (a report that cannot
/// be written is retried at the next beat).
///
/// The Resource Manager's tags API with the VM's managed identity,
/// through IMDS and curl alone: the az CLI is on few images. The
/// token goes to curl on stdin, not on its command line.
pub const REPORTER: &str = r#"report() {
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

/// `notice_pending`: true when the cloud has given this node notice that it
/// will be taken (its metadata service says so), read with `curl` alone.
pub const NOTICE_CHECK: &str = r#"notice_pending() {
  local md=http://169.254.169.254/metadata name ev
  name=$(curl -sf -m 2 -H Metadata:true "$md/instance/compute/name?api-version=2021-02-01&format=text") || return 1
  ev=$(curl -sf -m 2 -H Metadata:true "$md/scheduledevents?api-version=2020-07-01") || return 1
  printf %s "$ev" | tr '{' '\n' | grep -E '"EventType" *: *"(Preempt|Terminate)"' | grep -qF "\"$name\""
}"#;
