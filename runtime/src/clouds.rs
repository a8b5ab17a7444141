//! Opening one live cloud with a config's settings, and checking it as
//! `gpufleet check` does: the pieces the fleet, the live catalog and the
//! controllers' event feeds share (below all of them).

use std::sync::Arc;

use gpufleet_core::{Cloud, Error};

use crate::config::Config;
use crate::factory::Settings;

/// How long a cloud is given to answer a command's check (`gpufleet
/// check`'s default): a cloud that does not answer within it is left out of
/// the command.
pub const CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(3);

/// Checks one cloud with the config's settings, as `gpufleet check` does:
/// credentials, identity and one authenticated call, within `budget`.
#[cfg_attr(
    not(any(feature = "aws", feature = "gcp", feature = "azure")),
    allow(unused_variables)
)]
pub async fn check_cloud(
    cfg: &Config,
    cloud: Cloud,
    budget: std::time::Duration,
) -> gpufleet_core::check::CloudCheck {
    use gpufleet_core::check::CloudCheck;
    let started = std::time::Instant::now();
    let run = async {
        #[allow(unused_variables)]
        let unusable =
            |e: Error, unset| CloudCheck::unconfigured(cloud, e.message(), unset, started);
        match cloud {
            #[cfg(feature = "aws")]
            Cloud::Aws => match cfg.aws() {
                Ok(c) => gpufleet_aws::check::check(&c, budget).await,
                Err(e) => unusable(e, None),
            },
            #[cfg(feature = "gcp")]
            Cloud::Gcp => match cfg.gcp() {
                Ok(c) => gpufleet_gcp::check::check(&c, budget).await,
                Err(e) => unusable(e, Some(&gpufleet_gcp::check::UNSET)),
            },
            #[cfg(feature = "azure")]
            Cloud::Azure => match cfg.azure() {
                Ok(c) => gpufleet_azure::check::check(&c, budget).await,
                Err(e) => unusable(e, Some(&gpufleet_azure::check::UNSET)),
            },
            other => CloudCheck::new(other).fail(
                format!("no live {other} provider"),
                "use --provider fake to try the workflow",
            ),
        }
    };
    // A hard stop on top of each check's own budget.
    match tokio::time::timeout(budget + std::time::Duration::from_millis(500), run).await {
        Ok(c) => c,
        Err(_) => CloudCheck::new(cloud)
            .fail(
                format!("the check did not finish within {budget:?}"),
                "check the network or proxy (HTTPS_PROXY)",
            )
            .took(started),
    }
}

/// The AWS interruption queue of the config (`aws.interruption_queue`), read
/// with its AWS settings; `None` when none is set (or AWS is not built in).
pub async fn interruption_queue(
    cfg: &Config,
) -> Option<Result<Arc<dyn gpufleet_core::CloudEvents>, Error>> {
    #[cfg(feature = "aws")]
    if let Some(q) = &cfg.aws_interruption_queue {
        let open = async {
            let aws = gpufleet_aws::AwsProvider::new(cfg.aws()?).await?;
            let queue = aws.interruption_queue(q).await?;
            Ok(Arc::new(queue) as Arc<dyn gpufleet_core::CloudEvents>)
        };
        return Some(open.await);
    }
    #[cfg(not(feature = "aws"))]
    let _ = cfg;
    None
}

/// What `gpufleet check` says: each of `clouds` checked at once within
/// `budget` ([`check_cloud`]), and the AWS interruption queue where one is
/// set (a queue that cannot be read makes AWS unusable as configured).
pub async fn check_clouds(
    cfg: &Config,
    clouds: &[Cloud],
    budget: std::time::Duration,
) -> Vec<gpufleet_core::check::CloudCheck> {
    let mut checks: Vec<gpufleet_core::check::CloudCheck> =
        futures::future::join_all(clouds.iter().map(|c| check_cloud(cfg, *c, budget))).await;
    if let Some(c) = checks
        .iter_mut()
        .find(|c| c.cloud == Cloud::Aws && c.usable)
    {
        match check_interruption_queue(cfg, budget).await {
            Some(Ok(queue)) => c.endpoints.push(format!("{queue} (interruption queue)")),
            Some(Err(e)) => {
                c.usable = false;
                c.problem = Some(format!("the interruption queue cannot be read: {e}"));
                c.advice = Some("check aws.interruption_queue, and that the identity may sqs:ReceiveMessage, sqs:DeleteMessage and sqs:GetQueueAttributes on it".into());
            }
            None => {}
        }
    }
    checks
}

