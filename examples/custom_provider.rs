//! Bring your own cloud: implement gpufleet's traits for a provider it does
//! not ship (here a small GPU cloud that sells on-demand capacity only, in
//! memory) and run the same conformance suite the AWS provider passes.
//! Checks that the declared capabilities rule out (spot, placement groups,
//! interruption notices) are skipped with a reason.
//!
//! `cargo run --example custom_provider`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use gpufleet::conformance::{self, Harness, Outcome};
use gpufleet::*;
use time::OffsetDateTime;

/// A GPU cloud with two instance types in one region.
#[derive(Debug, Default)]
struct TinyCloud {
    instances: Mutex<BTreeMap<String, Instance>>,
    launches: Mutex<BTreeMap<String, (LaunchRequest, Vec<InstanceId>)>>,
}

fn types() -> Vec<Arc<InstanceType>> {
    [("gpu-1x-h100", 1), ("gpu-8x-h100", 8)]
        .into_iter()
        .map(|(name, n)| {
            Arc::new(InstanceType {
                cloud: Cloud::Fake,
                name: name.into(),
                gpu: Some(GpuSpec {
                    model: GpuModel::H100,
                    count: n,
                    memory_gib: 80,
                }),
                vcpus: 26 * n,
                memory_mib: 225 * 1024 * u64::from(n),
                interconnect: Interconnect::BASIC,
            })
        })
        .collect()
}

#[async_trait]
impl Catalog for TinyCloud {
    async fn instance_types(&self) -> Result<Vec<Arc<InstanceType>>> {
        Ok(types())
    }

    async fn offers(&self, query: &OfferQuery) -> Result<Vec<Offer>> {
        let offers = types().into_iter().map(|t| Offer {
            pool: Pool {
                cloud: Cloud::Fake,
                region: Region::new("us-tx-1"),
                zone: None,
                instance_type: t.name.clone(),
                capacity: Capacity::OnDemand,
            },
            price: Price::from_usd_per_hour_f64(2.49 * f64::from(t.gpu_count())),
            instance_type: t,
            zone_name: None,
            observed_at: OffsetDateTime::now_utc(),
            effective_at: None,
            source: PriceSource::new(SourceKind::User, "tiny-cloud-price-sheet"),
            stability: Stability::default(),
        });
        Ok(offers.filter(|o| query.matches(o)).collect())
    }
}

#[async_trait]
impl SpotMarket for TinyCloud {
    async fn spot_price_history(&self, _: &Pool, _: OffsetDateTime) -> Result<Vec<PricePoint>> {
        Err(Error::unsupported("spot_price_history"))
    }
    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        Ok(vec![Stability::default(); pools.len()])
    }
}

#[async_trait]
impl Placement for TinyCloud {
    async fn create_placement_group(&self, _: &PlacementGroupRequest) -> Result<PlacementGroup> {
        Err(Error::unsupported("create_placement_group"))
    }
    async fn placement_group(&self, id: &PlacementGroupId) -> Result<PlacementGroup> {
        Err(Error::new(
            ErrorKind::NotFound,
            format!("no placement group {id}"),
        ))
    }
    async fn list_placement_groups(&self, _: &TagFilter) -> Result<Vec<PlacementGroup>> {
        Ok(Vec::new())
    }
    async fn delete_placement_group(&self, id: &PlacementGroupId) -> Result<()> {
        Err(Error::new(
            ErrorKind::NotFound,
            format!("no placement group {id}"),
        ))
    }
}

