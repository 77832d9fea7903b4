//! What the lint finds: a warning, of a rule, about a service's policy.

use serde::Serialize;

/// How `(defaults)` is named in reports.
pub const DEFAULTS: &str = "(defaults)";

/// A kind of risk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// Delays without randomness: clients that failed together retry together.
    NoJitter,
    /// A maximum wait so long the pod looks dead.
    LongMaxDelay,
    /// Tiny constant delays: a retry flood.
    TinyConstantDelay,
    /// Retries that nothing caps as a share of traffic.
    NoBudget,
    /// Retries at several layers of a call chain, multiplying.
    RetryAmplification,
    /// A call cycle: retries can feed back on themselves.
    CallCycle,
    /// Retries spent before an outage ends: load, then failure anyway.
    ShortRetrySpan,
    /// `reporters` names a service the file names nowhere else: likely a
    /// misspelling, which leaves the dependency meant open to any caller.
    UnknownReporterDependency,
    /// A process-scoped budget whose floors, over the processes seen
    /// calling the service, allow more retries than its ratio at their
    /// traffic: the budget never binds.
    ProcessFloors,
    /// Every call that names no class is critical: nothing is shed before
    /// them, and shedding starts with calls the service exists to answer.
    CriticalByDefault,
    /// A more critical class may wait less than a less critical one.
    WaitBoundsInverted,
}

impl Rule {
    /// The rule's name in reports.
    pub fn code(self) -> &'static str {
        match self {
            Rule::NoJitter => "no-jitter",
            Rule::LongMaxDelay => "long-max-delay",
            Rule::TinyConstantDelay => "tiny-constant-delay",
            Rule::NoBudget => "no-budget",
            Rule::RetryAmplification => "retry-amplification",
            Rule::CallCycle => "call-cycle",
            Rule::ShortRetrySpan => "short-retry-span",
            Rule::UnknownReporterDependency => "unknown-reporter-dependency",
            Rule::ProcessFloors => "process-floors",
            Rule::CriticalByDefault => "critical-by-default",
            Rule::WaitBoundsInverted => "wait-bounds-inverted",
        }
    }
}

/// One storm risk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The service (or `(defaults)`) whose policy carries the risk.
    pub service: String,
    /// What kind of risk.
    pub rule: Rule,
    /// Why it is risky and what to change.
    pub message: String,
}
