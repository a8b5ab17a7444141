//! AWS rows (SkyPilot's catalog) to types and offers.

use super::*;

pub(super) fn build_aws(b: &mut Builder, data: &Path) -> Result<(), String> {
    let rows = read_csv(&data.join("skypilot_catalog/aws_vms_v7_gpu_rows_partial.csv"))?;
    let advisor = read_csv(&data.join("aws_spot_advisor/spot_advisor_2025-06-28_accel_linux.csv"))?;
    let buckets: HashMap<(String, String), InterruptionBucket> = advisor
        .iter()
        .filter_map(|r| {
            let idx: u8 = field(r, "interruption_bucket").parse().ok()?;
            Some((
                (
                    field(r, "instance_type").to_string(),
                    field(r, "region").to_string(),
                ),
                InterruptionBucket::from_index(idx)?,
            ))
        })
        .collect();
    let source = PriceSource::new(SourceKind::Snapshot, AWS_SOURCE);
    for r in &rows {
        let name = field(r, "InstanceType");
        let Some(s) = AWS_SPECS.iter().find(|s| s.name == name) else {
            b.report.note(
                "aws type without a published spec skipped",
                name.to_string(),
            );
            continue;
        };
        let csv_count = parse_u32(field(r, "AcceleratorCount")).unwrap_or(0);
        if csv_count != s.count {
            b.report.note(
                "aws GPU count corrected to the published spec",
                format!("{name}: {csv_count} -> {}", s.count),
            );
        }
        let vcpus = parse_u32(field(r, "vCPUs")).unwrap_or(0);
        let mem: f64 = field(r, "MemoryGiB").parse().unwrap_or(0.0);
        let t = b.add_type(spec_type(Cloud::Aws, s, vcpus, mem));
        let (region, zone) = (field(r, "Region"), field(r, "AvailabilityZone"));
        let at = format!("{region}/{zone}");
        let (od, spot) = b.check_prices(
            &t,
            &at,
            price(field(r, "Price")),
            price(field(r, "SpotPrice")),
        );
        if let Some(p) = od {
            b.add_offer(
                &t,
                region,
                Some(zone),
                Capacity::OnDemand,
                p,
                &source,
                AWS_OBSERVED,
                None,
            );
        }
        if let Some(p) = spot {
            let bucket = buckets
                .get(&(name.to_string(), region.to_string()))
                .copied();
            if bucket.is_none() {
                b.report.note(
                    "aws spot offer without a Spot Advisor bucket",
                    format!("{name} {region}"),
                );
            }
            b.add_offer(
                &t,
                region,
                Some(zone),
                Capacity::Spot,
                p,
                &source,
                AWS_OBSERVED,
                bucket,
            );
        }
    }
    Ok(())
}
