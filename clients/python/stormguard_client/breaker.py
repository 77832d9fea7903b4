"""The circuit breaker, the same as the Rust library's: it stops calls to a
dependency that keeps failing, so it gets room to recover, then lets a few
trial calls through to see whether it has.

- **closed** (0): calls pass. The breaker opens after ``consecutiveFailures``
  failures in a row that chance does not explain at the failure rate the
  window held before them (see ``chance``; a run of twice that many always
  opens it; 0 turns that trigger off), or once the window (the last
  N calls, or the calls of the last T) holds ``minimumCalls`` calls and the
  share that failed reaches ``failureRateThreshold``, or the share slower
  than ``slowCallDuration`` reaches ``slowCallRateThreshold``.
- **open** (2): calls are refused at once, for ``openTimeout``.
- **half-open** (1): at most ``halfOpenMaxCalls`` trial calls at a time.
  ``successThreshold`` good trials in a row close the breaker; a failed or
  slow trial opens it again.

A call ends in one of three outcomes (:class:`CallOutcome`): a success, a
failure, or a refusal: the dependency refused the call as overloaded or
down (a failure the policy's ``gate.overloadOn`` names, or one answered
with a ``Retry-After``) while no send gate paces it. A refusal says the
dependency may be up with less room than its callers want, so the breaker
follows what it accepts instead of shutting it out:

- closed, a refusal counts as a failure, but a breaker a refusal trips goes
  half-open, not open;
- half-open, the breaker keeps the trials of the last :data:`TRIAL_WINDOW`
  and what became of them. It sends a trial only while the refused ones
  number fewer than the accepted ones times ``TRIALS_PER_ACCEPTED - 1``,
  plus up to ``halfOpenMaxCalls`` it risks whatever the answers (the first
  of them at once, the rest spread over the first window), so it sends
  about :data:`TRIALS_PER_ACCEPTED` for each one the dependency accepts. A
  refused trial breaks the run of accepted ones, and opens the breaker
  only once it has been half-open a whole window that holds
  ``halfOpenMaxCalls`` refused trials and none accepted: the dependency is
  down, or answers nothing but refusals.

Under ``scope: fleet`` that holds in the overload that follows a return
(the daemon's trials found the dependency up and closed the breaker, until
ten seconds pass with no refusal); otherwise a refusal opens the breaker as
a failure does, for the daemon's one half-open for the fleet. A trial on
one of the daemon's slots that is refused is a failed trial to the daemon.

The move from open to half-open happens when a call asks for a permit after
``openTimeout``, so a breaker nobody calls stays open. A call's outcome
counts only in the state it started in: a call sent before the breaker
opened cannot close it. Times are nanoseconds on any clock that does not go
back (``time.monotonic_ns``).

Under ``scope: fleet`` an open breaker leaves its trials to the daemon,
which runs one half-open for the whole fleet: it sends a trial only on a
slot the daemon granted (:meth:`CircuitBreaker.heard`), reports the trial's
outcome at its next ask (:meth:`CircuitBreaker.fleet_report`), and closes
when the daemon says the fleet's trials succeeded. Without a word from the
daemon for a lease it decides alone, as under ``scope: process``.

A new version of the settings is taken up by :meth:`CircuitBreaker.retune`,
which keeps the breaker's state: an open breaker stays open.
"""

import enum
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, TypeAlias

from . import blocks, limits
from .chance import BOUND_Z as BOUND_Z, RUN_BY_CHANCE as RUN_BY_CHANCE, Run

BUCKETS = 20
U32_MAX = (1 << 32) - 1

TRIALS_PER_ACCEPTED = 2
"""Trials a half-open breaker may send for each one the dependency accepted
in the last :data:`TRIAL_WINDOW`, beyond its first ``halfOpenMaxCalls``:
two, the multiplier of client-side adaptive throttling in Google's SRE book
(Chapter 21). The breaker then sends about twice what the dependency takes,
so it sees the room grow, and no more, so an overload lasting minutes costs
the dependency one refusal per call it serves, not one per call its callers
make."""

