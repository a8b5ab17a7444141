//! A stateful EC2 Query API stand-in on wiremock, for what moto does not do:
//! placement groups, spot placement scores, realistic spot price history,
//! `ClientToken`, and scripted faults. Response bodies have the EC2 Query
//! API's XML shape (element names as the EC2 API reference gives them).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

/// A fault to answer the next call of an action with.
#[derive(Debug, Clone)]
pub struct Fault {
    /// HTTP status.
    pub status: u16,
    /// EC2 error code.
    pub code: String,
    /// Only when the request names this zone (RunInstances).
    pub zone: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MockInstance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub client_token: String,
    pub tags: BTreeMap<String, String>,
    pub state: &'static str,
    pub spot: bool,
    pub group: Option<String>,
}

/// A placement group: strategy, partition count, tags.
pub type Group = (String, Option<u32>, BTreeMap<String, String>);

#[derive(Debug, Default)]
pub struct State {
    /// Placement groups by name: strategy, partitions, tags.
    pub groups: BTreeMap<String, Group>,
    pub instances: Vec<MockInstance>,
    /// Every call: (action, params).
    pub calls: Vec<(String, HashMap<String, String>)>,
    faults: HashMap<String, VecDeque<Fault>>,
    raw: HashMap<String, VecDeque<ResponseTemplate>>,
    /// DescribeInstanceTypes answers with the same nextToken forever.
    pub repeat_token: bool,
    delays: HashMap<String, VecDeque<Duration>>,
    next_id: u64,
}

/// The stand-in: cloned handles share the state.
#[derive(Clone, Default)]
pub struct Ec2Mock {
    pub state: Arc<Mutex<State>>,
}

/// `action`'s answer holding `<set>`, an `<item>` for each of `rows`.
fn item_set<T>(
    action: &str,
    set: &str,
    rows: &[T],
    item: impl Fn(&T) -> String,
) -> ResponseTemplate {
    let items: String = rows
        .iter()
        .map(|r| format!("<item>{}</item>", item(r)))
        .collect();
    xml(action, &format!("<{set}>{items}</{set}>"))
}

fn xml(action: &str, body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<{action}Response xmlns="{NS}">
    <requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>
{body}
</{action}Response>"#
        ),
        "text/xml;charset=UTF-8",
    )
}

/// An EC2 error document.
pub fn error(status: u16, code: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_raw(
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"#
        ),
        "text/xml;charset=UTF-8",
    )
}

fn tag_set(tags: &BTreeMap<String, String>) -> String {
    let items: String = tags
        .iter()
        .map(|(k, v)| format!("<item><key>{k}</key><value>{v}</value></item>"))
        .collect();
    format!("<tagSet>{items}</tagSet>")
}

/// The zones of us-east-1 in this stand-in's account (names map to AZ IDs
/// differently in every account; these are made up, the IDs are real).
pub const ZONES: [(&str, &str); 3] = [
    ("us-east-1a", "use1-az6"),
    ("us-east-1b", "use1-az1"),
    ("us-east-1c", "use1-az2"),
];

fn zone_id(name: &str) -> &'static str {
    ZONES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("use1-az9", |(_, id)| id)
}

const INSTANCE_TYPES: &str = r#"
    <instanceTypeSet>
        <item>
            <instanceType>p4d.24xlarge</instanceType>
            <currentGeneration>true</currentGeneration>
            <vCpuInfo><defaultVCpus>96</defaultVCpus><defaultCores>48</defaultCores><defaultThreadsPerCore>2</defaultThreadsPerCore></vCpuInfo>
            <memoryInfo><sizeInMiB>1179648</sizeInMiB></memoryInfo>
            <networkInfo><networkPerformance>4x 100 Gigabit</networkPerformance><efaSupported>true</efaSupported></networkInfo>
            <gpuInfo>
                <gpus><item><name>A100</name><manufacturer>NVIDIA</manufacturer><count>8</count><memoryInfo><sizeInMiB>40960</sizeInMiB></memoryInfo></item></gpus>
                <totalGpuMemoryInMiB>327680</totalGpuMemoryInMiB>
            </gpuInfo>
            <placementGroupInfo><supportedStrategies><item>cluster</item><item>partition</item><item>spread</item></supportedStrategies></placementGroupInfo>
        </item>
        <item>
            <instanceType>g5.xlarge</instanceType>
            <currentGeneration>true</currentGeneration>
            <vCpuInfo><defaultVCpus>4</defaultVCpus></vCpuInfo>
            <memoryInfo><sizeInMiB>16384</sizeInMiB></memoryInfo>
            <networkInfo><networkPerformance>Up to 10 Gigabit</networkPerformance><efaSupported>false</efaSupported></networkInfo>
            <gpuInfo>
                <gpus><item><name>A10G</name><manufacturer>NVIDIA</manufacturer><count>1</count><memoryInfo><sizeInMiB>24576</sizeInMiB></memoryInfo></item></gpus>
                <totalGpuMemoryInMiB>24576</totalGpuMemoryInMiB>
            </gpuInfo>
        </item>
    </instanceTypeSet>"#;

