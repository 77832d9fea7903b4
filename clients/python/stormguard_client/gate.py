"""The send gate, the same as the Rust library's to the nanosecond and to the
bit (clients/vectors checks it): an adaptive limiter, per process and
dependency, that every attempt (first tries and retries) passes while the
dependency is unwell, so that a herd returns to a recovering dependency at
the rate it can take rather than all at once.

- **Off while healthy.** Asking for a turn reads one flag; outcomes that say
  nothing is wrong are ignored. The first outcome that says the dependency
  is overloaded or down turns the gate on: a failure the policy retries
  that ``gate.overloadOn`` names (by default a refused connection, a
  timeout, a 429 or a 503), or one whose answer asked for a wait
  (``Retry-After``). Any other failure (a 500, say) is an error the
  dependency answered with, which says nothing of its load.
- **Or once refusals outnumber acceptances.** Unless ``gate.overloadWhen:
  any-refusal`` (which is the above) a refusal
  heard while off starts *watching*: the gate stays off and counts what
  the dependency answers, and turns on only once refusals outnumber
  acceptances over a second by more than chance would (as Google's
  client-side throttling holds nothing back until requests exceed K = 2
  times the accepts), judging the dependency to *answer*, at twice what it
  delivers. Three refusals with nothing accepted for three seconds (the
  dependency is down), or a timeout, turn it on probing; once
  something is accepted, refusals cut the rate only while they outnumber
  acceptances, and the rate never falls below twice what the dependency
  delivers. A service that fails a share of requests at random keeps its
  throughput. Watching ends after ``quietMs`` without a refusal. While it
  watches a dependency that has lately accepted something, the gate tells
  the fleet's controller what it hears (:meth:`~SendGate.asks_fleet_at`,
  :meth:`~SendGate.tally`), which weighs every process's answers and may
  tell it to pace (:meth:`~SendGate.pace_by_fleet_at`) before its own
  counts would.
- **On: paced turns, the most critical first.** Turns are ``1 / rate``
  apart, paced rather than let through in bursts. An attempt that cannot go
  at once takes a :class:`Ticket` and waits in line; only the first in line
  waits for a time, the others wait to be woken, so waiters cost nothing
  while they wait and the line moves as soon as the rate grows. The line
  serves calls by class (``critical``, then ``default``, then
  ``sheddable``: see :data:`CRITICALITIES`), and within a class first come,
  first served. A call may say when its turn must come by (its class's
  ``gate.maxWait`` after it began, or its deadline if sooner): one whose
  turn, at the present pace, would come later is shed, failing at once
  rather than waiting in a line that grows for as long as an overload
  lasts. The caller gives up its place (:meth:`~SendGate.give_up`) when
  that time passes while it waits: a call shed too, for the tally.
- **The rate is learned from outcomes.** Until something is accepted, the
  gate probes at ``minRate``. Accepted attempts then grow the rate quickly
  (slow start: each adds ``ramp`` turns per second). An overload after that
  cuts it by ``beta`` and regrows it along CUBIC's curve towards, then past,
  the rate at which it failed; it cuts once per round of sends, as in TCP:
  attempts sent before the cut were sent at the old rate. A refusal's cut
  never goes below what the dependency accepted over the last second, and
  the refusal that ends slow start cuts to that, not by ``beta``. A timeout
  cuts to a share of the most the dependency accepted in a second of the
  last three (it may still be working on what timed out), and until a
  refusal shows it answering at once the rate then grows no faster than
  1.25 times that most.
- **Off again** once nothing has been refused and nobody has had to wait
  for ``quietMs`` (unless ``any-refusal``, a refusal that does not say
  overload is no trouble).

Decisions take the time as an argument (``now`` in nanoseconds, on any
clock that does not go back, such as ``time.monotonic_ns``), so that tests
and simulations drive the very code a client runs.
"""

import bisect
import enum
import math
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar, Literal, TypeAlias

from . import blocks, limits
from .answers import TENTH_NANOS, Answers
from .breaker import millis_to_nanos
from .retry_on import RetryOn
from .trial import Finding, Trials

NANOS_PER_SECOND = 1_000_000_000
# How much more than one turn of credit may build up: what accrues over this
# many seconds, so that a turn claimed late by a timer's lag is made up but a
# lull earns no burst.
LAG = 0.002
# Credit this close to a whole turn is one: a wait computed from the missing
# credit is rounded to whole nanoseconds, and must not bring a claim back a
# rounding error short of its turn.
EPSILON = 1e-9
# How far past what a slow dependency delivers the rate may grow (BBR's gain
# when it probes for more bandwidth).
GAIN = 1.25
# While the dependency is judged to answer, how far past what it delivers the
# rate always reaches: Google's K.
ANSWERING_GAIN = 2.0
# Unless any-refusal, how long (in tenths of a second, as the answers are
# counted) the dependency must have accepted nothing for a refusal to turn
# the gate on at once, as for a dependency that is down: as long as the
# gate's counts go back.
DOWN_AFTER_TENTHS = 30
# The refusals, with nothing accepted lately, that show a dependency down:
# under most-refused within three seconds, under evidence in a row over
# DOWN_SPAN_NS. One would do for a gate that has
# heard nothing else, but a process's first answers come from a dependency
# that fails a share at random too: at a half, the first is refused in one
# process of two, the first three in one of eight. A herd of callers refused
# together counts three at once.
DOWN_REFUSALS = 3
# Under evidence, the refusals in a row, with nothing accepted lately, that
# show a dependency down at once: a herd's callers, refused together, count
# five at once. A dependency failing a half at random refuses a process's
# first five about once in 32 starts; the gate then probes, and the trials of
# its cuts find the refusals random within a few dozen answers.
DOWN_RUN = 5
# Under evidence, how long DOWN_REFUSALS in a row, with nothing accepted
# lately, must span to show a dependency down: a process that sends a few
# attempts a second to a dependency failing up to a half at random hears one
# accepted within a second, while a process with one caller, whose retries
# back off, counts five only after seconds.
DOWN_SPAN_NS = 1_000_000_000
# Under evidence, the refusals in a row, with nothing accepted, past which a
# gate that found its dependency down does not try its cuts while it recovers
# (for as long again as the dependency was down): a half failed at random
# gives twenty in a row once in a million runs, so the dependency was down,
# and the refusals after its return are a capacity's. A trial holds the rate
# at its cut until it has counted twenty answers; at a limit that counts what
# it refuses (a request-rate limit) the hold keeps its window full.
OUTAGE_RUN = 20
OVERLOAD_WHEN_NAMES = ("evidence", "any-refusal", "most-refused")
"""``gate.overloadWhen``'s values, as written in a policy: when the refusals
``overloadOn`` names say overload. ``evidence`` (the default): a dependency
that has accepted nothing lately is down at once (five refusals in a row, or
three over a second); refusals from one that has been accepting are weighed
as under ``most-refused``, and the daemon, hearing the whole fleet, tells a
capacity from failure at random. ``any-refusal``: at the
first, and every refusal cuts the rate (never below what was accepted over
the last second), for a service that refuses only when it is overloaded.
``most-refused``: only once refusals outnumber acceptances by more than
chance would (Google's client-side throttling, K = 2), or three have come
with nothing accepted for three seconds (the service is down), or the
fleet's controller says so, for a service that fails a share of requests at
random."""
KEYS = ("enabled", "minRate", "maxRate", "beta", "scale", "ramp", "quietMs", "overloadOn", "overloadWhen")
Criticality: TypeAlias = Literal["critical", "default", "sheddable"]
"""How much a call matters when the send gate cannot serve every call:
``critical`` calls are served first and shed last, ``sheddable`` ones
(prefetches, batch work, background retries) served last and shed first;
``default`` is the class of a call that names none, unless the policy's
``gate.criticality`` says otherwise. Within a class, first come, first
served."""
CRITICALITIES: tuple[Criticality, ...] = ("critical", "default", "sheddable")
"""Every class, most critical first: the order the gate serves them in (a
class's index here is its rank)."""
_RANKS: dict[str, int] = {name: rank for rank, name in enumerate(CRITICALITIES)}
# Past every ticket number: the end of a class's part of the line.
_END = 1 << 64