TRIAL_WINDOW_NS = 10_000_000_000
"""How far back a half-open breaker counts its trials and their answers,
at most, in nanoseconds: ten seconds, long enough to hold a few answers at
a process's share of a small room, short enough that a room that grows or
shrinks is followed within seconds. A breaker whose ``openTimeout`` is
shorter counts over that (at least :data:`SHORTEST_TRIAL_WINDOW_NS`): it was
told to leave the dependency alone for less, and judges it as briefly
(with ``openTimeout: 3s``, ten seconds of trials were most of each cycle,
and breakers saw HAProxy back 4 s late, not 1.7 s)."""

SHORTEST_TRIAL_WINDOW_NS = 1_000_000_000
"""The shortest window a half-open breaker counts its trials over, in
nanoseconds: a second."""

KEYS = ("enabled", "consecutiveFailures", "failureRateThreshold", "slowCallRateThreshold",
        "slowCallDurationMs", "minimumCalls", "slidingWindow", "openTimeoutMs",
        "halfOpenMaxCalls", "successThreshold")
Window: TypeAlias = tuple[Literal["count", "time"], int]
"""A sliding window: ``("count", calls)`` or ``("time", duration_ns)``."""


class CircuitState(enum.StrEnum):
    """The breaker's state; it equals its name ("closed", "half-open", "open")."""

    CLOSED = "closed"
    HALF_OPEN = "half-open"
    OPEN = "open"

    @property
    def metric(self) -> int:
        """The state's number for metrics: 0 closed, 1 half-open, 2 open."""
        return {"closed": 0, "half-open": 1, "open": 2}[self.value]


class CallOutcome(enum.StrEnum):
    """How a call the breaker permitted ended; it equals its name."""

    SUCCESS = "success"
    """The dependency answered (a 2xx, or an error that is the caller's, a 4xx)."""
    FAILURE = "failure"
    """The dependency failed (a connect error, a timeout, a 5xx): it counts against it."""
    REFUSED = "refused"
    """The dependency refused the call as overloaded or down (a failure the
    policy's ``gate.overloadOn`` names, a 429 or 503 or a refused
    connection by default, or one answered with a ``Retry-After``; never a
    timeout) while no send gate paces it. Closed, it counts as a failure,
    but a breaker it trips goes half-open, not open; half-open, trials
    follow what the dependency accepts, and refusals open the breaker again
    only when nothing is accepted (see the module's docstring). Under
    ``scope: fleet`` that holds in the overload that follows a return (the
    daemon's trials found the dependency up and closed the breaker, until
    ten seconds pass with no refusal); otherwise a refusal opens the
    breaker as a failure does, for the daemon's one half-open for the
    fleet. A trial on one of the daemon's slots that is refused is a failed
    trial to the daemon."""


class CallNotPermitted(Exception):
    """A call refused by the breaker: ``state`` is the state that refused it
    (open, or half-open with every trial slot taken or the trials its
    answers earned spent) and ``retry_in_ns`` the time until the breaker
    admits trial calls (0 when half-open)."""

    def __init__(self, state: CircuitState, retry_in_ns: int) -> None:
        super().__init__(f"circuit breaker is {state}; calls are refused for {retry_in_ns} ns")
        self.state = state
        self.retry_in_ns = retry_in_ns


def millis_to_nanos(key: str, millis: object) -> int:
    """Milliseconds as a policy serves them (possibly fractional) to whole
    nanoseconds, as Rust's ``Duration::try_from_secs_f64(ms / 1e3)`` rounds
    them (to the nearest, ties to even). Raises ValueError naming ``key``."""
    if isinstance(millis, bool) or not isinstance(millis, (int, float)):
        raise ValueError(f"{key} must be a number of milliseconds, not {millis!r}")
    seconds = millis / 1e3
    if not math.isfinite(seconds) or seconds < 0 or seconds >= 2.0**64:
        raise ValueError(f"{key} must be 0 or more finite milliseconds, not {millis!r}")
    return round(Fraction(seconds) * 1_000_000_000)


