//! What the daemon exports to Prometheus: the one registry every component
//! registers its families in, and the families of the daemon itself.

mod daemon;
mod registry;

pub use daemon::{DaemonMetrics, ReloadOutcomes, RELOAD_FAILURE, RELOAD_SUCCESS};
pub use registry::{Refreshed, Registry, Written};
