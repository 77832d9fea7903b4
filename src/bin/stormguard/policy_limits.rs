//! The bounds on a policy file that `serve`, `check` and `diff` share.

use clap::Args;
use stormguard_toolkit::flags::count_in;
use stormguard_toolkit::policy::{LoadLimits, DEFAULT_MAX_FLOW_COLLECTIONS, DEFAULT_MAX_POLICY_BYTES};

/// Bounds on a policy file, for `serve` (also on `/admin/validate`) and `check`.
#[derive(Args)]
pub struct PolicyLimits {
    /// Largest policy file in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_POLICY_BYTES, value_parser = count_in(64usize, 64 << 20))]
    max_policy_bytes: usize,
    /// Most flow collections ([ or {) in a policy file; deep nesting makes YAML parsing slow.
    #[arg(long, default_value_t = DEFAULT_MAX_FLOW_COLLECTIONS, value_parser = count_in(1usize, 1_000_000))]
    max_flow_collections: usize,
}

impl PolicyLimits {
    pub fn load_limits(&self) -> LoadLimits {
        LoadLimits {
            max_bytes: self.max_policy_bytes,
            max_flow_collections: self.max_flow_collections,
        }
    }
}
