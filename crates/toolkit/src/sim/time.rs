//! Virtual time: the simulation counts nanoseconds from t = 0 in a `u64`.

use std::time::Duration;

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
