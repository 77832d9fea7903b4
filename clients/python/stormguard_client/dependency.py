"""Calls to one dependency under its current policy, every attempt reported,
in the order of the Rust library's guard (outermost first):

1. the circuit breaker: every attempt needs its permit; a refusal ends the
   call at once (CallNotPermitted), sending nothing;
2. the retry budget: a first try deposits, a retry needs its leave;
3. the retry loop: ``maxRetries``, ``retryOn``, the backoff delay (drawn
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
from .policies import DEFAULT_POLICY

__all__ = ["CallNotPermitted", "Dependency", "failure_of"]

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


class Dependency:
    """Calls to ``service``, under the policy ``watch`` (a PolicyWatch, or
    anything with ``policy(service)``) currently has for it, reported
    through ``reporter`` (a Reporter, or None)."""

    def __init__(self, watch, service, reporter=None, *, clock=time.monotonic_ns, sleep=time.sleep, rng=None):
        self.watch = watch
        self.service = service
        self.reporter = reporter
        self._clock = clock
        self._sleep = sleep
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

    def _current(self):
        """The controls of the watch's current policy, rebuilt when it
        changes: the breaker and the budget only if their block changed, so
        a policy update does not reset an open breaker or a spent budget."""
        policy = self.watch.policy(self.service)
        with self._lock:
            old = self._controls
            if old is not None and (old.policy is policy or old.policy == policy):
                return old
            try:
                self._controls = _build(policy, old, self._clock())
            except ValueError as error:
                if old is None:
                    log.error("stormguard: the policy of %s cannot be used (%s); using the defaults",
                              self.service, error)
                    self._controls = _build(DEFAULT_POLICY, None, self._clock())
                else:
                    log.error("stormguard: the new policy of %s cannot be used (%s); keeping the last",
                              self.service, error)
                    self._controls = _Controls(policy, *[getattr(old, f) for f in _FIELDS[1:]])
            return self._controls

    def call(self, endpoint, attempt):
        """Calls ``attempt(timeout)`` (``timeout`` in seconds, or None) until
        it succeeds or the policy says stop; returns the last HTTP status it
        returned, or raises the last exception it raised. Raises
        CallNotPermitted, without an attempt, when the breaker refuses."""
        controls = self._current()
        reporter = self.reporter
        if reporter is not None:
            reporter.track(self.service, controls.breaker, controls.budget)
        with reporter.in_flight(self.service) if reporter is not None else _nothing():
            return self._attempts(endpoint, attempt, controls)

    def _attempts(self, endpoint, attempt, c):
        start = self._clock()
        deadline = start + c.max_elapsed_ns if c.max_elapsed_ns is not None else None
        if c.budget is not None:
            c.budget.deposit(start)
        retry, previous = 0, 0
        while True:
            permit = c.breaker.acquire(self._clock()) if c.breaker is not None else None
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
            if status is not None:
                outcome = "server_error" if status >= 500 else "success"
                retryable = c.retry_on.retries_status(status)
            else:
                failure = failure_of(error)
                outcome = "error"
                retryable = failure is not None and c.retry_on.retries_failure(failure)
            if permit is not None:
                _settle(permit, status is not None and status < 500 and not retryable, retryable, now)
            if self.reporter is not None:
                self.reporter.record(self.service, endpoint, retry, outcome)
            if not retryable or retry >= c.max_retries:
                return _end(status, error)
            delay = c.backoff.delay(retry, previous, self._random.getrandbits(64))
            if deadline is not None and now + delay >= deadline:
                return _end(status, error)
            if c.budget is not None and not c.budget.try_retry(now):
                return _end(status, error)
            self._sleep(delay / 1e9)
            retry, previous = retry + 1, delay


_FIELDS = ("policy", "max_retries", "backoff", "retry_on", "per_try_timeout", "max_elapsed_ns", "budget", "breaker")


def _build(policy, old, now):
    max_elapsed = settings.value(policy, "maxElapsedMs")
    budget_block, breaker_block = settings.block(policy, "budget"), settings.block(policy, "circuitBreaker")
    keep_budget = old is not None and settings.block(old.policy, "budget") == budget_block
    keep_breaker = old is not None and settings.block(old.policy, "circuitBreaker") == breaker_block
    return _Controls(
        policy=policy,
        max_retries=settings.max_retries(policy),
        backoff=settings.backoff(policy),
        retry_on=settings.retry_on(policy),
        per_try_timeout=settings.per_try_timeout(policy),
        max_elapsed_ns=None if max_elapsed is None else settings.millis_to_nanos("maxElapsedMs", max_elapsed),
        budget=old.budget if keep_budget else settings.budget(policy, now),
        breaker=old.breaker if keep_breaker else settings.breaker(policy, now),
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


def _end(status, error):
    if error is not None:
        raise error
    return status


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
