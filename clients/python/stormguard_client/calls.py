"""One call to a dependency, decided with no I/O: the plan both flavours of
:class:`~stormguard_client.Dependency` drive (see
:mod:`stormguard_client.plans`). In the order of the Rust library's guard
(outermost first):

1. the circuit breaker: every attempt needs its permit; a refusal ends the
   call at once (CallNotPermitted), sending nothing;
2. the send gate: while the dependency is unwell, an attempt with a permit
   waits in line for its turn, behind the calls of more critical classes
   (the call's ``criticality``, or the policy's ``gate.criticality``), up
   to its class's ``gate.maxWait`` after the call began or its deadline,
   whichever comes first; a call whose turn, at the gate's pace, would
   come later fails at once (Shed), and one that gets no turn while it
   waits ends (NoTurn), its attempt not sent either way; the gate counts
   both shed, in the call's class. The gate stands
   after the breaker so that a call the breaker would refuse does not wait
   for nothing; a call in line asks the breaker again if it changed state
   meanwhile (it opened), and leaves the line unsent if refused, or to go
   at once as the fleet's trial. A retry waits
   at the call's old place in line, ahead of calls that came after it. The
   gate hears of each attempt it let through (see :func:`_signal`): only a
   failure ``gate.overloadOn`` names, or an answer that asked for a wait,
   says the dependency is overloaded. The gate hears each attempt before
   the breaker does, and a refusal it heard as overload while it is on
   (the one that turned it on included) is its to answer, by pacing: the
   breaker does not hear it as a failure, so that a breaker opening beside
   the gate does not turn an overload it is easing into an outage; a
   half-open trial so refused found the dependency up, and counts as a
   success. A timeout is no refusal (nothing answered it): the breaker
   hears it, gate on or not. Errors the dependency answered with count
   for the breaker as failures. A refusal (a failure the policy's
   ``gate.overloadOn`` names, read even when there is no gate, or an
   answer that asked for a wait) that no gate paces, there being none or
   it being off, is heard as refused (see
   :class:`~stormguard_client.breaker.CallOutcome`): it counts as a
   failure, but trips the breaker half-open, not open, and its trials
   follow what the dependency accepts;
3. the retry budget: a first try deposits, a retry needs its leave. While
   the gate paces, retries wait for turns instead, without a backoff: the
   gate bounds the load they add to what the dependency accepts;
4. the retry loop: ``maxRetries``, ``retryOn``, the backoff delay (drawn
   with the shared delay law), ``perTryTimeoutMs`` and ``maxElapsedMs``
   (and the caller's own bound on the call, if it gives one).

The plan yields :class:`Attempt` (send one, answer with its
:class:`Outcome`), :class:`Sleep` (back off) and :class:`WaitInLine` (wait
for the gate), and returns the last attempt's status or raises its
exception.
"""

import datetime
import email.message
import random
import re
import time
import urllib.error
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeAlias, TypeVar, Union, cast

from .breaker import CallOutcome, CircuitBreaker, Permit
from .controls import Controls
from .gate import Asker, Criticality, GatePolicy, NoTurn, SendGate, Shed, Shedding, Signal, Ticket
from .retry_on import RetryOn

Clock: TypeAlias = Callable[[], int]
"""Nanoseconds on a clock that never goes back (``time.monotonic_ns``)."""
FailureOf: TypeAlias = Callable[[Exception], "str | None"]
"""The retryOn failure an attempt's exception stands for (see :func:`failure_of`)."""
Record: TypeAlias = Callable[[int, str], None]
"""Counts an attempt: its retry number (0 for the first try) and outcome."""


class Wakeup(Protocol):
    """What a call waiting in a gate's line is woken with: the gate calls
    :meth:`set` (from any thread) when the line moves or the rate grows.
    ``threading.Event`` is one; the asyncio flavour has its own."""

    def set(self) -> None:
        """Wakes the waiter."""

    def clear(self) -> None:
        """Forgets an earlier wake."""


W = TypeVar("W", bound=Wakeup)


@dataclass(frozen=True)
class Attempt:
    """Send an attempt, bounded by ``timeout`` seconds (None: no bound);
    answer with its :class:`Outcome`."""

    timeout: float | None


