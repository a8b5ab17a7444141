//! Counts the calls that get through to where it sits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Call, Interceptor, Next, Reply};

/// Counts every call (every attempt, when below a retry layer) that reaches
/// it, and passes it on. Clones share the count: keep one to read it, put the
/// other in the stack. For tests that a call was, or was not, made.
#[derive(Debug, Clone, Default)]
pub struct CallCounter(Arc<AtomicU64>);

impl CallCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls counted so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Interceptor for CallCounter {
    fn intercept<'a, T: Send + 'a>(&'a self, _call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        self.0.fetch_add(1, Ordering::SeqCst);
        next()
    }
}
