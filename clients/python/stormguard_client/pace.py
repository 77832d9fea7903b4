"""Fleet pacing, the client's side, as the Rust library's reporter does it:
while a dependency's send gate is on, the reporter asks the daemon about
every 100 ms (``POST /v1/pace``) for this process's share of the rate the
whole fleet may send that dependency, and the gate paces at that share
for the grant's lease. A gate that only watches (under ``overloadWhen:
most-refused``, after a refusal from a dependency that has lately
accepted something) asks too, with what it heard (``"watching": true``):
the daemon judges from the whole fleet's answers whether the refusals are
a capacity's, and if so the grant says ``pace`` and the gate turns on
(:meth:`~stormguard_client.gate.SendGate.pace_by_fleet_at`). A daemon
that cannot be reached, or refuses, or answers what cannot be read,
changes nothing: the gate paces by its own rate once the last lease ends
(and a watching gate judges alone), so the process is no worse off than
without a daemon.

While a fleet-scoped breaker (``circuitBreaker.scope: fleet``) is open, the
same ask reports it (``"breaker"``, with ``"gateOff": true`` when the gate
does not ask), and the grant carries the fleet breaker's word: a trial
slot, or close (:meth:`~stormguard_client.breaker.CircuitBreaker.heard`).

An ask tells the calls shed and the demand by class (``"shed"``,
``"demand"``) only to a daemon whose last grant said it reads them
(``"classes": true``): one that predates classes refuses an ask with
fields it does not know, and an ask refused (a replica that predates
them, mid-rollout) leaves them out again until a grant says otherwise.

This module holds what an ask and a grant are; the asking itself runs on
the :class:`~stormguard_client.Reporter`'s pacing thread.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .breaker import CircuitState, Report, Verdict
from .gate import CRITICALITIES, Tally

ASK_EVERY = 0.1
"""Seconds between two rounds of asks until a grant says otherwise."""
ASK_TIMEOUT = 0.5
"""Seconds an ask may take: a grant later than that is stale."""
FASTEST = 0.02
"""The shortest interval between rounds a grant may set, in seconds."""
SLOWEST = 1.0
"""The longest interval between rounds a grant may set, in seconds."""
LONGEST_LEASE_NS = 60_000_000_000
"""The longest lease taken from a grant: a daemon that asks for more is
not trusted beyond a minute without asking again."""
_U64_MAX = (1 << 64) - 1


def ask_body(service: str, instance: str, tally: Tally | None, breaker: Report | None = None,
             classes: bool = False) -> bytes:
    """The JSON body of an ask for ``service`` by ``instance`` from a gate's
    ``tally`` (a :class:`~stormguard_client.gate.Tally`): what the gate saw
    since the last ask, and who waits now; ``"watching": true`` only while
    the gate watches (the daemon reads its absence as on, as from older
    clients). If the daemon reads classes (``classes``: its last grant said
    so; a daemon that predates them refuses an ask that carries them), by
    class name: ``"shed"``, the calls the gate shed since the last ask,
    only for classes that shed any (absent when none did), and
    ``"demand"``, the calls that asked for a turn plus those waiting, only
    while some are of a class other than ``default`` (the daemon reads its
    absence as all ``default``, so a process whose calls name no class asks
    as before). Without a tally (the gate does not ask, or there is none)
    the counts are 0 and ``"gateOff": true``; ``breaker`` is a
    fleet-scoped breaker's report, if it has one."""
    ask: dict[str, object] = {
        "service": service,
        "instance": instance,
        "sent": tally.sent if tally else 0,
        "accepted": tally.accepted if tally else 0,
        "overloaded": tally.overloaded if tally else 0,
        "timedOut": tally.timed_out if tally else 0,
        "waiting": tally.waiting if tally else 0,
    }
    if tally is not None and classes:
        shed = {name: count for name, count in zip(CRITICALITIES, tally.shed) if count > 0}
        if shed:
            ask["shed"] = shed
        critical, _, sheddable = tally.demand
        if critical > 0 or sheddable > 0:
            ask["demand"] = dict(zip(CRITICALITIES, tally.demand))
    if tally is not None and tally.watching:
        ask["watching"] = True
    if tally is None:
        ask["gateOff"] = True
    if breaker is not None:
        ask["breaker"] = {
            "open": breaker.open,
            "openForMs": breaker.open_for_ns // 1_000_000,
            "refused": breaker.refused,
            "trialsSucceeded": breaker.succeeded,
            "trialsFailed": breaker.failed,
        }
    return json.dumps(ask, separators=(",", ":")).encode()


