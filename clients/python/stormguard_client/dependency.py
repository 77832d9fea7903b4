"""Calls to one dependency under its current policy, every attempt reported:
the blocking flavour. What a call does, and in which order (breaker, send
gate, budget, retry loop), is decided by the plan in
:mod:`stormguard_client.calls`, which this module drives with blocking
sleeps and waits; :mod:`stormguard_client.aio` drives the same plan under
asyncio.
"""

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from .breaker import CallNotPermitted
from .calls import Attempt, Clock, FailureOf, Outcome, Sleep, Step, answered, failure_of
from .gate import Criticality, NoTurn, Shed
from .guard import Guard, PolicySource
from .reports import Reporter

if TYPE_CHECKING:
    import httpx

    from .httpx import GuardedTransport

__all__ = ["CallNotPermitted", "Criticality", "Dependency", "NoTurn", "Shed", "failure_of"]

BlockingAttempt: TypeAlias = Callable[[float | None], int]
"""An attempt: sends one request within ``timeout`` seconds (None: no
bound), returns its HTTP status or raises."""
_Attempt: TypeAlias = Callable[[float | None], int | Outcome]
"""An attempt that may also say whether its answer carried a
``Retry-After`` (an Outcome): the httpx transport's."""


class Dependency(Guard):
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
    credit. Replace them together to run calls in virtual time.

    ``criticality`` (``"critical"``, ``"default"`` or ``"sheddable"``) is
    the class of this dependency's calls that name none; None (the
    default) leaves it to the policy's ``gate.criticality``. While the send
    gate paces, it serves more critical calls first, and sheds less
    critical ones first."""

    def __init__(self, watch: PolicySource, service: str, reporter: Reporter | None = None, *,
                 clock: Clock = time.monotonic_ns, sleep: Callable[[float], object] = time.sleep,
                 wait: Callable[[threading.Event, float | None], object] = threading.Event.wait,
                 rng: random.Random | None = None, criticality: Criticality | None = None) -> None:
        super().__init__(watch, service, reporter, clock, rng, criticality)
        self._sleep = sleep
        self._wait = wait

    def call(self, endpoint: str, attempt: BlockingAttempt, *, timeout: float | None = None,
             failure: FailureOf = failure_of, criticality: Criticality | None = None) -> int:
        """Calls ``attempt(timeout)`` (``timeout`` in seconds, or None) until
        it succeeds or the policy says stop; returns the last HTTP status it
        returned, or raises the last exception it raised. Raises
        CallNotPermitted, without an attempt, when the breaker refuses;
        Shed, at once and without an attempt, when at the send gate's pace
        the attempt's turn would come after the call's wait bound (its
        class's ``gate.maxWait`` after it began) or its deadline; and
        NoTurn, without an attempt, when no turn comes while it waits in
        line before then (Shed is a NoTurn: ``except NoTurn`` catches both).

        ``timeout`` (seconds) bounds the whole call as ``maxElapsedMs``
        does, whichever ends first; ``failure`` names the retryOn failure an
        attempt's exception stands for (:func:`failure_of` by default);
        ``criticality`` is the call's class (None: the dependency's, else
        the policy's ``gate.criticality``)."""
        return self._call(endpoint, attempt, timeout=timeout, failure=failure, criticality=criticality)

    def _call(self, endpoint: str, attempt: _Attempt, *, timeout: float | None, failure: FailureOf,
              criticality: Criticality | None = None) -> int:
        """:meth:`call`, its attempts answering with a status or an Outcome."""
        with self._calling(endpoint, threading.Event, failure, timeout, criticality) as run:
            while not run.done:
                run.perform(lambda step: self._perform(step, attempt))
            return run.result

    def transport(self, inner: "httpx.BaseTransport | None" = None, *,
                  criticality: Criticality | None = None) -> "GuardedTransport":
        """An ``httpx`` transport that sends each request through ``inner``
        (``httpx.HTTPTransport()`` by default) as one call to this
        dependency, of class ``criticality`` if given (else the
        dependency's): ``httpx.Client(transport=payments.transport())``.
        Needs the ``httpx`` extra (see :mod:`stormguard_client.httpx`)."""
        # Imported when a transport is made, not with this module: httpx is an
        # optional extra, and the core must load without it.
        from .httpx import GuardedTransport

        return GuardedTransport(self, inner, criticality=criticality)

    def _perform(self, step: Step[threading.Event], attempt: _Attempt) -> Outcome | None:
        if isinstance(step, Attempt):
            return _attempted(attempt, step.timeout)
        if isinstance(step, Sleep):
            self._sleep(step.seconds)
        else:
            self._wait(step.wakeup, step.seconds)
        return None


def _attempted(attempt: _Attempt, timeout: float | None) -> Outcome:
    """Runs ``attempt(timeout)``: what came of it. What is not an Exception
    (an interrupt) is no outcome: it goes on, through the plan."""
    try:
        return answered(attempt(timeout))
    except Exception as error:  # noqa: BLE001 - the plan judges it, and raises it again
        return Outcome(error=error)
