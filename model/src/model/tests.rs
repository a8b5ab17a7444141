//! Tests of the model.

use super::*;
use crate::ErrorKind;
use time::OffsetDateTime;

fn pool(zone: Option<&str>, instance_type: &str) -> Pool {
    Pool {
        cloud: Cloud::Aws,
        region: Region::new("us-east-1"),
        zone: zone.map(Zone::new),
        instance_type: instance_type.into(),
        capacity: Capacity::Spot,
    }
}

fn instance(zone: &str, instance_type: &str) -> Instance {
    Instance {
        id: InstanceId::new(format!("i-{zone}")),
        pool: pool(Some(zone), instance_type),
        state: InstanceState::Running,
        tags: Tags::new(),
        launched_at: OffsetDateTime::UNIX_EPOCH,
        expires_at: None,
        placement_group: None,
        end_reason: None,
        ended_at: None,
        addresses: Default::default(),
    }
}

#[test]
fn a_replayed_launch_is_recognised_and_a_reused_key_refused() {
    let key = IdempotencyKey::new("job-7").unwrap();
    let req = LaunchRequest::new(pool(None, "p4d.24xlarge"), "ami-1", key.clone());
    assert!(!req.replayed(&[]).unwrap());
    // A launch that named no zone matches its instance in whatever zone.
    assert!(req
        .replayed(&[instance("use1-az4", "p4d.24xlarge")])
        .unwrap());
    let zoned = LaunchRequest::new(pool(Some("use1-az4"), "p4d.24xlarge"), "ami-1", key);
    assert!(zoned
        .replayed(&[instance("use1-az4", "P4D.24xlarge")])
        .unwrap());
    for (existing, why) in [
        (vec![instance("use1-az6", "p4d.24xlarge")], "another zone"),
        (vec![instance("use1-az4", "p5.48xlarge")], "another type"),
        (
            vec![
                instance("use1-az4", "p4d.24xlarge"),
                instance("use1-az4", "p4d.24xlarge"),
            ],
            "another count",
        ),
    ] {
        let e = zoned.replayed(&existing).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{why}");
        assert!(
            e.to_string().contains("'job-7' was already used"),
            "{why}: {e}"
        );
    }
}

#[test]
fn a_partial_launch_is_resumed_and_an_oversized_one_refused() {
    let key = IdempotencyKey::new("job-8").unwrap();
    let req =
        LaunchRequest::new(pool(Some("use1-az4"), "p4d.24xlarge"), "ami-1", key).with_count(4);
    let one = instance("use1-az4", "p4d.24xlarge");
    assert_eq!(req.resume(&[]).unwrap(), Resume::Fresh);
    assert_eq!(
        req.resume(std::slice::from_ref(&one)).unwrap(),
        Resume::Partial(1)
    );
    assert_eq!(req.resume(&vec![one.clone(); 4]).unwrap(), Resume::Done);
    assert!(req.resume(&vec![one.clone(); 5]).is_err());
    // Instances that say their launch asked for another count are
    // another request's, however many there are.
    let mut of_two = one.clone();
    of_two.tags.insert(tags::LAUNCH_COUNT.into(), "2".into());
    assert!(req.resume(std::slice::from_ref(&of_two)).is_err());
    of_two.tags.insert(tags::LAUNCH_COUNT.into(), "4".into());
    assert_eq!(req.resume(&[of_two]).unwrap(), Resume::Partial(1));
    // A one-call provider never sees a partial launch of its own: refused.
    assert!(req.replayed(std::slice::from_ref(&one)).is_err());
    let mut other = one;
    other.pool.capacity = Capacity::OnDemand;
    let e = req.resume(&[other]).unwrap_err();
    assert!(e.to_string().contains("'job-8' was already used"), "{e}");
}

#[test]
fn names_derived_from_a_key_never_change() {
    let key = IdempotencyKey::new("abc").unwrap();
    assert_eq!(key.fingerprint(), "e71fa2190541574b");
    assert_eq!(key.resource_name(3), "gf-e71fa2190541574b-3");
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
}

#[test]
fn a_provider_refuses_a_pool_of_another_cloud_before_any_request() {
    let key = IdempotencyKey::new("job-9").unwrap();
    let req = LaunchRequest::new(pool(None, "p4d.24xlarge"), "ami-1", key);
    assert!(req.validate_for(Cloud::Aws).is_ok());
    let e = req.validate_for(Cloud::Gcp).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string()
            .contains("is on AWS: the GCP provider launches only GCP pools"),
        "{e}"
    );
    // A malformed request is named first, whichever cloud it is for.
    let bad = req.clone().with_count(0);
    assert!(bad
        .validate_for(Cloud::Gcp)
        .unwrap_err()
        .to_string()
        .contains("invalid instance count 0"));
}

#[test]
fn names_in_text_match_the_names_in_json() {
    fn same<T: serde::Serialize + std::fmt::Display>(value: T, name: &str) {
        assert_eq!(value.to_string(), name);
        assert_eq!(serde_json::to_value(&value).unwrap(), name);
    }
    for c in [Cloud::Aws, Cloud::Gcp, Cloud::Azure, Cloud::Fake] {
        same(c, c.as_str());
    }
    same(Cloud::Aws, "aws");
    for c in [Capacity::OnDemand, Capacity::Spot] {
        same(c, c.as_str());
    }
    same(Capacity::OnDemand, "on-demand");
    for r in 0..5 {
        let b = InterruptionBucket::from_index(r).unwrap();
        same(b, b.label());
    }
    same(InterruptionBucket::Under5, "<5%");
    same(crate::Capability::SpotPriceHistory, "spot_price_history");
    assert_eq!(
        ErrorKind::InsufficientCapacity.to_string(),
        "insufficient-capacity"
    );
    assert_eq!(ErrorKind::NotFound.as_str(), "not-found");
}
