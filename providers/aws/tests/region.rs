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
    assert_eq!(first_region(AwsBuilder::new()).await, "eu-west-1");
    std::env::set_var("AWS_PROFILE", "gpu");
    assert_eq!(first_region(AwsBuilder::new()).await, "ap-northeast-1");
    // An explicit region wins.
    let explicit = AwsBuilder::new().with_regions("us-west-2");
    assert_eq!(first_region(explicit).await, "us-west-2");
}

/// The first region of a provider built from `b` (with test credentials).
async fn first_region(b: AwsBuilder) -> String {
    let config = b.with_static_credentials("AKIAX", "y").build().unwrap();
    let p = AwsProvider::new(config).await.unwrap();
    p.config().regions[0].as_str().to_string()
}
