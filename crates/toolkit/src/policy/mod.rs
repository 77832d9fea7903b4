//! Loading policy files: bytes → YAML tree → validated [`PolicyDocument`],
//! with every error tied to its file, line, column and key path.
//!
//! [`PolicyDocument`]: stormguard_core::policy::PolicyDocument

mod load;
pub(crate) mod yaml;

pub use load::{
    hex, load_bytes, load_file, read_capped, ContentHash, Diagnostic, LoadLimits, DEFAULT_MAX_POLICY_BYTES,
};
pub use yaml::DEFAULT_MAX_FLOW_COLLECTIONS;
