//! Pictures of runs (filled in next).

use super::report::Summary;

/// Small multiples of the runs' histograms, on the same axes.
pub fn small_multiples(_summaries: &[Summary]) -> String {
    String::new()
}
