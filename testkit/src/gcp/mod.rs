//! A stateful Compute Engine + Cloud Billing stand-in on wiremock. Bodies
//! have the REST references' JSON shape: aggregated lists keyed by
//! `zones/…` or `regions/…` with `warning` for empty scopes and
//! `nextPageToken`, `compute#operation` objects that go `RUNNING` -> `DONE`
//! (with `error.errors[].code` on failure), error bodies with
//! `error.errors[].reason`, and Cloud Billing SKUs with `pricingInfo`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub use crate::common::*;
pub use crate::faults::{Fault, Faults};

mod billing;
mod metadata;
pub use billing::*;
pub use metadata::*;

pub const PROJECT: &str = "gpufleet-test";
const API: &str = "https://www.googleapis.com/compute/v1";

#[derive(Debug, Default)]
pub struct State {
    /// zone -> (machine type, cpus, memory MB, accelerator, count)
    pub machine_types: BTreeMap<String, Vec<(String, u32, u32, Option<(String, u32)>)>>,
    /// zone -> (accelerator type, max cards)
    pub accelerator_types: BTreeMap<String, Vec<(String, u32)>>,
    /// SKU pages.
    pub sku_pages: Vec<Vec<Value>>,
    /// zone -> name -> instance JSON
    pub instances: BTreeMap<String, BTreeMap<String, Value>>,
    /// region -> name -> resource policy JSON
    pub policies: BTreeMap<String, BTreeMap<String, Value>>,
    /// operation name -> (operation JSON, polls left before DONE)
    operations: HashMap<String, (Value, u32)>,
    /// requestId -> operation name
    request_ids: HashMap<String, String>,
    /// Faults to inject, and every call: (operation, URL).
    pub faults: Faults<Fault>,
    /// machineTypes.aggregatedList answers with the same token forever.
    pub repeat_token: bool,
    /// Polls before an operation is DONE.
    pub operation_polls: u32,
    next_id: u64,
}

/// The stand-in: clones share state.
#[derive(Clone, Default)]
pub struct Gce(pub Arc<Mutex<State>>);

