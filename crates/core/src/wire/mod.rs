//! The JSON a client and the daemon exchange, as one set of serde types
//! that both sides use: the client writes reports with them and the daemon
//! reads them with them, so the two cannot drift apart in a field's name,
//! its casing or its encoding.
//!
//! - [`Report`] is what one process says about one dependency, and
//!   [`ReportBatch`] carries a process's reports with a sequence number
//!   that makes a resend harmless.
//! - [`ReportAnswer`] is the daemon's `202`: what it counted, what it
//!   refused ([`Rejected`]) and what its cardinality guard folded ([`Folded`]).
//! - [`SelectedPolicies`] answers a watch of several services at once.
//! - [`PaceAsk`] is a process's ask for its share of a dependency's rate
//!   while its send gate is on, and for trial slots while its fleet-scoped
//!   breaker is open ([`BreakerAsk`]); [`PaceGrant`] is the daemon's
//!   answer ([`BreakerGrant`]).
//! - The policy a client reads is [`ResolvedPolicy`](crate::policy::ResolvedPolicy);
//!   a client turns its `policy` into a [`ValidPolicy`](crate::policy::ValidPolicy)
//!   before anything acts on it.
//!
//! [`Report::check`] holds the rules a type alone cannot say (name syntax,
//! lengths, ranges); the daemon runs them on what it receives and the client
//! on the names it is configured with, so a bad name is refused where it
//! enters rather than by the daemon, batch after batch.

mod count;
mod pace;
mod policies;
mod report;

/// The response header by which the daemon says it shortened a long-poll's
/// `?wait=` to its maximum, in milliseconds; a client then asks for no more.
pub const MAX_WAIT_HEADER: &str = "stormguard-max-wait-ms";

pub use pace::{BreakerAsk, BreakerGrant, ByClass, PaceAsk, PaceGrant};
pub use policies::{
    parse_selection, BadSelection, SelectedPolicies, SelectedPolicy, MAX_SELECTED, SERVICES_PARAM,
};
pub use report::{
    check_endpoint, check_instance, BadLength, BudgetReport, EndpointCounts, FieldError, FloorPart, Folded,
    Rejected, Report, ReportAnswer, ReportBatch, StatusCounts, MAX_BATCH, MAX_ENDPOINT_LEN, MAX_INSTANCE_LEN,
};
