//! The herd simulator: what a retry policy does to a server recovering from
//! an outage, in virtual time, deterministic for a seed (a thundering herd
//! without the 15-60 s of real time a run would take).

mod arrivals;
mod collapse;
mod dependency;
mod engine;
mod errors_scenario;
mod fleet_budget;
mod forecast;
mod replicas;
mod report;
mod scenario;
mod store;
mod strategy;
mod svg;
mod text;
mod time;

pub use collapse::Collapse;
pub use engine::{run, ClassOutcome, GaveUpCounts, Run};
pub use errors_scenario::Errors;
pub use fleet_budget::REPORT_EVERY;
pub use forecast::{deployed, forecast};
pub use report::Summary;
pub use scenario::{Backends, Brownout, Classes, Failover, Fleet, Scenario, RESTART_APART, STORE_ROUND_TRIP};
pub use store::StoreModel;
pub use strategy::{Modifiers, Named, Strategy};
pub use svg::small_multiples;
pub use text::{histogram, summary, table};

#[cfg(test)]
mod tests;
