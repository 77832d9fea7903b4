"""What a dependency answered over the last three seconds, counted by the
tenth of a second, the same as the Rust library's: the attempts it accepted
and those it refused. From these the send gate's rate reads what the
dependency delivers (BBR's delivery rate), and, under ``gate.overloadWhen:
most-refused``, whether its refusals say overload: only once they outnumber
acceptances by more than chance would, as Google's client-side throttling
(SRE book, "Handling Overload") holds nothing back until requests exceed
K = 2 times the accepts. A dependency that fails a share at random (a bad
replica behind a balancer, a flaky disk) up to a half is then never taken
for overloaded.

Times are nanoseconds on any clock that does not go back
(``time.monotonic_ns``).
"""

import math

# Tenths kept: three seconds, the longest a timeout's cut looks back.
TENTH_NANOS = 100_000_000
TENTHS = 30
# Standard deviations by which refusals must go beyond a random share, over a
# second, for the gate (the K = 2 test, its refusals while judged to answer,
# its trials): it tests again at every answer, scores of times a second, and at
# three a dependency failing half at random seemed overloaded to one of ten
# processes of 100 calls a second every few seconds, each time pacing its
# calls into a backlog.
BEYOND_CHANCE = 4.0
U32_MAX = (1 << 32) - 1


class _Counts:
    """Counts per tenth of a second over the last three seconds, in tenths
    counted from ``origin``."""

    __slots__ = ("tenths", "current", "origin")

    def __init__(self, now: int) -> None:
        # The count per tenth, the current tenth at `current % TENTHS`.
        self.tenths = [0] * TENTHS
        self.current = 0
        self.origin = now

    def copy(self) -> "_Counts":
        """These counts, apart from this one."""
        counts = _Counts(self.origin)
        counts.tenths = list(self.tenths)
        counts.current = self.current
        return counts

    def roll(self, now: int) -> None:
        """Moves to the tenth holding ``now``, emptying those that have passed."""
        tenth = max(now - self.origin, 0) // TENTH_NANOS
        passed = min(max(tenth - self.current, 0), TENTHS)
        for i in range(1, passed + 1):
            self.tenths[(self.current + i) % TENTHS] = 0
        self.current = max(self.current, tenth)

    def add(self, count: int, now: int) -> None:
        """Counts ``count`` at ``now``."""
        self.roll(now)
        slot = self.current % TENTHS
        self.tenths[slot] = min(self.tenths[slot] + count, U32_MAX)

    def second_ending(self, back: int) -> float:
        """The count over the second that ended ``back`` tenths ago."""
        return float(sum(self.tenths[(self.current + TENTHS - i) % TENTHS] for i in range(back, back + 10)))

    def peak(self) -> float:
        """The most counted in any second of the last three."""
        return max([0.0] + [self.second_ending(back) for back in range(TENTHS - 10 + 1)])

    def is_empty(self) -> bool:
        """Whether nothing was counted in the last three seconds."""
        return not any(self.tenths)


class Answers:
    """Attempts accepted and refused over the last three seconds; nothing
    counted yet at ``now``."""

    __slots__ = ("_accepted", "_refused")

    def __init__(self, now: int) -> None:
        self._accepted = _Counts(now)
        self._refused = _Counts(now)

    def copy(self) -> "Answers":
        """These answers, counted on apart from these (the Rust library's
        are copied by value)."""
        answers = Answers(self._accepted.origin)
        answers._accepted = self._accepted.copy()
        answers._refused = self._refused.copy()
        return answers

    def roll(self, now: int) -> None:
        """Moves to ``now``, forgetting what is older than three seconds."""
        self._accepted.roll(now)
        self._refused.roll(now)

    def accepted(self, count: int, now: int) -> None:
        """Counts ``count`` attempts accepted at ``now``."""
        self._accepted.add(count, now)
        self._refused.roll(now)

    def refused(self, count: int, now: int) -> None:
        """Counts ``count`` attempts refused at ``now``."""
        self._refused.add(count, now)
        self._accepted.roll(now)

    def delivered(self) -> float:
        """Accepted over the last second, per second: what the dependency
        delivers."""
        return self._accepted.second_ending(0)

    def peak(self) -> float:
        """The most accepted in any second of the last three (BBR's windowed
        maximum of the delivery rate)."""
        return self._accepted.peak()

    def refusals(self) -> float:
        """Refusals counted over the last three seconds."""
        return float(sum(self._refused.tenths))

    def any_accepted(self) -> bool:
        """Whether anything was accepted in the last three seconds."""
        return not self._accepted.is_empty()

    def refused_share_last_second(self) -> float:
        """Of the answers over the last second, the share refused; 0 with
        none."""
        accepted, refused = self._accepted.second_ending(0), self._refused.second_ending(0)
        return 0.0 if accepted + refused == 0 else refused / (accepted + refused)

    def shows_overload(self) -> bool:
        """Whether, over the last second, refusals outnumbered acceptances by
        more than chance would: fewer than half accepted, as Google's K = 2."""
        accepted, refused = self._accepted.second_ending(0), self._refused.second_ending(0)
        return refused - accepted > BEYOND_CHANCE * math.sqrt(refused + accepted)
