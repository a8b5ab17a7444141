//! Prices and stability: the Price List API for on-demand prices (embedded
//! snapshot as the fallback), `DescribeSpotPriceHistory` for spot prices,
//! `GetSpotPlacementScores` and the embedded Spot Advisor buckets for
//! stability.

use async_trait::async_trait;
use gpufleet_model::SpotMarket;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types::InstanceType as Ec2Type;
use aws_sdk_pricing::types::{Filter as PriceFilter, FilterType};
use gpufleet_model::{
    Capacity, Error, ErrorKind, InterruptionBucket, Pool, Price, PricePoint, PriceSource, Region,
    Result, SourceKind, Stability,
};
use time::OffsetDateTime;

use crate::error::all_items;
use crate::zones::zones;
use crate::{now, AwsProvider};

/// An on-demand price and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Quote {
    pub(crate) price: Price,
    pub(crate) observed_at: OffsetDateTime,
    pub(crate) source: PriceSource,
}

/// The product description gpufleet prices and launches.
const LINUX: &str = "Linux/UNIX";

fn term(field: &str, value: &str) -> Option<PriceFilter> {
    PriceFilter::builder()
        .r#type(FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()
        .ok()
}

/// On-demand Linux prices per instance type in a region: the Price List API
/// when it answers, else the embedded snapshot (with a warning). Types neither
/// knows are left out.
pub(crate) async fn on_demand_prices(
    p: &AwsProvider,
    region: &Region,
    names: &[String],
) -> HashMap<String, Quote> {
    let mut out = HashMap::new();
    if p.inner.config.live_prices {
        match price_list(p, region).await {
            Ok(prices) => {
                let at = now();
                for (name, price) in prices {
                    if names.contains(&name) {
                        out.insert(
                            name,
                            Quote {
                                price,
                                observed_at: at,
                                source: PriceSource::new(SourceKind::Live, "pricing:GetProducts"),
                            },
                        );
                    }
                }
            }
            Err(e) => tracing::warn!(
                %region,
                error = %e,
                "the AWS Price List API did not answer; on-demand prices come from the embedded snapshot"
            ),
        }
    }
    for o in p.inner.snapshot.offers() {
        if o.pool.region == *region
            && o.pool.capacity == Capacity::OnDemand
            && names.contains(&o.pool.instance_type)
            && !out.contains_key(&o.pool.instance_type)
        {
            out.insert(
                o.pool.instance_type.clone(),
                Quote {
                    price: o.price,
                    observed_at: o.observed_at,
                    source: o.source.clone(),
                },
            );
        }
    }
    out
}

/// `GetProducts` for GPU instances in a region (all pages): shared tenancy,
/// Linux, no pre-installed software, capacity status Used.
async fn price_list(p: &AwsProvider, region: &Region) -> Result<HashMap<String, Price>> {
    let filters: Vec<PriceFilter> = [
        ("regionCode", region.as_str()),
        ("instanceFamily", "GPU instance"),
        ("operatingSystem", "Linux"),
        ("tenancy", "Shared"),
        ("preInstalledSw", "NA"),
        ("capacitystatus", "Used"),
    ]
    .into_iter()
    .filter_map(|(f, v)| term(f, v))
    .collect();
    let documents = all_items(
        p.inner
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .format_version("aws_v1")
            .set_filters(Some(filters))
            .max_results(100)
            .into_paginator()
            .send(),
        "GetProducts",
        |page| page.price_list,
    )
    .await?;
    let mut out = HashMap::new();
    for doc in &documents {
        match parse_price_list_item(doc) {
            Some((name, price)) => {
                out.insert(name, price);
            }
            None => tracing::debug!("a Price List item without an hourly USD on-demand price"),
        }
    }
    Ok(out)
}

/// One Price List document: `product.attributes.instanceType` and the hourly
/// USD price of its on-demand term.
pub(crate) fn parse_price_list_item(doc: &str) -> Option<(String, Price)> {
    let v: serde_json::Value = serde_json::from_str(doc).ok()?;
    let name = v
        .pointer("/product/attributes/instanceType")?
        .as_str()?
        .to_string();
    let terms = v.pointer("/terms/OnDemand")?.as_object()?;
    for offer in terms.values() {
        for dim in offer.get("priceDimensions")?.as_object()?.values() {
            if dim.get("unit").and_then(|u| u.as_str()) != Some("Hrs") {
                continue;
            }
            let usd = dim.pointer("/pricePerUnit/USD")?.as_str()?;
            let price: Price = usd.parse().ok()?;
            if price.micros_per_hour() > 0 {
                return Some((name, price));
            }
        }
    }
    None
}

fn to_time(d: &DateTime) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(d.secs()).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn from_time(t: OffsetDateTime) -> DateTime {
    DateTime::from_secs(t.unix_timestamp())
}

