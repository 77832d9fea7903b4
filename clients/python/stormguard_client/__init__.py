"""stormguard's client for Python services: the policy watch (fetch, cache,
defaults, long-poll), the delay law, the retry budget, the circuit breaker
and the send gate, the same to the nanosecond as the Rust library's
(clients/vectors checks it), the reporter (which, while a send gate is on,
also asks the daemon for this process's share of the fleet's rate), and a
dependency's calls under all of them. Both the watch and the reporter reach
an ``https://`` daemon with a :class:`DaemonTls` (a CA, a client
certificate), and the reporter sends a service-account token file's token.

Two flavours drive the same decisions (:mod:`stormguard_client.plans`):
the blocking one here (:class:`PolicyWatch`, :class:`Dependency`) and the
asyncio one in :mod:`stormguard_client.aio` (``AsyncPolicyWatch``,
``AsyncDependency``). :mod:`stormguard_client.httpx` guards an httpx client
in one line (the ``httpx`` extra). Standard library only otherwise; typed
(``py.typed``)."""

from .backoff import Backoff
from .breaker import BreakerPolicy, CallNotPermitted, CallOutcome, CircuitBreaker, CircuitState
from .budget import RetryBudget
from .connect import DaemonTls, TlsFileError
from .dependency import Dependency
from .gate import Criticality, GatePolicy, NoTurn, SendGate, Shed
from .policies import PolicyWatch
from .reports import Reporter, ReporterStats, ReportNotDelivered, ReportRefused

__all__ = ["Backoff", "BreakerPolicy", "CallNotPermitted", "CallOutcome", "CircuitBreaker", "CircuitState",
           "Criticality", "DaemonTls", "Dependency", "GatePolicy", "NoTurn", "PolicyWatch", "Reporter", "ReporterStats",
           "ReportNotDelivered", "ReportRefused", "RetryBudget", "SendGate", "Shed", "TlsFileError"]
