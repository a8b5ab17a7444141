//! Fault injection and the call log of the GCP and Azure REST stand-ins,
//! written once: each stand-in's `tests/support` includes this file by path
//! (test support is not a crate of its own).

use std::collections::{HashMap, VecDeque};

/// Faults aimed at an operation's next calls, at a call by its number, and
/// at every create in a zone; and every call so far.
#[derive(Debug)]
pub struct Faults<F> {
    per_op: HashMap<String, VecDeque<F>>,
    per_call: HashMap<usize, F>,
    per_zone: HashMap<String, String>,
    /// Every call so far: (operation, URL).
    pub calls: Vec<(String, String)>,
}

impl<F> Default for Faults<F> {
    fn default() -> Self {
        Faults {
            per_op: HashMap::new(),
            per_call: HashMap::new(),
            per_zone: HashMap::new(),
            calls: Vec::new(),
        }
    }
}

impl<F> Faults<F> {
    /// Answers the next call of `op` (after those already queued) with
    /// `fault`.
    pub fn fail_next(&mut self, op: &str, fault: F) {
        self.per_op.entry(op.into()).or_default().push_back(fault);
    }

    /// Answers the `n`th call (1-based, counting every call) with `fault`.
    pub fn fail_call(&mut self, n: usize, fault: F) {
        self.per_call.insert(n, fault);
    }

    /// Fails every create in `zone` with the error `code`.
    pub fn fail_zone(&mut self, zone: &str, code: &str) {
        self.per_zone.insert(zone.into(), code.into());
    }

    /// The error code creates in `zone` fail with, if any.
    pub fn zone_fault(&self, zone: &str) -> Option<String> {
        self.per_zone.get(zone).cloned()
    }

    /// How many calls of `op` there were.
    pub fn count(&self, op: &str) -> usize {
        self.calls.iter().filter(|(o, _)| o == op).count()
    }

    /// Logs a call and takes the fault aimed at it: by its number first,
    /// then the next one queued for its operation.
    pub fn take(&mut self, op: &str, url: String) -> Option<F> {
        self.calls.push((op.to_string(), url));
        match self.per_call.remove(&self.calls.len()) {
            Some(f) => Some(f),
            None => self.per_op.get_mut(op).and_then(VecDeque::pop_front),
        }
    }
}
