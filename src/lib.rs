//! stormguard, the daemon: loads a retry-policy file, validates it, hot-reloads
//! it without ever serving a broken one, and serves each service's resolved
//! policy over HTTP. The binary's command line is in `main.rs`.

pub mod check;
pub mod flags;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod identity;
pub mod lint;
pub mod metrics;
pub mod pace_store;
pub mod policy;
pub mod reload;
pub mod render;
pub mod reports;
pub mod serve;
pub mod server;
pub mod shutdown;
pub mod sim;
pub mod simulate;
pub mod snapshot;
pub mod stamp;
pub mod supervise;
pub mod text;
pub mod tls;
pub mod tune;
pub mod watch;
