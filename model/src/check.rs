//! What `gpufleet check` reports per cloud, and the one-line advice every
//! command prints when a cloud it needs is not usable.

use std::ops::ControlFlow;

use serde::Serialize;

use crate::{Cloud, ErrorKind, Result};

/// Whether a cloud can be used from here, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloudCheck {
    /// The cloud.
    pub cloud: Cloud,
    /// Credentials resolved, the scope is set, and the API answered (where
    /// the check could ask it).
    pub usable: bool,
    /// Where the credentials come from (`environment variables`, `profile
    /// dev in ~/.aws/config`, `gcloud application-default login`, …).
    pub credentials: Option<String>,
    /// Who the calls are made as (an ARN, a service account, a user),
    /// never a secret.
    pub identity: Option<String>,
    /// What the calls are scoped to: regions, a project, a subscription.
    pub scope: Option<String>,
    /// The API endpoints calls go to (an override says so).
    pub endpoints: Vec<String>,
    /// What is wrong, when something is.
    pub problem: Option<String>,
    /// What to do about it.
    pub advice: Option<String>,
    /// How long the check took, milliseconds.
    pub elapsed_ms: u64,
}

/// The regions part of a check's scope: `regions us-east-1, us-west-2`, or
/// `all regions` when none is configured (the providers then scan every
/// region they know).
pub fn regions_scope<R: std::fmt::Display>(regions: &[R]) -> String {
    if regions.is_empty() {
        return "all regions".into();
    }
    let names: Vec<String> = regions.iter().map(ToString::to_string).collect();
    format!("regions {}", names.join(", "))
}

/// An endpoint a check shows that is not the cloud's own: `URL (override)`,
/// or `URL (override: SOURCE)` naming where it came from.
pub fn overridden(url: &str, from: Option<&str>) -> String {
    match from {
        Some(from) => format!("{url} (override: {from})"),
        None => format!("{url} (override)"),
    }
}

/// What a check says when a cloud's scope (a GCP project, an Azure
/// subscription) is set nowhere.
#[derive(Debug, Clone, Copy)]
pub struct Unset {
    /// How the settings' error about it starts.
    pub prefix: &'static str,
    /// The problem, naming every place the scope could have come from.
    pub problem: &'static str,
    /// How to set it.
    pub advice: &'static str,
}

impl CloudCheck {
    /// A check with nothing found yet.
    pub fn new(cloud: Cloud) -> Self {
        CloudCheck {
            cloud,
            usable: false,
            credentials: None,
            identity: None,
            scope: None,
            endpoints: Vec::new(),
            problem: None,
            advice: None,
            elapsed_ms: 0,
        }
    }

    /// Marks it not usable, with why and what to do.
    pub fn fail(mut self, problem: impl Into<String>, advice: impl Into<String>) -> Self {
        self.usable = false;
        self.problem = Some(problem.into());
        self.advice = Some(advice.into());
        self
    }

    /// The check of a cloud whose settings could not be built, `why` saying
    /// why: when that is its missing scope (`why` starts with the prefix of
    /// the cloud's `unset`), that scope's full problem and advice; otherwise
    /// `why`, and advice to fix the cloud's settings.
    pub fn unconfigured(
        cloud: Cloud,
        why: impl Into<String>,
        unset: Option<&Unset>,
        started: std::time::Instant,
    ) -> Self {
        let why = why.into();
        let out = CloudCheck::new(cloud);
        let out = match unset {
            Some(u) if why.starts_with(u.prefix) => out.fail(u.problem, u.advice),
            _ => {
                let advice = format!(
                    "fix the {} settings (`gpufleet config show`)",
                    cloud.as_str()
                );
                out.fail(why, advice)
            }
        };
        out.took(started)
    }

