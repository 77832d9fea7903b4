//! How much fleet state the daemon keeps at most: past these, asks and
//! reports get no share, and their processes decide alone.

/// Dependencies the daemon keeps fleet state for at once, at most, for
/// each of pacing, fleet-scoped breakers and fleet-scoped budgets: asks
/// and reports about more get no share, and their processes decide alone.
pub const MAX_DEPENDENCIES: usize = 1000;
/// Processes paced per dependency, at most.
pub const MAX_PROCESSES: usize = 10_000;
