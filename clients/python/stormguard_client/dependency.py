"""Calls to one dependency under its current policy, every attempt reported,
in the order of the Rust library's guard (outermost first):

1. the circuit breaker: every attempt needs its permit; a refusal ends the
   call at once (CallNotPermitted), sending nothing;
2. the send gate: while the dependency is unwell, an attempt with a permit
   waits in line for its turn, up to the call's deadline; a call that gets
   no turn before it ends (NoTurn), its attempt not sent. The gate stands
   after the breaker so that a call the breaker would refuse does not wait
   for nothing, and an attempt that waited its turn is sent. A retry waits
   at the call's old place in line, ahead of calls that came after it;
3. the retry budget: a first try deposits, a retry needs its leave. While
   the gate paces, retries wait for turns instead, without a backoff: the
   gate bounds the load they add to what the dependency accepts;
4. the retry loop: ``maxRetries``, ``retryOn``, the backoff delay (drawn
   with the shared delay law), ``perTryTimeoutMs`` and ``maxElapsedMs``.
"""

import logging
import random
import threading
import time
import urllib.error
from dataclasses import dataclass

from . import settings
from .breaker import CallNotPermitted
from .gate import NoTurn, Signal
from .policies import DEFAULT_POLICY

__all__ = ["CallNotPermitted", "Dependency", "NoTurn", "failure_of"]

log = logging.getLogger(__name__)


def failure_of(error):
    """The retryOn failure an exception from an attempt stands for:
    "connect-failure", "timeout" or "reset"; None if it is not a network
    failure (not an OSError). A URLError is judged by its reason."""
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, OSError):
        error = error.reason
    if isinstance(error, ConnectionRefusedError):
        return "connect-failure"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, OSError):
        return "reset"
    return None


@dataclass(frozen=True)
class _Controls:
    """Everything one version of the policy sets up."""

    policy: dict
    max_retries: int
    backoff: object
    retry_on: object
    per_try_timeout: object
    max_elapsed_ns: object
    budget: object
    breaker: object
    gate: object


class Dependency:
    """Calls to ``service``, under the policy ``watch`` (a PolicyWatch, or
    anything with ``policy(service)``) currently has for it, reported
    through ``reporter`` (a Reporter, or None), which is told the current
    breaker, budget and send gate at each call: it reports their states,
    and paces the gate by the fleet's grant while it is on.

    The calls keep time with ``clock`` (nanoseconds that never go back),
    wait out a backoff with ``sleep(seconds)`` and wait in a send gate's
    line with ``wait(event, seconds)``: until the ``threading.Event`` is set
    (the line moved, or the rate grew: the turn may come sooner) or the
    seconds pass, without end if they are None. ``rng`` (a
    ``random.Random``) draws the backoff's jitter and the gate's first
    credit. Replace them together to run calls in virtual time."""

    def __init__(self, watch, service, reporter=None, *, clock=time.monotonic_ns, sleep=time.sleep,
                 wait=threading.Event.wait, rng=None):
        self.watch = watch
        self.service = service
        self.reporter = reporter
        self._clock = clock
        self._sleep = sleep
        self._wait = wait
        self._random = rng or random.Random()
        self._lock = threading.Lock()
        self._controls = None

    @property
    def breaker(self):
        """The circuit breaker of the current policy, or None if it has none."""
        return self._current().breaker

    @property
    def budget(self):
        """The retry budget of the current policy, or None if it has none."""
        return self._current().budget

    @property
    def gate(self):
        """The send gate of the current policy, or None if it has none."""
        return self._current().gate

    def _current(self):
        """The controls of the watch's current policy, rebuilt when it
        changes: the breaker, the budget and the gate only if their block
        changed, so a policy update does not reset an open breaker, a spent
        budget or a gate that paces a recovering dependency."""
        policy = self.watch.policy(self.service)
        with self._lock:
            old = self._controls
            if old is not None and (old.policy is policy or old.policy == policy):
                return old
            try:
                self._controls = _build(policy, old, self._clock(), self._random.random)
            except ValueError as error:
                if old is None:
                    log.error("stormguard: the policy of %s cannot be used (%s); using the defaults",
                              self.service, error)
                    self._controls = _build(DEFAULT_POLICY, None, self._clock(), self._random.random)
                else:
                    log.error("stormguard: the new policy of %s cannot be used (%s); keeping the last",
                              self.service, error)
                    self._controls = _Controls(policy, *[getattr(old, f) for f in _FIELDS[1:]])
            return self._controls

    def call(self, endpoint, attempt):
        """Calls ``attempt(timeout)`` (``timeout`` in seconds, or None) until
        it succeeds or the policy says stop; returns the last HTTP status it
        returned, or raises the last exception it raised. Raises
        CallNotPermitted, without an attempt, when the breaker refuses, and
        NoTurn, without an attempt, when the send gate has no turn for one
        before the call's deadline."""
        controls = self._current()
        reporter = self.reporter
        if reporter is not None:
            reporter.track(self.service, controls.breaker, controls.budget, controls.gate, self._clock)
        with reporter.in_flight(self.service) if reporter is not None else _nothing():
            return self._attempts(endpoint, attempt, controls)

    def _attempts(self, endpoint, attempt, c):
        start = self._clock()
        deadline = start + c.max_elapsed_ns if c.max_elapsed_ns is not None else None
        if c.budget is not None:
            c.budget.deposit(start)
        retry, previous = 0, 0
        # The call's place in the gate's line, from the first time it waited.
        place = None
        status, error = None, None
        while True:
            permit = c.breaker.acquire(self._clock()) if c.breaker is not None else None
            sent = None
            if c.gate is not None:
                try:
                    sent, place, waited = self._turn(c.gate, place, deadline)
                except BaseException:
                    if permit is not None:
                        permit.cancel()
                    raise
                if sent is None:
                    if permit is not None:
                        permit.cancel()
                    raise NoTurn(waited, retry, status) from error
            timeout = c.per_try_timeout
            if deadline is not None:
                left = max(deadline - self._clock(), 1) / 1e9
                timeout = left if timeout is None else min(timeout, left)
            error, status = None, None
            try:
                status = attempt(timeout)
            except Exception as raised:  # noqa: BLE001 - judged below, re-raised
                error = raised
            except BaseException:
                if permit is not None:
                    permit.cancel()
                raise
            if isinstance(error, urllib.error.HTTPError):
                status = error.code
            now = self._clock()
            failure = None
            if status is not None:
                outcome = "server_error" if status >= 500 else "success"
                retryable = c.retry_on.retries_status(status)
            else:
                failure = failure_of(error)
                outcome = "error"
                retryable = failure is not None and c.retry_on.retries_failure(failure)
            if permit is not None:
                _settle(permit, status is not None and status < 500 and not retryable, retryable, now)
            if c.gate is not None:
                c.gate.record(_signal(failure, retryable), sent, now)
            if self.reporter is not None:
                self.reporter.record(self.service, endpoint, retry, outcome)
            if not retryable or retry >= c.max_retries:
                return _end(status, error)
            delay = c.backoff.delay(retry, previous, self._random.getrandbits(64))
            if deadline is not None and now + delay >= deadline:
                return _end(status, error)
            # While the gate paces, it bounds what retries add to the load,
            # and more tightly than a budget's fixed share; it also spaces
            # them. So a retry waits for its turn instead of asking the
            # budget, and instead of backing off.
            if c.gate is None or not c.gate.is_on:
                if c.budget is not None and not c.budget.try_retry(now):
                    return _end(status, error)
                self._sleep(delay / 1e9)
            retry, previous = retry + 1, delay

    def _turn(self, gate, place, deadline):
        """Waits for ``gate`` to give the call's next attempt a turn, at the
        call's old ``place`` in line if it has one: (when the turn came, the
        call's place, how long it waited), the first None if no turn came
        before ``deadline``. The call leaves the line unless it got its turn."""
        now = self._clock()
        ticket = gate.turn(now) if place is None else gate.rejoin(place, now)
        if ticket is None:
            return now, place, 0
        place = ticket.number if place is None else place
        entered, woken = now, threading.Event()
        try:
            while deadline is None or now < deadline:
                # Cleared before the claim, so that a wake after it is kept.
                woken.clear()
                claim = gate.claim(ticket, now, woken.set)
                if claim.go:
                    ticket = None
                    return now, place, now - entered
                until = claim.at_ns
                if deadline is not None:
                    until = deadline if until is None else min(until, deadline)
                self._wait(woken, None if until is None else max(until - now, 1) / 1e9)
                now = self._clock()
            return None, place, now - entered
        finally:
            if ticket is not None:
                gate.leave(ticket)