def criticality_of(key: str, value: object) -> Criticality:
    """``value`` as a class of call, one of :data:`CRITICALITIES`; raises
    ValueError naming ``key`` unless it is one."""
    for name in CRITICALITIES:
        if value == name and isinstance(value, str):
            return name
    raise ValueError(f"{key} must be one of {', '.join(CRITICALITIES)}, not {value!r}")


def rank_of(criticality: Criticality) -> int:
    """The place of ``criticality`` in :data:`CRITICALITIES`: 0 is served first."""
    return _RANKS[criticality]


class Signal(enum.StrEnum):
    """What an attempt's outcome says about the dependency; it equals its
    name ("accepted", "overloaded", "timed_out")."""

    ACCEPTED = "accepted"
    """Answered well, or failed in a way that says nothing about load: a
    failure the policy does not retry, or an error the dependency answered
    with (a 500, say) that ``gate.overloadOn`` leaves out and that asked
    for no wait; also a timeout, when ``overloadOn`` leaves ``timeout``
    out."""
    OVERLOADED = "overloaded"
    """Overloaded or down: a failure the policy retries that
    ``gate.overloadOn`` names (by default a refused connection, a 429 or a
    503), or whose answer asked for a wait (``Retry-After``)."""
    TIMED_OUT = "timed_out"
    """No answer in time, when ``gate.overloadOn`` names ``timeout``: the
    dependency may still be working on it, so the rate is cut to what it
    has lately been seen to accept."""


class NoTurn(Exception):
    """A call that got no turn from the send gate while it waited in line,
    before its wait bound (its class's ``gate.maxWait`` after it began) or
    its deadline, whichever came first: the attempt was not sent.
    ``waited_ns`` is how long it waited in line, ``attempts`` how many
    attempts the call had sent before, and ``status`` the last one's HTTP
    status (None if it had none). A call shed at once, its turn too far off
    to wait for, raises :class:`Shed`, a NoTurn too."""

    def __init__(self, waited_ns: int, attempts: int = 0, status: int | None = None) -> None:
        super().__init__(f"the send gate had no turn for the attempt before its wait bound (maxWait) or deadline "
                         f"(waited {waited_ns} ns in line, after {attempts} attempt(s))")
        self.waited_ns = waited_ns
        self.attempts = attempts
        self.status = status


class Shed(NoTurn):
    """A call the send gate shed: at the pace the dependency can take, its
    turn would have come after its wait bound (its class's
    ``gate.maxWait`` after it began) or its deadline, so it failed at once,
    the attempt not sent and no place in line taken, rather than wait for
    nothing. ``criticality`` is the call's class, ``attempts`` how many
    attempts the call had sent before, and ``status`` the last one's HTTP
    status (None if it had none).

    It is a :class:`NoTurn` that got no turn without waiting for one
    (``waited_ns`` is 0), so that code that handles NoTurn handles a call
    shed at once too."""

    def __init__(self, criticality: Criticality = "default", attempts: int = 0, status: int | None = None) -> None:
        # Its own message, not NoTurn's: it did not wait in line.
        Exception.__init__(self, "shed: at the pace the service can take, its turn would come after its wait "
                           f"bound (maxWait) or deadline (a {criticality} call, after {attempts} attempt(s))")
        self.waited_ns = 0
        self.criticality = criticality
        self.attempts = attempts
        self.status = status


@dataclass(frozen=True)
class Ticket:
    """A place in a gate's line, used up by a granted claim or by leaving;
    ``number`` is unique within its gate, in the order tickets were taken,
    and ``criticality`` the class of the call that holds it. The line is in
    the order of :attr:`place`: every class ahead of the less critical ones,
    and within a class, by number."""

    number: int
    criticality: Criticality = "default"

    @property
    def place(self) -> tuple[int, int]:
        """Where the ticket stands in line: its class's rank, then its number."""
        return rank_of(self.criticality), self.number


@dataclass(frozen=True)
class Asker:
    """Who asks for a turn: the call's class (``criticality``), and
    ``by_ns``, the latest its turn may come (None: no bound). Calls of a
    more critical class wait ahead of it, those of a less critical one
    behind; if at the present pace its turn would come after ``by_ns``, it
    is shed."""

    criticality: Criticality = "default"
    by_ns: int | None = None


class Shedding(enum.Enum):
    """A turn the gate refuses at once (see :meth:`SendGate.turn_for`)."""

    SHED = "shed"
    """At the present pace the asker's turn would come after the time it may
    wait until: it fails now (it is shed), taking no place in line."""


@dataclass(frozen=True)
class Claim:
    """What the holder of a ticket is told when it claims its turn:
    ``verdict`` "go" (send now; the ticket is used up), "at" (first in line:
    claim again at ``at_ns``, or sooner if woken, as the rate may grow
    meanwhile) or "behind" (others are ahead: claim again when woken).
    ``Claim.GO`` and ``Claim.BEHIND`` are the two without a time."""

    verdict: str
    at_ns: int | None = None
    GO: ClassVar["Claim"]
    BEHIND: ClassVar["Claim"]

    @classmethod
    def at(cls, at_ns: int) -> "Claim":
        """The claim of the first in line whose turn is due at ``at_ns``."""
        return cls("at", at_ns)

    @property
    def go(self) -> bool:
        """Whether the attempt may be sent now."""
        return self.verdict == "go"


Claim.GO = Claim("go")
Claim.BEHIND = Claim("behind")


