//! stormguard, the daemon: loads a retry-policy file, validates it, hot-reloads
//! it without ever serving a broken one, and serves each service's resolved
//! policy over HTTP. The binary's command line is in `main.rs`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod identity;
pub mod listen;
pub mod metrics;
pub mod pace_store;
pub mod reload;
pub mod reports;
pub mod serve;
pub mod server;
pub mod shutdown;
pub mod snapshot;
pub mod stamp;
pub mod supervise;
pub mod tls;
pub mod watch;
