//! The herd simulator: what a retry policy does to a server recovering from
//! an outage, in virtual time, deterministic for a seed (a thundering herd
//! without the 15-60 s of real time a run would take).

mod arrivals;
mod collapse;
mod dependency;
mod engine;
mod errors;
mod fleet_budget;
mod forecast;
mod render;
mod replicas;
mod report;
mod scenario;
mod strategy;
mod svg;
mod time;

pub use collapse::Collapse;
pub use engine::{run, GaveUpCounts, Run};
pub use errors::Errors;
pub use fleet_budget::REPORT_EVERY;
pub use forecast::{deployed, forecast};
pub use render::{histogram, summary, table};
pub use report::Summary;
pub use scenario::{Backends, Brownout, Fleet, Scenario, STORE_ROUND_TRIP};
pub use strategy::{Modifiers, Named, Strategy};
pub use svg::small_multiples;

#[cfg(test)]
mod tests;