@dataclass(frozen=True)
class Tally:
    """What a gate saw since it was last asked (see :meth:`SendGate.tally`):
    turns given while on (``sent``), attempts accepted, refused or timed out
    while on (``overloaded``, of which ``timed_out`` timed out), and the
    attempts waiting in line now. While the gate is off and ``watching``
    (unless ``overloadWhen: any-refusal``, since a refusal), the counts are
    of every attempt it heard the outcome of since the refusal that began
    watching (that one left out: every process would report one, and none
    of the acceptances before it), each sent unpaced; the fleet's
    controller judges from them whether the refusals are a capacity's.

    By class (in :data:`CRITICALITIES`' order): ``shed``, the calls the
    gate failed for want of a turn while on: shed at once (their turn too
    far off), or after waiting in line as long as they could (see
    :meth:`SendGate.give_up`); demand the pace did not serve. ``demand``,
    the calls that asked for a turn while on plus those waiting now: what
    each class wants, in proportion, of what the fleet gives this
    process."""

    sent: int = 0
    accepted: int = 0
    overloaded: int = 0
    timed_out: int = 0
    waiting: int = 0
    watching: bool = False
    shed: tuple[int, int, int] = (0, 0, 0)
    demand: tuple[float, float, float] = (0.0, 0.0, 0.0)


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class MaxWait:
    """A policy's ``gate.maxWait``: how long after it began a call of each
    class may still wait for the send gate's turn, in nanoseconds (``0``
    sends it only if a turn is free at once). The call's deadline
    (``maxElapsedMs``, or the caller's) bounds it too. The defaults: a
    second for a call of no class, as a line that holds a call longer holds
    it past the point most callers still want the answer, and a call that
    fails at once can be answered from elsewhere; five for critical calls,
    served first, which wait only while critical calls alone outrun the
    pace; a quarter of one for sheddable calls, sent on a turn that is
    free, or dropped."""

    critical_ns: int = 5_000_000_000
    default_ns: int = 1_000_000_000
    sheddable_ns: int = 250_000_000

    @classmethod
    def from_json(cls, block: object, defaults: object = None) -> "MaxWait":
        """The bounds of a ``maxWait`` JSON object (``criticalMs``,
        ``defaultMs``, ``sheddableMs``); a key it lacks is taken from
        ``defaults`` (another such object), if given, else from the
        built-in defaults. Raises ValueError naming a key that is not a
        number of milliseconds."""
        if not isinstance(block, dict):
            raise ValueError(f"gate.maxWait must be an object, not {block!r}")
        merged = {**(defaults if isinstance(defaults, dict) else {}), **block}
        bounds = {name: getattr(cls(), f"{name}_ns") for name in CRITICALITIES}
        for name in CRITICALITIES:
            if f"{name}Ms" in merged:
                bounds[name] = millis_to_nanos(f"gate.maxWait.{name}Ms", merged[f"{name}Ms"])
        return cls(bounds["critical"], bounds["default"], bounds["sheddable"])

    def of(self, criticality: Criticality) -> int:
        """The bound of ``criticality``, in nanoseconds."""
        return {"critical": self.critical_ns, "default": self.default_ns,
                "sheddable": self.sheddable_ns}[criticality]

    def check(self) -> None:
        """Raises ValueError naming the first bound outside the range the
        daemon's validation allows (``gate.maxWait.<class>``)."""
        for name in CRITICALITIES:
            limits.duration(f"gate.maxWait.{name}", self.of(name))


@dataclass(frozen=True)
class GatePolicy:
    """A policy's ``gate`` block: rates in attempts per second, ``quiet_ns``
    in nanoseconds, and ``overload_on`` (``overloadOn``, written as
    ``retryOn`` is): which of the failures the policy retries say the
    dependency is overloaded or down, and so turn the gate on and cut its
    rate. Any other is an error the dependency answered with (a 500, say),
    which says nothing of its load: the gate counts it as accepted, as the
    AWS SDKs' adaptive mode feeds only throttling errors to its rate. An
    answer that asked for a wait (``Retry-After``) always says overload.
    ``overload_when`` (``overloadWhen``, one of :data:`OVERLOAD_WHEN_NAMES`)
    says when those refusals say overload: by the evidence (``evidence``,
    the default), at the first (``any-refusal``), or only once they
    outnumber acceptances or nothing is accepted (``most-refused``).
    ``criticality`` (``criticality``) is the class of a call that names
    none, and ``max_wait`` (``maxWait``) how long after it began a call of
    each class may wait for a turn; both are missing from an older
    daemon's policy, which reads as the defaults (``default``, and
    :class:`MaxWait`'s)."""

    enabled: bool = False
    min_rate: float = 0.5
    max_rate: float = 100_000.0
    beta: float = 0.7
    scale: float = 0.4
    ramp: float = 16.0
    quiet_ns: int = 5_000_000_000
    overload_on: RetryOn = field(default_factory=RetryOn.overload)
    overload_when: str = "evidence"
    criticality: Criticality = "default"
    max_wait: MaxWait = field(default_factory=MaxWait)

    @classmethod
    def from_json(cls, block: object, defaults: Mapping[str, object] | None = None) -> "GatePolicy":
        """The policy of a ``gate`` JSON block; a key it lacks is taken from
        ``defaults`` (another such block), if given. Raises ValueError naming
        a key that is missing or of the wrong type."""
        merged, enabled = blocks.merged("gate", block, defaults, KEYS)
        overload_when = merged["overloadWhen"]
        if not isinstance(overload_when, str) or overload_when not in OVERLOAD_WHEN_NAMES:
            raise ValueError(f"gate.overloadWhen must be one of {', '.join(OVERLOAD_WHEN_NAMES)}, "
                             f"not {overload_when!r}")
        # Missing from an older daemon's policy: the defaults.
        criticality = criticality_of("gate.criticality", merged.get("criticality", "default"))
        max_wait = MaxWait.from_json(block.get("maxWait", {}) if isinstance(block, dict) else {},
                                     (defaults or {}).get("maxWait"))
        return cls(
            enabled=enabled,
            min_rate=_number("gate.minRate", merged["minRate"]),
            max_rate=_number("gate.maxRate", merged["maxRate"]),
            beta=_number("gate.beta", merged["beta"]),
            scale=_number("gate.scale", merged["scale"]),
            ramp=_number("gate.ramp", merged["ramp"]),
            quiet_ns=millis_to_nanos("gate.quietMs", merged["quietMs"]),
            overload_on=RetryOn.from_json(merged["overloadOn"], "gate.overloadOn"),
            overload_when=overload_when,
            criticality=criticality,
            max_wait=max_wait,
        )

    @property
    def overloaded_by_timeouts(self) -> bool:
        """Whether a timed-out attempt says the dependency is overloaded or
        down (``overloadOn`` names ``timeout``)."""
        return "timeout" in self.overload_on

    def unlearned_by(self, following: "GatePolicy") -> str | None:
        """The setting, if any, whose change from this policy to
        ``following`` voids what a gate learned under this one: whether it
        is on, which failures it hears as overload (``gate.overloadOn``),
        and when refusals say overload (``gate.overloadWhen``). Its rates,
        CUBIC's constants and ``quiet`` only shape what comes next, so a
        change of them keeps the pace."""
        if self.enabled != following.enabled:
            return "gate.enabled"
        if self.overload_on != following.overload_on:
            return "gate.overloadOn"
        if self.overload_when != following.overload_when:
            return "gate.overloadWhen"
        return None

    @property
    def weighs_refusals(self) -> bool:
        """Whether refusals from a dependency that has been accepting are
        weighed before they say overload: unless ``any-refusal``."""
        return self.overload_when != "any-refusal"

    def check(self) -> None:
        """Raises ValueError naming the first setting outside the range the
        daemon's validation allows."""
        limits.number("gate.minRate", self.min_rate)
        max_rate = limits.of("gate.maxRate", "number")
        if math.isfinite(self.min_rate):
            max_rate = max_rate.starting_at(max(self.min_rate, max_rate.low))
        max_rate.check(self.max_rate)
        limits.number("gate.beta", self.beta)
        limits.number("gate.scale", self.scale)
        limits.number("gate.ramp", self.ramp)
        limits.duration("gate.quiet", self.quiet_ns)
        if self.overload_when not in OVERLOAD_WHEN_NAMES:
            raise ValueError(f"gate.overloadWhen must be one of {', '.join(OVERLOAD_WHEN_NAMES)}, "
                             f"found {self.overload_when!r}")
        criticality_of("gate.criticality", self.criticality)
        self.max_wait.check()


