"""Trials: whether a process's refusals are a capacity's or a share failed at
random, told by what the send gate's cuts do to them, as the Rust library's
``gate::trial`` decides.

A capacity refuses what is sent past it: cut to what it delivered, its
refusals vanish. A dependency failing a share at random refuses that share at
any rate. A trial counts the answers to attempts sent since a cut; refusals
that keep their share over two cuts in a row are taken for failure at random
(the first cut after a capacity falls may still be past it)."""

import enum
import math
from dataclasses import dataclass

from .answers import BEYOND_CHANCE

# Refusals a trial expects, at the share before its cut, before it judges.
EVIDENCE = 10.0
# However high the share, a trial counts at least this many answers.
LEAST_ANSWERS = 20.0
# Standard deviations below the refusals the share before the cut expects,
# for them to have vanished.
FEWER_THAN_CHANCE = 2.0
# Trials in a row whose refusals kept their share, to judge failure at random.
IN_A_ROW = 2


class Finding(enum.Enum):
    """What a trial's answers say, once they say something."""

    CAPACITY = "capacity"
    """The refusals went beyond their share before the cut, or vanished."""
    KEPT = "kept"
    """The refusals kept their share: the next cut begins the next trial."""
    RANDOM = "random"
    """They kept it over IN_A_ROW trials: the dependency fails at random."""


def beyond_random(accepted: float, refused: float, share: float) -> bool:
    """Whether ``refused`` of ``accepted + refused`` answers are more than a
    dependency failing ``share`` of its requests at random would refuse, by
    BEYOND_CHANCE standard deviations of the binomial count."""
    answered = accepted + refused
    expected = share * answered
    spread = math.sqrt(answered * share * (1.0 - share))
    return refused - expected > BEYOND_CHANCE * spread


@dataclass
class _Trial:
    since: int
    share_before: float
    accepted: float = 0.0
    refused: float = 0.0


class Trials:
    """The trials of one gate's cuts."""

    def __init__(self) -> None:
        self._current: _Trial | None = None
        self._kept = 0

    def cut(self, share_before: float, now: int) -> None:
        """The rate was cut at ``now``, after ``share_before`` of the answers
        over the last second were refused: a trial begins unless one is under
        way."""
        if self._current is None and share_before > 0.0:
            self._current = _Trial(now, share_before)

    @property
    def holds(self) -> bool:
        """Whether a trial holds the rate: a refusal cuts nothing."""
        return self._current is not None

    def reset(self) -> None:
        """Forgets every trial."""
        self._current = None
        self._kept = 0

    def answered(self, accepted: float, refused: float, sent: int) -> Finding | None:
        """Counts ``accepted`` and ``refused`` answers to an attempt sent at
        ``sent``; what the trial under way found, once it has found it."""
        trial = self._current
        if trial is None or sent < trial.since:
            return None
        trial.accepted += accepted
        trial.refused += refused
        if beyond_random(trial.accepted, trial.refused, trial.share_before):
            self.reset()
            return Finding.CAPACITY
        answered = trial.accepted + trial.refused
        expected = answered * trial.share_before
        if expected < EVIDENCE or answered < LEAST_ANSWERS:
            return None
        self._current = None
        spread = math.sqrt(expected * (1.0 - trial.share_before))
        kept = expected - trial.refused <= FEWER_THAN_CHANCE * spread
        most = trial.refused - trial.accepted > 2.0 * math.sqrt(answered)
        if not kept or most:
            self.reset()
            return Finding.CAPACITY
        self._kept += 1
        if self._kept < IN_A_ROW:
            return Finding.KEPT
        self.reset()
        return Finding.RANDOM
