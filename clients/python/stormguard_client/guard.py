"""What both flavours of :class:`~stormguard_client.Dependency` share
(:class:`Guard`): the controls of the current policy
(:mod:`stormguard_client.controls`), kept current as the policy changes,
and the start of each call.
"""

import contextlib
import functools
import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from .breaker import CircuitBreaker
from .budget import RetryBudget
from .calls import Clock, FailureOf, Outcome, Step, W, call_plan
from .controls import Controls, build
from .gate import Criticality, SendGate, criticality_of
from .plans import Run
from .policies import DEFAULT_POLICY
from .reports import Reporter
from .watching import Policy

# The name the blocking Dependency has always logged under.
log = logging.getLogger("stormguard_client.dependency")


class PolicySource(Protocol):
    """Where a dependency reads its current policy: a
    :class:`~stormguard_client.PolicyWatch`, an
    :class:`~stormguard_client.aio.AsyncPolicyWatch`, or anything with
    ``policy(service)``."""

    def policy(self, service: str) -> Policy:
        """The current resolved policy of ``service``."""
        ...


class Guard:
    """Calls to ``service`` under the policy ``watch`` currently has for it,
    reported through ``reporter``: what the blocking and the asyncio
    flavours share. Each call starts with :meth:`_calling`, whose plan the
    flavour then drives."""

    def __init__(self, watch: PolicySource, service: str, reporter: Reporter | None, clock: Clock,
                 rng: random.Random | None, criticality: Criticality | None = None) -> None:
        self.watch = watch
        self.service = service
        self.reporter = reporter
        self.criticality = None if criticality is None else criticality_of("criticality", criticality)
        """The class of this dependency's calls that name none (None: the
        policy's ``gate.criticality``)."""
        self._clock = clock
        self._random = rng or random.Random()
        self._lock = threading.Lock()
        self._controls: Controls | None = None
        # The last policy the watch gave that build refused, so that it is
        # reported once, not rebuilt on every call; never the comparison
        # base for the next one, which stays the policy the controls were
        # built from.
        self._refused: Policy | None = None

    @property
    def breaker(self) -> CircuitBreaker | None:
        """The circuit breaker of the current policy, or None if it has none."""
        return self._current().breaker

    @property
    def budget(self) -> RetryBudget | None:
        """The retry budget of the current policy, or None if it has none."""
        return self._current().budget

    @property
    def gate(self) -> SendGate | None:
        """The send gate of the current policy, or None if it has none."""
        return self._current().gate

    def _current(self) -> Controls:
        """The controls of the watch's current policy, rebuilt when it
        changes: the budget only if its block changed, and the breaker and
        the gate retuned in place (see :func:`~stormguard_client.controls.build`),
        so a policy update does not reset an open breaker, a spent budget or
        a gate that paces a recovering dependency. A policy build refuses is
        logged once and changes nothing: the controls, and the policy they
        were built from (what the next policy is compared with), stay as
        they were; refused from the start, the defaults serve."""
        policy = self.watch.policy(self.service)
        with self._lock:
            old = self._controls
            if old is not None and (old.policy is policy or old.policy == policy):
                # Back to the policy in force: a refused one coming again is
                # a new version, reported again.
                self._refused = None
                return old
            if old is not None and (self._refused is policy or self._refused == policy):
                return old
            try:
                controls = build(policy, old, self._clock(), self._random.random)
            except ValueError as error:
                # Refused: the controls, and the policy they were built from,
                # stay as they were, so the next policy is compared with the
                # last one applied.
                self._refused = policy
                if old is not None:
                    log.error("stormguard: the new policy of %s cannot be used (%s); keeping the last",
                              self.service, error)
                    return old
                log.error("stormguard: the policy of %s cannot be used (%s); using the defaults",
                          self.service, error)
                controls = build(DEFAULT_POLICY, None, self._clock(), self._random.random)
            else:
                self._refused = None
            self._controls = controls
            return controls

    @contextlib.contextmanager
    def _calling(self, endpoint: str, new_wakeup: Callable[[], W], failure: FailureOf,
                 timeout: float | None, criticality: Criticality | None = None,
                 ) -> Iterator[Run[Step[W], Outcome | None, int]]:
        """A call to ``endpoint`` of class ``criticality`` (None: the
        dependency's, else the policy's), its plan under way, for the
        ``with`` block: the reporter is told the current breaker, budget and
        gate, and counts the call in flight until the block ends. Raises
        ValueError, before anything else, if ``criticality`` is not a class."""
        if criticality is not None:
            criticality = criticality_of("criticality", criticality)
        controls = self._current()
        reporter = self.reporter
        if reporter is not None:
            reporter.track(self.service, controls.breaker, controls.budget, controls.gate, self._clock)
        with reporter.in_flight(self.service) if reporter is not None else contextlib.nullcontext():
            yield Run(call_plan(controls, clock=self._clock, rng=self._random, new_wakeup=new_wakeup,
                                record=functools.partial(self._record, endpoint), failure=failure,
                                timeout=timeout, criticality=criticality or self.criticality))

    def _record(self, endpoint: str, retry: int, outcome: str) -> None:
        if self.reporter is not None:
            self.reporter.record(self.service, endpoint, retry, outcome)