@dataclass(frozen=True)
class Sleep:
    """Back off for ``seconds`` before the next attempt; answer None."""

    seconds: float


@dataclass(frozen=True)
class WaitInLine(Generic[W]):
    """Wait in the send gate's line until ``wakeup`` is set or ``seconds``
    pass (None: without end); answer None. A wait cut short by an exception
    (a cancellation) goes to the plan with :meth:`Run.fail
    <stormguard_client.plans.Run.fail>`, which takes the call out of line."""

    wakeup: W
    seconds: float | None


@dataclass(frozen=True)
class Outcome:
    """What came of an attempt: the HTTP status it returned, or the
    exception it raised; and ``retry_after``, the seconds its answer's
    ``Retry-After`` asked to wait (None: it had none, or none readable). An
    ``urllib.error.HTTPError`` raised stands for its status and its
    ``Retry-After`` header."""

    status: int | None = None
    error: Exception | None = None
    retry_after: float | None = None


def answered(answer: "int | Outcome") -> Outcome:
    """What an attempt's answer says came of it: an HTTP status, or the
    Outcome itself (one that also says whether the answer carried a
    ``Retry-After``, as the httpx transports' attempts give it)."""
    return answer if isinstance(answer, Outcome) else Outcome(status=answer)


Step: TypeAlias = Union[Attempt, Sleep, WaitInLine[W]]
"""A step of a call's plan."""
CallPlan: TypeAlias = Generator[Step[W], "Outcome | None", int]
"""A call's plan: its steps, answered with an attempt's outcome or None,
ending with the last status."""