pub fn error_body(status: u16, reason: &str, message: &str) -> Value {
    json!({"error": {"code": status, "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}]}})
}

fn error(status: u16, reason: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(error_body(status, reason, message))
}

/// Compute Engine's 404 for `resource` (a path below the API, or a name).
fn not_found(resource: &str) -> ResponseTemplate {
    error(
        404,
        "notFound",
        &format!("The resource '{resource}' was not found"),
    )
}

/// The resource `parts` names (`[_, location, _, name]` of
/// `projects/P/{scope}/{location}/{collection}/{name}`) as a 200 when
/// `held` (location -> name -> body) has it, else [`not_found`].
fn found(
    held: &BTreeMap<String, BTreeMap<String, Value>>,
    (scope, collection): (&str, &str),
    parts: &[&str],
) -> ResponseTemplate {
    match held.get(parts[1]).and_then(|l| l.get(parts[3])) {
        Some(r) => ResponseTemplate::new(200).set_body_json(r.clone()),
        None => not_found(&format!(
            "projects/{PROJECT}/{scope}/{}/{collection}/{}",
            parts[1], parts[3]
        )),
    }
}

fn state_default() -> State {
    let mut s = State {
        operation_polls: 1,
        sku_pages: default_skus(),
        ..State::default()
    };
    let a2 = |n: &str, c: u32, m: u32, g: u32| {
        (
            n.to_string(),
            c,
            m,
            Some(("nvidia-tesla-a100".to_string(), g)),
        )
    };
    let n1 = |n: &str, c: u32, m: u32| (n.to_string(), c, m, None);
    s.machine_types.insert(
        "us-central1-a".into(),
        vec![
            a2("a2-highgpu-1g", 12, 87040, 1),
            a2("a2-highgpu-8g", 96, 696320, 8),
            n1("n1-standard-4", 4, 15360),
            n1("n1-standard-8", 8, 30720),
            n1("e2-standard-4", 4, 16384),
        ],
    );
    s.machine_types.insert(
        "us-central1-b".into(),
        vec![
            a2("a2-highgpu-1g", 12, 87040, 1),
            n1("n1-standard-8", 8, 30720),
        ],
    );
    s.machine_types.insert("us-west1-c".into(), vec![]);
    s.accelerator_types.insert(
        "us-central1-a".into(),
        vec![
            ("nvidia-tesla-t4".into(), 4),
            ("nvidia-tesla-a100".into(), 16),
        ],
    );
    s.accelerator_types
        .insert("us-central1-b".into(), vec![("nvidia-tesla-t4".into(), 4)]);
    s
}

fn no_results(scope: &str) -> Value {
    json!({"warning": {"code": "NO_RESULTS_ON_PAGE",
        "message": format!("There are no results for scope '{scope}' on this page."),
        "data": [{"key": "scope", "value": scope}]}})
}

/// The last segment of a URL or partial URL (`…/machineTypes/a2-highgpu-1g`).
fn last_segment(v: &Value) -> String {
    let text = v.as_str().unwrap_or("");
    text.rsplit('/').next().unwrap_or("").to_string()
}

/// An aggregated list's entry for `scope`: the `key` list, or Compute
/// Engine's no-results warning when it is empty.
fn scoped(scope: String, key: &str, listed: Vec<&Value>) -> (String, Value) {
    let entry = if listed.is_empty() {
        no_results(&scope)
    } else {
        json!({ key: listed })
    };
    (scope, entry)
}

fn query(req: &Request) -> HashMap<String, String> {
    req.url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// `labels.k = "v" AND …` terms.
fn label_terms(filter: &str) -> Vec<(String, String)> {
    filter
        .split(" AND ")
        .filter_map(|t| {
            let (k, v) = t.split_once('=')?;
            Some((
                k.trim().strip_prefix("labels.")?.to_string(),
                v.trim().trim_matches('"').to_string(),
            ))
        })
        .collect()
}

stand_in_handles!(Gce, Fault, |server| state_default());

impl Gce {
    /// Resource policies (placement groups), as `region/name`.
    pub fn policy_names(&self) -> Vec<String> {
        let s = self.0.lock().unwrap();
        s.policies
            .iter()
            .flat_map(|(r, m)| m.keys().map(move |n| format!("{r}/{n}")))
            .collect()
    }

    /// Preempts a spot VM as Compute Engine does: the instance goes
    /// `TERMINATED` and the zone records a `compute.instances.preempted`
    /// operation (done, by the system) aimed at it.
    pub fn preempt(&self, zone: &str, name: &str) -> bool {
        let mut s = self.0.lock().unwrap();
        let Some(i) = s.instances.get_mut(zone).and_then(|z| z.get_mut(name)) else {
            return false;
        };
        i["status"] = json!("TERMINATED");
        i["lastStopTimestamp"] = json!("2026-11-22T03:00:00.000-08:00");
        let target = format!("{API}/projects/{PROJECT}/zones/{zone}/instances/{name}");
        let polls = std::mem::replace(&mut s.operation_polls, 0);
        let mut op = Self::operation(
            &mut s,
            ("zone", zone),
            "compute.instances.preempted",
            &target,
            None,
        );
        s.operation_polls = polls;
        op["user"] = json!("system");
        op["progress"] = json!(100);
        op["statusMessage"] = json!("Instance was preempted.");
        op["insertTime"] = json!("2026-11-22T03:00:00.000-08:00");
        let name = op["name"].as_str().unwrap().to_string();
        s.operations.insert(name, (op, 0));
        true
    }

    /// Preempts a spot VM whose termination action is `DELETE`, as Compute
    /// Engine does: the preemption operation is recorded and the VM is
    /// deleted (a `get` is then 404).
    pub fn preempt_and_delete(&self, zone: &str, name: &str) -> bool {
        if !self.preempt(zone, name) {
            return false;
        }
        let mut s = self.0.lock().unwrap();
        s.instances
            .get_mut(zone)
            .and_then(|z| z.remove(name))
            .is_some()
    }

    /// Labels a VM as its node's boot script does (`gcloud compute
    /// instances add-labels`, keys with `:` as `-`): what the node reports
    /// reaches gpufleet this way only.
    pub fn add_labels(&self, zone: &str, name: &str, tags: &[(&str, &str)]) -> bool {
        let mut s = self.0.lock().unwrap();
        let Some(i) = s.instances.get_mut(zone).and_then(|z| z.get_mut(name)) else {
            return false;
        };
        if !i["labels"].is_object() {
            i["labels"] = json!({});
        }
        for (k, v) in tags {
            i["labels"][k.replace(':', "-")] = json!(v);
        }
        true
    }

    /// The instances' bodies as the inserts left them.
    pub fn instance_bodies(&self) -> Vec<Value> {
        self.instances().into_iter().map(|(_, body)| body).collect()
    }

    /// The instances' names.
    pub fn instance_names(&self) -> Vec<String> {
        self.instances().into_iter().map(|(name, _)| name).collect()
    }

    /// Every instance (name, body), zone by zone.
    fn instances(&self) -> Vec<(String, Value)> {
        let s = self.0.lock().unwrap();
        let zones = s.instances.values();
        zones.flat_map(|z| z.clone()).collect()
    }

    fn operation(
        s: &mut State,
        scope: (&str, &str),
        kind: &str,
        target: &str,
        error: Option<&str>,
    ) -> Value {
        s.next_id += 1;
        let name = format!(
            "operation-{}-{:x}",
            1_763_800_000_000u64 + s.next_id,
            s.next_id * 7919
        );
        let (key, scope_name) = scope;
        let mut op = json!({
            "kind": "compute#operation",
            "id": (5_000_000_000_000_000u64 + s.next_id).to_string(),
            "name": name,
            "operationType": kind,
            "targetLink": target,
            "targetId": (7_000_000_000_000_000u64 + s.next_id).to_string(),
            "status": if s.operation_polls == 0 { "DONE" } else { "RUNNING" },
            "user": "gpufleet@gpufleet-test.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": "2026-11-22T01:00:00.000-08:00",
            "startTime": "2026-11-22T01:00:00.100-08:00",
            "selfLink": format!("{API}/projects/{PROJECT}/{key}s/{scope_name}/operations/{name}"),
        });
        op[key] = json!(format!("{API}/projects/{PROJECT}/{key}s/{scope_name}"));
        if let Some(code) = error {
            op["error"] = json!({"errors": [{"code": code, "message": format!("{code}: the operation failed")}]});
            op["httpErrorStatusCode"] = json!(if code.contains("QUOTA") { 403 } else { 503 });
            op["httpErrorMessage"] = json!("SERVICE UNAVAILABLE");
        }
        let polls = s.operation_polls;
        s.operations.insert(name, (op.clone(), polls));
        op
    }

    fn answer(&self, method: &str, path: &str, req: &Request) -> ResponseTemplate {
        let q = query(req);
        if let Some(rest) = path.strip_prefix("/v1/services/6F81-5844-456A/skus") {
            if !rest.is_empty() {
                return error(404, "notFound", "no such path");
            }
            return self.skus(&q);
        }
        let Some(rest) = path.strip_prefix(&format!("/compute/v1/projects/{PROJECT}/")) else {
            return not_found(path);
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let op_name = match (method, parts.as_slice()) {
            ("GET", ["aggregated", "machineTypes"]) => "machineTypes.aggregatedList",
            ("GET", ["aggregated", "acceleratorTypes"]) => "acceleratorTypes.aggregatedList",
            ("GET", ["aggregated", "instances"]) => "instances.aggregatedList",
            ("GET", ["aggregated", "resourcePolicies"]) => "resourcePolicies.aggregatedList",
            ("POST", ["zones", _, "instances"]) => "instances.insert",
            ("GET", ["zones", _, "instances", _]) => "instances.get",
            ("DELETE", ["zones", _, "instances", _]) => "instances.delete",
            ("POST", ["zones", _, "instances", _, "setLabels"]) => "instances.setLabels",
            ("GET", ["zones", _, "operations", _]) => "zoneOperations.get",
            ("GET", ["zones", _, "operations"]) => "zoneOperations.list",
            ("POST", ["regions", _, "resourcePolicies"]) => "resourcePolicies.insert",
            ("GET", ["regions", _, "resourcePolicies", _]) => "resourcePolicies.get",
            ("DELETE", ["regions", _, "resourcePolicies", _]) => "resourcePolicies.delete",
            ("GET", ["regions", _, "operations", _]) => "regionOperations.get",
            _ => return not_found(path),
        };
        let fault = {
            let mut s = self.0.lock().unwrap();
            s.faults.take(op_name, req.url.to_string())
        };
        match fault {
            Some(Fault::Http(status, reason, after)) => {
                return Fault::respond(status, &reason, after, |s, r| {
                    error(s, r, &format!("{r} (injected)"))
                })
            }
            Some(Fault::Raw(t)) => return t,
            Some(Fault::Delay(d)) => {
                return self.route(op_name, &parts, req, &q, None).set_delay(d)
            }
            Some(Fault::Operation(code)) => {
                return self.route(op_name, &parts, req, &q, Some(code))
            }
            Some(Fault::Pass) | None => {}
        }
        self.route(op_name, &parts, req, &q, None)
    }

    fn route(
        &self,
        op_name: &str,
        parts: &[&str],
        req: &Request,
        q: &HashMap<String, String>,
        fail: Option<String>,
    ) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        match op_name {
            "machineTypes.aggregatedList" => {
                let zones: Vec<String> = s.machine_types.keys().cloned().collect();
                // One zone per page.
                let idx: usize = q
                    .get("pageToken")
                    .and_then(|t| t.strip_prefix("mt-"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let mut items = serde_json::Map::new();
                if let Some(z) = zones.get(idx) {
                    let list = &s.machine_types[z];
                    if list.is_empty() {
                        items.insert(format!("zones/{z}"), no_results(&format!("zones/{z}")));
                    } else {
                        let mts: Vec<Value> = list.iter().enumerate().map(|(i, (n, c, m, acc))| {
                            let mut v = json!({
                                "kind": "compute#machineType", "id": (801_016u64 + i as u64).to_string(),
                                "creationTimestamp": "1969-12-31T16:00:00.000-08:00", "name": n,
                                "description": format!("{c} vCPUs, {} GB RAM", m / 1024), "guestCpus": c,
                                "memoryMb": m, "imageSpaceGb": 0, "maximumPersistentDisks": 128,
                                "maximumPersistentDisksSizeGb": "263168", "zone": z,
                                "selfLink": format!("{API}/projects/{PROJECT}/zones/{z}/machineTypes/{n}"),
                                "isSharedCpu": false, "architecture": "X86_64"
                            });
                            if let Some((a, k)) = acc {
                                v["accelerators"] = json!([{"guestAcceleratorType": a, "guestAcceleratorCount": k}]);
                            }
                            v
                        }).collect();
                        items.insert(format!("zones/{z}"), json!({"machineTypes": mts}));
                    }
                }
                let mut body = json!({"kind": "compute#machineTypeAggregatedList", "id": format!("projects/{PROJECT}/aggregated/machineTypes"),
                    "items": items, "selfLink": format!("{API}/projects/{PROJECT}/aggregated/machineTypes")});
                if s.repeat_token {
                    body["nextPageToken"] = json!("mt-0");
                } else if idx + 1 < zones.len() {
                    body["nextPageToken"] = json!(format!("mt-{}", idx + 1));
                }
                ResponseTemplate::new(200).set_body_json(body)
            }
            "acceleratorTypes.aggregatedList" => {
                let mut items = serde_json::Map::new();
                for (z, list) in &s.accelerator_types {
                    let ats: Vec<Value> = list.iter().map(|(n, max)| json!({
                        "kind": "compute#acceleratorType", "id": "10002", "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
                        "name": n, "description": n.to_uppercase(),
                        "zone": format!("{API}/projects/{PROJECT}/zones/{z}"),
                        "selfLink": format!("{API}/projects/{PROJECT}/zones/{z}/acceleratorTypes/{n}"),
                        "maximumCardsPerInstance": max
                    })).collect();
                    items.insert(format!("zones/{z}"), json!({"acceleratorTypes": ats}));
                }
                ResponseTemplate::new(200).set_body_json(
                    json!({"kind": "compute#acceleratorTypeAggregatedList",
                    "id": format!("projects/{PROJECT}/aggregated/acceleratorTypes"), "items": items,
                    "selfLink": format!("{API}/projects/{PROJECT}/aggregated/acceleratorTypes")}),
                )
            }
            "instances.aggregatedList" => {
                let terms = q.get("filter").map(|f| label_terms(f)).unwrap_or_default();
                let mut items = serde_json::Map::new();
                for (z, list) in &s.instances {
                    let listed: Vec<&Value> = list
                        .values()
                        .filter(|i| {
                            terms
                                .iter()
                                .all(|(k, v)| i["labels"][k.as_str()] == json!(v))
                        })
                        .collect();
                    let (scope, entry) = scoped(format!("zones/{z}"), "instances", listed);
                    items.insert(scope, entry);
                }
                ResponseTemplate::new(200).set_body_json(
                    json!({"kind": "compute#instanceAggregatedList",
                    "id": format!("projects/{PROJECT}/aggregated/instances"), "items": items,
                    "selfLink": format!("{API}/projects/{PROJECT}/aggregated/instances")}),
                )
            }
            "instances.insert" => {
                let zone = parts[1];
                let Some(request_id) = q.get("requestId").cloned() else {
                    return error(400, "required", "requestId is required by this stand-in");
                };
                if let Some(op) = s.request_ids.get(&request_id).cloned() {
                    // The same request again: the same operation, nothing new.
                    return ResponseTemplate::new(200).set_body_json(s.operations[&op].0.clone());
                }
                let Ok(mut body) = serde_json::from_slice::<Value>(&req.body) else {
                    return error(
                        400,
                        "parseError",
                        "This API does not support parsing form-encoded input.",
                    );
                };
                let name = body["name"].as_str().unwrap_or("").to_string();
                if s.instances.get(zone).is_some_and(|z| z.contains_key(&name)) {
                    return error(409, "alreadyExists", &format!("The resource 'projects/{PROJECT}/zones/{zone}/instances/{name}' already exists"));
                }
                let machine = last_segment(&body["machineType"]);
                if !s
                    .machine_types
                    .get(zone)
                    .is_some_and(|m| m.iter().any(|(n, ..)| *n == machine))
                {
                    return error(400, "invalid", &format!("Invalid value for field 'resource.machineType': '{machine}'. Machine type with name '{machine}' does not exist in zone '{zone}'."));
                }
                let target = format!("{API}/projects/{PROJECT}/zones/{zone}/instances/{name}");
                let fail = fail.or_else(|| s.faults.zone_fault(zone));
                let op =
                    Self::operation(&mut s, ("zone", zone), "insert", &target, fail.as_deref());
                s.request_ids
                    .insert(request_id, op["name"].as_str().unwrap().to_string());
                if fail.is_none() {
                    s.next_id += 1;
                    body["kind"] = json!("compute#instance");
                    body["id"] = json!((9_000_000_000_000_000u64 + s.next_id).to_string());
                    body["creationTimestamp"] = json!("2026-11-22T01:00:00.000-08:00");
                    body["zone"] = json!(format!("{API}/projects/{PROJECT}/zones/{zone}"));
                    body["machineType"] = json!(format!(
                        "{API}/projects/{PROJECT}/zones/{zone}/machineTypes/{machine}"
                    ));
                    body["status"] = json!("RUNNING");
                    // Compute Engine gives each interface its name and an
                    // internal address, and each access configuration an
                    // external one.
                    let n = s.next_id;
                    if let Some(nics) = body["networkInterfaces"].as_array_mut() {
                        for (i, nic) in nics.iter_mut().enumerate() {
                            nic["kind"] = json!("compute#networkInterface");
                            nic["name"] = json!(format!("nic{i}"));
                            nic["networkIP"] = json!(format!("10.128.{i}.{}", 1 + n % 250));
                            if let Some(acs) = nic["accessConfigs"].as_array_mut() {
                                for ac in acs {
                                    ac["kind"] = json!("compute#accessConfig");
                                    ac["natIP"] = json!(format!("34.1.2.{}", 1 + n % 250));
                                }
                            }
                        }
                    }
                    body["selfLink"] = json!(target);
                    body["labelFingerprint"] = json!("42WmSpB8rSM=");
                    if let Some(accs) = body["guestAccelerators"].as_array_mut() {
                        for a in accs {
                            let t = last_segment(&a["acceleratorType"]);
                            a["acceleratorType"] = json!(format!(
                                "{API}/projects/{PROJECT}/zones/{zone}/acceleratorTypes/{t}"
                            ));
                        }
                    }
                    s.instances
                        .entry(zone.to_string())
                        .or_default()
                        .insert(name, body);
                }
                ResponseTemplate::new(200).set_body_json(op)
            }
            "instances.get" => found(&s.instances, ("zones", "instances"), parts),
            "instances.setLabels" => {
                // The labels replace the instance's own when the fingerprint
                // is the one it has (412 `conditionNotMet` otherwise).
                let (zone, name) = (parts[1], parts[3]);
                let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
                    return error(
                        400,
                        "parseError",
                        "This API does not support parsing form-encoded input.",
                    );
                };
                s.next_id += 1;
                let next = s.next_id;
                let Some(i) = s.instances.get_mut(zone).and_then(|z| z.get_mut(name)) else {
                    return not_found(&format!("projects/{PROJECT}/zones/{zone}/instances/{name}"));
                };
                if body["labelFingerprint"] != i["labelFingerprint"] {
                    return error(
                        412,
                        "conditionNotMet",
                        "Labels fingerprint either invalid or resource labels have changed",
                    );
                }
                i["labels"] = body["labels"].clone();
                i["labelFingerprint"] = json!(format!("fp{next:010}"));
                let target = format!("{API}/projects/{PROJECT}/zones/{zone}/instances/{name}");
                let op = Self::operation(
                    &mut s,
                    ("zone", zone),
                    "setLabels",
                    &target,
                    fail.as_deref(),
                );
                ResponseTemplate::new(200).set_body_json(op)
            }
            "instances.delete" => {
                let (zone, name) = (parts[1], parts[3]);
                if s.instances
                    .get_mut(zone)
                    .and_then(|z| z.remove(name))
                    .is_none()
                {
                    return not_found(&format!("projects/{PROJECT}/zones/{zone}/instances/{name}"));
                }
                let target = format!("{API}/projects/{PROJECT}/zones/{zone}/instances/{name}");
                let op = Self::operation(&mut s, ("zone", zone), "delete", &target, None);
                ResponseTemplate::new(200).set_body_json(op)
            }
            "zoneOperations.list" => {
                // The filter's quoted operation types, as `(operationType =
                // "x") OR (operationType = "y")`.
                let kinds: Vec<String> = q
                    .get("filter")
                    .map(|f| {
                        f.split('"')
                            .skip(1)
                            .step_by(2)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                let zone_link = format!("{API}/projects/{PROJECT}/zones/{}", parts[1]);
                let mut items: Vec<Value> = s
                    .operations
                    .values()
                    .map(|(op, _)| op.clone())
                    .filter(|op| op["zone"] == json!(zone_link))
                    .filter(|op| {
                        kinds.is_empty() || kinds.iter().any(|k| op["operationType"] == json!(k))
                    })
                    .collect();
                items.sort_by(|a, b| b["insertTime"].as_str().cmp(&a["insertTime"].as_str()));
                ResponseTemplate::new(200).set_body_json(json!({
                    "kind": "compute#operationList",
                    "id": format!("projects/{PROJECT}/zones/{}/operations", parts[1]),
                    "items": items,
                    "selfLink": format!("{zone_link}/operations"),
                }))
            }
            "zoneOperations.get" | "regionOperations.get" => {
                let name = parts[3];
                let Some((op, left)) = s.operations.get_mut(name) else {
                    return not_found(&format!("operation {name}"));
                };
                if *left > 0 {
                    *left -= 1;
                }
                if *left == 0 {
                    op["status"] = json!("DONE");
                    op["progress"] = json!(100);
                    op["endTime"] = json!("2026-11-22T01:00:20.000-08:00");
                }
                ResponseTemplate::new(200).set_body_json(op.clone())
            }
            "resourcePolicies.insert" => {
                let region = parts[1];
                let Ok(mut body) = serde_json::from_slice::<Value>(&req.body) else {
                    return error(400, "parseError", "unparseable body");
                };
                let name = body["name"].as_str().unwrap_or("").to_string();
                if s.policies
                    .get(region)
                    .is_some_and(|r| r.contains_key(&name))
                {
                    return error(409, "alreadyExists", &format!("The resource 'projects/{PROJECT}/regions/{region}/resourcePolicies/{name}' already exists"));
                }
                let target =
                    format!("{API}/projects/{PROJECT}/regions/{region}/resourcePolicies/{name}");
                body["kind"] = json!("compute#resourcePolicy");
                body["region"] = json!(format!("{API}/projects/{PROJECT}/regions/{region}"));
                body["selfLink"] = json!(target);
                body["status"] = json!("READY");
                s.policies
                    .entry(region.to_string())
                    .or_default()
                    .insert(name, body);
                let op = Self::operation(&mut s, ("region", region), "insert", &target, None);
                ResponseTemplate::new(200).set_body_json(op)
            }
            "resourcePolicies.get" => found(&s.policies, ("regions", "resourcePolicies"), parts),
            "resourcePolicies.delete" => {
                let (region, name) = (parts[1], parts[3]);
                let link = format!("projects/{PROJECT}/regions/{region}/resourcePolicies/{name}");
                let user = s.instances.values().flat_map(|z| z.values()).find(|i| {
                    i["resourcePolicies"].as_array().is_some_and(|rps| {
                        rps.iter()
                            .any(|rp| rp.as_str().is_some_and(|rp| rp.ends_with(&link)))
                    })
                });
                if let Some(user) = user {
                    // As Compute Engine answers: a policy in use is not deleted.
                    return error(
                        400,
                        "resourceInUseByAnotherResource",
                        &format!(
                            "The resource_policy resource '{link}' is already being used by '{}'",
                            user["selfLink"].as_str().unwrap_or("")
                        ),
                    );
                }
                if s.policies
                    .get_mut(region)
                    .and_then(|r| r.remove(name))
                    .is_none()
                {
                    return not_found(&link);
                }
                let target =
                    format!("{API}/projects/{PROJECT}/regions/{region}/resourcePolicies/{name}");
                let op = Self::operation(&mut s, ("region", region), "delete", &target, None);
                ResponseTemplate::new(200).set_body_json(op)
            }
            "resourcePolicies.aggregatedList" => {
                let mut items = serde_json::Map::new();
                for (r, list) in &s.policies {
                    let listed = list.values().collect();
                    let (scope, entry) = scoped(format!("regions/{r}"), "resourcePolicies", listed);
                    items.insert(scope, entry);
                }
                ResponseTemplate::new(200).set_body_json(
                    json!({"kind": "compute#resourcePolicyAggregatedList", "items": items}),
                )
            }
            _ => error(404, "notFound", "unrouted"),
        }
    }
}

impl Respond for Gce {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let method = request.method.as_str().to_string();
        let path = request.url.path().to_string();
        self.answer(&method, &path, request)
    }
}

/// A provider pointed at the stand-in, anonymous, operations polled fast.
pub async fn provider(
    server: &MockServer,
    metadata: Option<&MockServer>,
) -> gpufleet_gcp::GcpProvider {
    let mut b = gpufleet_gcp::GcpBuilder::new()
        .with_project(PROJECT)
        .with_compute_endpoint(server.uri())
        .with_billing_endpoint(server.uri())
        .with_anonymous(true)
        .with_operation_poll(Duration::from_millis(5));
    if let Some(m) = metadata {
        b = b.with_metadata_host(m.address().to_string());
    }
    gpufleet_gcp::GcpProvider::new(b.build().unwrap())
        .await
        .unwrap()
}
