//! Azure rows (SkyPilot's catalog) to types and offers.

use super::*;

pub(super) fn build_azure(b: &mut Builder, data: &Path) -> Result<(), String> {
    let rows = read_csv(&data.join("skypilot_catalog/azure_vms_v6_gpu_rows.csv"))?;
    let source = PriceSource::new(SourceKind::Snapshot, AZURE_SOURCE);
    for r in &rows {
        let name = field(r, "InstanceType");
        if name.ends_with("_Promo") {
            b.report.note("azure promo size skipped", name.to_string());
            continue;
        }
        let Some(s) = AZURE_SPECS.iter().find(|s| s.name == name) else {
            b.report.note(
                "azure size skipped (fractional or non-NVIDIA GPU, or no published spec)",
                name.to_string(),
            );
            continue;
        };
        let csv_count = parse_u32(field(r, "AcceleratorCount")).unwrap_or(0);
        if csv_count != s.count {
            b.report.note(
                "azure GPU count corrected to the published spec",
                format!("{name}: {csv_count} -> {}", s.count),
            );
        }
        let vcpus = parse_u32(field(r, "vCPUs")).unwrap_or(0);
        let mem: f64 = field(r, "MemoryGiB").parse().unwrap_or(0.0);
        let t = b.add_type(spec_type(Cloud::Azure, s, vcpus, mem));
        let region = field(r, "Region");
        let (od, spot) = b.check_prices(
            &t,
            region,
            price(field(r, "Price")),
            price(field(r, "SpotPrice")),
        );
        if let Some(p) = od {
            b.add_offer(
                &t,
                region,
                None,
                Capacity::OnDemand,
                p,
                &source,
                AZURE_OBSERVED,
                None,
            );
        }
        if let Some(p) = spot {
            b.add_offer(
                &t,
                region,
                None,
                Capacity::Spot,
                p,
                &source,
                AZURE_OBSERVED,
                None,
            );
        }
    }
    Ok(())
}