/// Checks that the config's interruption queue can be read, within
/// `budget`, for `gpufleet check`: what was read, or what is wrong.
pub async fn check_interruption_queue(
    cfg: &Config,
    budget: std::time::Duration,
) -> Option<Result<String, Error>> {
    let run = async {
        let queue = interruption_queue(cfg).await?;
        Some(match queue {
            Ok(q) => q.check().await.map(|()| q.describe()),
            Err(e) => Err(e),
        })
    };
    match tokio::time::timeout(budget, run).await {
        Ok(r) => r,
        Err(_) => Some(Err(Error::new(
            gpufleet_core::ErrorKind::Timeout,
            format!("the interruption queue did not answer within {budget:?}"),
        ))),
    }
}

/// The clouds' event feeds `cfg` sets up (the AWS interruption queue), for
/// a controller of jobs or services: an unset one is none; one that cannot
/// be opened now is said on stderr and left out (interruptions are then
/// seen at the polls and the nodes' own reports).
pub async fn event_feeds(cfg: &Config) -> Vec<Arc<dyn gpufleet_core::CloudEvents>> {
    match interruption_queue(cfg).await {
        Some(Ok(queue)) => vec![queue],
        Some(Err(e)) => {
            tracing::warn!(error = %e, "cannot open the interruption queue; interruptions are seen at the polls");
            eprintln!("warning: cannot open the interruption queue ({e}); interruptions are seen at the polls");
            Vec::new()
        }
        None => Vec::new(),
    }
}

/// The settings a live `cloud` opens with, when it is set up: `Err` with
/// the check line to print when it is not (no AWS credentials anywhere in
/// the chain, no GCP project, no Azure subscription), found without any SDK
/// call that could retry its way through a credentials chain; `None` for a
/// cloud with no live provider in this build. The fleet and the catalog
/// refresh open clouds through this.
pub async fn live_settings(
    cfg: &Config,
    cloud: Cloud,
) -> Result<Option<Result<Settings, gpufleet_core::check::CloudCheck>>, Error> {
    #[allow(unused_imports)]
    use gpufleet_core::check::CloudCheck;
    let settings = match cloud {
        #[cfg(feature = "aws")]
        Cloud::Aws => {
            let c = cfg.aws()?;
            Some(
                match gpufleet_aws::check::credential_source(
                    &c,
                    std::time::Duration::from_millis(800),
                )
                .await
                {
                    Some(_) => Ok(Settings::Aws(c)),
                    None => Err(CloudCheck::new(Cloud::Aws).fail(
                        "no AWS credentials found",
                        gpufleet_aws::check::NO_CREDENTIALS_ADVICE,
                    )),
                },
            )
        }
        #[cfg(feature = "gcp")]
        Cloud::Gcp => Some(
            cfg.gcp()
                .map(Settings::Gcp)
                .map_err(|e| CloudCheck::new(Cloud::Gcp).fail(e.message(), "")),
        ),
        #[cfg(feature = "azure")]
        Cloud::Azure => Some(
            cfg.azure()
                .map(Settings::Azure)
                .map_err(|e| CloudCheck::new(Cloud::Azure).fail(e.message(), "")),
        ),
        // No live provider for it in this build (the fake cloud, a cloud
        // whose feature is off, one the model gains before its crate):
        // `None`, which every caller says as "no live provider".
        _ => {
            let _ = cfg;
            None
        }
    };
    Ok(settings)
}
