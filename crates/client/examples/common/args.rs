//! What the benchmark examples share: reading `--name value` flags, and the
//! wall clock as the benchmarks give their instants (since the Unix epoch).
//! Each example includes it with `#[path]`; not every one uses every item.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The value after `name`, if given.
pub fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The value after `name`; panics, naming it, if it is not given.
pub fn required(args: &[String], name: &str) -> String {
    flag(args, name).unwrap_or_else(|| panic!("{name} is required"))
}

/// Now, since the Unix epoch.
pub fn since_epoch() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}