def _secs(nanos: int) -> float:
    """Nanoseconds as seconds, rounded as Rust's ``Duration::as_secs_f64``
    rounds them (whole seconds plus the fraction, not nanos / 1e9)."""
    whole, fraction = divmod(nanos, NANOS_PER_SECOND)
    return float(whole) + fraction / 1e9


def _cbrt(x: float) -> float:
    """The cube root of ``x`` correctly rounded (to the nearest double), as
    the Rust library computes CUBIC's k. The C library's ``cbrt`` (which
    ``math.cbrt`` calls) may be a unit in the last place off; its result is
    moved to the double whose rounding interval holds the exact root, found
    by cubing the interval's ends exactly. No exact root lies on an end: an
    end has 54 significant bits, its cube far more than a double holds."""
    if x < 0.0:
        return -_cbrt(-x)
    root = math.cbrt(x)
    if x == 0.0 or not math.isfinite(x):
        return root
    exact = Fraction(x)
    while True:
        above = math.nextafter(root, math.inf)
        if exact > ((Fraction(root) + Fraction(above)) / 2) ** 3:
            root = above
            continue
        below = math.nextafter(root, 0.0)
        if exact < ((Fraction(below) + Fraction(root)) / 2) ** 3:
            root = below
            continue
        return root


def _nanos(seconds: float) -> int:
    """Seconds to whole nanoseconds, to the nearest (ties to even), as Rust's
    ``Duration::from_secs_f64`` rounds them."""
    return round(Fraction(seconds) * NANOS_PER_SECOND)


class _Rate:
    """The rate a gate paces at, and what it has learned: probing at the
    lowest rate until something is accepted, slow start, then CUBIC after
    overloads."""

    def __init__(self, policy: "GatePolicy", now: int) -> None:
        self.now = policy.min_rate
        self.phase = "probing"
        # CUBIC's curve after a cut: back to `max` k seconds after `since`;
        # set by the first cut, and read only after it (in phase "cubic").
        self.max = self.k = 0.0
        self.since = now
        # When the rate was last cut: an overload of an attempt sent before
        # then was answered under the old rate, and does not cut it again.
        self.last_cut = now
        # Whether the latest overload was a timeout: answers come late from a
        # slow dependency, so the rate grows no faster than GAIN times what it
        # delivers. A refusal clears it: a dependency that refuses is answering.
        self.slow = False
        self.answers = Answers(now)
        # Unless any-refusal, whether the dependency has accepted something
        # since the gate turned on (or was accepting when it did): a refusal
        # then cuts only while refusals outnumber acceptances, and the rate is
        # never below ANSWERING_GAIN times what it delivers, as Google's
        # client-side throttling admits K = 2 times the accepts. A dependency
        # failing a share up to a half at random is never paced below what it
        # answers.
        self.answering = False

    def answering_verdict(self, policy: "GatePolicy", now: int) -> None:
        """The gate's trials found its refusals keep their share: from ``now``
        the dependency is judged to answer, failing up to a half at random
        (as under most-refused), and the rate grows as in slow start from
        ANSWERING_GAIN times what it delivers."""
        self.answers.roll(now)
        self.answering = True
        self.slow = False
        self.phase = "slow_start"
        answered = self.answers.delivered() / (1.0 - 0.5)
        self.now = min(max(max(self.now, answered), policy.min_rate), policy.max_rate)

    @classmethod
    def answering_from(cls, policy: "GatePolicy", answers: Answers, now: int) -> "_Rate":
        """The rate of a gate that turns on at ``now``, under most-refused,
        because refusals came to outnumber acceptances while the dependency
        still accepted some (``answers`` counts them): judging it to answer,
        at ANSWERING_GAIN times what it delivers, growing as in slow start."""
        rate = cls(policy, now)
        rate.phase = "slow_start"
        rate.answers = answers.copy()
        rate.answering = True
        rate.now = min(max(ANSWERING_GAIN * answers.delivered(), policy.min_rate), policy.max_rate)
        return rate

    def phase_name(self) -> str:
        """The phase as :attr:`SendGate.phase` names it."""
        if self.phase == "cubic" and self.now >= self.max:
            return "regrown"
        return self.phase

    def refused(self, count: int, now: int) -> None:
        """Counts ``count`` attempts refused at ``now``; :meth:`overloaded`
        judges what they say."""
        self.answers.refused(count, now)

    def overloaded(self, policy: "GatePolicy", sent: int, now: int, timed_out: bool) -> bool:
        """An attempt sent at ``sent`` was refused (or, if ``timed_out``, got
        no answer in time) at ``now``; whether that says the dependency is
        overloaded (if not, nothing is cut: see ``answering``).
        :meth:`refused` has counted a refusal already."""
        self.answers.roll(now)
        if not timed_out and self._refusal_is_random():
            return False
        self.slow = timed_out
        if sent < self.last_cut:
            return True
        self.last_cut = now
        if timed_out:
            cut = max(min(self.answers.peak(), self.now) * policy.beta, policy.min_rate)
        else:
            delivered = min(self.answers.delivered(), self.now)
            # Slow start grew the rate ahead of the answers: a share of it is
            # no measure of the dependency, what it accepted is.
            kept = 0.0 if self.phase == "slow_start" else self.now * policy.beta
            cut = max(max(kept, delivered), policy.min_rate)
        if self.phase != "probing":
            # After a timeout the rate it was sent at is no target: regrow
            # from the cut, slowly at first.
            self.max = cut if timed_out else self.now
            self.k = 0.0 if timed_out else _cbrt(self.max * (1.0 - policy.beta) / policy.scale)
            self.since = now
            self.phase = "cubic"
        self.now = cut
        return True

    def _refusal_is_random(self) -> bool:
        """Whether a refusal says nothing of overload: while the dependency is
        judged to answer, until refusals outnumber acceptances."""
        return self.answering and not self.answers.shows_overload()

    def accepted(self, policy: "GatePolicy", now: int) -> None:
        """An attempt was accepted at ``now``."""
        self.answers.accepted(1, now)
        if self.phase == "probing":
            self.phase = "slow_start"
            # Something got through: under most-refused, refusals count as
            # overload from now on only while they outnumber acceptances
            # (under evidence, once the gate's trials find them random).
            self.answering = policy.overload_when == "most-refused"
            grown = self.now + policy.ramp
        elif self.phase == "slow_start":
            grown = self.now + policy.ramp
        else:
            x = _secs(max(now - self.since, 0)) - self.k
            # x * x * x, as Rust's powi(3) computes it, bit for bit.
            grown = max(self.now, policy.scale * (x * x * x) + self.max)
        if self.slow:
            grown = min(grown, max(GAIN * self.answers.peak(), self.now))
        if self.answering:
            grown = max(grown, ANSWERING_GAIN * self.answers.delivered())
        self.now = min(max(grown, policy.min_rate), policy.max_rate)


