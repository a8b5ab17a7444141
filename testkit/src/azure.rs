//! A stateful Azure stand-in on wiremock: Resource Manager (Compute `skus`
//! with `nextLink` pages, `virtualMachines` and `proximityPlacementGroups`
//! with long-running operations through `Azure-AsyncOperation` and
//! `Location`), Resource Graph, the Retail Prices API (`Items`,
//! `NextPageLink`) and Scheduled Events. Bodies have the REST references'
//! JSON shape; errors are `{"error": {"code", "message"}}`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub use crate::common::*;
pub use crate::faults::{Fault, Faults};

pub const SUB: &str = "00000000-0000-0000-0000-0000000000a1";
pub const RG: &str = "gpufleet-test";
/// The signature of the stand-in's boot diagnostics SAS URLs.
pub const SAS_SIG: &str = "sas-signature-c2VjcmV0";
pub const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.gpufleet-test-bearer.c2lnbmF0dXJl";

#[derive(Debug, Default)]
pub struct State {
    /// SKU pages (per region the same).
    pub sku_pages: Vec<Vec<Value>>,
    /// Retail price pages.
    pub price_pages: Vec<Vec<Value>>,
    /// Resource Graph rows.
    pub evictions: Vec<Value>,
    pub vms: BTreeMap<String, Value>,
    pub groups: BTreeMap<String, Value>,
    /// operation id -> (polls left, final status, error code, vm to remove)
    operations: HashMap<String, (u32, String, Option<String>, Option<String>)>,
    /// Faults to inject, and every call: (operation, URL).
    pub faults: Faults<Fault>,
    /// Retry-After (seconds) on LRO answers.
    pub retry_after: Option<u64>,
    /// Scheduled Events document.
    pub events: Value,
    /// This VM's name, as IMDS `compute/name` answers it.
    pub vm_name: String,
    /// IMDS answers as the VM created last (`vm_name` follows each create):
    /// for harnesses that open the notice stream before they know the VM.
    pub imds_is_newest_vm: bool,
    pub acks: Vec<Value>,
    /// The skus list's nextLink points at itself.
    pub repeat_link: bool,
    /// The stand-in's own base URL (for nextLink and operation URLs).
    pub base: String,
    next: u64,
}

#[derive(Clone, Default)]
pub struct Arm(pub Arc<Mutex<State>>);

/// The ARM id of the network interface a VM's create makes (`NAME-nic`).
fn nic_id(vm: &str) -> String {
    format!("/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/networkInterfaces/{vm}-nic")
}

/// The network interface of the `n`th VM, `vm`, as the Network API shows
/// it (private address `10.0.0.(4+n)`), once the VM has one.
fn nic(n: usize, vm: &str, body: &Value) -> Option<Value> {
    body["properties"]["networkProfile"]["networkInterfaces"].as_array()?;
    Some(json!({
        "name": format!("{vm}-nic"),
        "id": nic_id(vm),
        "type": "Microsoft.Network/networkInterfaces",
        "location": body["location"],
        "properties": {
            "provisioningState": "Succeeded",
            "primary": true,
            "virtualMachine": {"id": body["id"]},
            "ipConfigurations": [{
                "name": "ipconfig1",
                "id": format!("{}/ipConfigurations/ipconfig1", nic_id(vm)),
                "properties": {
                    "privateIPAddress": format!("10.0.0.{}", 4 + n),
                    "privateIPAllocationMethod": "Dynamic",
                    "primary": true,
                    "privateIPAddressVersion": "IPv4"
                }
            }]
        }
    }))
}

fn error(status: u16, code: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header("x-ms-request-id", "6f1f1ffe-0000-4000-8000-0000000000ff")
        .set_body_json(json!({"error": {"code": code, "message": message}}))
}

