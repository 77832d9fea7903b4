"""Reading a policy as :class:`~stormguard_client.PolicyWatch` hands it out
(its JSON, as the daemon serves it) into the pieces that act on it: the
retry count, the delay law, ``retryOn``, the per-try timeout, the retry
budget, the circuit breaker and the send gate (with its ``overloadOn`` and
``overloadWhen``). A key the policy lacks is taken from the built-in
defaults (``default_policy.json``); a value out of range raises ValueError
naming its key.
"""

import math
import random
from collections.abc import Callable, Mapping

from . import limits
from .backoff import JITTERS, Backoff
from .breaker import BreakerPolicy, CircuitBreaker, millis_to_nanos
from .budget import SCOPES, RetryBudget
from .gate import GatePolicy, SendGate
from .policies import DEFAULT_POLICY
from .retry_on import RetryOn

__all__ = ["backoff", "block", "breaker", "breaker_policy", "budget", "gate", "gate_policy", "max_elapsed",
           "max_retries", "millis_to_nanos", "per_try_timeout", "retry_on", "value"]


def value(policy: Mapping[str, object], key: str) -> object:
    """``policy[key]``, or the built-in default's if the policy lacks it."""
    return policy[key] if key in policy else DEFAULT_POLICY[key]


def block(policy: Mapping[str, object], key: str) -> dict[str, object]:
    """A block (``budget``, ``circuitBreaker``, ...) of ``policy``, each key
    it lacks filled in from the built-in default's block."""
    given = policy.get(key)
    if given is not None and not isinstance(given, dict):
        raise ValueError(f"{key} must be an object, not {given!r}")
    return {**DEFAULT_POLICY[key], **(given or {})}


def max_retries(policy: Mapping[str, object]) -> int:
    """The policy's ``maxRetries``: retries after the first try."""
    retries = value(policy, "maxRetries")
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise ValueError(f"maxRetries must be a whole number, not {retries!r}")
    limits.count("maxRetries", retries)
    return retries


def backoff(policy: Mapping[str, object]) -> Backoff:
    """The policy's delay law (``initialDelayMs``, ``maxDelayMs``, ``multiplier``,
    ``jitter``, ``jitterFactor``, ``delaysMs``) as a :class:`Backoff`."""
    delays = value(policy, "delaysMs") or []
    if not isinstance(delays, list):
        raise ValueError(f"delaysMs must be a list of milliseconds, not {delays!r}")
    multiplier = _finite("multiplier", value(policy, "multiplier"))
    factor = _finite("jitterFactor", value(policy, "jitterFactor"))
    jitter = value(policy, "jitter")
    if not isinstance(jitter, str):
        raise ValueError(f"jitter must be one of {', '.join(JITTERS)}, not {jitter!r}")
    max_nanos = millis_to_nanos("maxDelayMs", value(policy, "maxDelayMs"))
    limits.duration("maxDelay", max_nanos)
    limits.number("multiplier", multiplier)
    limits.number("jitterFactor", factor)
    limits.count("delays", len(delays))
    return Backoff(
        initial_nanos=millis_to_nanos("initialDelayMs", value(policy, "initialDelayMs")),
        max_nanos=max_nanos,
        multiplier=multiplier,
        jitter=jitter,
        jitter_factor=factor,
        delays_nanos=tuple(millis_to_nanos(f"delaysMs[{i}]", d) for i, d in enumerate(delays)),
    )


def retry_on(policy: Mapping[str, object]) -> RetryOn:
    """The policy's ``retryOn`` as a :class:`RetryOn`."""
    return RetryOn.from_json(value(policy, "retryOn"), "retryOn")


def _finite(key: str, number: object) -> float:
    """``number`` as a float; raises ValueError naming ``key`` unless it is a finite number."""
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise ValueError(f"{key} must be a finite number, not {number!r}")
    return float(number)


def per_try_timeout(policy: Mapping[str, object]) -> float | None:
    """The policy's ``perTryTimeoutMs`` in seconds (a float), or None for no
    timeout: null, or 0 as a policy file's ``perTryTimeout: 0s`` means."""
    nanos = _optional_nanos(policy, "perTryTimeout")
    return None if nanos is None else nanos / 1e9