/// Where each type is offered: (type, zone name).
pub const OFFERINGS: [(&str, &str); 5] = [
    ("p4d.24xlarge", "us-east-1a"),
    ("p4d.24xlarge", "us-east-1b"),
    ("g5.xlarge", "us-east-1a"),
    ("g5.xlarge", "us-east-1b"),
    ("g5.xlarge", "us-east-1c"),
];

/// Spot prices per (type, zone name): a week of changes, newest first as
/// EC2 returns them.
pub const SPOT_HISTORY: [(&str, &str, &str, &str); 7] = [
    (
        "p4d.24xlarge",
        "us-east-1a",
        "9.8300",
        "2026-11-21T10:14:02.000Z",
    ),
    (
        "p4d.24xlarge",
        "us-east-1a",
        "10.2114",
        "2026-11-19T04:40:51.000Z",
    ),
    (
        "p4d.24xlarge",
        "us-east-1a",
        "11.0470",
        "2026-11-16T22:03:11.000Z",
    ),
    (
        "p4d.24xlarge",
        "us-east-1b",
        "12.1045",
        "2026-11-20T13:31:40.000Z",
    ),
    (
        "g5.xlarge",
        "us-east-1a",
        "0.4023",
        "2026-11-21T08:00:12.000Z",
    ),
    (
        "g5.xlarge",
        "us-east-1b",
        "0.3911",
        "2026-11-20T17:45:09.000Z",
    ),
    (
        "g5.xlarge",
        "us-east-1c",
        "0.4410",
        "2026-11-18T11:12:45.000Z",
    ),
];

