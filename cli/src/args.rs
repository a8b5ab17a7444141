//! Argument parsers shared by the commands: each names the bad value and what
//! would be valid.

use std::time::Duration;

use gpufleet::placer::{parse_duration, MAX_JOB_HOURS};
use gpufleet::{check_known, Cloud, Error, GpuRequirement, Money, Price, Region, Snapshot};

/// `aws`, `gcp` or `azure`.
pub fn parse_cloud(s: &str) -> Result<Cloud, String> {
    match s.parse::<Cloud>() {
        Ok(c) if c != Cloud::Fake => Ok(c),
        _ => Err(format!(
            "unknown cloud '{s}'; valid clouds: aws, gcp, azure"
        )),
    }
}

/// `live` or `fake`.
pub fn parse_provider(s: &str) -> Result<gpufleet::runtime::config::ProviderKind, String> {
    s.parse()
        .map_err(|e: gpufleet::Error| e.message().to_string())
}

/// `MODEL` or `MODEL:COUNT`.
pub fn parse_gpu(s: &str) -> Result<GpuRequirement, String> {
    s.parse::<GpuRequirement>()
        .map_err(|e| e.message().to_string())
}

/// GiB from 1 to 1024.
pub fn parse_gib(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!(
            "invalid GPU memory '{s}': expected GiB as a whole number from 1 to 1024"
        )),
    }
}

/// US dollars per hour.
pub fn parse_price(s: &str) -> Result<Price, String> {
    s.parse::<Price>()
        .map_err(|e| format!("{e} (US dollars per hour)"))
}

/// A positive amount of US dollars.
pub fn parse_usd(s: &str) -> Result<Money, String> {
    match s.parse::<Money>() {
        Ok(m) if m > Money::ZERO => Ok(m),
        Ok(_) => Err(format!(
            "invalid amount '{s}': expected a positive amount of US dollars such as 250"
        )),
        Err(e) => Err(format!("{e} (US dollars)")),
    }
}

/// A duration such as `30m` or `1.5h`.
pub fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.message().to_string())
}

/// Positive hours of work.
pub fn parse_hours(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(h) if h.is_finite() && h > 0.0 && h <= MAX_JOB_HOURS => Ok(h),
        _ => Err(format!(
            "invalid hours '{s}': expected a positive number of hours of work up to {MAX_JOB_HOURS}, such as 20 or 0.5"
        )),
    }
}

/// Checks zones against the catalog of the given clouds (all when empty)
/// in the given regions (all when empty), suggesting the nearest known
/// names. An AWS zone name (`us-east-1a`) is explained: gpufleet names AWS
/// zones by AZ ID, the same zone in every account, while a name maps to a
/// different zone per account.
pub fn known_zones(
    clouds: &[Cloud],
    regions: &[Region],
    zones: &[String],
    snapshot: &Snapshot,
) -> Result<(), Error> {
    let clouds: Vec<Cloud> = if clouds.is_empty() {
        Cloud::REAL.to_vec()
    } else {
        clouds.to_vec()
    };
    let known: Vec<gpufleet::Zone> = clouds
        .iter()
        .flat_map(|c| snapshot.zones(*c, regions))
        .collect();
    for z in zones.iter().map(|z| z.trim()).filter(|z| !z.is_empty()) {
        if known.iter().any(|k| k.as_str() == z) {
            continue;
        }
        // us-east-1a, us-gov-west-1b, ap-southeast-4c: a region and a letter.
        let aws_region = z
            .strip_suffix(|c: char| c.is_ascii_lowercase())
            .filter(|r| {
                snapshot
                    .regions(Cloud::Aws)
                    .iter()
                    .any(|k| k.as_str() == *r)
            });
        if let (Some(region), true) = (aws_region, clouds.contains(&Cloud::Aws)) {
            let ids = snapshot.zones(Cloud::Aws, &[Region::new(region)]);
            return Err(Error::invalid_input(format!(
                "unknown zone '{z}': AWS zones are named by AZ ID here ({}), the same zone in every account, while a name such as {z} maps to a different zone in each account (`aws ec2 describe-availability-zones --region {region}` shows which)",
                ids.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        check_known("zone", z, known.iter().map(|k| k.as_str()))?;
    }
    Ok(())
}
