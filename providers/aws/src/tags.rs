//! gpufleet tags as EC2 tags: sent with every resource gpufleet creates
//! (instances, volumes, placement groups), read back, and turned into
//! `tag:` filters. EC2 keeps keys and values as given (up to 128 and 256
//! characters; `aws:` is reserved), so the mapping is one to one.

use aws_sdk_ec2::types::{Filter, Tag};
use gpufleet_model::{TagFilter, Tags};

/// The tags in EC2's form.
pub(crate) fn ec2_tags(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// Tags read back from EC2 (a tag without a key is dropped).
pub(crate) fn from_ec2_tags(tags: &[Tag]) -> Tags {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

/// A tag filter as EC2 `tag:KEY` filters (all must match).
pub(crate) fn tag_filters(filter: &TagFilter) -> Vec<Filter> {
    filter
        .0
        .iter()
        .map(|(k, v)| Filter::builder().name(format!("tag:{k}")).values(v).build())
        .collect()
}