/// The current Linux spot price per (instance type, zone name).
pub(crate) async fn current_spot_prices(
    p: &AwsProvider,
    region: &Region,
    names: &[String],
) -> Result<HashMap<(String, String), (Price, OffsetDateTime)>> {
    let mut out: HashMap<(String, String), (Price, OffsetDateTime)> = HashMap::new();
    let client = p.client(region)?;
    for chunk in names.chunks(100) {
        let history = all_items(
            client
                .describe_spot_price_history()
                .set_instance_types(Some(
                    chunk.iter().map(|n| Ec2Type::from(n.as_str())).collect(),
                ))
                .product_descriptions(LINUX)
                .start_time(from_time(now()))
                .into_paginator()
                .send(),
            "DescribeSpotPriceHistory",
            |page| page.spot_price_history,
        )
        .await?;
        for sp in &history {
            let (Some(t), Some(z), Some(price), Some(at)) = (
                sp.instance_type(),
                sp.availability_zone(),
                sp.spot_price().and_then(|s| s.parse::<Price>().ok()),
                sp.timestamp(),
            ) else {
                continue;
            };
            let at = to_time(at);
            let key = (t.as_str().to_string(), z.to_string());
            if out.get(&key).is_none_or(|(_, seen)| at > *seen) {
                out.insert(key, (price, at));
            }
        }
    }
    Ok(out)
}

/// Spot Advisor buckets by (region, instance type), Linux.
pub(crate) type Advisor = HashMap<(String, String), InterruptionBucket>;

/// Parses the Spot Advisor's `spot-advisor-data.json`:
/// `spot_advisor[region]["Linux"][type] = {"r": bucket index, "s": saving %}`.
pub(crate) fn parse_spot_advisor(json: &str) -> Result<Advisor> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("not JSON: {e}")))?;
    let regions = v
        .get("spot_advisor")
        .and_then(|a| a.as_object())
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "no 'spot_advisor' object"))?;
    let mut out = Advisor::new();
    for (region, oses) in regions {
        let Some(linux) = oses.get("Linux").and_then(|l| l.as_object()) else {
            continue;
        };
        for (itype, entry) in linux {
            let bucket = entry
                .get("r")
                .and_then(|r| r.as_u64())
                .and_then(|r| u8::try_from(r).ok())
                .and_then(InterruptionBucket::from_index);
            if let Some(b) = bucket {
                out.insert((region.clone(), itype.clone()), b);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::new(
            ErrorKind::Unexpected,
            "no Linux interruption buckets in the document",
        ));
    }
    Ok(out)
}

/// The Spot Advisor interruption bucket of a type in a region: refreshed data
/// if [`AwsProvider::refresh_spot_advisor`] ran, else the embedded copy.
pub(crate) fn advisor_bucket(
    p: &AwsProvider,
    region: &Region,
    instance_type: &str,
) -> Option<InterruptionBucket> {
    if let Ok(guard) = p.inner.advisor.read() {
        if let Some(a) = guard.as_ref() {
            return a
                .get(&(region.to_string(), instance_type.to_string()))
                .copied();
        }
    }
    p.inner
        .snapshot
        .offers()
        .iter()
        .filter(|o| {
            o.pool.region == *region
                && o.pool.instance_type == instance_type
                && o.pool.capacity == Capacity::Spot
        })
        .find_map(|o| o.stability.bucket)
}

/// `GetSpotPlacementScores` per AZ ID for one instance of `instance_type`.
async fn placement_scores(
    p: &AwsProvider,
    region: &Region,
    instance_type: &str,
) -> Result<HashMap<String, u8>> {
    let scores = all_items(
        p.client(region)?
            .get_spot_placement_scores()
            .instance_types(instance_type)
            .target_capacity(1)
            .single_availability_zone(true)
            .region_names(region.as_str())
            .into_paginator()
            .send(),
        "GetSpotPlacementScores",
        |page| page.spot_placement_scores,
    )
    .await?;
    let mut out = HashMap::new();
    for s in &scores {
        if let (Some(az), Some(score)) = (s.availability_zone_id(), s.score()) {
            if let Ok(score) = u8::try_from(score.clamp(1, 10)) {
                out.insert(az.to_string(), score);
            }
        }
    }
    Ok(out)
}

