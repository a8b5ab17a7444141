//! `gpufleet mix`: committed, on-demand and spot for a demand profile.

use serde::Serialize;

use crate::advisor::mix::{MixOption, MixReport};
use crate::{Cloud, Region};

/// One option as `mix --output json` prints it (a stable schema).
#[derive(Debug, Clone, Serialize)]
pub struct MixOptionRow {
    /// Its name.
    pub name: String,
    /// The commitment's term, if any.
    pub term: Option<String>,
    /// Instances committed.
    pub committed: u32,
    /// How busy the committed instances are over the profile.
    pub committed_utilisation: Option<f64>,
    /// On-demand instance-hours over the profile.
    pub on_demand_instance_hours: f64,
    /// Spot instance-hours over the profile.
    pub spot_instance_hours: f64,
    /// Cost over the whole profile, USD.
    pub cost_over_profile_usd: f64,
    /// Cost a month, USD.
    pub monthly_usd: f64,
    /// Saving a month against all on-demand, USD.
    pub monthly_saving_usd: f64,
    /// That saving as a share of all on-demand.
    pub saving_share: f64,
}

impl From<&MixOption> for MixOptionRow {
    fn from(o: &MixOption) -> Self {
        MixOptionRow {
            name: o.name.clone(),
            term: o.term.clone(),
            committed: o.committed,
            committed_utilisation: o.committed_utilisation,
            on_demand_instance_hours: o.on_demand_instance_hours,
            spot_instance_hours: o.spot_instance_hours,
            cost_over_profile_usd: o.cost.as_usd_f64(),
            monthly_usd: o.monthly.as_usd_f64(),
            monthly_saving_usd: o.monthly_saving.as_usd_f64(),
            saving_share: o.saving_share,
        }
    }
}

/// One input of the comparison, with where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct MixInput {
    /// What it is.
    pub name: &'static str,
    /// Its value, as said to people.
    pub value: String,
    /// Where it came from.
    pub source: String,
}

/// One commitment term.
#[derive(Debug, Clone, Serialize)]
pub struct MixTermRow {
    /// Its name.
    pub term: String,
    /// Its price, USD per hour.
    pub hourly_usd: f64,
    /// Its discount on on-demand.
    pub discount: f64,
    /// How busy a committed instance must be to beat on-demand.
    pub break_even_utilisation: f64,
    /// Where the price came from.
    pub source: String,
}

/// What `mix --output json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct MixDoc {
    /// Cloud.
    pub cloud: String,
    /// Region.
    pub region: String,
    /// Instance type.
    pub instance_type: String,
    /// Hours the demand profile covers.
    pub profile_hours: f64,
    /// Most instances in demand at once.
    pub peak_instances: f64,
    /// Mean instances in demand.
    pub mean_instances: f64,
    /// The inputs and their sources.
    pub inputs: Vec<MixInput>,
    /// The commitment terms.
    pub terms: Vec<MixTermRow>,
    /// Every option compared.
    pub options: Vec<MixOptionRow>,
    /// The cheapest.
    pub recommended: MixOptionRow,
}

impl MixDoc {
    /// The document of `report`, for `instance_type` in `region` of `cloud`,
    /// its profile read from `profile` (named as its source).
    pub fn new(
        r: &MixReport,
        cloud: Cloud,
        region: &Region,
        instance_type: &str,
        profile: &str,
    ) -> Self {
        MixDoc {
            cloud: cloud.to_string(),
            region: region.to_string(),
            instance_type: instance_type.to_string(),
            profile_hours: r.profile_hours,
            peak_instances: r.peak,
            mean_instances: r.mean,
            inputs: inputs(r, profile),
            terms: r
                .break_even
                .iter()
                .map(|b| MixTermRow {
                    term: b.term.clone(),
                    hourly_usd: b.hourly.usd_per_hour_f64(),
                    discount: b.discount,
                    break_even_utilisation: b.break_even_utilisation,
                    source: b.basis.to_string(),
                })
                .collect(),
            options: r.options.iter().map(MixOptionRow::from).collect(),
            recommended: MixOptionRow::from(&r.recommended),
        }
    }
}

fn inputs(r: &MixReport, profile: &str) -> Vec<MixInput> {
    let q = &r.request;
    let mut v = vec![
        MixInput {
            name: "demand profile",
            value: format!(
                "{:.0} h, peak {:.1}, mean {:.2} instances",
                r.profile_hours, r.peak, r.mean
            ),
            source: format!("user input: {profile}"),
        },
        MixInput {
            name: "on-demand price",
            value: format!("${}/h", q.on_demand),
            source: q.on_demand_basis.to_string(),
        },
    ];
    match (q.spot, &q.spot_basis) {
        (Some(p), Some(b)) => v.push(MixInput {
            name: "spot price",
            value: format!("${p}/h"),
            source: b.to_string(),
        }),
        _ => v.push(MixInput {
            name: "spot price",
            value: "none".into(),
            source: "catalog: not sold as spot here; interruptible demand runs on-demand".into(),
        }),
    }
    if let Some(b) = &q.spot_overhead_basis {
        v.push(MixInput {
            name: "spot rework",
            value: format!("+{:.1}%", q.spot_overhead * 100.0),
            source: b.to_string(),
        });
    }
    v.push(MixInput {
        name: "interruptible share",
        value: format!("{:.0}%", q.interruptible_share * 100.0),
        source: q.interruptible_basis.to_string(),
    });
    v
}

/// What the recommended option does, in words, from its own hours: the
/// line named on-demand and spot whatever the option held (an all-committed
/// option, or spot dearer than on-demand, has neither).
pub fn recommendation(rec: &MixOption) -> String {
    // Under half an instance-hour over the profile is none.
    let on_demand = rec.on_demand_instance_hours >= 0.5;
    let spot = rec.spot_instance_hours >= 0.5;
    if rec.committed == 0 {
        return match (on_demand, spot) {
            (true, true) => {
                "commit to nothing: the firm demand on-demand, the interruptible share on spot"
            }
            (false, true) => "commit to nothing: all of it on spot",
            _ => "commit to nothing: all of it on-demand",
        }
        .into();
    }
    let commit = format!(
        "commit to {} instance(s){}",
        rec.committed,
        rec.term
            .as_deref()
            .map(|t| format!(" for {t}"))
            .unwrap_or_default()
    );
    let rest = match (on_demand, spot) {
        (true, true) => ", the rest of the firm demand on-demand, the interruptible share on spot",
        (true, false) => ", the rest on-demand",
        (false, true) => ", the interruptible demand above it on spot",
        (false, false) => ", which covers all of it",
    };
    format!("{commit}{rest}")
}
