"""Whether a run of failures in a row is one that chance explains: the rule
that keeps a closed breaker shut against a dependency that fails a share of
calls at random (a bad replica behind a balancer) and still opens it at once
for one that went down.

The run is weighed at the upper Wilson bound of the failure rate the window
held before it; nothing is excused unless the window holds as many calls
before the run as in it and a failure among them; a run of twice ``consecutiveFailures``
opens the breaker whatever the background. Only ``+ - * / sqrt`` are used,
each rounded once, so every client reaches the Rust library's verdict to the
last bit (the shared vectors check it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

RUN_BY_CHANCE = 1e-5
"""How likely, at most, a run of failures may be by chance before the breaker
believes it: one in 100,000 runs, at the upper 97.5 % bound of the failure
rate the window held before the run. A dependency failing 30 % of calls at
random fails five in a row about once in 600 calls, and a breaker that opened
on those would hold open a dependency that serves 70 % of calls."""

BOUND_Z = 1.96
"""The z-score of the upper bound the background rate is taken at: one-sided 97.5 %."""

_BOUND_Z_SQUARED = 3.8416
_AT_MOST_BY_CHANCE = 1.000000001e-5
"""RUN_BY_CHANCE and a billionth more: 0.1**5 in floating point is a hair above
1e-5, and counts as 1e-5."""


@dataclass(frozen=True)
class Run:
    """What a closed breaker knows when a run of failures reaches ``consecutiveFailures``."""

    length: int
    """Failures in a row, the latest call among them."""
    calls: int
    """The window's calls, the run among them."""
    failures: int
    """The window's failures, the run among them."""
    opens_at: int
    """``consecutiveFailures``: the run that opens the breaker when nothing excuses it."""
    threshold: float
    """``failureRateThreshold``: a background at or past it excuses nothing."""

    def by_chance(self) -> bool:
        """Whether chance explains the run, so the breaker stays closed."""
        if self.length >= 2 * self.opens_at:
            return False
        before = self.calls - self.length
        failures = self.failures - self.length
        if before < self.length or failures <= 0 or failures / before >= self.threshold:
            return False
        return _likely(_upper_bound(failures, before), self.length)


def _likely(rate: float, run: int) -> bool:
    """Whether ``run`` failures in a row at ``rate`` are more likely than
    RUN_BY_CHANCE, multiplied out one failure at a time."""
    chance = 1.0
    for _ in range(run):
        chance *= rate
        if chance <= _AT_MOST_BY_CHANCE:
            return False
    return True


def _upper_bound(failures: int, calls: int) -> float:
    """The upper end of the Wilson score interval for ``failures`` of ``calls``."""
    n = float(calls)
    p = failures / n
    z2 = _BOUND_Z_SQUARED
    spread = p * (1.0 - p) / n + z2 / (4.0 * n * n)
    centre = p + z2 / (2.0 * n)
    return (centre + BOUND_Z * math.sqrt(spread)) / (1.0 + z2 / n)