fn params(req: &Request) -> HashMap<String, String> {
    form_urlencoded::parse(&req.body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Values of a list parameter `Name.1`, `Name.2`, …
fn list(p: &HashMap<String, String>, prefix: &str) -> Vec<String> {
    (1..)
        .map_while(|i| p.get(&format!("{prefix}.{i}")).cloned())
        .collect()
}

/// The pairs `{prefix}.N.{key}` / `{prefix}.N.{value}` for N = 1, 2, …
/// (a missing value is empty).
fn pairs(
    p: &HashMap<String, String>,
    prefix: &str,
    (key, value): (&str, &str),
) -> Vec<(String, String)> {
    (1..)
        .map_while(|i| {
            let k = p.get(&format!("{prefix}.{i}.{key}"))?;
            let v = p.get(&format!("{prefix}.{i}.{value}"));
            Some((k.clone(), v.cloned().unwrap_or_default()))
        })
        .collect()
}

/// Tag filters `Filter.N.Name=tag:K`, `Filter.N.Value.1=V`.
fn tag_filters(p: &HashMap<String, String>) -> Vec<(String, String)> {
    pairs(p, "Filter", ("Name", "Value.1"))
        .into_iter()
        .filter_map(|(n, v)| n.strip_prefix("tag:").map(|k| (k.to_string(), v)))
        .collect()
}

fn spec_tags(p: &HashMap<String, String>, n: usize) -> BTreeMap<String, String> {
    pairs(p, &format!("TagSpecification.{n}.Tag"), ("Key", "Value"))
        .into_iter()
        .collect()
}

fn instance_xml(i: &MockInstance) -> String {
    let code = match i.state {
        "pending" => 0,
        "running" => 16,
        "shutting-down" => 32,
        "terminated" => 48,
        _ => 80,
    };
    format!(
        "<item><instanceId>{}</instanceId><imageId>ami-0123456789abcdef0</imageId><instanceState><code>{code}</code><name>{}</name></instanceState><instanceType>{}</instanceType><launchTime>2026-11-21T10:00:00.000Z</launchTime><placement><availabilityZone>{}</availabilityZone><groupName>{}</groupName><tenancy>default</tenancy></placement>{}<clientToken>{}</clientToken>{}</item>",
        i.id,
        i.state,
        i.instance_type,
        i.zone,
        i.group.clone().unwrap_or_default(),
        if i.spot { "<instanceLifecycle>spot</instanceLifecycle>" } else { "" },
        i.client_token,
        tag_set(&i.tags)
    )
}

impl Ec2Mock {
    /// Starts wiremock with this stand-in answering every POST.
    pub async fn start() -> (MockServer, Ec2Mock) {
        let server = MockServer::start().await;
        let mock = Ec2Mock::default();
        Mock::given(method("POST"))
            .respond_with(mock.clone())
            .mount(&server)
            .await;
        (server, mock)
    }

    /// Answers the next call of `action` with an error.
    pub fn fail_next(&self, action: &str, status: u16, code: &str) {
        self.state
            .lock()
            .unwrap()
            .faults
            .entry(action.into())
            .or_default()
            .push_back(Fault {
                status,
                code: code.into(),
                zone: None,
            });
    }

    /// Answers every RunInstances in `zone` with `code`.
    pub fn fail_zone(&self, zone: &str, code: &str) {
        let mut s = self.state.lock().unwrap();
        let q = s.faults.entry("RunInstances".into()).or_default();
        for _ in 0..100 {
            q.push_back(Fault {
                status: 500,
                code: code.into(),
                zone: Some(zone.into()),
            });
        }
    }

    /// Answers the next call of `action` with this response as is.
    pub fn raw_next(&self, action: &str, response: ResponseTemplate) {
        self.state
            .lock()
            .unwrap()
            .raw
            .entry(action.into())
            .or_default()
            .push_back(response);
    }

    /// Delays the next answer to `action` (its effect happens at once).
    pub fn delay_next(&self, action: &str, by: Duration) {
        self.state
            .lock()
            .unwrap()
            .delays
            .entry(action.into())
            .or_default()
            .push_back(by);
    }

    /// How many calls of `action` were made.
    pub fn count(&self, action: &str) -> usize {
        self.calls(action).len()
    }

    /// Parameters of every call of `action`.
    pub fn calls(&self, action: &str) -> Vec<HashMap<String, String>> {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|(a, _)| a == action)
            .map(|(_, p)| p.clone())
            .collect()
    }

    fn answer(&self, action: &str, p: &HashMap<String, String>) -> ResponseTemplate {
        let mut s = self.state.lock().unwrap();
        s.calls.push((action.to_string(), p.clone()));
        if let Some(q) = s.faults.get_mut(action) {
            let zone = p.get("Placement.AvailabilityZone");
            if let Some(pos) = q
                .iter()
                .position(|f| f.zone.is_none() || f.zone.as_ref() == zone)
            {
                let f = q.remove(pos).unwrap();
                let status = if f.code == "InsufficientInstanceCapacity" {
                    500
                } else {
                    f.status
                };
                let msg = format!(
                    "We currently do not have sufficient capacity or the request is refused ({})",
                    f.code
                );
                return error(status, &f.code, &msg);
            }
        }
        if let Some(r) = s.raw.get_mut(action).and_then(|q| q.pop_front()) {
            return r;
        }
        let delay = s.delays.get_mut(action).and_then(|q| q.pop_front());
        let resp = match action {
            "DescribeInstanceTypes" if s.repeat_token => xml(
                action,
                &INSTANCE_TYPES.replace("</instanceTypeSet>", "</instanceTypeSet><nextToken>page-again</nextToken>"),
            ),
            "DescribeInstanceTypes" => xml(action, INSTANCE_TYPES),
            "DescribeAvailabilityZones" => item_set(action, "availabilityZoneInfo", &ZONES, |(n, id)| format!("<zoneName>{n}</zoneName><zoneId>{id}</zoneId><zoneState>available</zoneState><regionName>us-east-1</regionName><zoneType>availability-zone</zoneType>")),
            "DescribeInstanceTypeOfferings" => item_set(action, "instanceTypeOfferingSet", &OFFERINGS, |(t, z)| format!("<instanceType>{t}</instanceType><locationType>availability-zone</locationType><location>{z}</location>")),
            "DescribeSpotPriceHistory" => {
                let types = list(p, "InstanceType");
                let zone = p.get("AvailabilityZone");
                let current = p.get("EndTime").is_none();
                let mut seen = std::collections::HashSet::new();
                let items: String = SPOT_HISTORY
                    .iter()
                    .filter(|(t, z, _, _)| {
                        (types.is_empty() || types.iter().any(|x| x == t))
                            && zone.is_none_or(|w| w == z)
                    })
                    // With no end time EC2 gives the price in effect now.
                    .filter(|(t, z, _, _)| !current || seen.insert((*t, *z)))
                    .map(|(t, z, price, at)| format!("<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>{price}</spotPrice><timestamp>{at}</timestamp><availabilityZone>{z}</availabilityZone><availabilityZoneId>{}</availabilityZoneId></item>", zone_id(z)))
                    .collect();
                xml(action, &format!("<spotPriceHistorySet>{items}</spotPriceHistorySet><nextToken/>"))
            }
            "GetSpotPlacementScores" => xml(
                action,
                "<spotPlacementScoreSet><item><region>us-east-1</region><availabilityZoneId>use1-az6</availabilityZoneId><score>9</score></item><item><region>us-east-1</region><availabilityZoneId>use1-az1</availabilityZoneId><score>3</score></item></spotPlacementScoreSet>",
            ),
            "CreatePlacementGroup" => {
                let name = p.get("GroupName").cloned().unwrap_or_default();
                let strategy = p.get("Strategy").cloned().unwrap_or_default();
                let partitions = p.get("PartitionCount").and_then(|n| n.parse().ok());
                if s.groups.contains_key(&name) {
                    return error(400, "InvalidPlacementGroup.Duplicate", &format!("The Placement Group '{name}' already exists."));
                }
                if strategy == "partition" && !(1..=7).contains(&partitions.unwrap_or(0)) {
                    return error(400, "InvalidParameterValue", "PartitionCount must be between 1 and 7");
                }
                let tags = spec_tags(p, 1);
                s.groups.insert(name.clone(), (strategy.clone(), partitions, tags.clone()));
                xml(action, &format!(
                    "<placementGroup><groupName>{name}</groupName><state>available</state><strategy>{strategy}</strategy>{}<groupId>pg-0{:016x}</groupId>{}</placementGroup>",
                    partitions.map(|n| format!("<partitionCount>{n}</partitionCount>")).unwrap_or_default(),
                    s.groups.len(),
                    tag_set(&tags)
                ))
            }
            "DescribePlacementGroups" => {
                let names = list(p, "GroupName");
                let filters = tag_filters(p);
                for n in &names {
                    if !s.groups.contains_key(n) {
                        return error(400, "InvalidPlacementGroup.Unknown", &format!("The Placement Group '{n}' is unknown."));
                    }
                }
                let items: String = s
                    .groups
                    .iter()
                    .filter(|(n, _)| names.is_empty() || names.contains(n))
                    .filter(|(_, (_, _, tags))| filters.iter().all(|(k, v)| tags.get(k) == Some(v)))
                    .map(|(n, (st, parts, tags))| format!(
                        "<item><groupName>{n}</groupName><state>available</state><strategy>{st}</strategy>{}<groupId>pg-0example</groupId>{}</item>",
                        parts.map(|k| format!("<partitionCount>{k}</partitionCount>")).unwrap_or_default(),
                        tag_set(tags)
                    ))
                    .collect();
                xml(action, &format!("<placementGroupSet>{items}</placementGroupSet>"))
            }
            "DeletePlacementGroup" => {
                let name = p.get("GroupName").cloned().unwrap_or_default();
                if s.groups.remove(&name).is_none() {
                    return error(400, "InvalidPlacementGroup.Unknown", &format!("The Placement Group '{name}' is unknown."));
                }
                xml(action, "<return>true</return>")
            }
            "RunInstances" => {
                let token = p.get("ClientToken").cloned().unwrap_or_default();
                let existing: Vec<MockInstance> = s
                    .instances
                    .iter()
                    .filter(|i| !token.is_empty() && i.client_token == token)
                    .cloned()
                    .collect();
                let made = if existing.is_empty() {
                    let count: usize = p.get("MinCount").and_then(|n| n.parse().ok()).unwrap_or(1);
                    let mut made = Vec::new();
                    for _ in 0..count {
                        s.next_id += 1;
                        let inst = MockInstance {
                            id: format!("i-0{:016x}", 0xabc000 + s.next_id),
                            instance_type: p.get("InstanceType").cloned().unwrap_or_default(),
                            zone: p.get("Placement.AvailabilityZone").cloned().unwrap_or_else(|| "us-east-1a".into()),
                            client_token: token.clone(),
                            tags: spec_tags(p, 1),
                            state: "pending",
                            spot: p.get("InstanceMarketOptions.MarketType").map(String::as_str) == Some("spot"),
                            group: p.get("Placement.GroupName").cloned(),
                        };
                        s.instances.push(inst.clone());
                        made.push(inst);
                    }
                    made
                } else {
                    existing
                };
                let items: String = made.iter().map(instance_xml).collect();
                xml(action, &format!("<reservationId>r-0example</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>{items}</instancesSet>"))
            }
            "DescribeInstances" => {
                let ids = list(p, "InstanceId");
                let filters = tag_filters(p);
                for id in &ids {
                    if !s.instances.iter().any(|i| &i.id == id) {
                        return error(400, "InvalidInstanceID.NotFound", &format!("The instance ID '{id}' does not exist"));
                    }
                }
                let live_only = (1..).map_while(|i| p.get(&format!("Filter.{i}.Name"))).any(|n| n == "instance-state-name");
                let items: String = s
                    .instances
                    .iter()
                    .filter(|i| ids.is_empty() || ids.contains(&i.id))
                    .filter(|i| filters.iter().all(|(k, v)| i.tags.get(k) == Some(v)))
                    .filter(|i| !live_only || i.state != "terminated")
                    .map(instance_xml)
                    .collect();
                xml(action, &format!("<reservationSet><item><reservationId>r-0example</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>{items}</instancesSet></item></reservationSet>"))
            }
            "TerminateInstances" => {
                let ids = list(p, "InstanceId");
                let mut items = String::new();
                for id in &ids {
                    match s.instances.iter_mut().find(|i| &i.id == id) {
                        Some(i) => {
                            i.state = "terminated";
                            items.push_str(&format!("<item><instanceId>{id}</instanceId><currentState><code>32</code><name>shutting-down</name></currentState><previousState><code>16</code><name>running</name></previousState></item>"));
                        }
                        None => return error(400, "InvalidInstanceID.NotFound", &format!("The instance ID '{id}' does not exist")),
                    }
                }
                xml(action, &format!("<instancesSet>{items}</instancesSet>"))
            }
            "CreateTags" => {
                let ids = list(p, "ResourceId");
                // One unknown id and nothing is tagged, as EC2 answers.
                if let Some(id) = ids.iter().find(|id| !s.instances.iter().any(|i| &i.id == *id)) {
                    return error(400, "InvalidInstanceID.NotFound", &format!("The instance ID '{id}' does not exist"));
                }
                let tags = pairs(p, "Tag", ("Key", "Value"));
                for i in s.instances.iter_mut().filter(|i| ids.contains(&i.id)) {
                    i.tags.extend(tags.iter().cloned());
                }
                xml(action, "<return>true</return>")
            }
            other => error(400, "InvalidAction", &format!("The action {other} is not valid for this web service.")),
        };
        match delay {
            Some(d) => resp.set_delay(d),
            None => resp,
        }
    }
}

impl Respond for Ec2Mock {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let p = params(request);
        let action = p.get("Action").cloned().unwrap_or_default();
        self.answer(&action, &p)
    }
}
