//! Client reports: `POST /v1/reports` decoded strictly, then counted into
//! the Prometheus families the bundled dashboards and alerts read.

mod batches;
mod decode;
mod ingest;

pub use batches::{Batch, BatchLog, REMEMBERED};
pub use decode::{decode, decode_body, Decoded, ReportError};
pub use ingest::{ClientMetrics, ReportLimits, OTHER};
