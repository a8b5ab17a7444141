//! Which GPUs a job can be moved to: what `fit` and `fit --from-job`
//! suggest, and what they leave out and why.

use crate::{GpuModel, Offer};

/// Whether a job can run on `candidate`: `Err` with why not. The job ran on
/// `ran_on` (for `fit --from-job`; `None` for `fit`, which assumes the CUDA
/// stack). A model in `asked` (`--gpu`) is always allowed: the user chose
/// it. Otherwise it must be of the same vendor (software stack) as what the
/// job ran on (NVIDIA for `fit`), not retired or graphics-class, and not of
/// an older generation than what the job ran on.
pub fn can_run_on(
    candidate: &GpuModel,
    ran_on: Option<&GpuModel>,
    asked: &[GpuModel],
) -> Result<(), String> {
    if asked.contains(candidate) || ran_on == Some(candidate) {
        return Ok(());
    }
    let stack = ran_on.and_then(GpuModel::vendor).unwrap_or("nvidia");
    match candidate.vendor() {
        Some(v) if v == stack => {}
        Some(v) => {
            return Err(format!(
                "{v} ({}), not the {stack} stack the job {}",
                if v == "amd" { "ROCm" } else { "CUDA" },
                if ran_on.is_some() {
                    "ran on"
                } else {
                    "is assumed to use"
                }
            ))
        }
        None => return Err("not a GPU gpufleet knows the software stack of".into()),
    }
    if let Some(why) = candidate.unsuited() {
        return Err(why.into());
    }
    if let (Some(old), Some(new)) = (
        ran_on.and_then(GpuModel::generation),
        candidate.generation(),
    ) {
        if new < old {
            return Err(format!(
                "an older generation than the {} it ran on",
                ran_on.map(GpuModel::as_str).unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// `offers` whose GPU the job can run on ([`can_run_on`]), and each GPU
/// model left out with why (one line each, sorted).
pub fn compatible_offers(
    offers: &[Offer],
    ran_on: Option<&GpuModel>,
    asked: &[GpuModel],
) -> (Vec<Offer>, Vec<String>) {
    let mut kept = Vec::new();
    let mut left: std::collections::BTreeMap<String, String> = Default::default();
    for o in offers {
        let Some(g) = o.instance_type.gpu.as_ref() else {
            continue;
        };
        match can_run_on(&g.model, ran_on, asked) {
            Ok(()) => kept.push(o.clone()),
            Err(why) => {
                left.entry(g.model.to_string()).or_insert(why);
            }
        }
    }
    (
        kept,
        left.into_iter()
            .map(|(m, why)| format!("{m} ({why})"))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda_job_is_not_offered_retired_graphics_amd_or_older_gpus() {
        let v100 = GpuModel::V100;
        for (m, ok) in [
            (GpuModel::K80, false),
            (GpuModel::M60, false),
            (GpuModel::Mi25, false),
            (GpuModel::P100, false),
            (GpuModel::T4, true),
            (GpuModel::V100, true),
            (GpuModel::H100, true),
        ] {
            assert_eq!(can_run_on(&m, Some(&v100), &[]).is_ok(), ok, "{m}");
        }
        // Asked for by name, anything goes; `fit` alone keeps old CUDA GPUs
        // that still run.
        assert!(can_run_on(&GpuModel::Mi25, Some(&v100), &[GpuModel::Mi25]).is_ok());
        assert!(can_run_on(&GpuModel::P100, None, &[]).is_ok());
        assert!(can_run_on(&GpuModel::K80, None, &[]).is_err());
        // An AMD job stays on AMD.
        assert!(can_run_on(&GpuModel::H100, Some(&GpuModel::Mi25), &[]).is_err());
    }
}
