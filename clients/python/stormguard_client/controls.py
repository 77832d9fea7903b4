"""What one version of a dependency's policy sets up for its calls: the
retry count, the delay law, ``retryOn``, the timeouts, the budget, the
breaker and the send gate (:class:`Controls`, made by :func:`build`). A
call's plan (:mod:`stormguard_client.calls`) runs under them; the
dependency (:mod:`stormguard_client.guard`) keeps them current as the
policy changes.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from . import settings
from .backoff import Backoff
from .breaker import BreakerPolicy, CircuitBreaker
from .budget import RetryBudget
from .gate import SendGate
from .retry_on import RetryOn
from .watching import Policy


@dataclass(frozen=True)
class Controls:
    """Everything one version of the policy sets up."""

    policy: Policy
    max_retries: int
    backoff: Backoff
    retry_on: RetryOn
    per_try_timeout: float | None
    max_elapsed_ns: int | None
    budget: RetryBudget | None
    breaker: CircuitBreaker | None
    gate: SendGate | None
    overload_on: RetryOn = field(default_factory=RetryOn.overload)
    """The policy's ``gate.overloadOn``, read whether or not the gate is
    enabled: the failures that say the dependency is overloaded or down,
    which the breaker hears as refused while no gate paces them."""


def build(policy: Policy, old: Controls | None, now: int, draw: Callable[[], float]) -> Controls:
    """The controls of ``policy``: the budget of ``old`` kept if its block
    did not change; its breaker kept too, retuned, unless the update turns
    it off; and its gate, retuned, unless the change voids what it
    learned. Raises ValueError naming a setting that cannot be used, having
    changed nothing of ``old``'s."""
    keep_budget = old is not None and settings.block(old.policy, "budget") == settings.block(policy, "budget")
    breaker, retuned = _breaker(policy, old, now)
    controls = Controls(
        policy=policy,
        max_retries=settings.max_retries(policy),
        backoff=settings.backoff(policy),
        retry_on=settings.retry_on(policy),
        per_try_timeout=settings.per_try_timeout(policy),
        max_elapsed_ns=settings.max_elapsed(policy),
        budget=old.budget if old is not None and keep_budget else settings.budget(policy, now),
        breaker=breaker,
        gate=_gate(policy, old, now, draw),
        overload_on=settings.gate_policy(policy).overload_on,
    )
    if breaker is not None and retuned is not None:
        # Last, once every other setting has been read: a policy refused
        # leaves the old breaker as it was.
        breaker.retune(retuned)
    return controls


def _breaker(policy: Policy, old: Controls | None, now: int) -> tuple[CircuitBreaker | None, BreakerPolicy | None]:
    """The breaker of ``policy``, and the settings to retune it to, if any
    (checked already, so the retune cannot fail): ``old``'s if its block did
    not change, or, retuned, if the breaker stays enabled (an update
    mid-outage does not close an open breaker); else a new one, or None."""
    if old is not None and old.breaker is not None:
        if settings.block(old.policy, "circuitBreaker") == settings.block(policy, "circuitBreaker"):
            return old.breaker, None
        following = settings.breaker_policy(policy)
        if following.enabled:
            following.check()
            return old.breaker, following
    return settings.breaker(policy, now), None


def _gate(policy: Policy, old: Controls | None, now: int, draw: Callable[[], float]) -> SendGate | None:
    """The gate of ``policy``: ``old``'s if its block did not change, or
    retuned if the change keeps what it learned (an update mid-incident
    neither lets new calls past its line nor sends it back to probing);
    else a new one."""
    if old is not None and old.gate is not None:
        if settings.block(old.policy, "gate") == settings.block(policy, "gate"):
            return old.gate
        following = settings.gate_policy(policy)
        if following.enabled and old.gate.retune(following):
            return old.gate
    return settings.gate(policy, now, draw)