    /// How the check's one authenticated call to `api` ended, as the check
    /// reports it: `None` when it did not answer within `budget` (the
    /// problem says so, with `silence`'s why and advice), a refusal (its
    /// message, with the advice `refused` gives for its kind) both end the
    /// check (`Break`); an answer is for the check to go on with.
    pub fn answered<T>(
        self,
        api: &str,
        budget: std::time::Duration,
        answer: Option<Result<T>>,
        silence: (&str, &str),
        refused: impl Fn(ErrorKind) -> &'static str,
    ) -> ControlFlow<Self, (Self, T)> {
        match answer {
            None => ControlFlow::Break(self.fail(
                format!("{api} did not answer within {budget:?}{}", silence.0),
                silence.1,
            )),
            Some(Err(e)) => {
                let advice = refused(e.kind());
                ControlFlow::Break(self.fail(format!("{api} refused: {}", e.message()), advice))
            }
            Some(Ok(v)) => ControlFlow::Continue((self, v)),
        }
    }

    /// Records how long the check took since `started`.
    pub fn took(mut self, started: std::time::Instant) -> Self {
        self.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The line a command prints when it skips this cloud.
    pub fn one_line(&self) -> String {
        match (&self.problem, &self.advice) {
            (Some(p), Some(a)) if !a.is_empty() => {
                format!("{}: {p}; {a} (`gpufleet check` says more)", self.cloud)
            }
            (Some(p), _) => format!("{}: {p} (`gpufleet check` says more)", self.cloud),
            _ => format!("{}: usable", self.cloud),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_scope_gets_its_own_advice_and_any_other_error_its_cloud_settings() {
        let unset = Unset {
            prefix: "no GCP project",
            problem: "no GCP project: set nowhere",
            advice: "set GOOGLE_CLOUD_PROJECT",
        };
        let started = std::time::Instant::now();
        let c = CloudCheck::unconfigured(Cloud::Gcp, "no GCP project", Some(&unset), started);
        assert!(!c.usable);
        assert_eq!(c.problem.as_deref(), Some("no GCP project: set nowhere"));
        assert_eq!(c.advice.as_deref(), Some("set GOOGLE_CLOUD_PROJECT"));
        let why = "invalid region 'mars-1'";
        let c = CloudCheck::unconfigured(Cloud::Azure, why, Some(&unset), started);
        assert_eq!(c.problem.as_deref(), Some("invalid region 'mars-1'"));
        assert_eq!(
            c.advice.as_deref(),
            Some("fix the azure settings (`gpufleet config show`)")
        );
        let c = CloudCheck::unconfigured(Cloud::Aws, "no region", None, started);
        assert_eq!(c.problem.as_deref(), Some("no region"));
    }

    #[test]
    fn a_probe_that_is_silent_or_refused_ends_the_check_and_an_answer_goes_on() {
        let budget = std::time::Duration::from_secs(3);
        let refused = |k: ErrorKind| match k {
            ErrorKind::Unauthenticated => "log in",
            _ => "check the network",
        };
        let silence = (" (no route)", "check the proxy");
        let start = || CloudCheck::new(Cloud::Gcp);
        let ControlFlow::Break(c) = start().answered::<()>("API", budget, None, silence, refused)
        else {
            panic!("a silent API went on")
        };
        assert_eq!(
            c.problem.as_deref(),
            Some("API did not answer within 3s (no route)")
        );
        assert_eq!(c.advice.as_deref(), Some("check the proxy"));
        let e = crate::Error::new(ErrorKind::Unauthenticated, "token expired");
        let ControlFlow::Break(c) =
            start().answered::<()>("API", budget, Some(Err(e)), silence, refused)
        else {
            panic!("a refusal went on")
        };
        assert!(
            c.problem
                .as_deref()
                .is_some_and(|p| p.starts_with("API refused: token expired")),
            "{c:?}"
        );
        assert_eq!(c.advice.as_deref(), Some("log in"));
        assert!(!c.usable);
        let ControlFlow::Continue((c, v)) =
            start().answered("API", budget, Some(Ok(7)), silence, refused)
        else {
            panic!("an answer ended the check")
        };
        assert_eq!(v, 7);
        assert!(c.problem.is_none());
    }
}
