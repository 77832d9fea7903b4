//! Virtual time: the simulation counts nanoseconds from t = 0 in a `u64`.

use std::time::Duration;

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Serialises `d` as seconds, for JSON keys ending `_seconds`.
pub(super) fn seconds<S: serde::Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(d.as_secs_f64())
}
