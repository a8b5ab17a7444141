//! What the REST stand-ins (Compute Engine, Azure Resource Manager) include
//! by path: fault injection and the call log (`faults.rs`, with the
//! `stand_in_handles!` macro), and the checks every cloud's tests share
//! (`common.rs`, which the AWS tests include on their own).

#[macro_use]
mod faults;
mod common;

#[allow(unused_imports)] // each test binary uses some of them
pub use common::*;
pub use faults::{Fault, Faults};
