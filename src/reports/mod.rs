//! Client reports: `POST /v1/reports` decoded strictly, then counted into
//! the Prometheus families the seed's dashboards and alerts read.

mod decode;
mod ingest;

pub use decode::{
    decode, decode_batch, BudgetReport, CircuitState, EndpointCounts, Report, ReportError, StatusCounts,
    MAX_BATCH, MAX_ENDPOINT_LEN, MAX_INSTANCE_LEN,
};
pub use ingest::{ClientMetrics, Folded, ReportLimits, OTHER};
