//! stormguard's core: the retry-policy model and its resolution, as pure
//! logic that does no I/O (no files, no sockets), so that a service that
//! only wants the library pulls in nothing heavy. The `tower` feature (on
//! by default) adds the tower layers, and with them the `http` types.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod call;
pub mod fleet;
pub mod gate;
pub mod guard;
pub mod hedge;
pub mod policy;
pub mod retry;
#[cfg(feature = "tower")]
pub mod shed;
pub mod wire;
