//! GCP: Cloud Billing SKUs combined into whole-VM prices, and N1 shapes
//! with attached GPUs.

use super::*;

/// GCP interconnect by machine family and GPU count.
pub(super) fn gcp_interconnect(machine: &str, count: u32, model: &GpuModel) -> Interconnect {
    let (gpu_link, fabric, network_gbps) = if machine.starts_with("a3-megagpu") {
        (Nvswitch, GpuDirect, Some(1800))
    } else if machine == "a3-highgpu-8g" {
        (Nvswitch, GpuDirect, Some(1000))
    } else if machine.starts_with("a2-") || machine.starts_with("a3-") {
        (
            if count > 1 { Nvswitch } else { Pcie },
            Standard,
            (count >= 8).then_some(100),
        )
    } else if *model == G::V100 && count > 1 {
        (Nvlink, Standard, None)
    } else {
        (Pcie, Standard, None)
    };
    Interconnect {
        gpu_link,
        fabric,
        network_gbps,
    }
}

pub(super) fn build_gcp(b: &mut Builder, data: &Path) -> Result<(), String> {
    let vm_rows = read_csv(
        &data.join("gcp_price_history_cyclenerd/gcp_vm_prices_snapshot_2026-07-30_gpu_and_n1.csv"),
    )?;
    let gpu_rows = read_csv(&data.join("skypilot_catalog/gcp_vms_v7_gpu_rows.csv"))?;
    // Zones offering each accelerator, per region.
    let mut zones: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
    // GPU-only prices per (accelerator, count, zone).
    let mut gpu_prices: HashMap<(String, u32, String), PricePair> = HashMap::new();
    for r in &gpu_rows {
        let acc = field(r, "AcceleratorName").to_string();
        let zone = field(r, "AvailabilityZone").to_string();
        zones
            .entry((acc.clone(), field(r, "Region").to_string()))
            .or_default()
            .insert(zone.clone());
        if let Some(n) = parse_u32(field(r, "AcceleratorCount")) {
            gpu_prices.insert(
                (acc, n, zone),
                (price(field(r, "Price")), price(field(r, "SpotPrice"))),
            );
        }
    }
    let listed = Listed::new(GCP_SOURCE, GCP_OBSERVED);
    let n1_listed = Listed::new(GCP_N1_SOURCE, GCP_OBSERVED);
    let mut hosts: HashMap<(String, String), Host> = HashMap::new();
    for r in &vm_rows {
        let machine = field(r, "instance_type");
        let region = field(r, "region");
        if machine.starts_with("n1-") {
            hosts.insert(
                (machine.to_string(), region.to_string()),
                (
                    (
                        price(field(r, "hour_usd")),
                        price(field(r, "hour_spot_usd")),
                    ),
                    parse_u32(field(r, "vcpus")).unwrap_or(0),
                    field(r, "ram_gb").parse().unwrap_or(0.0),
                ),
            );
            continue;
        }
        let Some(count) = parse_u32(field(r, "accelerator_count")).filter(|n| *n >= 1) else {
            b.report
                .note("gcp fractional-GPU shape skipped", machine.to_string());
            continue;
        };
        let acc = field(r, "accelerator");
        let model = GpuModel::from_cloud_name(acc);
        let Some(mem) = model.default_memory_gib() else {
            b.report.note(
                "gcp shape with an unknown GPU skipped",
                format!("{machine} ({acc})"),
            );
            continue;
        };
        let t = b.add_type(InstanceType {
            cloud: Cloud::Gcp,
            name: machine.to_string(),
            gpu: Some(GpuSpec {
                model: model.clone(),
                count,
                memory_gib: mem,
            }),
            vcpus: parse_u32(field(r, "vcpus")).unwrap_or(0),
            memory_mib: (field(r, "ram_gb").parse::<f64>().unwrap_or(0.0) * 1024.0).round() as u64,
            interconnect: gcp_interconnect(machine, count, &model),
        });
        let skypilot_acc = match (machine, &model) {
            (m, _) if m.starts_with("a3-megagpu") => "H100-MEGA",
            (_, G::A100) => "A100",
            (_, G::A100_80GB) => "A100-80GB",
            (_, G::H100) => "H100",
            (_, G::L4) => "L4",
            _ => "",
        };
        let (od, spot) = b.check_prices(
            &t,
            region,
            price(field(r, "hour_usd")),
            price(field(r, "hour_spot_usd")),
        );
        if od.is_some() {
            for (term, col) in [("1y", "month_1y_cud_usd"), ("3y", "month_3y_cud_usd")] {
                match field(r, col).parse::<f64>() {
                    Ok(month) if month > 0.0 => {
                        let hourly = Price::from_usd_per_hour_f64(month / 730.0);
                        b.commitments.insert(format!(
                            "gcp,{machine},{region},{term},{},{GCP_SOURCE}",
                            hourly.display(6)
                        ));
                    }
                    _ => b.report.note(
                        "gcp shape without a committed-use price",
                        format!("{machine} {region} {term}"),
                    ),
                }
            }
        }
        let region_zones: Vec<Option<String>> = if skypilot_acc.is_empty() {
            b.report.note(
                "gcp shape priced per region (no zone data in source)",
                format!("{machine} {region}"),
            );
            vec![None]
        } else {
            match zones.get(&(skypilot_acc.to_string(), region.to_string())) {
                Some(z) => z.iter().cloned().map(Some).collect(),
                None => {
                    b.report.note(
                        "gcp region without zone data skipped",
                        format!("{machine} {region}"),
                    );
                    continue;
                }
            }
        };
        for zone in region_zones {
            b.add_offers(&t, (region, zone.as_deref()), (od, spot), &listed, None);
        }
    }
    // GPUs attached to N1 hosts: host price (per region) + GPU price (per zone).
    let mut attach: Vec<(&(String, u32, String), &PricePair)> = gpu_prices.iter().collect();
    attach.sort_by(|a, b| a.0.cmp(b.0));
    for ((acc, count, zone), (gpu_od, gpu_spot)) in attach {
        for (host_acc, model, n, host) in GCP_N1_HOSTS {
            if host_acc != acc || n != count {
                continue;
            }
            let region = zone.rsplit_once('-').map_or(zone.as_str(), |(r, _)| r);
            let Some(((host_od, host_spot), vcpus, ram)) =
                hosts.get(&(host.to_string(), region.to_string()))
            else {
                b.report.note(
                    "gcp N1 host price missing; attachment skipped",
                    format!("{host} {region}"),
                );
                continue;
            };
            let name = format!("{host}+nvidia-tesla-{}x{n}", acc.to_lowercase());
            let t = b.add_type(InstanceType {
                cloud: Cloud::Gcp,
                name,
                gpu: Some(GpuSpec {
                    model: model.clone(),
                    count: *n,
                    memory_gib: model.default_memory_gib().unwrap_or(16),
                }),
                vcpus: *vcpus,
                memory_mib: (ram * 1024.0).round() as u64,
                interconnect: gcp_interconnect(host, *n, model),
            });
            let sum = |a: &Option<Price>, b: &Option<Price>| {
                a.zip(*b).and_then(|(a, b)| a.checked_add(b))
            };
            let (od, spot) =
                b.check_prices(&t, zone, sum(host_od, gpu_od), sum(host_spot, gpu_spot));
            b.add_offers(&t, (region, Some(zone)), (od, spot), &n1_listed, None);
        }
    }
    Ok(())
}