fn cap(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// A `Microsoft.Compute/skus` entry.
pub fn sku(
    name: &str,
    vcpus: u32,
    mem_gb: &str,
    gpus: Option<u32>,
    zones: &[&str],
    restrictions: Value,
) -> Value {
    let mut caps = vec![
        cap("MaxResourceVolumeMB", "65536"),
        cap("vCPUs", &vcpus.to_string()),
        cap("MemoryGB", mem_gb),
        cap("LowPriorityCapable", "True"),
    ];
    if let Some(g) = gpus {
        caps.push(cap("GPUs", &g.to_string()));
    }
    json!({
        "resourceType": "virtualMachines", "name": name, "tier": "Standard",
        "size": name.trim_start_matches("Standard_"), "family": "standardNCADSA100v4Family",
        "locations": ["eastus"],
        "locationInfo": [{"location": "eastus", "zones": zones, "zoneDetails": []}],
        "capabilities": caps, "restrictions": restrictions
    })
}

fn price(arm_sku: &str, meter: &str, product: &str, usd: f64, kind: &str) -> Value {
    json!({
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": usd, "unitPrice": usd,
        "armRegionName": "eastus", "location": "US East", "effectiveStartDate": "2025-06-01T00:00:00Z",
        "meterId": "00000000-0000-0000-0000-000000000001", "meterName": meter,
        "productId": "DZH318Z08M23", "skuId": "DZH318Z08M23/00BB", "productName": product,
        "skuName": meter, "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": kind,
        "isPrimaryMeterRegion": true, "armSkuName": arm_sku
    })
}

fn default_state() -> State {
    let a100 = "Standard_NC24ads_A100_v4";
    let zone_restricted = json!([{"type": "Zone", "values": ["eastus"],
        "restrictionInfo": {"locations": ["eastus"], "zones": ["3"]}, "reasonCode": "NotAvailableForSubscription"}]);
    let region_restricted = json!([{"type": "Location", "values": ["eastus"],
        "restrictionInfo": {"locations": ["eastus"]}, "reasonCode": "NotAvailableForSubscription"}]);
    State {
        sku_pages: vec![
            vec![
                sku(a100, 24, "220", Some(1), &["1", "2", "3"], zone_restricted),
                sku(
                    "Standard_D4s_v5",
                    4,
                    "16",
                    None,
                    &["1", "2", "3"],
                    json!([]),
                ),
            ],
            vec![
                sku("Standard_NC6s_v3", 6, "112", Some(1), &["1"], json!([])),
                sku(
                    "Standard_ND96isr_H100_v5",
                    96,
                    "1900",
                    Some(8),
                    &["1", "2"],
                    region_restricted,
                ),
            ],
        ],
        price_pages: vec![
            vec![
                price(
                    a100,
                    "NC24ads A100 v4",
                    "Virtual Machines NCads A100 v4 Series",
                    3.673,
                    "Consumption",
                ),
                price(
                    a100,
                    "NC24ads A100 v4 Spot",
                    "Virtual Machines NCads A100 v4 Series",
                    0.7346,
                    "Consumption",
                ),
                price(
                    a100,
                    "NC24ads A100 v4 Low Priority",
                    "Virtual Machines NCads A100 v4 Series",
                    0.5,
                    "Consumption",
                ),
                price(
                    a100,
                    "NC24ads A100 v4",
                    "Virtual Machines NCads A100 v4 Series Windows",
                    4.5,
                    "Consumption",
                ),
            ],
            vec![
                price(
                    "Standard_NC6s_v3",
                    "NC6s v3",
                    "Virtual Machines NCSv3 Series",
                    3.06,
                    "Consumption",
                ),
                price(
                    "Standard_NC6s_v3",
                    "NC6s v3 Spot",
                    "Virtual Machines NCSv3 Series",
                    0.3672,
                    "Consumption",
                ),
                price(
                    "Standard_NC6s_v3",
                    "NC6s v3",
                    "Virtual Machines NCSv3 Series",
                    1.9,
                    "Reservation",
                ),
            ],
        ],
        evictions: vec![
            json!({"skuName": "standard_nc24ads_a100_v4", "location": "eastus", "evictionRate": "0-5"}),
            json!({"skuName": "Standard_NC6s_v3", "location": "eastus", "evictionRate": "20+"}),
        ],
        events: json!({"DocumentIncarnation": 0, "Events": []}),
        vm_name: "gf-00aa-0".into(),
        ..State::default()
    }
}

fn query(req: &Request) -> HashMap<String, String> {
    req.url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

stand_in_handles!(Arm, Fault, |server| State {
    base: server.uri(),
    ..default_state()
});

impl Arm {
    /// VMs that exist and are not being deleted (a delete ARM accepted
    /// finishes on its own), with their NIC and OS disk settings.
    pub fn standing_vms(&self) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .vms
            .values()
            .filter(|v| v["properties"]["provisioningState"] != "Deleting")
            .cloned()
            .collect()
    }

    /// Proximity placement group names.
    pub fn group_names(&self) -> Vec<String> {
        self.0.lock().unwrap().groups.keys().cloned().collect()
    }

    pub fn vm_names(&self) -> Vec<String> {
        self.0.lock().unwrap().vms.keys().cloned().collect()
    }

    /// Evicts a Spot VM as Azure does under `evictionPolicy: Delete` (the
    /// policy gpufleet sets): the VM, and so its `GET`, is gone.
    pub fn evict(&self, name: &str) -> bool {
        self.0.lock().unwrap().vms.remove(name).is_some()
    }

    /// Tags a VM as its node's boot script does (the tags API's `PATCH`
    /// with operation `Merge`): what the node reports.
    pub fn merge_tags(&self, name: &str, tags: &[(&str, &str)]) -> bool {
        let mut s = self.0.lock().unwrap();
        let Some(vm) = s.vms.get_mut(name) else {
            return false;
        };
        if !vm["tags"].is_object() {
            vm["tags"] = json!({});
        }
        for (k, v) in tags {
            vm["tags"][*k] = json!(v);
        }
        true
    }

    /// The VMs' bodies as the last `PUT`s left them.
    pub fn vm_bodies(&self) -> Vec<Value> {
        self.0.lock().unwrap().vms.values().cloned().collect()
    }

    fn op_name(method: &str, path: &str) -> &'static str {
        let p: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (method, p.as_slice()) {
            ("GET", ["subscriptions", _, "providers", "Microsoft.Compute", "skus"]) => "skus.list",
            ("POST", ["providers", "Microsoft.ResourceGraph", "resources"]) => "graph",
            ("GET", ["api", "retail", "prices"]) => "prices",
            (
                "GET",
                ["subscriptions", _, "providers", "Microsoft.Compute", "locations", _, "operations", _],
            ) => "operation",
            (
                "GET",
                ["subscriptions", _, "providers", "Microsoft.Compute", "locations", _, "operationResults", _],
            ) => "operationResult",
            (
                m,
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Compute", "virtualMachines", _],
            ) => match m {
                "PUT" => "vm.put",
                "GET" => "vm.get",
                "DELETE" => "vm.delete",
                _ => "unknown",
            },
            (
                "GET",
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Compute", "virtualMachines"],
            ) => "vm.list",
            (
                "POST",
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Compute", "virtualMachines", _, "retrieveBootDiagnosticsData"],
            ) => "vm.bootdiag",
            ("GET", ["bootdiagnostics", _]) => "bootdiag.blob",
            (
                "PATCH",
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Compute", "virtualMachines", _, "providers", "Microsoft.Resources", "tags", "default"],
            ) => "vm.tags",
            (
                m,
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Compute", "proximityPlacementGroups", _],
            ) => match m {
                "PUT" => "ppg.put",
                "GET" => "ppg.get",
                "DELETE" => "ppg.delete",
                _ => "unknown",
            },
            (
                "GET",
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Compute", "proximityPlacementGroups"],
            ) => "ppg.list",
            (
                "GET",
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Network", "networkInterfaces"],
            ) => "nic.list",
            (
                "GET",
                ["subscriptions", _, "resourceGroups", _, "providers", "Microsoft.Network", "networkInterfaces", _],
            ) => "nic.get",
            ("GET", ["metadata", "scheduledevents"]) => "events.get",
            ("POST", ["metadata", "scheduledevents"]) => "events.post",
            ("GET", ["metadata", "instance", "compute", "name"]) => "events.name",
            _ => "unknown",
        }
    }

    fn authorized(req: &Request) -> bool {
        req.headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            == Some(&format!("Bearer {TOKEN}"))
    }

    fn answer(&self, req: &Request) -> ResponseTemplate {
        let method = req.method.as_str().to_string();
        let path = req.url.path().to_string();
        let op = Self::op_name(&method, &path);
        let base = self.0.lock().unwrap().base.clone();
        let fault = {
            let mut s = self.0.lock().unwrap();
            s.faults.take(op, req.url.to_string())
        };
        let public = matches!(
            op,
            "prices" | "events.get" | "events.post" | "events.name" | "bootdiag.blob"
        );
        if !public && !Self::authorized(req) {
            return error(
                401,
                "InvalidAuthenticationToken",
                "The access token is invalid.",
            );
        }
        if op.starts_with("events")
            && req.headers.get("metadata").and_then(|v| v.to_str().ok()) != Some("true")
        {
            return ResponseTemplate::new(400).set_body_json(
                json!({"error": "Bad request. Required metadata header not specified"}),
            );
        }
        let mut fail_op = None;
        match fault {
            Some(Fault::Http(status, code, after)) => {
                return Fault::respond(status, &code, after, |s, c| {
                    error(s, c, &format!("{c} (injected)"))
                })
            }
            Some(Fault::Raw(t)) => return t,
            Some(Fault::Delay(d)) => return self.route(op, &path, req, &base, None).set_delay(d),
            Some(Fault::Operation(code)) => fail_op = Some(code),
            Some(Fault::Pass) | None => {}
        }
        self.route(op, &path, req, &base, fail_op)
    }

    fn lro(
        s: &mut State,
        base: &str,
        location: &str,
        status: &str,
        error_code: Option<String>,
        remove_vm: Option<String>,
    ) -> (String, String) {
        s.next += 1;
        let id = format!("{:08x}-7c4f-4d1b-9c6a-{:012x}", s.next, s.next * 7919);
        s.operations
            .insert(id.clone(), (1, status.to_string(), error_code, remove_vm));
        (
            format!("{base}/subscriptions/{SUB}/providers/Microsoft.Compute/locations/{location}/operations/{id}?api-version=2024-07-01"),
            format!("{base}/subscriptions/{SUB}/providers/Microsoft.Compute/locations/{location}/operationResults/{id}?api-version=2024-07-01"),
        )
    }

    fn route(
        &self,
        op: &str,
        path: &str,
        req: &Request,
        base: &str,
        fail_op: Option<String>,
    ) -> ResponseTemplate {
        let q = query(req);
        let mut s = self.0.lock().unwrap();
        let name = match path.split_once("/providers/Microsoft.Resources/tags/default") {
            // A VM's tags: the VM's name.
            Some((vm, _)) => vm.rsplit('/').next().unwrap_or("").to_string(),
            None => path.rsplit('/').next().unwrap_or("").to_string(),
        };
        let with_after = |mut t: ResponseTemplate, after: Option<u64>| {
            if let Some(a) = after {
                t = t.insert_header("Retry-After", a.to_string().as_str());
            }
            t
        };
        match op {
            "skus.list" => {
                let page: usize = q.get("$skiptoken").and_then(|t| t.parse().ok()).unwrap_or(0);
                let mut body = json!({"value": s.sku_pages.get(page).cloned().unwrap_or_default()});
                let filter = q.get("$filter").cloned().unwrap_or_default();
                if s.repeat_link || page + 1 < s.sku_pages.len() {
                    let next = if s.repeat_link { page } else { page + 1 };
                    let mut u = azure_core::http::Url::parse(&format!("{base}{path}")).unwrap();
                    u.query_pairs_mut().append_pair("api-version", "2021-07-01").append_pair("$filter", &filter).append_pair("$skiptoken", &next.to_string());
                    body["nextLink"] = json!(u.to_string());
                }
                ResponseTemplate::new(200).set_body_json(body)
            }
            "graph" => {
                let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
                if !body["query"].as_str().unwrap_or("").contains("microsoft.compute/skuspotevictionrate/location") {
                    return error(400, "BadRequest", "unexpected query");
                }
                let rows = s.evictions.clone();
                ResponseTemplate::new(200).set_body_json(json!({"totalRecords": rows.len(), "count": rows.len(), "data": rows, "facets": [], "resultTruncated": "false"}))
            }
            "prices" => {
                let skip: usize = q.get("$skip").and_then(|t| t.parse().ok()).unwrap_or(0);
                let page = skip / 1000;
                let items = s.price_pages.get(page).cloned().unwrap_or_default();
                let next = if page + 1 < s.price_pages.len() {
                    let mut u = azure_core::http::Url::parse(&format!("{base}/api/retail/prices")).unwrap();
                    u.query_pairs_mut()
                        .append_pair("api-version", "2023-01-01-preview")
                        .append_pair("$filter", q.get("$filter").map(String::as_str).unwrap_or(""))
                        .append_pair("$skip", &((page + 1) * 1000).to_string());
                    Value::String(u.to_string())
                } else {
                    Value::Null
                };
                ResponseTemplate::new(200).set_body_json(json!({"BillingCurrency": "USD", "CustomerEntityId": "Default",
                    "CustomerEntityType": "Retail", "Items": items, "NextPageLink": next, "Count": 4}))
            }
            "operation" | "operationResult" => {
                let id = name;
                let after = s.retry_after;
                let Some((left, status, code, remove)) = s.operations.get_mut(&id) else {
                    return error(404, "ResourceNotFound", "no such operation");
                };
                let done = *left == 0;
                if *left > 0 {
                    *left -= 1;
                }
                let (status, code, remove) = (status.clone(), code.clone(), remove.clone());
                if op == "operationResult" {
                    if !done {
                        return with_after(ResponseTemplate::new(202), after);
                    }
                    if let Some(vm) = remove {
                        s.vms.remove(&vm);
                    }
                    return ResponseTemplate::new(204);
                }
                if !done {
                    return with_after(ResponseTemplate::new(200).set_body_json(json!({"startTime": "2026-11-22T06:00:00.0000000+00:00", "status": "InProgress", "name": id})), after);
                }
                if let Some(vm) = remove {
                    s.vms.remove(&vm);
                }
                let mut body = json!({"startTime": "2026-11-22T06:00:00.0000000+00:00", "endTime": "2026-11-22T06:01:10.0000000+00:00", "status": status, "name": id});
                if let Some(c) = code {
                    body["error"] = json!({"code": "AllocationFailed", "message": "Allocation failed. Please try another zone.",
                        "details": [{"code": c, "message": format!("{c}: no capacity for this size in the zone")}]});
                    if c == "ZonalAllocationFailed" || c == "OverconstrainedAllocationRequest" {
                        body["error"]["code"] = json!(c);
                        body["error"]["details"] = json!([]);
                    }
                }
                ResponseTemplate::new(200).set_body_json(body)
            }
            "vm.put" => {
                let Ok(mut vm) = serde_json::from_slice::<Value>(&req.body) else {
                    return error(400, "InvalidRequestContent", "The request content was invalid and could not be deserialized");
                };
                let size = vm["properties"]["hardwareProfile"]["vmSize"].as_str().unwrap_or("").to_string();
                let location = vm["location"].as_str().unwrap_or("").to_string();
                let known = s.sku_pages.iter().flatten().any(|k| k["name"] == json!(size));
                if !known {
                    return error(409, "SkuNotAvailable", &format!("The requested VM size {size} is not available in the current region."));
                }
                if vm["properties"]["priority"] == "Spot" && vm["properties"]["evictionPolicy"].is_null() {
                    return error(400, "InvalidParameter", "evictionPolicy is required for Spot VMs");
                }
                let zone = vm["zones"][0].as_str().map(|z| format!("{location}-{z}"));
                let fail = fail_op.or_else(|| zone.and_then(|z| s.faults.zone_fault(&z)));
                let existed = s.vms.contains_key(&name);
                vm["id"] = json!(format!("/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{name}"));
                vm["name"] = json!(name);
                vm["type"] = json!("Microsoft.Compute/virtualMachines");
                vm["properties"]["provisioningState"] = json!("Creating");
                vm["properties"]["vmId"] = json!("0f8c4a64-5d1f-4f2e-9a0e-5f3b3f1e1b01");
                vm["properties"]["timeCreated"] = json!("2026-11-22T06:00:00.0000000+00:00");
                s.vms.insert(name.clone(), vm.clone());
                if s.imds_is_newest_vm {
                    s.vm_name = name.clone();
                }
                let (status, code) = match &fail {
                    Some(c) => ("Failed", Some(c.clone())),
                    None => ("Succeeded", None),
                };
                let (async_url, _) = Self::lro(&mut s, base, &location, status, code, None);
                // Mark the final state now (the GET after the LRO sees it).
                if let Some(v) = s.vms.get_mut(&name) {
                    v["properties"]["provisioningState"] = json!(if fail.is_some() { "Failed" } else { "Succeeded" });
                    if fail.is_none() {
                        // The interface made from networkInterfaceConfigurations,
                        // as the Compute API lists it once the VM exists.
                        v["properties"]["networkProfile"]["networkInterfaces"] = json!([{
                            "id": nic_id(&name),
                            "properties": {"primary": true, "deleteOption": "Delete"}
                        }]);
                    }
                }
                let after = s.retry_after;
                with_after(
                    ResponseTemplate::new(if existed { 200 } else { 201 })
                        .insert_header("Azure-AsyncOperation", async_url.as_str())
                        .set_body_json(vm),
                    after,
                )
            }
            "vm.tags" => {
                // Tags - Update At Scope: `Merge` adds and replaces, `Replace`
                // sets, `Delete` removes the given ones.
                let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
                    return error(400, "InvalidRequestContent", "The request content was invalid and could not be deserialized");
                };
                let Some(vm) = s.vms.get_mut(&name) else {
                    return error(404, "ResourceNotFound", &format!("The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group '{RG}' was not found."));
                };
                let given = body["properties"]["tags"].as_object().cloned().unwrap_or_default();
                if !vm["tags"].is_object() {
                    vm["tags"] = json!({});
                }
                match body["operation"].as_str() {
                    Some("Merge") => given.iter().for_each(|(k, v)| vm["tags"][k] = v.clone()),
                    Some("Replace") => vm["tags"] = json!(given),
                    Some("Delete") => {
                        if let Some(t) = vm["tags"].as_object_mut() {
                            given.keys().for_each(|k| { t.remove(k); });
                        }
                    }
                    _ => return error(400, "InvalidRequestContent", "operation must be Merge, Replace or Delete"),
                }
                let tags = vm["tags"].clone();
                ResponseTemplate::new(200).set_body_json(json!({
                    "id": format!("/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{name}/providers/Microsoft.Resources/tags/default"),
                    "name": "default", "type": "Microsoft.Resources/tags",
                    "properties": {"tags": tags}
                }))
            }
            "vm.get" => match s.vms.get(&name) {
                Some(vm) => {
                    let mut vm = vm.clone();
                    if q.get("$expand").map(String::as_str) == Some("instanceView") {
                        let power = if vm["properties"]["provisioningState"] == "Succeeded" { "PowerState/running" } else { "PowerState/starting" };
                        vm["properties"]["instanceView"] = json!({"statuses": [
                            {"code": format!("ProvisioningState/{}", vm["properties"]["provisioningState"].as_str().unwrap_or("").to_lowercase()), "level": "Info", "displayStatus": "Provisioning succeeded"},
                            {"code": power, "level": "Info", "displayStatus": "VM running"}]});
                    }
                    ResponseTemplate::new(200).set_body_json(vm)
                }
                None => error(404, "ResourceNotFound", &format!("The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group '{RG}' was not found.")),
            },
            "vm.delete" => {
                let Some(vm) = s.vms.get_mut(&name) else {
                    return ResponseTemplate::new(204);
                };
                vm["properties"]["provisioningState"] = json!("Deleting");
                let location = vm["location"].as_str().unwrap_or("eastus").to_string();
                let (async_url, location_url) = Self::lro(&mut s, base, &location, "Succeeded", None, Some(name));
                ResponseTemplate::new(202)
                    .insert_header("Azure-AsyncOperation", async_url.as_str())
                    .insert_header("Location", location_url.as_str())
            }
            "nic.list" => {
                let value: Vec<Value> = s.vms.iter().enumerate().filter_map(|(n, (vm, body))| nic(n, vm, body)).collect();
                ResponseTemplate::new(200).set_body_json(json!({"value": value}))
            }
            "nic.get" => {
                let found = s.vms.iter().enumerate().find_map(|(n, (vm, body))| {
                    nic(n, vm, body).filter(|_| name == format!("{vm}-nic"))
                });
                match found {
                    Some(body) => ResponseTemplate::new(200).set_body_json(body),
                    None => error(404, "ResourceNotFound", &format!("The Resource 'Microsoft.Network/networkInterfaces/{name}' under resource group '{RG}' was not found.")),
                }
            }
            "vm.list" => {
                let all: Vec<Value> = s.vms.values().cloned().collect();
                // Two VMs per page, to exercise nextLink.
                let page: usize = q.get("$skiptoken").and_then(|t| t.parse().ok()).unwrap_or(0);
                let chunk: Vec<Value> = all.iter().skip(page * 2).take(2).cloned().collect();
                let mut body = json!({"value": chunk});
                if all.len() > (page + 1) * 2 {
                    body["nextLink"] = json!(format!("{base}{path}?api-version=2024-07-01&$skiptoken={}", page + 1));
                }
                ResponseTemplate::new(200).set_body_json(body)
            }
            "vm.bootdiag" => {
                let vm_name = path.rsplit('/').nth(1).unwrap_or("").to_string();
                match s.vms.get(&vm_name) {
                    None => error(404, "ResourceNotFound", &format!("The Resource 'Microsoft.Compute/virtualMachines/{vm_name}' under resource group '{RG}' was not found.")),
                    Some(vm) if vm["properties"]["diagnosticsProfile"]["bootDiagnostics"]["enabled"] != json!(true) => {
                        error(409, "OperationNotAllowed", "Boot diagnostics are not enabled for this virtual machine.")
                    }
                    Some(_) => ResponseTemplate::new(200).set_body_json(json!({
                        "consoleScreenshotBlobUri": format!("{base}/bootdiagnostics/{vm_name}.screenshot.bmp?sv=2023-01-03&se=2026-11-22T07%3A00%3A00Z&sr=b&sp=r&sig={SAS_SIG}"),
                        "serialConsoleLogBlobUri": format!("{base}/bootdiagnostics/{vm_name}.serialconsole.log?sv=2023-01-03&se=2026-11-22T07%3A00%3A00Z&sr=b&sp=r&sig={SAS_SIG}")
                    })),
                }
            }
            "bootdiag.blob" => {
                if q.get("sig").map(String::as_str) != Some(SAS_SIG) {
                    return ResponseTemplate::new(403).set_body_string("<Error><Code>AuthenticationFailed</Code></Error>");
                }
                let vm_name = name.trim_end_matches(".serialconsole.log");
                if !s.vms.contains_key(vm_name) {
                    return ResponseTemplate::new(404).set_body_string("<Error><Code>BlobNotFound</Code></Error>");
                }
                ResponseTemplate::new(200).set_body_string(format!("[    0.000000] Linux version 6.8.0-1015-azure\ngpufleet: setup done on {vm_name}\ngpufleet: run started\n"))
            }
            "ppg.put" => {
                let Ok(mut g) = serde_json::from_slice::<Value>(&req.body) else {
                    return error(400, "InvalidRequestContent", "bad body");
                };
                g["id"] = json!(format!("/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/proximityPlacementGroups/{name}"));
                g["name"] = json!(name);
                g["type"] = json!("Microsoft.Compute/proximityPlacementGroups");
                let existed = s.groups.insert(name, g.clone()).is_some();
                ResponseTemplate::new(if existed { 200 } else { 201 }).set_body_json(g)
            }
            "ppg.get" => match s.groups.get(&name) {
                Some(g) => ResponseTemplate::new(200).set_body_json(g.clone()),
                None => error(404, "ResourceNotFound", &format!("The Resource 'Microsoft.Compute/proximityPlacementGroups/{name}' under resource group '{RG}' was not found.")),
            },
            "ppg.delete" => {
                let suffix = format!("/proximityplacementgroups/{}", name.to_lowercase());
                let in_use = s.vms.values().any(|v| {
                    v["properties"]["provisioningState"] != "Deleting"
                        && v["properties"]["proximityPlacementGroup"]["id"].as_str().is_some_and(|id| id.to_lowercase().ends_with(&suffix))
                });
                if in_use {
                    // A group with members is refused (the code is this
                    // stand-in's; ARM answers a 409 conflict).
                    return error(409, "OperationNotAllowed", &format!("Proximity Placement Group {name} cannot be deleted because it has virtual machines in it."));
                }
                if s.groups.remove(&name).is_some() {
                    ResponseTemplate::new(200)
                } else {
                    ResponseTemplate::new(204)
                }
            }
            "ppg.list" => {
                let all: Vec<Value> = s.groups.values().cloned().collect();
                ResponseTemplate::new(200).set_body_json(json!({"value": all}))
            }
            "events.get" => ResponseTemplate::new(200).set_body_json(s.events.clone()),
            "events.name" => ResponseTemplate::new(200).set_body_string(s.vm_name.clone()),
            "events.post" => {
                let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
                s.acks.push(body);
                ResponseTemplate::new(200)
            }
            _ => error(404, "NotFound", &format!("no route for {path}")),
        }
    }
}

impl Respond for Arm {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.answer(request)
    }
}

/// A provider pointed at the stand-in (ARM, prices and IMDS all there).
pub async fn provider(server: &MockServer) -> gpufleet_azure::AzureProvider {
    let config = gpufleet_azure::AzureBuilder::new()
        .with_subscription_id(SUB)
        .with_regions("eastus")
        .with_arm_endpoint(server.uri())
        .with_prices_endpoint(server.uri())
        .with_imds_endpoint(server.uri())
        .with_static_token(TOKEN)
        .with_resource_group(RG)
        .with_subnet_id(format!("/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/gpufleet-vnet/subnets/default"))
        .with_ssh_public_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnlyForTheStandIn gpufleet@test")
        .with_operation_poll(Duration::from_millis(5))
        .build()
        .unwrap();
    gpufleet_azure::AzureProvider::new(config).await.unwrap()
}