def failure_of(error: Exception) -> str | None:
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


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAY, _MONTH = "|".join(_WEEKDAYS), "|".join(_MONTHS)
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
# The three forms of an HTTP date (RFC 9110, 5.6.7), as the Rust library's
# httpdate reads them: IMF-fixdate, RFC 850 (a two-digit year: before 70 is
# 20xx) and asctime (its day padded with a space).
_HTTP_DATES = tuple(re.compile(form, re.ASCII) for form in (
    rf"(?P<weekday>{_DAY}), (?P<day>[0-9]{{2}}) (?P<month>{_MONTH}) (?P<year>[0-9]{{4}}) {_TIME} GMT",
    rf"(?P<weekday>{_DAY})[a-z]*, (?P<day>[0-9]{{2}})-(?P<month>{_MONTH})-(?P<year>[0-9]{{2}}) {_TIME} GMT",
    rf"(?P<weekday>{_DAY}) (?P<month>{_MONTH}) (?P<day> [0-9]|[0-9]{{2}}) {_TIME} (?P<year>[0-9]{{4}})",
))
_LONG_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def parse_retry_after(value: str, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` value asks to wait, as the Rust library
    reads it: delay-seconds, or an HTTP date (in one of its three forms,
    its weekday the date's, 1970 to 9999) after ``now`` (seconds since the
    epoch; the wall clock's by default), a date in the past meaning none;
    None for anything unreadable."""
    value = value.strip()
    if re.fullmatch(r"\+?[0-9]+", value, flags=re.ASCII):
        seconds = int(value)
        return float(seconds) if seconds < 1 << 64 else None
    at = _http_date(value)
    if at is None:
        return None
    return max(at - (time.time() if now is None else now), 0.0)


def _http_date(value: str) -> float | None:
    """An HTTP date as seconds since the epoch; None if it is not one."""
    for form in _HTTP_DATES:
        if (found := form.fullmatch(value)) is not None:
            break
    else:
        return None
    weekday, year = found["weekday"], int(found["year"])
    if len(found["year"]) == 2:
        year += 2000 if year < 70 else 1900
        if found[0].split(",")[0] != _LONG_WEEKDAYS[_WEEKDAYS.index(weekday)]:
            return None
    hour, minute, second = int(found["hour"]), int(found["minute"]), int(found["second"])
    if not 1970 <= year <= 9999 or hour > 23 or minute > 59 or second > 59:
        return None
    try:
        at = datetime.datetime(year, _MONTHS.index(found["month"]) + 1, int(found["day"]), hour, minute, second,
                               tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    return at.timestamp() if at.weekday() == _WEEKDAYS.index(weekday) else None


def _asked_to_wait(error: urllib.error.HTTPError) -> float | None:
    """The seconds an HTTPError's ``Retry-After`` header asked to wait, if any."""
    headers: email.message.Message | None = error.headers
    value = headers.get("Retry-After") if headers is not None else None
    return parse_retry_after(value) if isinstance(value, str) else None


def call_plan(c: Controls, *, clock: Clock, rng: random.Random, new_wakeup: Callable[[], W], record: Record,
              failure: FailureOf = failure_of, timeout: float | None = None,
              criticality: Criticality | None = None) -> CallPlan[W]:
    """The plan of one call under ``c``: ``record`` counts each attempt,
    ``failure`` judges an attempt's exception, ``new_wakeup`` makes what a
    wait in the gate's line is woken with, ``timeout`` (seconds, or None)
    bounds the call as ``maxElapsedMs`` does, whichever ends first, and
    ``criticality`` is the call's class (None: the policy's
    ``gate.criticality``)."""
    start = clock()
    deadline = _deadline(start, c.max_elapsed_ns, timeout)
    if c.budget is not None:
        c.budget.deposit(start)
    retry, previous = 0, 0
    # The call's place in the gate's line, from the first time it waited.
    place: int | None = None
    status: int | None = None
    error: Exception | None = None
    while True:
        permit = c.breaker.acquire(clock()) if c.breaker is not None else None
        sent: int | None = None
        if c.gate is not None and permit is not None and permit.fleet_trial:
            # The fleet's trials are few already: one does not wait for a turn.
            sent = clock()
        elif c.gate is not None:
            held = _Held(c.breaker, permit)
            asker = _asker(c.gate.policy, criticality, start, deadline)
            try:
                turned, place, waited = yield from _turn(c.gate, place, asker, clock, new_wakeup, held.renew)
            except BaseException:
                held.cancel()
                raise
            permit = held.permit
            if isinstance(turned, Shedding):
                held.cancel()
                raise Shed(asker.criticality, retry, status) from error
            if turned is None:
                held.cancel()
                raise NoTurn(waited, retry, status) from error
            sent = turned
        per_try = c.per_try_timeout
        if deadline is not None:
            left = max(deadline - clock(), 1) / 1e9
            per_try = left if per_try is None else min(per_try, left)
        try:
            outcome = yield Attempt(per_try)
        except BaseException:
            if permit is not None:
                permit.cancel()
            raise
        if outcome is None:
            raise TypeError("an Attempt is answered with its Outcome")
        status, error, retry_after = outcome.status, outcome.error, outcome.retry_after
        if isinstance(error, urllib.error.HTTPError):
            status, retry_after = error.code, _asked_to_wait(error)
        now = clock()
        failed: str | None = None
        if status is not None:
            kind = "server_error" if status >= 500 else "success"
            retryable = c.retry_on.retries_status(status)
        else:
            failed = failure(error) if error is not None else None
            kind = "error"
            retryable = failed is not None and c.retry_on.retries_failure(failed)
        # What a gate hears of the attempt, under the policy's overloadOn,
        # whether or not there is a gate: the breaker hears a refusal no
        # gate paces as refused.
        overload_on = c.gate.policy.overload_on if c.gate is not None else c.overload_on
        heard = _signal(overload_on, failed, status, retry_after, retryable)
        # The gate hears the attempt first, then the breaker: a refusal the
        # gate paces, the one that turned it on included, is the gate's to
        # answer, not the breaker's.
        if c.gate is not None and sent is not None:
            c.gate.record(heard, sent, now)
        if permit is not None:
            # Only a refusal is the gate's to pace: a timeout says nothing
            # answered, and the breaker hears it (a trial that timed out
            # did not find the dependency up).
            overloaded = heard is Signal.OVERLOADED
            paced = overloaded and c.gate is not None and c.gate.is_on
            _settle(permit, status is not None and status < 500 and not retryable, retryable, paced,
                    overloaded and not paced, now)
        record(retry, kind)
        if not retryable or retry >= c.max_retries:
            return _end(status, error)
        # The backoff's delay, lengthened to what the answer's Retry-After
        # asked, never beyond maxDelay.
        asked = round(retry_after * 1e9) if retry_after is not None else 0
        delay = min(max(c.backoff.delay(retry, previous, rng.getrandbits(64)), asked), c.backoff.max_nanos)
        if deadline is not None and now + delay >= deadline:
            return _end(status, error)
        # While the gate paces, it bounds what retries add to the load,
        # and more tightly than a budget's fixed share; it also spaces
        # them. So a retry waits for its turn instead of asking the
        # budget, and instead of backing off, unless the dependency asked
        # for a wait (Retry-After).
        paced = c.gate is not None and c.gate.is_on
        wait = asked if paced else delay
        if deadline is not None and now + wait >= deadline:
            return _end(status, error)
        if not paced and c.budget is not None and not c.budget.try_retry(now):
            return _end(status, error)
        if wait > 0:
            yield Sleep(wait / 1e9)
        retry, previous = retry + 1, delay


def _asker(policy: GatePolicy, criticality: Criticality | None, start: int, deadline: int | None) -> Asker:
    """A call's class (its own, else the gate's policy's), and when its turn
    must come by: its class's ``maxWait`` after the call began at
    ``start``, or its ``deadline`` if sooner."""
    chosen = criticality if criticality is not None else policy.criticality
    by = start + policy.max_wait.of(chosen)
    return Asker(chosen, by if deadline is None else min(by, deadline))


def _deadline(start: int, max_elapsed_ns: int | None, timeout: float | None) -> int | None:
    """When the call must be over: ``maxElapsedMs`` or the caller's
    ``timeout`` after ``start``, whichever comes first; None for neither."""
    ends = [start + max_elapsed_ns] if max_elapsed_ns is not None else []
    if timeout is not None:
        ends.append(start + max(round(timeout * 1e9), 0))
    return min(ends) if ends else None


class _Held:
    """The breaker's permit of a call waiting in the gate's line."""

    def __init__(self, breaker: CircuitBreaker | None, permit: Permit | None) -> None:
        self._breaker = breaker
        self.permit = permit

    def renew(self, now: int) -> bool:
        """Asks the breaker again if it left the state it gave the permit in
        (it opened while the call waited): raises CallNotPermitted if it
        refuses now; True if it grants the fleet's trial, which waits for
        no turn."""
        if self._breaker is None or self.permit is None or self.permit.current:
            return False
        stale, self.permit = self.permit, None
        stale.cancel()
        self.permit = self._breaker.acquire(now)
        return self.permit.fleet_trial

    def cancel(self) -> None:
        """Gives the permit back, if the call holds one."""
        if self.permit is not None:
            self.permit.cancel()
            self.permit = None


def _turn(gate: SendGate, place: int | None, asker: Asker, clock: Clock,
          new_wakeup: Callable[[], W], permitted: Callable[[int], bool],
          ) -> Generator[WaitInLine[W], object, tuple[int | Shedding | None, int | None, int]]:
    """Waits for ``gate`` to give the call's next attempt a turn, at the
    call's old ``place`` in line if it has one, as ``asker`` (the call's
    class, and when its turn must come by): (when the turn came, the
    call's place, how long it waited), the first :attr:`Shedding.SHED` if
    the gate shed the call at once, None if no turn came while it waited,
    before ``asker.by_ns``: the call then gives up its place, and the gate
    counts it shed. Before each claim of its turn, ``permitted(now)`` may
    raise (the breaker opened meanwhile): the call then leaves the line, no
    turn spent; if it says True (the fleet's trial), the call leaves the
    line and goes at once. The call leaves the line unless it got its
    turn."""
    now = clock()
    # A call that waited before rejoins at its place, in its class.
    turned = gate.turn_for(asker, now) if place is None else gate.rejoin(place, asker, now)
    if turned is None or isinstance(turned, Shedding):
        return (now if turned is None else turned), place, 0
    ticket: Ticket | None = turned
    place = turned.number if place is None else place
    entered, woken, by = now, new_wakeup(), asker.by_ns
    try:
        while by is None or now < by:
            # Cleared before the claim, so that a wake after it is kept.
            woken.clear()
            if permitted(now):
                return now, place, now - entered
            claim = gate.claim(turned, now, woken.set)
            if claim.go:
                ticket = None
                return now, place, now - entered
            until = claim.at_ns
            if by is not None:
                until = by if until is None else min(until, by)
            yield WaitInLine(woken, None if until is None else max(until - now, 1) / 1e9)
            now = clock()
        # It waited as long as it could (NoTurn): demand the pace did not
        # serve, which the fleet hears of.
        gate.give_up(turned)
        ticket = None
        return None, place, now - entered
    finally:
        if ticket is not None:
            gate.leave(ticket)


def _settle(permit: Permit, answered: bool, retryable: bool, paced: bool, refused: bool, now: int) -> None:
    """Tells the breaker how an attempt went, as the Rust library does: an
    answer counts as a success, a failure the policy retries counts against
    the dependency, and one it does not retry (a 501, an exception retryOn
    leaves out) counts for nothing. A refusal the send gate paces
    (``paced``: the gate, having recorded it, heard it as an overload, an
    answered refusal or a refused connection that ``overloadOn`` names,
    never a timeout, and is on) is not a failure: the gate answers an
    overload by pacing, and a breaker opening beside it would turn the
    overload into an outage. A half-open trial so refused found the
    dependency up: it counts as a success, so that the breaker hears its
    trial's result (a fleet trial is then reported as succeeded at the next
    ask) and the trial's slot is not handed back for a call that skips the
    gate's pace; a paced attempt that is no trial counts for nothing.

    A refusal no gate paces (``refused``: heard as an overload under the
    policy's ``gate.overloadOn``, with no gate or one that is off) is heard
    as :attr:`CallOutcome.REFUSED
    <stormguard_client.breaker.CallOutcome.REFUSED>`: the dependency may be
    up with less room than its callers want, so a breaker it trips goes
    half-open, not open, and its trials follow what the dependency
    accepts. A timeout is never a refusal: nothing answered it."""
    if answered or (paced and permit.trial):
        permit.record(CallOutcome.SUCCESS, now)
    elif retryable and not paced:
        permit.record(CallOutcome.REFUSED if refused else CallOutcome.FAILURE, now)
    else:
        permit.cancel()


def _signal(overload_on: RetryOn, failure: str | None, status: int | None, retry_after: float | None,
            retryable: bool) -> Signal:
    """What an attempt's outcome tells the send gate, as the Rust library
    maps it, under the gate's ``overloadOn``: the attempt failed with
    ``failure`` (a retryOn failure, or None) or was answered with
    ``status`` (whose ``Retry-After`` asked to wait ``retry_after``
    seconds, or None), and the policy retries it if ``retryable``.

    - A timeout says the dependency is slow (TIMED_OUT) if ``overloadOn``
      names ``timeout``; if not, it says nothing of its load (ACCEPTED).
    - A failure the policy retries says the dependency is overloaded or
      down (OVERLOADED) if ``overloadOn`` covers it or its answer asked for
      a wait (``Retry-After``); if not, it is an error the dependency
      answered with (a 500, say), which says nothing of its load
      (ACCEPTED).
    - Anything else (an answer, a failure the policy does not retry) is
      ACCEPTED."""
    if failure == "timeout":
        return Signal.TIMED_OUT if "timeout" in overload_on else Signal.ACCEPTED
    if not retryable:
        return Signal.ACCEPTED
    if status is not None:
        overloaded = retry_after is not None or overload_on.covers_status(status)
    else:
        overloaded = failure is not None and overload_on.covers_failure(failure)
    return Signal.OVERLOADED if overloaded else Signal.ACCEPTED


def _end(status: int | None, error: Exception | None) -> int:
    """The call's end: the last exception raised again, else the last status
    (None only from an attempt that returned None against its type, handed
    back as it came)."""
    if error is not None:
        raise error
    return cast(int, status)
