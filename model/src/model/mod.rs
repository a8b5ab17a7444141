//! The core model, by subject: clouds and locations, hardware, offers and
//! prices, placement groups, interruption notices, instances, launch requests.

mod hardware;
mod instance;
mod launch;
mod location;
mod notice;
mod offer;
mod placement;

pub use hardware::*;
pub use instance::*;
pub use launch::*;
pub use location::*;
pub use notice::*;
pub use offer::*;
pub use placement::*;

#[cfg(test)]
mod tests;