#[async_trait]
impl SpotMarket for AwsProvider {
    /// The spot price history of one pool since `since`, oldest first.
    async fn spot_price_history(
        &self,
        pool: &Pool,
        since: OffsetDateTime,
    ) -> Result<Vec<PricePoint>> {
        if pool.capacity != Capacity::Spot {
            return Err(Error::invalid_input(format!(
                "{pool} is on-demand: only spot pools have a price history"
            )));
        }
        let zones = zones(self, &pool.region).await?;
        let zone_name = match &pool.zone {
            Some(id) => Some(zones.name_by_id.get(id.as_str()).cloned().ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no availability zone {id} in {}", pool.region),
                )
            })?),
            None => None,
        };
        let history = all_items(
            self.client(&pool.region)?
                .describe_spot_price_history()
                .instance_types(Ec2Type::from(pool.instance_type.as_str()))
                .product_descriptions(LINUX)
                .set_availability_zone(zone_name)
                .start_time(from_time(since))
                .end_time(from_time(now()))
                .into_paginator()
                .send(),
            "DescribeSpotPriceHistory",
            |page| page.spot_price_history,
        )
        .await?;
        let source = PriceSource::new(SourceKind::Live, "ec2:DescribeSpotPriceHistory");
        let mut points: Vec<PricePoint> = history
            .iter()
            .filter_map(|sp| {
                Some(PricePoint {
                    pool: pool.clone(),
                    price: sp.spot_price()?.parse::<Price>().ok()?,
                    at: to_time(sp.timestamp()?),
                    source: source.clone(),
                })
            })
            .filter(|pt| pt.price.micros_per_hour() > 0)
            .collect();
        points.sort_by_key(|pt| pt.at);
        points.dedup_by(|a, b| a.at == b.at && a.price == b.price);
        Ok(points)
    }

    /// Stability signals per pool: the Spot Advisor bucket and the spot placement
    /// score of the pool's zone (for a target of one instance). Placement scores
    /// that cannot be fetched are left out, with one warning per region: after
    /// a region's first failure (most often a role without
    /// `ec2:GetSpotPlacementScores`, or the API's own limit on how many
    /// configurations it scores a day) it is not asked again in this call,
    /// since every instance type would fail the same way. The rest still
    /// answers.
    async fn stability(&self, pools: &[Pool]) -> Result<Vec<Stability>> {
        let mut scores: HashMap<(Region, String), HashMap<String, u8>> = HashMap::new();
        // Per region that failed: the first error and the types left unscored.
        let mut failed: BTreeMap<Region, (Error, BTreeSet<String>)> = BTreeMap::new();
        for pool in pools.iter().filter(|p| p.capacity == Capacity::Spot) {
            let key = (pool.region.clone(), pool.instance_type.clone());
            if scores.contains_key(&key) {
                continue;
            }
            if let Some((_, types)) = failed.get_mut(&pool.region) {
                types.insert(pool.instance_type.clone());
                continue;
            }
            match placement_scores(self, &pool.region, &pool.instance_type).await {
                Ok(s) => {
                    scores.insert(key, s);
                }
                Err(e) => {
                    failed.insert(
                        pool.region.clone(),
                        (e, BTreeSet::from([pool.instance_type.clone()])),
                    );
                }
            }
        }
        for (region, (error, types)) in &failed {
            tracing::warn!(
                region = %region,
                instance_types = types.len(),
                error = %error,
                "no spot placement scores in this region; its spot pools are placed on the \
                 Spot Advisor bucket and the price alone"
            );
        }
        Ok(pools
            .iter()
            .map(|pool| {
                if pool.capacity != Capacity::Spot {
                    return Stability::default();
                }
                let score = pool.zone.as_ref().and_then(|z| {
                    scores
                        .get(&(pool.region.clone(), pool.instance_type.clone()))
                        .and_then(|m| m.get(z.as_str()).copied())
                });
                Stability {
                    placement_score: score,
                    bucket: advisor_bucket(self, &pool.region, &pool.instance_type),
                    ..Stability::default()
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_list_documents() {
        let doc = r#"{"product":{"productFamily":"Compute Instance","attributes":{"instanceType":"p4d.24xlarge","regionCode":"us-east-1","operatingSystem":"Linux"},"sku":"ABC"},"serviceCode":"AmazonEC2","terms":{"OnDemand":{"ABC.JRTCKXETXF":{"priceDimensions":{"ABC.JRTCKXETXF.6YS6EN2CT7":{"unit":"Hrs","endRange":"Inf","description":"$32.7726 per On Demand Linux p4d.24xlarge Instance Hour","appliesTo":[],"rateCode":"ABC.JRTCKXETXF.6YS6EN2CT7","beginRange":"0","pricePerUnit":{"USD":"32.7726000000"}}},"sku":"ABC","effectiveDate":"2025-11-01T00:00:00Z","offerTermCode":"JRTCKXETXF","termAttributes":{}}}},"version":"20251101","publicationDate":"2025-11-01T00:00:00Z"}"#;
        let (name, price) = parse_price_list_item(doc).unwrap();
        assert_eq!(name, "p4d.24xlarge");
        assert_eq!(price, "32.7726".parse().unwrap());
        assert!(parse_price_list_item("{}").is_none());
        assert!(parse_price_list_item("not json").is_none());
        assert!(parse_price_list_item(r#"{"product":{"attributes":{"instanceType":"x"}},"terms":{"OnDemand":{"a":{"priceDimensions":{"b":{"unit":"Quantity","pricePerUnit":{"USD":"1"}}}}}}}"#).is_none());
    }
}
