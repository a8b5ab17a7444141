//! Following a cloud list's page tokens safely.

use std::collections::HashSet;

use crate::error::{Error, ErrorKind, Result};
use crate::model::Cloud;

/// Follows a list's page tokens (`pageToken`, `nextLink`, `$skipToken`, …),
/// refusing one that repeats (a stand-in or proxy that loops would otherwise
/// keep gpufleet listing forever) and stopping after `max` pages.
///
/// ```
/// use gpufleet_model::paging::PageTokens;
/// use gpufleet_model::Cloud;
///
/// let mut pages = PageTokens::new(Cloud::Gcp, "instances.aggregatedList", 100);
/// assert_eq!(pages.next(Some("p2")).unwrap().as_deref(), Some("p2"));
/// assert_eq!(pages.next(Some("")).unwrap(), None); // the last page
/// assert!(pages.next(Some("p2")).is_err()); // a token seen before
/// ```
#[derive(Debug)]
pub struct PageTokens {
    seen: HashSet<String>,
    max: usize,
    cloud: Cloud,
    operation: &'static str,
}

impl PageTokens {
    /// A guard for one listing of `operation`, allowing at most `max` pages.
    pub fn new(cloud: Cloud, operation: &'static str, max: usize) -> PageTokens {
        PageTokens {
            seen: HashSet::new(),
            max: max.max(1),
            cloud,
            operation,
        }
    }

    /// The token of the next page to ask for, given the one the last page
    /// returned: `None` at the end (no token, or an empty one), an
    /// [`ErrorKind::Unavailable`] error naming the operation when the token
    /// repeats or the listing passes `max` pages.
    pub fn next(&mut self, token: Option<&str>) -> Result<Option<String>> {
        let Some(t) = token.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        if !self.seen.insert(t.to_string()) || self.seen.len() >= self.max {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{} returned a page token it had returned before (or more than {} pages): the listing does not end",
                    self.operation, self.max
                ),
            )
            .with_provider(self.cloud)
            .with_operation(self.operation));
        }
        Ok(Some(t.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_at_the_end_refuses_repeats_and_bounds_the_pages() {
        let mut p = PageTokens::new(Cloud::Azure, "skus.list", 3);
        assert_eq!(p.next(None).unwrap(), None);
        assert_eq!(p.next(Some("a")).unwrap().as_deref(), Some("a"));
        let e = p.next(Some("a")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.to_string().contains("skus.list"), "{e}");
        let mut p = PageTokens::new(Cloud::Azure, "skus.list", 3);
        assert!(p.next(Some("a")).is_ok());
        assert!(p.next(Some("b")).is_ok());
        assert!(p.next(Some("c")).is_err());
    }
}