#[async_trait]
impl Compute for TinyCloud {
    async fn launch(&self, req: &LaunchRequest) -> Result<Vec<Instance>> {
        req.validate()?;
        let key = req.idempotency_key.to_string();
        let mut launches = self.launches.lock().unwrap_or_else(|p| p.into_inner());
        let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((first, ids)) = launches.get(&key) {
            if first.pool != req.pool || first.count != req.count {
                return Err(Error::invalid_input(format!(
                    "idempotency key '{key}' was used for another request"
                )));
            }
            return Ok(ids
                .iter()
                .filter_map(|id| instances.get(id.as_str()).cloned())
                .collect());
        }
        let now = OffsetDateTime::now_utc();
        let mut made = Vec::new();
        for _ in 0..req.count {
            let id = InstanceId::new(format!("tiny-{}", instances.len() + 1));
            let inst = Instance {
                id: id.clone(),
                pool: req.pool.clone(),
                state: InstanceState::Running,
                tags: req.effective_tags(now),
                launched_at: now,
                expires_at: req.expires_at(now),
                placement_group: None,
                end_reason: None,
                ended_at: None,
                addresses: Default::default(),
            };
            instances.insert(id.to_string(), inst.clone());
            made.push(inst);
        }
        launches.insert(
            key,
            (req.clone(), made.iter().map(|i| i.id.clone()).collect()),
        );
        Ok(made)
    }

    async fn instance(&self, id: &InstanceId) -> Result<Instance> {
        let instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        instances
            .get(id.as_str())
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no instance {id}")))
    }

    async fn list_instances(&self, filter: &TagFilter) -> Result<Vec<Instance>> {
        let instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        Ok(instances
            .values()
            .filter(|i| i.state.is_live() && filter.matches(&i.tags))
            .cloned()
            .collect())
    }

    async fn terminate(&self, id: &InstanceId) -> Result<()> {
        let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        match instances.get_mut(id.as_str()) {
            Some(i) if i.state.is_live() => {
                i.state = InstanceState::Terminated;
                Ok(())
            }
            _ => Err(Error::new(
                ErrorKind::NotFound,
                format!("no live instance {id}"),
            )),
        }
    }

    async fn tag_instances(&self, ids: &[InstanceId], tags: &Tags) -> Result<()> {
        let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = ids.iter().find(|id| {
            !instances
                .get(id.as_str())
                .is_some_and(|i| i.state.is_live())
        }) {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no live instance {id}"),
            ));
        }
        for id in ids {
            if let Some(i) = instances.get_mut(id.as_str()) {
                i.tags.extend(tags.clone());
                i.expires_at = i
                    .tags
                    .get(tags::EXPIRES_AT)
                    .and_then(|t| tags::parse_time(t));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl InterruptionSource for TinyCloud {
    async fn interruptions(&self) -> Result<NoticeStream> {
        Err(Error::unsupported("interruptions"))
    }
}

impl Provider for TinyCloud {
    fn cloud(&self) -> Cloud {
        Cloud::Fake
    }
    fn name(&self) -> &str {
        "tiny-cloud"
    }
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::CATALOG_ONLY;
        c.compute = true;
        c
    }
}

struct TinyHarness;

#[async_trait]
impl Harness for TinyHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(TinyCloud::default())
    }
}

#[tokio::main]
async fn main() {
    let h = TinyHarness;
    let checks = [
        ("catalog", conformance::check_catalog(&h).await),
        ("spot prices", conformance::check_spot_prices(&h).await),
        (
            "placement groups",
            conformance::check_placement_groups(&h).await,
        ),
        (
            "launch lifecycle",
            conformance::check_launch_lifecycle(&h).await,
        ),
        (
            "idempotent launch",
            conformance::check_idempotent_launch(&h).await,
        ),
        ("not found", conformance::check_not_found(&h).await),
        (
            "interruption stream",
            conformance::check_interruption_stream(&h).await,
        ),
    ];
    for (name, outcome) in checks {
        match outcome {
            Outcome::Passed => println!("{name:20} passed"),
            Outcome::Skipped(why) => println!("{name:20} skipped: {why}"),
        }
    }
    // A check that fails panics with what broke, so reaching here means the
    // provider conforms to everything its capabilities declare.
    println!("tiny-cloud conforms");
}