def _millis(grant: Mapping[str, object], key: str) -> int:
    value = grant.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise ValueError(f"{key} must be a whole number of milliseconds, not {value!r}")
    return value


def _verdict(word: object) -> Verdict | None:
    """The fleet breaker's word in a grant, if there is one."""
    if word is None:
        return None
    if not isinstance(word, dict):
        raise ValueError(f"breaker must be an object, not {word!r}")
    state = word.get("state")
    if state not in ("closed", "half-open", "open"):
        raise ValueError(f"breaker.state must be closed, half-open or open, not {state!r}")
    trials = word.get("trials")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise ValueError(f"breaker.trials must be a whole number, not {trials!r}")
    return Verdict(CircuitState(state), trials, _millis(word, "retryInMs") * 1_000_000)


@dataclass(frozen=True)
class PaceGrant:
    """The daemon's answer to an ask: this process's share of the
    dependency's rate."""

    rate: float
    """Attempts per second the process may send the dependency."""
    lease_ms: int
    """How long the grant holds, in milliseconds; after it the gate paces
    by its own rate until the next grant."""
    ask_every_ms: int
    """How often to ask while the gate is on, in milliseconds."""
    pace: bool = False
    """Whether the daemon holds the fleet back (it judges the dependency
    down, overloaded or slow, and its refusals a capacity's, not a share
    failed at random): a watching gate turns on and paces at ``rate``.
    Absent from the answer (an older daemon): False."""
    breaker: Verdict | None = None
    """The fleet breaker's word, if the ask reported a fleet-scoped breaker."""
    classes: bool = False
    """Whether the daemon reads an ask's classes (``shed`` and ``demand``):
    the next ask carries them only if so, as a daemon that predates them
    refuses an ask with fields it does not know. Absent from the answer (an
    older daemon): False."""

    @classmethod
    def from_json(cls, text: str | bytes) -> "PaceGrant":
        """The grant in a 2xx answer's body (bytes or str). Raises ValueError
        when it is not a grant: not JSON, a field missing or of the wrong
        type (fields it does not know are left alone, for later daemons;
        ``pace`` and ``classes`` may be absent)."""
        grant = json.loads(text)
        if not isinstance(grant, dict):
            raise ValueError(f"a grant is a JSON object, not {grant!r}")
        rate = grant.get("rate")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise ValueError(f"rate must be a number, not {rate!r}")
        try:
            rate = float(rate)
        except OverflowError as error:
            raise ValueError(f"rate {rate} is too large") from error
        pace = grant.get("pace", False)
        if not isinstance(pace, bool):
            raise ValueError(f"pace must be true or false, not {pace!r}")
        classes = grant.get("classes", False)
        if not isinstance(classes, bool):
            raise ValueError(f"classes must be true or false, not {classes!r}")
        return cls(rate, _millis(grant, "leaseMs"), _millis(grant, "askEveryMs"), pace,
                   _verdict(grant.get("breaker")), classes)

    @property
    def lease_ns(self) -> int:
        """The lease in nanoseconds, at most :data:`LONGEST_LEASE_NS`."""
        return min(self.lease_ms * 1_000_000, LONGEST_LEASE_NS)

    @property
    def ask_every(self) -> float:
        """Seconds until the next round of asks, within :data:`FASTEST` and
        :data:`SLOWEST`, whatever the daemon says."""
        return min(max(self.ask_every_ms / 1000, FASTEST), SLOWEST)

