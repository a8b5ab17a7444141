//! Azure rows (SkyPilot's catalog) to types and offers.

use super::*;

pub(super) fn build_azure(b: &mut Builder, data: &Path) -> Result<(), String> {
    let rows = read_csv(&data.join("skypilot_catalog/azure_vms_v6_gpu_rows.csv"))?;
    let listed = Listed::new(AZURE_SOURCE, AZURE_OBSERVED);
    for r in &rows {
        let name = field(r, "InstanceType");
        if name.ends_with("_Promo") {
            b.report.note("azure promo size skipped", name.to_string());
            continue;
        }
        let region = field(r, "Region");
        let skipped = "azure size skipped (fractional or non-NVIDIA GPU, or no published spec)";
        let Some((t, prices)) = b.spec_row((Cloud::Azure, AZURE_SPECS), r, region, skipped) else {
            continue;
        };
        b.add_offers(&t, (region, None), prices, &listed, None);
    }
    Ok(())
}