def _whole(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a whole number, not {value!r}")
    return value


def _rate(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class BreakerPolicy:
    """A policy's ``circuitBreaker`` block, durations in nanoseconds.
    ``sliding_window`` is ``("count", calls)`` or ``("time", duration_ns)``."""

    enabled: bool = False
    consecutive_failures: int = 5
    failure_rate_threshold: float = 0.5
    slow_call_rate_threshold: float = 1.0
    slow_call_duration_ns: int = 60_000_000_000
    minimum_calls: int = 100
    sliding_window: Window = ("count", 100)
    open_timeout_ns: int = 30_000_000_000
    half_open_max_calls: int = 10
    success_threshold: int = 3
    fleet_scoped: bool = False
    """``scope: fleet``: the daemon decides the open breaker's trials."""

    @classmethod
    def from_json(cls, block: object, defaults: Mapping[str, object] | None = None) -> "BreakerPolicy":
        """The policy of a ``circuitBreaker`` JSON block; a key it lacks is
        taken from ``defaults`` (another such block), if given. Raises
        ValueError naming a key that is missing or of the wrong type."""
        merged, enabled = blocks.merged("circuitBreaker", block, defaults, KEYS)
        window = merged["slidingWindow"]
        if not isinstance(window, dict) or window.get("type") not in ("count", "time"):
            raise ValueError(f"circuitBreaker.slidingWindow must be {{type: count, calls}} or "
                             f"{{type: time, durationMs}}, not {window!r}")
        shape: Window
        if window["type"] == "count":
            shape = ("count", _whole("circuitBreaker.slidingWindow.calls", window.get("calls")))
        else:
            shape = ("time", millis_to_nanos("circuitBreaker.slidingWindow.durationMs", window.get("durationMs")))
        return cls(
            enabled=enabled,
            consecutive_failures=_whole("circuitBreaker.consecutiveFailures", merged["consecutiveFailures"]),
            failure_rate_threshold=_rate("circuitBreaker.failureRateThreshold", merged["failureRateThreshold"]),
            slow_call_rate_threshold=_rate("circuitBreaker.slowCallRateThreshold", merged["slowCallRateThreshold"]),
            slow_call_duration_ns=millis_to_nanos("circuitBreaker.slowCallDurationMs", merged["slowCallDurationMs"]),
            minimum_calls=_whole("circuitBreaker.minimumCalls", merged["minimumCalls"]),
            sliding_window=shape,
            open_timeout_ns=millis_to_nanos("circuitBreaker.openTimeoutMs", merged["openTimeoutMs"]),
            half_open_max_calls=_whole("circuitBreaker.halfOpenMaxCalls", merged["halfOpenMaxCalls"]),
            success_threshold=_whole("circuitBreaker.successThreshold", merged["successThreshold"]),
            fleet_scoped=_scope(merged.get("scope", "process")),
        )

    def check(self) -> None:
        """Raises ValueError naming the first setting outside the range the
        daemon's validation allows."""
        limits.count("circuitBreaker.consecutiveFailures", self.consecutive_failures)
        limits.number("circuitBreaker.failureRateThreshold", self.failure_rate_threshold)
        limits.number("circuitBreaker.slowCallRateThreshold", self.slow_call_rate_threshold)
        limits.duration("circuitBreaker.slowCallDuration", self.slow_call_duration_ns)
        limits.count("circuitBreaker.minimumCalls", self.minimum_calls)
        kind, size = self.sliding_window
        if kind == "count":
            limits.count("circuitBreaker.slidingWindow", size)
        elif kind == "time":
            limits.duration("circuitBreaker.slidingWindow", size)
        else:
            raise ValueError(f"circuitBreaker.slidingWindow must be count or time, not {kind!r}")
        limits.duration("circuitBreaker.openTimeout", self.open_timeout_ns)
        limits.count("circuitBreaker.halfOpenMaxCalls", self.half_open_max_calls)
        limits.count("circuitBreaker.successThreshold", self.success_threshold)


class _CountWindow:
    """A ring of the last N outcomes, with running totals [calls, failures, slow]."""

    def __init__(self, calls: int) -> None:
        self.capacity = max(calls, 1)
        self.clear()

    def clear(self) -> None:
        self._outcomes: list[tuple[int, int] | None] = [None] * self.capacity
        self._next = 0
        self._tally = [0, 0, 0]

    def record(self, now: int, failed: bool, slow: bool) -> None:
        old = self._outcomes[self._next]
        if old is not None:
            self._tally[0] -= 1
            self._tally[1] -= old[0]
            self._tally[2] -= old[1]
        self._outcomes[self._next] = (int(failed), int(slow))
        self._tally[0] += 1
        self._tally[1] += int(failed)
        self._tally[2] += int(slow)
        self._next = (self._next + 1) % self.capacity

    def tally(self, now: int) -> tuple[int, int, int]:
        calls, failures, slow = self._tally
        return calls, failures, slow


class _TimeWindow:
    """The calls of the last ``duration``, in BUCKETS steps of ``duration // BUCKETS``."""

    capacity: int | None = None

    def __init__(self, duration_ns: int, now: int) -> None:
        self._start = now
        self._step = max(duration_ns // BUCKETS, 1)
        self.clear()

    def clear(self) -> None:
        # Per bucket: [step, calls, failures, slow].
        self._buckets = [[0, 0, 0, 0] for _ in range(BUCKETS)]

    def _step_at(self, now: int) -> int:
        return max(now - self._start, 0) // self._step

    def record(self, now: int, failed: bool, slow: bool) -> None:
        step = self._step_at(now)
        bucket = self._buckets[step % BUCKETS]
        if bucket[0] != step:
            bucket[:] = [step, 0, 0, 0]
        bucket[1] += 1
        bucket[2] += int(failed)
        bucket[3] += int(slow)

    def tally(self, now: int) -> tuple[int, int, int]:
        step = self._step_at(now)
        total = [0, 0, 0]
        for bucket in self._buckets:
            if bucket[0] <= step and step - bucket[0] < BUCKETS:
                for i in range(3):
                    total[i] += bucket[i + 1]
        return total[0], total[1], total[2]


def trial_span(policy: BreakerPolicy) -> int:
    """The window, in nanoseconds, a breaker under ``policy`` counts its
    half-open trials over: ``openTimeout`` between
    SHORTEST_TRIAL_WINDOW_NS and TRIAL_WINDOW_NS."""
    return min(max(policy.open_timeout_ns, SHORTEST_TRIAL_WINDOW_NS), TRIAL_WINDOW_NS)


def _scope(scope: object) -> bool:
    """Whether ``circuitBreaker.scope`` is the fleet's."""
    if scope not in ("process", "fleet"):
        raise ValueError(f'circuitBreaker.scope must be "process" or "fleet", found {scope!r}')
    return scope == "fleet"


@dataclass(frozen=True)
class Verdict:
    """The daemon's word on the fleet's breaker, from a pace answer."""

    state: CircuitState
    """closed: close the breaker; half-open: send the trials granted; open: stay open."""
    trials: int
    """Trial slots this answer grants (0 or 1)."""
    retry_in_ns: int
    """While open: until the fleet's breaker goes half-open, or this process's turn to close."""


@dataclass(frozen=True)
class Report:
    """What a fleet-scoped breaker tells the daemon in an ask."""

    open: bool
    open_for_ns: int
    refused: int
    """Calls it refused since the last report (at most ``U32_MAX``, as the Rust library counts them)."""
    succeeded: int
    failed: int
    """Trials on the daemon's slots since the last report (a slow one failed)."""


class _FleetWord:
    """Under ``scope: fleet``, what the daemon last said and what to tell it."""

    def __init__(self) -> None:
        self.until: int | None = None
        """When its word stops holding; meanwhile the daemon decides the open breaker's trials."""
        self.slots = 0
        self.slots_until: int | None = None
        """Unused slots are good until the lease of the answer that granted
        them (the daemon takes an unsettled slot back after two leases)."""
        self.retry_at: int | None = None
        self.succeeded = 0
        self.failed = 0
        self.refused_reported = 0

    def holds(self, now: int) -> bool:
        return self.until is not None and now < self.until

    def slots_at(self, now: int) -> int:
        return self.slots if self.slots_until is not None and now < self.slots_until else 0


class Permit:
    """Leave to make one call: tell the breaker how it went with
    :meth:`record`, or :meth:`cancel` it if the call was cancelled (it then
    counts for nothing and frees its trial slot)."""

    def __init__(self, breaker: "CircuitBreaker", generation: int, trial: bool, started_ns: int,
                 fleet_trial: bool = False) -> None:
        self._breaker = breaker
        self._generation = generation
        self._started = started_ns
        self._done = False
        self.trial = trial
        """Whether this is a half-open trial call."""
        self.fleet_trial = fleet_trial
        """Whether this is a trial on a slot the daemon granted the fleet: the
        fleet's trials are few already, so it does not wait for a gate's turn."""

    @property
    def current(self) -> bool:
        """Whether the breaker is still in the state it granted this permit
        in: once it changed (it opened while the call waited in a send
        gate's line), the call's outcome would be ignored, and the breaker
        must be asked again before anything is sent. The fleet's trial is
        always current: its outcome is the daemon's to judge."""
        return self.fleet_trial or self._generation == self._breaker._generation

    def record(self, outcome: "CallOutcome | bool", now_ns: int) -> None:
        """Records how the call went: a :class:`CallOutcome`, or a bool (true
        for a failure: a connect error, a timeout, a 5xx; false for a
        success). Its duration since the permit decides whether it was slow."""
        if isinstance(outcome, bool):
            outcome = CallOutcome.FAILURE if outcome else CallOutcome.SUCCESS
        outcome = CallOutcome(outcome)
        self._finish()
        if self.fleet_trial:
            self._breaker._record_fleet_trial(self._started, outcome != CallOutcome.SUCCESS, now_ns)
        else:
            self._breaker._record(self._generation, self._started, outcome, now_ns)

    def cancel(self) -> None:
        """The call was cancelled unrecorded: it counts for nothing."""
        self._finish()
        if self.fleet_trial:
            self._breaker._release_slot()
        else:
            self._breaker._release(self._generation, self.trial)

    def _finish(self) -> None:
        if self._done:
            raise RuntimeError("this permit was already recorded or cancelled")
        self._done = True


class CircuitBreaker:
    """A circuit breaker shared by every thread that calls one dependency."""

    def __init__(self, policy: BreakerPolicy, now_ns: int = 0) -> None:
        policy.check()
        self.policy = policy
        """The settings it applies now (:meth:`retune` replaces them)."""
        self._born = now_ns
        self._window = self._new_window(policy.sliding_window)
        self._lock = threading.Lock()
        self._state = CircuitState.CLOSED
        self._generation = 0
        self._consecutive_failures = 0
        self._opened_at = now_ns
        self._trials_in_flight = 0
        self._trial_successes = 0
        """Trials accepted in a row, none refused between."""
        self._trial_span = trial_span(policy)
        """The window its trials are counted over since it last went
        half-open: TRIAL_WINDOW_NS, or ``openTimeout`` if shorter."""
        self._trials = _TimeWindow(self._trial_span, now_ns)
        """Half-open: the trials of the last ``_trial_span``, a refused one as a failure."""
        self._half_open_since = now_ns
        """When it last went half-open."""
        self._refusing = False
        """Half-open because refusals tripped it from closed: the dependency
        answers, and the trials are this process's own. Under ``scope:
        fleet`` the daemon hears of the breaker only once it opens."""
        self._after_return_until: int | None = None
        """Under ``scope: fleet``, until when refusals are the overload that
        follows the dependency's return: a trial window past the daemon's
        close, and past each refusal since. Until then they trip the breaker
        half-open; after, they open it, for the fleet's one half-open."""
        self.transitions = 0
        """State changes since the breaker was created."""
        self.rejected = 0
        """Calls refused since the breaker was created."""
        self._opened_from_closed = now_ns
        self._fleet = _FleetWord()

    def _new_window(self, shape: Window) -> "_CountWindow | _TimeWindow":
        kind, size = shape
        return _CountWindow(size) if kind == "count" else _TimeWindow(size, self._born)

    @property
    def state(self) -> CircuitState:
        """The state now (the move from open to half-open waits for the next call)."""
        return self._state

    def retune(self, policy: BreakerPolicy) -> None:
        """Takes up ``policy``, a new version of the breaker's settings,
        keeping its state, so that an operator's edit mid-outage does not
        close an open breaker and let every call through to a dependency
        that is down. It keeps the state, when it opened, its refusals,
        transitions and failures in a row, and, while ``policy`` stays
        fleet-scoped, the daemon's word and what is still to be reported.
        A new ``openTimeout`` counts from when the breaker last opened; new
        ``halfOpenMaxCalls`` and ``successThreshold`` apply from now on
        (trials in flight stay counted); new thresholds and
        ``minimumCalls`` apply to the next judgement. A ``slidingWindow`` of
        another type or size starts the closed state's window afresh, since
        outcomes kept in one shape cannot be read in another; the same
        window keeps them. Turned from fleet to process scope, it drops the
        daemon's word and decides alone from now; turned to fleet scope, it
        asks the daemon from its next ask. ``enabled`` is the caller's to act
        on (no breaker, or a new one). Raises ValueError naming a setting
        out of range, as the constructor does, leaving the breaker as it was."""
        policy.check()
        with self._lock:
            if policy.sliding_window != self.policy.sliding_window:
                self._window = self._new_window(policy.sliding_window)
            if not policy.fleet_scoped:
                self._fleet = _FleetWord()
            self.policy = policy

    def acquire(self, now_ns: int) -> Permit:
        """A permit to make a call now; raises CallNotPermitted if the breaker refuses."""
        with self._lock:
            if self._state == CircuitState.OPEN and self.policy.fleet_scoped and self._fleet.holds(now_ns):
                return self._fleet_trial(now_ns)
            if self._state == CircuitState.OPEN:
                reopens = self._opened_at + self.policy.open_timeout_ns
                if now_ns < reopens:
                    self.rejected += 1
                    raise CallNotPermitted(CircuitState.OPEN, reopens - now_ns)
                self._transition(CircuitState.HALF_OPEN, now_ns)
            trial = self._state == CircuitState.HALF_OPEN
            if trial:
                most = max(self.policy.half_open_max_calls, 1)
                if self._trials_in_flight >= most or not self._trial_credit_at(most, now_ns):
                    self.rejected += 1
                    raise CallNotPermitted(CircuitState.HALF_OPEN, 0)
                self._trials_in_flight += 1
            return Permit(self, self._generation, trial, now_ns)

    def _fleet_trial(self, now: int) -> Permit:
        """An open breaker the daemon speaks for: a trial on one of its slots, if any is left."""
        fleet = self._fleet
        if fleet.slots_at(now) == 0:
            self.rejected += 1
            retry_in = 0 if fleet.retry_at is None else max(fleet.retry_at - now, 0)
            raise CallNotPermitted(CircuitState.OPEN, retry_in)
        fleet.slots -= 1
        return Permit(self, self._generation, True, now, fleet_trial=True)

    def asks_fleet(self) -> bool:
        """Whether it has something to tell the daemon: it is fleet-scoped and
        open (or half-open alone), or its trials' outcomes are still to be reported."""
        with self._lock:
            return self.policy.fleet_scoped and (
                self._is_open_for_the_fleet() or self._fleet.succeeded > 0 or self._fleet.failed > 0)

    def fleet_report(self, now_ns: int) -> Report | None:
        """What to tell the daemon at ``now_ns``, if fleet-scoped: whether it
        is open, since when, the calls it refused and its trials' outcomes
        since the last report (which this takes: they are reported once)."""
        with self._lock:
            if not self.policy.fleet_scoped:
                return None
            fleet = self._fleet
            report = Report(open=self._is_open_for_the_fleet(),
                            open_for_ns=max(now_ns - self._opened_from_closed, 0),
                            refused=min(self.rejected - fleet.refused_reported, U32_MAX),
                            succeeded=fleet.succeeded, failed=fleet.failed)
            fleet.refused_reported = self.rejected
            fleet.succeeded = fleet.failed = 0
            return report

    def heard(self, verdict: Verdict, until_ns: int, now_ns: int) -> bool:
        """The daemon's verdict on the fleet's breaker, heard at ``now_ns``
        and holding until ``until_ns`` (the answer's lease): closed closes
        this breaker; open or half-open leaves its trials to the daemon's
        slots until then. True if it closed the breaker, for the caller to
        hand the dependency to its pace."""
        with self._lock:
            if not self.policy.fleet_scoped:
                return False
            if self._refusing:
                # Its trials follow what the dependency accepts; the fleet's word is for open breakers.
                return False
            fleet = self._fleet
            if verdict.state == CircuitState.CLOSED:
                fleet.until = fleet.slots_until = None
                if self._state != CircuitState.CLOSED:
                    self._transition(CircuitState.CLOSED, now_ns)
                    self._after_return_until = now_ns + trial_span(self.policy)
                    return True
                return False
            if self._state == CircuitState.HALF_OPEN:
                # It had gone half-open alone, without the daemon: the daemon's trials govern again.
                self._transition(CircuitState.OPEN, now_ns)
            fleet.until = until_ns
            if verdict.trials > 0:
                fleet.slots, fleet.slots_until = verdict.trials, until_ns
            elif verdict.state == CircuitState.OPEN:
                fleet.slots_until = None
            fleet.retry_at = now_ns + verdict.retry_in_ns
            return False

    def _record_fleet_trial(self, started: int, failed: bool, now: int) -> None:
        """The fleet's trial: its outcome is the daemon's to judge, whatever
        this breaker did since; a failure restarts its own open timeout."""
        with self._lock:
            slow = max(now - started, 0) >= self.policy.slow_call_duration_ns
            if failed or slow:
                self._fleet.failed += 1
                if self._state == CircuitState.OPEN:
                    self._opened_at = now
            else:
                self._fleet.succeeded += 1

    def _release_slot(self) -> None:
        """An unused fleet trial: the slot is this process's until its lease ends."""
        with self._lock:
            self._fleet.slots += 1

    def _record(self, generation: int, started: int, outcome: CallOutcome, now: int) -> None:
        with self._lock:
            if generation != self._generation:
                return
            failed = outcome != CallOutcome.SUCCESS
            refused = outcome == CallOutcome.REFUSED
            if refused and self._after_return(now):
                self._after_return_until = now + trial_span(self.policy)
            # Under ``scope: fleet``, refusals outside the overload that follows
            # a return are the fleet's to judge, as failures are.
            refused = refused and (not self.policy.fleet_scoped or self._after_return(now))
            slow = max(now - started, 0) >= self.policy.slow_call_duration_ns
            if self._state == CircuitState.CLOSED:
                self._record_closed(failed, slow, refused, now)
            elif self._state == CircuitState.HALF_OPEN and refused and not slow:
                self._record_refused_trial(now)
            elif self._state == CircuitState.HALF_OPEN:
                self._record_trial(failed or slow, now)

    def _record_closed(self, failed: bool, slow: bool, refused: bool, now: int) -> None:
        """A call that ended closed: ``refused`` if the dependency refused it
        as overloaded, which trips the breaker half-open, not open: the
        dependency may be up with less room than its callers want, and the
        trials find out."""
        policy = self.policy
        self._consecutive_failures = min(self._consecutive_failures + 1, U32_MAX) if failed else 0
        self._window.record(now, failed, slow)
        calls, failures, _ = self._window.tally(now)
        in_a_row = (0 < policy.consecutive_failures <= self._consecutive_failures
                    and not Run(self._consecutive_failures, calls, failures, policy.consecutive_failures,
                                policy.failure_rate_threshold).by_chance())
        if in_a_row or self._rates_exceeded(now):
            self._transition(CircuitState.HALF_OPEN if refused else CircuitState.OPEN, now)
            self._refusing = refused

    def _rates_exceeded(self, now: int) -> bool:
        """Whether the window holds enough calls and too many failed or were
        slow. A count window smaller than minimumCalls is judged once full."""
        calls, failures, slow = self._window.tally(now)
        if calls == 0 or calls < self._minimum_calls():
            return False
        return (failures / calls >= self.policy.failure_rate_threshold
                or slow / calls >= self.policy.slow_call_rate_threshold)

    def _minimum_calls(self) -> int:
        """Calls the window must hold before its rates are judged:
        minimumCalls, or a smaller count window once full."""
        capacity = self._window.capacity
        return self.policy.minimum_calls if capacity is None else min(capacity, self.policy.minimum_calls)

    def _record_trial(self, bad: bool, now: int) -> None:
        """A trial that ended: a failed or slow one opens the breaker again;
        ``successThreshold`` accepted in a row close it."""
        self._trials_in_flight = max(self._trials_in_flight - 1, 0)
        if bad:
            self._transition(CircuitState.OPEN, now)
            return
        self._trials.record(now, False, False)
        self._trial_successes += 1
        if self._trial_successes >= self.policy.success_threshold:
            self._transition(CircuitState.CLOSED, now)

    def _record_refused_trial(self, now: int) -> None:
        """A trial the dependency refused as overloaded: it breaks the run of
        accepted trials, and opens the breaker again only once the breaker
        has been half-open a whole trial window and the window holds
        ``halfOpenMaxCalls`` refused trials and none accepted, so that a
        dependency that is down (or answers nothing but refusals) is left
        alone, and one that takes a share is not. A refusal alone says
        little: a dependency with a per-second quota refuses every call late
        in a second, retries included."""
        self._trials_in_flight = max(self._trials_in_flight - 1, 0)
        self._trial_successes = 0
        self._trials.record(now, True, False)
        calls, refused, _ = self._trials.tally(now)
        most = max(self.policy.half_open_max_calls, 1)
        judged = now - self._half_open_since >= self._trial_span
        if judged and refused == calls and refused >= most:
            self._transition(CircuitState.OPEN, now)

    def _after_return(self, now: int) -> bool:
        """Whether refusals at ``now`` are the overload that follows a return."""
        return self._after_return_until is not None and now < self._after_return_until

    def _is_open_for_the_fleet(self) -> bool:
        """Whether the daemon is to hear that this breaker is open: open, or
        half-open alone after ``openTimeout``; not half-open on refusals."""
        if self._state == CircuitState.OPEN:
            return True
        if self._state == CircuitState.HALF_OPEN:
            return not self._refusing
        return False

    def _trial_credit_at(self, most: int, now: int) -> bool:
        """Whether a half-open breaker may send one more trial at ``now``:
        while the trials the dependency refused in its trial window
        number fewer than those it accepted times ``TRIALS_PER_ACCEPTED - 1``
        plus the unearned ones (:meth:`_unearned_trials_at`), so that it
        sends about TRIALS_PER_ACCEPTED for each accepted, and ``most`` a
        window when none is. Trials nobody refused are limited only by
        ``most`` at a time."""
        calls, refused, _ = self._trials.tally(now)
        accepted = calls - refused
        return refused < accepted * (TRIALS_PER_ACCEPTED - 1) + self._unearned_trials_at(most, now)

    def _unearned_trials_at(self, most: int, now: int) -> int:
        """The refusals a half-open breaker risks whatever the answers:
        ``most`` a window, the first window's coming one per
        ``_trial_span // most``, so that processes that went half-open
        together (opened by the same outage) do not spend them in one burst
        that a recovering dependency refuses almost whole."""
        spacing = self._trial_span // max(most, 1)
        steps = max(now - self._half_open_since, 0) // spacing
        return min(steps + 1, most)

    def _release(self, generation: int, trial: bool) -> None:
        with self._lock:
            if trial and generation == self._generation:
                self._trials_in_flight = max(self._trials_in_flight - 1, 0)

    def _transition(self, to: CircuitState, now: int) -> None:
        if self._state == CircuitState.CLOSED and to == CircuitState.OPEN:
            self._opened_from_closed = now
        self._state = to
        self._refusing = False
        self._generation += 1
        self.transitions += 1
        self._trials_in_flight = 0
        self._trial_successes = 0
        if to == CircuitState.OPEN:
            self._opened_at = now
            self._after_return_until = None
        elif to == CircuitState.CLOSED:
            self._consecutive_failures = 0
            self._window.clear()
        else:
            # Half-open: a fresh window of trials.
            self._trial_span = trial_span(self.policy)
            self._trials = _TimeWindow(self._trial_span, now)
            self._half_open_since = now