class _Lease:
    """A rate the fleet granted until ``until``, granted at ``since``;
    ``cut`` once a refusal has cut it."""

    __slots__ = ("rate", "until", "since", "cut")

    def __init__(self, rate: float, until: int, since: int) -> None:
        self.rate, self.until, self.since, self.cut = rate, until, since, False


class _Pacer:
    """Turns at a rate, as credit: credit accrues at the pace and a turn
    spends one. When the pace changes, the credit accrued so far is kept, so
    a faster pace speeds up what is left of the wait rather than granting at
    once every turn it would have earned since the last one."""

    def __init__(self, credit: float, now: int) -> None:
        self.credit = credit
        self.at = now
        self.lease: _Lease | None = None

    def overloaded(self, beta: float, sent: int) -> None:
        """The first refusal of an attempt sent under the current lease cuts
        it by ``beta`` until the next grant, which knows of it."""
        lease = self.lease
        if lease is not None and not lease.cut and sent >= lease.since:
            lease.rate *= beta
            lease.cut = True

    def pace(self, own: float) -> float:
        """The pace at the last accrual: the lease's while it lasts, else ``own``."""
        lease = self.lease
        return lease.rate if lease is not None and self.at < lease.until else own

    def pace_at(self, own: float, now: int) -> float:
        """The pace at ``now``: the lease's if it still runs, else ``own``."""
        lease = self.lease
        return lease.rate if lease is not None and now < lease.until else own

    def accrue(self, own: float, now: int) -> None:
        """Accrues credit up to ``now``: at the lease's rate until it ends, then at ``own``."""
        if now <= self.at:
            return
        lease = self.lease
        if lease is not None:
            if self.at < lease.until:
                end = min(lease.until, now)
                self.credit += lease.rate * _secs(end - self.at)
                self.at = end
            if now >= lease.until:
                self.lease = None
        self.credit += own * _secs(max(now - self.at, 0))
        self.at = now
        self.credit = min(self.credit, 1.0 + self.pace(own) * LAG)

    def take(self) -> bool:
        """Spends a turn if one has accrued (accrue first)."""
        ready = self.credit >= 1.0 - EPSILON
        if ready:
            self.credit = max(self.credit - 1.0, 0.0)
        return ready

    def due(self, own: float) -> int:
        """When a turn will have accrued at the present pace (accrue first);
        no later than the lease's end, when the pace changes."""
        missing = 1.0 - self.credit
        if missing <= EPSILON:
            return self.at
        due = self.at + max(_nanos(missing / self.pace(own)), 1)
        lease = self.lease
        if lease is not None and self.at < lease.until:
            due = min(due, lease.until)
        return due


class _Watched(enum.Enum):
    """What an outcome heard while off says."""

    NOT_YET = "not_yet"
    """Not overload yet: the gate stays off."""
    DOWN = "down"
    """The dependency is down (nothing accepted lately) or slow (a timeout),
    or under any-refusal any refusal: on, probing."""
    OVERLOADED = "overloaded"
    """Refusals have come to outnumber acceptances."""


