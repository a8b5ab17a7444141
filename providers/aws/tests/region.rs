//! With no region given, the shared config file's profile region is used, as
//! the AWS CLI would (its own process: it sets environment variables).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpufleet_aws::{AwsBuilder, AwsProvider};

#[tokio::test]
async fn the_profile_region_is_used_when_none_is_given() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let file = dir.join("config");
    std::fs::write(
        &file,
        "[default]\nregion = eu-west-1\n\n[profile gpu]\nregion = ap-northeast-1\n",
    )
    .unwrap();
    std::env::set_var("AWS_CONFIG_FILE", &file);
    std::env::remove_var("AWS_PROFILE");
    let p = AwsProvider::new(
        AwsBuilder::new()
            .with_static_credentials("AKIAX", "y")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(p.config().regions[0].as_str(), "eu-west-1");
    std::env::set_var("AWS_PROFILE", "gpu");
    let p = AwsProvider::new(
        AwsBuilder::new()
            .with_static_credentials("AKIAX", "y")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(p.config().regions[0].as_str(), "ap-northeast-1");
    // An explicit region wins.
    let p = AwsProvider::new(
        AwsBuilder::new()
            .with_regions("us-west-2")
            .with_static_credentials("AKIAX", "y")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(p.config().regions[0].as_str(), "us-west-2");
}
