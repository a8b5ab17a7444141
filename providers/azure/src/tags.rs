//! gpufleet tags as Azure Resource Manager tags, on VMs and proximity
//! placement groups. ARM keeps names and values as given within its limits
//! (a name of at most 512 characters without `<`, `>`, `%`, `&`, `\`, `?`
//! or `/`; a value of at most 256; at most 50 tags on a resource), so the
//! mapping is one to one; a tag outside them is refused here, naming it,
//! before any request.

use std::collections::BTreeMap;

use gpufleet_model::{Error, Result, Tags};

/// ARM's most tags on one resource.
pub(crate) const MAX_TAGS: usize = 50;
const MAX_NAME: usize = 512;
const MAX_VALUE: usize = 256;
const FORBIDDEN: &[char] = &['<', '>', '%', '&', '\\', '?', '/'];

/// The tags in ARM's form, or an error naming the first tag ARM would refuse.
pub(crate) fn to_arm(tags: &Tags) -> Result<BTreeMap<String, String>> {
    if tags.len() > MAX_TAGS {
        return Err(Error::invalid_input(format!(
            "{} tags: an Azure resource takes at most {MAX_TAGS}",
            tags.len()
        )));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > MAX_NAME || k.contains(FORBIDDEN) {
            return Err(Error::invalid_input(format!(
                "invalid Azure tag name '{k}': 1 to {MAX_NAME} characters, none of < > % & \\ ? /"
            )));
        }
        if v.chars().count() > MAX_VALUE {
            return Err(Error::invalid_input(format!(
                "invalid Azure tag value for '{k}': {} characters, at most {MAX_VALUE}",
                v.chars().count()
            )));
        }
    }
    Ok(tags.clone())
}

/// Tags read back from ARM.
pub(crate) fn from_arm(tags: &BTreeMap<String, String>) -> Tags {
    tags.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_refused_by_name() {
        let mut t = Tags::new();
        t.insert("gpufleet:job".into(), "train-1".into());
        assert_eq!(from_arm(&to_arm(&t).expect("ok")), t);
        let mut bad = t.clone();
        bad.insert("team/owner".into(), "x".into());
        let e = to_arm(&bad).unwrap_err();
        assert!(e.to_string().contains("'team/owner'"), "{e}");
        let mut long = t.clone();
        long.insert("note".into(), "x".repeat(257));
        let e = to_arm(&long).unwrap_err();
        assert!(
            e.to_string().contains("'note'") && e.to_string().contains("257"),
            "{e}"
        );
        let many: Tags = (0..51).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(to_arm(&many).unwrap_err().to_string().contains("51 tags"));
    }
}
