//! The retry-policy model: the settings a client applies to calls to one
//! service, how a file's layers merge into them, and how they are checked.
//!
//! A policy is plain data. Everything that acts on it (backoff, the retry
//! loop, budgets, breakers, the simulator, the linter) takes it by reference.

#[macro_use]
mod named;
mod document;
mod duration;
mod forecast;
mod layer;
pub mod limits;
mod model;
mod name;
mod reporters;
mod tree;
mod valid;
mod validate;

pub use document::{PolicyDocument, PolicySource, ResolvedPolicy, DOCUMENT_KEYS, MAX_CALLS};
pub use duration::{millis, parse_duration, DurationError, GoDuration};
pub use forecast::{
    service_time, Dependency, DependencyModel, DependencySpec, FleetShape, ForecastBlock, ForecastScenario,
    FORECAST_KEYS, MAX_FORECAST_CAPACITY, MAX_FORECAST_CLIENTS, MAX_FORECAST_LATENCY, MAX_FORECAST_OUTAGE,
    MAX_FORECAST_OUTAGES, MAX_FORECAST_PROCESSES, MAX_FORECAST_REPLICAS, MAX_FORECAST_WORKERS,
};
pub use layer::{Layered, Leaf};
pub use model::{
    BreakerScope, BudgetPolicy, BudgetPolicySpec, BudgetScope, CircuitBreakerPolicy,
    CircuitBreakerPolicySpec, Criticality, GatePolicy, GatePolicySpec, HedgingPolicy, HedgingPolicySpec,
    Jitter, MaxWait, MaxWaitSpec, OverloadWhen, RetryCondition, RetryOn, RetryPolicy, RetryPolicySpec,
    RetryThrottlingPolicy, RetryThrottlingPolicySpec, SlidingWindow,
};
pub use name::{check_service_name, InvalidServiceName, NameProblem, MAX_SERVICE_NAME_LEN};
pub use reporters::{BadReporter, Reporter, Reporters, MAX_REPORTERS};
pub use tree::{did_you_mean, Errors, KeyPath, Node, PolicyError, Segment, Target};
pub use valid::{InvalidPolicy, ValidPolicy};
pub use validate::Violation;
