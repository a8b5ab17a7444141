//! Fault injection and the call log of the GCP and Azure REST stand-ins,
//! written once for both.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use wiremock::ResponseTemplate;

/// A fault for the next call of an operation (`instances.insert`,
/// `virtualMachines.createOrUpdate`, …).
#[derive(Debug, Clone)]
pub enum Fault {
    /// An HTTP error with the cloud's error body (its error code or reason)
    /// and, when given, a `Retry-After` in seconds.
    Http(u16, String, Option<u64>),
    /// The request is accepted; its long-running operation ends with this
    /// error code.
    Operation(String),
    /// A raw response.
    Raw(ResponseTemplate),
    /// Wait this long, then answer as usual.
    Delay(Duration),
    /// Answer as usual (to aim a later fault at a later call).
    Pass,
}

impl Fault {
    /// An HTTP error without `Retry-After`.
    pub fn http(status: u16, code: &str) -> Fault {
        Fault::Http(status, code.into(), None)
    }

    /// The error response `error` builds for this status and code (the
    /// cloud's body shape), with its `Retry-After` when it has one.
    pub fn respond(
        status: u16,
        code: &str,
        after: Option<u64>,
        error: impl FnOnce(u16, &str) -> ResponseTemplate,
    ) -> ResponseTemplate {
        let t = error(status, code);
        match after {
            Some(a) => t.insert_header("Retry-After", a.to_string().as_str()),
            None => t,
        }
    }
}

/// The handles every stand-in gives its tests, written once: `start` (a
/// wiremock server that answers every request with the stand-in, whose
/// state `$state` builds from the server) and the fault and call-log
/// handles of its `faults` field. The stand-in is a tuple struct around an
/// `Arc<Mutex<State>>`.
macro_rules! stand_in_handles {
    ($stand_in:ident, $fault:ty, |$server:ident| $state:expr) => {
        impl $stand_in {
            /// Starts a server answered by a fresh stand-in.
            pub async fn start() -> (MockServer, $stand_in) {
                let $server = MockServer::start().await;
                let stand_in = $stand_in(Arc::new(Mutex::new($state)));
                Mock::given(wiremock::matchers::any())
                    .respond_with(stand_in.clone())
                    .mount(&$server)
                    .await;
                ($server, stand_in)
            }

            /// See [`Faults::fail_next`].
            pub fn fail_next(&self, op: &str, fault: $fault) {
                self.0.lock().unwrap().faults.fail_next(op, fault);
            }

            /// See [`Faults::fail_call`].
            pub fn fail_call(&self, n: usize, fault: $fault) {
                self.0.lock().unwrap().faults.fail_call(n, fault);
            }

            /// See [`Faults::fail_zone`].
            pub fn fail_zone(&self, zone: &str, code: &str) {
                self.0.lock().unwrap().faults.fail_zone(zone, code);
            }

            /// See [`Faults::count`].
            pub fn count(&self, op: &str) -> usize {
                self.0.lock().unwrap().faults.count(op)
            }

            /// Every call so far: (operation, URL).
            pub fn calls(&self) -> Vec<(String, String)> {
                self.0.lock().unwrap().faults.calls.clone()
            }
        }
    };
}

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
