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
    let listed = Listed::new(AWS_SOURCE, AWS_OBSERVED);
    for r in &rows {
        let (region, zone) = (field(r, "Region"), field(r, "AvailabilityZone"));
        let at = format!("{region}/{zone}");
        let skipped = "aws type without a published spec skipped";
        let Some((t, prices)) = b.spec_row((Cloud::Aws, AWS_SPECS), r, &at, skipped) else {
            continue;
        };
        let bucket = buckets.get(&(t.name.clone(), region.to_string())).copied();
        if prices.1.is_some() && bucket.is_none() {
            b.report.note(
                "aws spot offer without a Spot Advisor bucket",
                format!("{} {region}", t.name),
            );
        }
        b.add_offers(&t, (region, Some(zone)), prices, &listed, bucket);
    }
    Ok(())
}
