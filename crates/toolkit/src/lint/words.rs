//! How the lint words its figures.

use std::time::Duration;

/// `d` to the nearest millisecond, as a person reads a span.
pub(super) fn to_millis(d: Duration) -> Duration {
    Duration::from_millis((d.as_secs_f64() * 1000.0).round() as u64)
}

/// "its only retry is" or "its N retries are".
pub(super) fn its_retries(n: u32) -> String {
    match n {
        1 => "its only retry is".to_owned(),
        n => format!("its {n} retries are"),
    }
}