def _optional_nanos(policy: Mapping[str, object], key: str) -> int | None:
    """The policy's ``{key}Ms`` in nanoseconds, held to the daemon's range
    for ``key``, or None when null or 0 (none)."""
    millis = value(policy, key + "Ms")
    if millis is None:
        return None
    nanos = millis_to_nanos(key + "Ms", millis)
    limits.duration(key, nanos)
    return nanos or None


def max_elapsed(policy: Mapping[str, object]) -> int | None:
    """The policy's ``maxElapsedMs`` in nanoseconds, or None for no bound
    (null or 0)."""
    return _optional_nanos(policy, "maxElapsed")


def budget(policy: Mapping[str, object], now_ns: int = 0) -> RetryBudget | None:
    """A :class:`RetryBudget` from the policy's ``budget`` block (``enabled``,
    ``retryRatio``, ``minRetriesPerSecond``, ``ttlMs``, ``scope``), its clock
    starting at ``now_ns``; None when the block is not enabled."""
    settings = block(policy, "budget")
    if settings["enabled"] is not True:
        if settings["enabled"] is not False:
            raise ValueError(f"budget.enabled must be true or false, not {settings['enabled']!r}")
        return None
    ratio, reserve = settings["retryRatio"], settings["minRetriesPerSecond"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        raise ValueError(f"budget.retryRatio must be a number, found {ratio!r}")
    limits.number("budget.retryRatio", ratio)
    if isinstance(reserve, bool) or not isinstance(reserve, int):
        raise ValueError(f"budget.minRetriesPerSecond must be a whole number, found {reserve!r}")
    limits.count("budget.minRetriesPerSecond", reserve)
    ttl = millis_to_nanos("budget.ttlMs", settings["ttlMs"])
    limits.duration("budget.ttl", ttl)
    scope = settings.get("scope", "process")
    if scope not in SCOPES:
        raise ValueError(f"budget.scope must be one of {', '.join(SCOPES)}, found {scope!r}")
    return RetryBudget(ratio, reserve, ttl, now_ns, scope)


def breaker_policy(policy: Mapping[str, object]) -> BreakerPolicy:
    """The policy's ``circuitBreaker`` block as a :class:`BreakerPolicy`."""
    given = policy.get("circuitBreaker")
    if given is not None and not isinstance(given, dict):
        raise ValueError(f"circuitBreaker must be an object, not {given!r}")
    return BreakerPolicy.from_json(given or {}, defaults=DEFAULT_POLICY["circuitBreaker"])


def breaker(policy: Mapping[str, object], now_ns: int = 0) -> CircuitBreaker | None:
    """A :class:`CircuitBreaker` from the policy's ``circuitBreaker`` block,
    its clock starting at ``now_ns``; None when the block is not enabled."""
    settings = breaker_policy(policy)
    return CircuitBreaker(settings, now_ns) if settings.enabled else None


def gate_policy(policy: Mapping[str, object]) -> GatePolicy:
    """The policy's ``gate`` block as a :class:`GatePolicy`, its
    ``overloadOn`` read as ``retryOn`` is (see :class:`RetryOn`), its
    ``overloadWhen`` one of :data:`~stormguard_client.gate.OVERLOAD_WHEN_NAMES`
    (``evidence``, the default, ``any-refusal`` or ``most-refused``), its
    ``criticality`` one of :data:`~stormguard_client.gate.CRITICALITIES`
    and its ``maxWait`` the bound of each class (each taken from the
    defaults when an older daemon's policy lacks it)."""
    given = policy.get("gate")
    if given is not None and not isinstance(given, dict):
        raise ValueError(f"gate must be an object, not {given!r}")
    return GatePolicy.from_json(given or {}, defaults=DEFAULT_POLICY["gate"])


def gate(policy: Mapping[str, object], now_ns: int = 0, draw: Callable[[], float] = random.random) -> SendGate | None:
    """A :class:`SendGate` from the policy's ``gate`` block, created off at
    ``now_ns``, drawing each turn-on's first credit from ``draw``; None when
    the block is not enabled."""
    settings = gate_policy(policy)
    return SendGate(settings, now_ns, draw) if settings.enabled else None
