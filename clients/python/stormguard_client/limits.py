"""The range of every policy setting as the daemon validates it, read from
the ``limits.json`` stormguard-core writes, so that the client refuses
exactly what the daemon refuses: a policy from a stale cache or an older
daemon is held to the same ranges as one the daemon serves now.
"""

import decimal
import json
import math
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = ["Range", "count", "duration", "number", "of", "RANGES"]


@dataclass(frozen=True)
class Range:
    """The range one setting must lie in: ``key`` as the daemon's messages
    name it; ``low`` and ``high`` counting ``unit`` (``count``, ``number``,
    or ``duration`` in nanoseconds); each end allowed or not."""
    key: str
    unit: str
    low: float
    low_allowed: bool
    high: float
    high_allowed: bool

    def admits(self, value: float) -> bool:
        """Whether ``value`` lies in the range (a NaN never does)."""
        above_low = value >= self.low if self.low_allowed else value > self.low
        below_high = value <= self.high if self.high_allowed else value < self.high
        return above_low and below_high

    def starting_at(self, low: float) -> "Range":
        """This range with its lower end at ``low``, allowed."""
        return replace(self, low=low, low_allowed=True)

    def check(self, value: float, show: Callable[[float], str] | None = None) -> None:
        """Raises ValueError, worded as the daemon words it ("must be
        between 0 and 100, found 101"), unless the range admits ``value``."""
        if self.admits(value):
            return
        show = show or _plain
        low, high = {
            (True, True): ("between", "and"),
            (True, False): ("at least", "and below"),
            (False, True): ("above", "and at most"),
            (False, False): ("above", "and below"),
        }[(self.low_allowed, self.high_allowed)]
        raise ValueError(f"{self.key} must be {low} {show(self.low)} {high} {show(self.high)}, found {show(value)}")

    def edges(self) -> list[tuple[float, bool]]:
        """The range's ends, the values just inside and just outside them,
        and whether each is allowed: the step is one for a count, a
        nanosecond for a duration and the next float for a number. What
        the client's tests try, so a check that differs from the daemon's
        at any end fails them."""
        def step(value: float, toward: float) -> float:
            if self.unit == "number":
                return math.nextafter(value, toward)
            return value + 1 if toward > value else value - 1

        return [
            (self.low, self.low_allowed),
            (step(self.low, -math.inf), False),
            (step(self.low, math.inf), True),
            (self.high, self.high_allowed),
            (step(self.high, math.inf), False),
            (step(self.high, -math.inf), True),
        ]


def _plain(value: float) -> str:
    """A number as the daemon shows it: 100, 0.5, 10000000, never with an
    exponent (5e-324 is 0.000…005)."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value):
        return str(int(value))
    return format(decimal.Decimal(repr(value)), "f")


def _read() -> tuple[Range, ...]:
    text = (pathlib.Path(__file__).parent / "limits.json").read_text()
    return tuple(
        Range(r["key"], r["unit"], r["low"], r["lowAllowed"], r["high"], r["highAllowed"])
        for r in json.loads(text)["limits"]
    )


RANGES = _read()
"""Every range, as stormguard-core lists them."""


def of(key: str, unit: str) -> Range:
    """The range of ``key`` whose values count ``unit``. Asking for one the
    file lacks is a bug in this client, which its tests catch."""
    for found in RANGES:
        if (found.key, found.unit) == (key, unit):
            return found
    raise LookupError(f"no {unit} limit for {key} in limits.json")


def count(key: str, value: int) -> None:
    """Raises ValueError naming ``key`` unless its count range admits ``value``."""
    of(key, "count").check(value)


def number(key: str, value: float) -> None:
    """Raises ValueError naming ``key`` unless its number range admits ``value``."""
    of(key, "number").check(value)


def duration(key: str, nanos: int) -> None:
    """Raises ValueError naming ``key`` unless its duration range admits
    ``nanos``, showing durations as a policy file writes them ("1h0m0s"),
    as the daemon does."""
    of(key, "duration").check(nanos, lambda v: go_duration(round(v)))


def go_duration(nanos: int) -> str:
    """``nanos`` nanoseconds written as a policy file (and Go) writes a
    duration: "0s", "250ms", "1.5s", "1h0m0s"; "us" for microseconds."""
    if nanos < 0:
        return "-" + go_duration(-nanos)
    if nanos == 0:
        return "0s"
    for per, unit in ((1, "ns"), (1_000, "us"), (1_000_000, "ms")):
        if nanos < per * 1_000:
            return _fraction(nanos, per, unit)
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    lead = f"{hours}h{minutes}m" if hours else (f"{minutes}m" if minutes else "")
    return lead + _fraction(rest, 1_000_000_000, "s")


def _fraction(nanos: int, per: int, unit: str) -> str:
    whole, part = divmod(nanos, per)
    if part == 0:
        return f"{whole}{unit}"
    digits = f"{part:0{len(str(per)) - 1}d}".rstrip("0")
    return f"{whole}.{digits}{unit}"
