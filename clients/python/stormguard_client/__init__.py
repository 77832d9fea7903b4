"""stormguard's client for Python services: the policy watch (fetch, cache,
defaults, long-poll), the delay law, the retry budget and the circuit
breaker, the same to the nanosecond as the Rust library's (clients/vectors
checks it), the reporter, and a dependency's calls under all of them."""

from .backoff import Backoff
from .breaker import BreakerPolicy, CallNotPermitted, CircuitBreaker, CircuitState
from .budget import RetryBudget
from .dependency import Dependency
from .policies import PolicyWatch
from .reports import Reporter, ReporterStats, ReportNotDelivered, ReportRefused

__all__ = ["Backoff", "BreakerPolicy", "CallNotPermitted", "CircuitBreaker", "CircuitState", "Dependency",
           "PolicyWatch", "Reporter", "ReporterStats", "ReportNotDelivered", "ReportRefused", "RetryBudget"]
