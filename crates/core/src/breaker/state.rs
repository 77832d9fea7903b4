//! The three states of a circuit breaker, apart from the breaker itself:
//! the fleet's breaker, the wire and the reports name them too.

/// The breaker's state, numbered as the `circuit_breaker_state` metric is,
/// and named as the daemon's pace answers name the fleet's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum CircuitState {
    /// Calls pass; failures are counted.
    Closed = 0,
    /// A few trial calls pass to probe the dependency.
    HalfOpen = 1,
    /// Calls are refused until `openTimeout` has passed.
    Open = 2,
}

impl CircuitState {
    /// The state's number for metrics: 0 closed, 1 half-open, 2 open.
    pub fn as_metric(self) -> u8 {
        self as u8
    }

    /// The state's name, as logs and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::HalfOpen => "half-open",
            CircuitState::Open => "open",
        }
    }
}
