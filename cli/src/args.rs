//! Argument parsers shared by the commands: each names the bad value and what
//! would be valid.

use std::time::Duration;

use gpufleet::placer::{parse_duration, MAX_JOB_HOURS};
use gpufleet::{Cloud, GpuRequirement, Money, Price};

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