_FIELDS = ("policy", "max_retries", "backoff", "retry_on", "per_try_timeout", "max_elapsed_ns", "budget", "breaker",
           "gate")


def _build(policy, old, now, draw):
    max_elapsed = settings.value(policy, "maxElapsedMs")
    budget_block, breaker_block = settings.block(policy, "budget"), settings.block(policy, "circuitBreaker")
    keep_budget = old is not None and settings.block(old.policy, "budget") == budget_block
    keep_breaker = old is not None and settings.block(old.policy, "circuitBreaker") == breaker_block
    keep_gate = old is not None and settings.block(old.policy, "gate") == settings.block(policy, "gate")
    return _Controls(
        policy=policy,
        max_retries=settings.max_retries(policy),
        backoff=settings.backoff(policy),
        retry_on=settings.retry_on(policy),
        per_try_timeout=settings.per_try_timeout(policy),
        max_elapsed_ns=None if max_elapsed is None else settings.millis_to_nanos("maxElapsedMs", max_elapsed),
        budget=old.budget if keep_budget else settings.budget(policy, now),
        breaker=old.breaker if keep_breaker else settings.breaker(policy, now),
        gate=old.gate if keep_gate else settings.gate(policy, now, draw),
    )


def _settle(permit, answered, retryable, now):
    """Tells the breaker how an attempt went, as the Rust library does: an
    answer counts as a success, a failure the policy retries counts against
    the dependency, and one it does not retry (a 501, an exception retryOn
    leaves out) counts for nothing."""
    if answered:
        permit.record(False, now)
    elif retryable:
        permit.record(True, now)
    else:
        permit.cancel()


def _signal(failure, retryable):
    """What an attempt's outcome tells the send gate, as the Rust library
    maps it: a timeout says the dependency is slow; another failure the
    policy retries, that it is overloaded; anything else (an answer, or a
    failure that says nothing of its load) that it accepts."""
    if failure == "timeout":
        return Signal.TIMED_OUT
    return Signal.OVERLOADED if retryable else Signal.ACCEPTED


def _end(status, error):
    if error is not None:
        raise error
    return status


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