class SendGate:
    """The gate of one dependency in one process, shared by every thread
    that calls it; created off at ``now_ns``. ``draw`` returns a random
    number in [0, 1): each turn-on's first credit, so that processes that
    failed together do not probe together."""

    def __init__(self, policy: GatePolicy, now_ns: int = 0, draw: Callable[[], float] = random.random) -> None:
        policy.check()
        self.policy = policy
        self._draw = draw
        self._lock = threading.Lock()
        self._on = False
        self._rate = _Rate(policy, now_ns)
        self._pacer = _Pacer(0.0, now_ns)
        # The last overload, or when someone last had to wait: the gate turns
        # off `quiet` after the later of the two.
        self._last_trouble = now_ns
        # The line, first place first: each place (its class's rank, its
        # ticket's number), and each waiter's waker.
        self._line: list[tuple[int, int]] = []
        self._wakers: dict[tuple[int, int], Callable[[], object] | None] = {}
        self._next_ticket = 0
        # Since the last tally: turns given (while watching, outcomes heard:
        # each was sent unpaced), accepted, overloaded, timed out; and by
        # class, the calls shed.
        self._counts = [0, 0, 0, 0]
        self._shed = [0, 0, 0]
        # By class, the calls that asked for a turn while on since the last tally.
        self._asked = [0, 0, 0]
        # Off, but a refusal has been heard (unless any-refusal): outcomes are
        # counted (in `_watch`, since watching began) until they show overload
        # (the gate turns on) or `quiet` passes without another refusal.
        self._watching = False
        self._watch = Answers(now_ns)
        # While watching, the refusals since the last acceptance (or since
        # watching began), and when the first of them came.
        self._refusal_run: tuple[int, int] | None = None
        # Once on for a dependency found down: the refusals in a row, with
        # nothing accepted, that found it down and met the probes since.
        self._outage_run = 0
        # When the gate last turned on for a dependency found down, and after
        # an outage of OUTAGE_RUN refusals or more, until when its recovery is
        # not tried for failure at random.
        self._down_since = now_ns
        self._untried_until: int | None = None
        # Under evidence, once on for a dependency found down: what the
        # gate's cuts do to the refusals.
        self._trials = Trials()
        # Unless any-refusal, the tenth of a second (counted from `_origin`,
        # plus one; 0: never) of the last accepted attempt: whether the
        # dependency was lately accepting. At most a store a tenth while
        # healthy.
        self._last_accepted = 0
        self._origin = now_ns

    # --- what the gate is doing ---------------------------------------------

    @property
    def is_on(self) -> bool:
        """Whether the gate paces attempts now."""
        return self._on

    def is_on_at(self, now_ns: int) -> bool:
        """Whether the gate paces attempts at ``now_ns``: it turns off here if
        it has been quiet long enough and nobody waits, as it would at the
        next turn."""
        if not self._on:
            return False
        with self._lock:
            return not self._turn_off_if_quiet(now_ns)

    @property
    def rate(self) -> float | None:
        """The rate the gate paces at, in attempts per second (the fleet's
        grant while one lasts, else its own), as of its last accrual; None
        while off. See :meth:`rate_at` for the rate at a given time."""
        with self._lock:
            return self._pacer.pace(self._rate.now) if self._on else None

    def rate_at(self, now_ns: int) -> float | None:
        """The rate the gate paces at ``now_ns``: the fleet's grant if its
        lease still runs then, else its own; None while off. Unlike
        :attr:`rate`, which tells the pace as of the gate's last turn or
        outcome, this sees a lease end even while nothing asks for turns."""
        with self._lock:
            return self._pacer.pace_at(self._rate.now, now_ns) if self._on else None

    @property
    def own_rate(self) -> float | None:
        """The rate learned from this process's own outcomes; None while off."""
        with self._lock:
            return self._rate.now if self._on else None

    @property
    def is_watching(self) -> bool:
        """Whether the gate is off but counting outcomes since a refusal
        (unless ``overloadWhen: any-refusal``)."""
        return self._watching

    @property
    def is_answering(self) -> bool:
        """Whether the gate judges the dependency to answer rather than to be
        overloaded (unless ``overloadWhen: any-refusal``, once something was
        accepted): a refusal then cuts the rate only while refusals
        outnumber acceptances. False while off."""
        with self._lock:
            return self._on and self._rate.answering

    @property
    def phase(self) -> str:
        """Where the gate's own rate is in its law: "off", or while on
        "probing", "slow_start", "cubic" (after a cut, below the rate it was
        cut at) or "regrown" (back at or past it)."""
        with self._lock:
            return self._rate.phase_name() if self._on else "off"

    @property
    def credit(self) -> float:
        """Turns' credit as of the gate's last accrual."""
        with self._lock:
            return self._pacer.credit

    @property
    def waiting(self) -> int:
        """Attempts waiting in line."""
        with self._lock:
            return len(self._line)

    def asks_fleet_at(self, now_ns: int) -> bool:
        """Whether the process asks the fleet's controller for its share at
        ``now_ns``: its gate is on (see :meth:`is_on_at`), or off and
        watching a dependency that has lately accepted something (the
        controller hears what it counts, and may tell it to pace: see
        :meth:`pace_by_fleet_at`). A gate that watches a dependency that has
        not waits to see it down, as it would without a fleet."""
        return self.is_on_at(now_ns) or (self._watching and self._accepted_lately(now_ns))

    def tally(self) -> Tally:
        """What the gate saw since the last tally, who waits now, and whether
        it watches (see :class:`Tally`); by class, the calls shed and the
        demand (those that asked since the last tally, and those waiting)."""
        with self._lock:
            sent, accepted, overloaded, timed_out = self._counts
            demand = [float(asked) for asked in self._asked]
            for rank, _ in self._line:
                demand[rank] += 1.0
            tally = Tally(sent, accepted, overloaded, timed_out, waiting=len(self._line), watching=self._watching,
                          shed=(self._shed[0], self._shed[1], self._shed[2]),
                          demand=(demand[0], demand[1], demand[2]))
            self._reset_counts([0, 0, 0, 0])
            self._asked = [0, 0, 0]
            return tally

    def first_in_line(self) -> tuple[int, int] | None:
        """The number of the first ticket in line and when its turn is due
        (nanoseconds), or None if nobody waits."""
        with self._lock:
            if not self._line:
                return None
            return self._line[0][1], self._pacer.due(self._rate.now)

    # --- turns --------------------------------------------------------------

    def turn(self, now_ns: int) -> Ticket | None:
        """A turn for an attempt of a call of the default class, with no time
        its turn must come by, asking at ``now_ns``: None to send it now, or
        a :class:`Ticket` to :meth:`claim` its turn with until it says go (or
        to :meth:`leave` the line with)."""
        turn = self.turn_for(Asker(), now_ns)
        assert not isinstance(turn, Shedding), "a call with no time to come by is never shed"
        return turn

    def rejoin(self, place: int, asker: Asker, now_ns: int) -> Ticket | Shedding | None:
        """:meth:`turn_for` for ``asker``'s call that has waited in line
        before, under ticket number ``place``: it waits at that place again,
        in its class, ahead of calls of its class that came after it. The
        line is first come, first served by call, not by attempt, so a retry
        does not go to the back of a line it has waited in longest; nor, of
        a class more critical than the default, behind default calls."""
        return self.turn_for(asker, now_ns, place)

    def turn_for(self, asker: Asker, now_ns: int, place: int | None = None) -> Ticket | Shedding | None:
        """A turn for an attempt of ``asker``'s call, asking at ``now_ns``
        (at ticket number ``place`` again, if the call has waited in line
        before: see :meth:`rejoin`): None to send it now; a :class:`Ticket`
        to wait in line with, behind the calls of its class and of more
        critical ones that wait; or :attr:`Shedding.SHED` if at the
        present pace its turn would come after ``asker.by_ns``."""
        if not self._on:
            return None
        return self._paced_turn(now_ns, place, asker)

    def _paced_turn(self, now: int, place: int | None, asker: Asker) -> Ticket | Shedding | None:
        rank = rank_of(asker.criticality)
        with self._lock:
            if place is None:
                self._asked[rank] += 1
            # Those it would wait behind: ahead of its place, or of its class's end.
            before = (rank, _END if place is None else place)
            ahead = bool(self._line) and self._line[0] < before
            if self._turn_off_if_quiet(now) or (not ahead and self._give_turn(now)):
                return None
            self._last_trouble = now
            if asker.by_ns is not None and self._turn_expected(before, now) > asker.by_ns:
                self._shed[rank] += 1
                return Shedding.SHED
            if place is None:
                place = self._next_ticket
                self._next_ticket += 1
            key = (rank, place)
            if key not in self._wakers:
                bisect.insort(self._line, key)
            self._wakers[key] = None
            return Ticket(place, asker.criticality)

    def claim(self, ticket: Ticket, now_ns: int, waker: Callable[[], object] | None = None) -> Claim:
        """The holder of ``ticket`` asks for its turn at ``now_ns``: a
        :class:`Claim`. ``waker``, if given, is called (once, with no
        arguments) when the answer may have changed: the line moved, or the
        rate grew."""
        key = ticket.place
        with self._lock:
            first = self._line[0] if self._line else None
            if first == key and self._give_turn(now_ns):
                self._line.pop(0)
                del self._wakers[key]
                self._last_trouble = now_ns
                self._wake_first()
                return Claim.GO
            if key in self._wakers:
                self._wakers[key] = waker
            if first == key:
                return Claim.at(self._pacer.due(self._rate.now))
            return Claim.BEHIND

    def give_up(self, ticket: Ticket) -> None:
        """The holder of ``ticket`` waited in line until it could wait no
        longer (its class's ``maxWait``, or its deadline) and gives up its
        place: a call shed, counted in the tally by its class as one shed at
        once is (demand the pace did not serve)."""
        with self._lock:
            self._leave(ticket.place)
            self._shed[rank_of(ticket.criticality)] += 1

    def leave(self, ticket: Ticket) -> None:
        """The holder of ``ticket`` gives up its place (it was cancelled):
        unlike :meth:`give_up`, it counts for nothing."""
        with self._lock:
            self._leave(ticket.place)

    def _leave(self, key: tuple[int, int]) -> None:
        """Takes the place ``key`` out of the line, if it is there."""
        if key not in self._wakers:
            return
        was_first = self._line[0] == key
        self._line.remove(key)
        del self._wakers[key]
        if was_first:
            self._wake_first()

    # --- learning -----------------------------------------------------------

    def record(self, signal: Signal | str, sent_ns: int, now_ns: int) -> None:
        """Learns from the outcome (a :class:`Signal`), at ``now_ns``, of an
        attempt sent at ``sent_ns``."""
        if signal == Signal.ACCEPTED:
            if self.policy.weighs_refusals:
                self._note_accepted(now_ns)
            if not self._on and not self._watching:
                return
        with self._lock:
            self._learn(Signal(signal), sent_ns, now_ns)

    def _note_accepted(self, now: int) -> None:
        """Notes that something was accepted at ``now``: a store at most once
        a tenth of a second."""
        tenth = self._tenth(now) + 1
        if self._last_accepted != tenth:
            self._last_accepted = tenth

    def _tenth(self, now: int) -> int:
        return max(now - self._origin, 0) // TENTH_NANOS

    def _accepted_lately(self, now: int) -> bool:
        """Whether anything was accepted within DOWN_AFTER_TENTHS of ``now``."""
        last = self._last_accepted
        return last != 0 and max(self._tenth(now) + 1 - last, 0) < DOWN_AFTER_TENTHS

    def retune(self, policy: GatePolicy) -> bool:
        """Takes up ``policy``, a new version of the gate's settings, keeping
        what the gate has learned (on or off, its rate, judgement, trials and
        line): its rates, CUBIC's constants and ``quiet`` shape what comes
        next, and the rate stays within the new bounds. Whether it did: a
        change that voids what the gate learned (see
        :meth:`GatePolicy.unlearned_by`), or a bad setting, is refused, and
        needs a new gate."""
        try:
            policy.check()
        except ValueError:
            return False
        with self._lock:
            if self.policy.unlearned_by(policy) is not None:
                return False
            self._rate.now = min(max(self._rate.now, policy.min_rate), policy.max_rate)
            if self._pacer.lease is not None:
                self._pacer.lease.rate = min(self._pacer.lease.rate, policy.max_rate)
            self.policy = policy
            # The first in line may be due sooner now.
            self._wake_first()
            return True

    def lease(self, rate: float, until_ns: int, now_ns: int) -> None:
        """Paces at ``rate`` until ``until_ns`` instead of the gate's own
        rate: the fleet's grant. Ignored while the gate is off, or if
        ``rate`` is not a positive number; at most the policy's maxRate."""
        usable = self._on and rate > 0.0 and math.isfinite(rate) and until_ns > now_ns
        if not usable:
            return
        with self._lock:
            self._pacer.accrue(self._rate.now, now_ns)
            self._pacer.lease = _Lease(min(rate, self.policy.max_rate), until_ns, now_ns)
            self._wake_first()

    def pace_by_fleet_at(self, now_ns: int) -> bool:
        """While watching, turns the gate on at ``now_ns`` because the fleet's
        controller, hearing every process, holds the fleet back (its grant
        says ``pace``); whether it did (not if it was on already, or not
        watching). The grant then paces it, and its own rate, should grants
        stop, is that of a dependency judged to answer, at twice what it
        delivers (or, if nothing was accepted lately, of one that is down:
        probing). It draws its first credit as a refusal that turns it on
        does."""
        with self._lock:
            if self._on or not self._watching:
                return False
            if self._accepted_lately(now_ns):
                self._rate = _Rate.answering_from(self.policy, self._watch, now_ns)
                self._start_pacing(Signal.OVERLOADED, now_ns)
            else:
                self._turn_on(Signal.OVERLOADED, now_ns, now_ns)
            # The fleet heard what it counted while watching.
            self._reset_counts([0, 0, 0, 0])
            return True

    def resume_by_fleet_at(self, now_ns: int) -> bool:
        """The fleet's breaker closed at ``now_ns`` and the daemon takes the
        fleet back at its pace: the gate turns on if it is off, as for a
        dependency that has accepted nothing yet (it went quiet while the
        breaker refused every call), so that the fleet's grant, not every
        process at once, sets what is sent; a watching gate turns on as
        :meth:`pace_by_fleet_at` turns it. Whether it turned on."""
        if self._watching:
            return self.pace_by_fleet_at(now_ns)
        with self._lock:
            if self._on:
                return False
            self._turn_on(Signal.OVERLOADED, now_ns, now_ns)
            self._reset_counts([0, 0, 0, 0])
            return True

    def _learn(self, signal: Signal, sent: int, now: int) -> None:
        policy = self.policy
        if not self._on:
            watched = self._watched(signal, now)
            if watched is _Watched.DOWN:
                self._turn_on(signal, sent, now)
            elif watched is _Watched.OVERLOADED:
                self._rate = _Rate.answering_from(policy, self._watch, now)
                self._start_pacing(signal, now)
            return
        if signal != Signal.ACCEPTED:
            timed_out = signal == Signal.TIMED_OUT
            self._counts[2] += 1
            self._counts[3] += int(timed_out)
            if not timed_out:
                if self._rate.phase == "probing":
                    self._outage_run += 1
                self._rate.refused(1, now)
                if self._trial_holds(0.0, 1.0, sent, now):
                    return
            self._pacer.accrue(self._rate.now, now)
            last_cut = self._rate.last_cut
            if self._rate.overloaded(policy, sent, now, timed_out):
                self._last_trouble = now
                self._pacer.overloaded(policy.beta, sent)
            if self._tries_cuts(now) and not timed_out and self._rate.last_cut > last_cut:
                self._rate.answers.roll(now)
                self._trials.cut(self._rate.answers.refused_share_last_second(), now)
        else:
            if self._rate.phase == "probing" and self._outage_run >= OUTAGE_RUN:
                self._untried_until = now + max(now - self._down_since, 0)
            self._trial_holds(1.0, 0.0, sent, now)
            self._counts[1] += 1
            self._pacer.accrue(self._rate.now, now)
            self._rate.accepted(policy, now)
            self._turn_off_if_quiet(now)
            # The first in line may be due sooner now.
            self._wake_first()

    # --- under the lock -----------------------------------------------------

    def _watched(self, signal: Signal, now: int) -> _Watched | None:
        """Counts an outcome heard while off (a refusal, or anything while
        watching; in the tally too, but for the refusal that begins
        watching), and says what a refusal shows. A timeout turns the gate
        on at once, and so does any refusal under any-refusal. Otherwise a
        refusal starts watching, and turns the gate on at once only once
        refusals show the dependency down (``_shows_down``); while watching,
        outcomes are counted until they show overload, and watching ends
        after ``quiet`` without a refusal."""
        if not self.policy.weighs_refusals and signal != Signal.ACCEPTED:
            return _Watched.DOWN
        if signal == Signal.ACCEPTED:
            self._refusal_run = None
            self._watch.accepted(1, now)
            self._counts[0] += 1
            self._counts[1] += 1
            if max(now - self._last_trouble, 0) >= self.policy.quiet_ns:
                self._watching = False
            return None
        if signal == Signal.TIMED_OUT:
            return _Watched.DOWN
        if self._watching:
            self._counts[0] += 1
            self._counts[2] += 1
        else:
            # The refusal that begins watching is left out of what the fleet
            # hears: every process would report one, and none of the
            # acceptances before it.
            self._watch = Answers(now)
            self._refusal_run = None
            self._reset_counts([0, 0, 0, 0])
            self._watching = True
        self._watch.refused(1, now)
        self._last_trouble = now
        run, since = self._refusal_run or (0, now)
        self._refusal_run = (run + 1, since)
        down = not self._accepted_lately(now) and not self._watch.any_accepted()
        if down and self._shows_down(now):
            return _Watched.DOWN
        if self._watch.shows_overload():
            return _Watched.OVERLOADED
        return _Watched.NOT_YET

    def _shows_down(self, now: int) -> bool:
        """Whether the refusals heard while watching, with nothing accepted
        lately, show the dependency down: under most-refused, three within
        three seconds; under evidence, DOWN_RUN in a row, or DOWN_REFUSALS
        in a row over DOWN_SPAN_NS."""
        if self.policy.overload_when == "most-refused":
            return self._watch.refusals() >= DOWN_REFUSALS
        run, since = self._refusal_run or (0, now)
        return run >= DOWN_RUN or (run >= DOWN_REFUSALS and now - since >= DOWN_SPAN_NS)

    def _tries_cuts(self, now: int) -> bool:
        """Whether the gate tries its cuts at ``now``: under evidence, on for a
        dependency it found down that has since accepted something, until a
        trial finds it failing a share at random, or the gate is slow; not
        while it recovers from an outage no chance explains (OUTAGE_RUN)."""
        rate = self._rate
        untried = self._untried_until is not None and now < self._untried_until
        return (self.policy.overload_when == "evidence" and not untried
                and rate.phase != "probing" and not rate.answering and not rate.slow)

    def _trial_holds(self, accepted: float, refused: float, sent: int, now: int) -> bool:
        """Hears, at ``now``, ``accepted`` and ``refused`` answers to an
        attempt sent at ``sent`` in the trial of the gate's last cut, if it
        tries its cuts; whether the trial holds the rate (a refusal then cuts
        nothing). A trial whose refusals kept their share over two cuts judges
        the dependency to answer, failing a share at random: refusals from
        then on cut only while most are refused, as under most-refused."""
        if not self._tries_cuts(now):
            return False
        if self._trials.answered(accepted, refused, sent) is Finding.RANDOM:
            self._rate.answering_verdict(self.policy, now)
            self._trials.reset()
            return False
        return self._trials.holds

    def _turn_on(self, signal: Signal, sent: int, now: int) -> None:
        """Turns the gate on at ``now`` for a dependency that accepts nothing:
        it probes at the lowest rate."""
        self._rate = _Rate(self.policy, now)
        self._trials.reset()
        self._outage_run = self._refusal_run[0] if self._refusal_run else 1
        self._refusal_run = None
        self._down_since = now
        self._untried_until = None
        # The rate is at its lowest already; this only notes whether the
        # dependency is slow.
        self._rate.overloaded(self.policy, sent, now, signal == Signal.TIMED_OUT)
        self._start_pacing(signal, now)

    def _start_pacing(self, signal: Signal, now: int) -> None:
        """Starts pacing at ``now``, at the rate set, after ``signal``."""
        self._pacer = _Pacer(self._draw(), now)
        self._last_trouble = now
        # The failure that turned it on is the first the daemon hears of.
        self._reset_counts([0, 0, 1, int(signal == Signal.TIMED_OUT)])
        self._watching = False
        self._on = True

    def _turn_off_if_quiet(self, now: int) -> bool:
        """Turns the gate off if nothing has been refused and nobody has
        waited for ``quiet``, and nobody waits now; whether it did."""
        off = max(now - self._last_trouble, 0) >= self.policy.quiet_ns and not self._line
        if off:
            self._on = False
        return off

    def _reset_counts(self, counts: list[int]) -> None:
        """Starts what the next tally tells over from ``counts`` (sent,
        accepted, overloaded, timed out), none shed."""
        self._counts = counts
        self._shed = [0, 0, 0]

    def _turn_expected(self, before: tuple[int, int], now: int) -> int:
        """When the turn of a call waiting behind those whose places are
        before ``before`` would come, at the present pace: the first in
        line's turn is due when its credit accrues, each after it one pace
        later. While the gate probes a dependency that has accepted
        nothing, its pace is a probe's, not what the dependency will take
        once back (the line then moves at once): the call's turn is
        expected no sooner than the next probe, whoever is ahead. A fleet's
        grant to a process that probes is its part of the fleet's probes, as
        much a probe's: a herd whose calls may wait a minute lost a tenth of
        them, shed, when those ahead counted at it."""
        own = self._rate.now
        self._pacer.accrue(own, now)
        ahead = 0 if self._rate.phase == "probing" else bisect.bisect_left(self._line, before)
        pace = self._pacer.pace(own)
        return self._pacer.due(own) + _nanos(ahead / pace)

    def _give_turn(self, now: int) -> bool:
        """Gives a turn if one has accrued by ``now``."""
        self._pacer.accrue(self._rate.now, now)
        given = self._pacer.take()
        self._counts[0] += int(given)
        return given

    def _wake_first(self) -> None:
        if self._line:
            waker = self._wakers[self._line[0]]
            self._wakers[self._line[0]] = None
            if waker is not None:
                waker()

