"""The retry budget (Finagle's, as in Linkerd and tower), the same as the
Rust library's: over a sliding window of ``ttl`` in ten steps, retries may be
at most ``retry_ratio`` of the requests plus ``min_retries_per_second * ttl``.
Times are nanoseconds on any clock that does not go back (``time.monotonic_ns``).

A fleet-scoped budget's ``min_retries_per_second`` is the whole fleet's: the
daemon divides it among the processes, and ``LocalFloor`` says which floor a
process applies, from the daemon's answers, with
``RetryBudget.set_min_retries_per_second``.
"""

import math
import threading

SLOTS = 10
SCOPES = ("process", "fleet")
MIN_TTL_NANOS = 10_000_000


class RetryBudget:
    """A budget shared by every call to one dependency."""

    def __init__(self, retry_ratio: float, min_retries_per_second: float, ttl_nanos: int, now_nanos: int = 0,
                 scope: str = "process") -> None:
        if retry_ratio < 0 or min_retries_per_second < 0 or ttl_nanos <= 0:
            raise ValueError("retry_ratio and min_retries_per_second must be 0 or more, ttl_nanos above 0")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        # Whose floor min_retries_per_second is: each process's, or the
        # fleet's (a reporter then sets this budget's part of it).
        self.scope = scope
        self.configured_floor = float(min_retries_per_second)
        ttl = max(ttl_nanos, MIN_TTL_NANOS)
        self._ratio = float(retry_ratio)
        self._reserve = float(min_retries_per_second) * (ttl / 1e9)
        self._ttl_seconds = ttl / 1e9
        self._slot_nanos = max(ttl // SLOTS, 1)
        self._start = now_nanos
        # Per slot: [step, requests] and [step, retries].
        self._requests = [[0, 0] for _ in range(SLOTS)]
        self._retries = [[0, 0] for _ in range(SLOTS)]
        self._lock = threading.Lock()
        self.denied = 0

    def deposit(self, now_nanos: int) -> None:
        """Counts a first attempt."""
        with self._lock:
            step = self._step(now_nanos)
            _add(self._requests[step % SLOTS], step)

    def try_retry(self, now_nanos: int) -> bool:
        """Takes one retry from the budget if it allows one; counts a refusal otherwise."""
        with self._lock:
            step = self._step(now_nanos)
            requests = sum(_live(slot, step) for slot in self._requests)
            retries = sum(_live(slot, step) for slot in self._retries)
            if retries < self._reserve + self._ratio * requests:
                _add(self._retries[step % SLOTS], step)
                return True
            self.denied += 1
            return False

    def allowed(self, now_nanos: int) -> float:
        """How many retries the window allows in all: the floor's share plus
        ``retry_ratio`` of the requests in the window."""
        with self._lock:
            step = self._step(now_nanos)
            return self._reserve + self._ratio * sum(_live(slot, step) for slot in self._requests)

    def set_min_retries_per_second(self, per_second: float) -> None:
        """Sets the retries always allowed per second: a fleet-scoped budget's
        part of the fleet's floor. Below 0 or not a number counts as 0."""
        per_second = per_second if per_second > 0 else 0.0
        with self._lock:
            self._reserve = float(per_second) * self._ttl_seconds

    def _step(self, now_nanos: int) -> int:
        return max(now_nanos - self._start, 0) // self._slot_nanos


def _add(slot: list[int], step: int) -> None:
    """Counts one at `step`; a count for an older step than the one held goes
    to the step held, as the Rust library's does."""
    if step > slot[0]:
        slot[0], slot[1] = step, 1
    else:
        slot[1] += 1


def _live(slot: list[int], step: int) -> int:
    return slot[1] if step - slot[0] < SLOTS else 0


class LocalFloor:
    """A process's floor under a fleet-scoped budget: the part the daemon last
    gave it, or, while the daemon cannot be reached, the configured floor
    divided by the fleet size it last heard (the whole floor if it never heard
    one). Never more than the configured floor."""

    def __init__(self, configured: float) -> None:
        self._configured = max(float(configured), 0.0)
        self._processes = 0

    def initial(self) -> float:
        """The floor before the daemon has answered: the whole configured one."""
        return self._configured

    def answered(self, per_second: float, processes: int) -> float:
        """Takes the daemon's answer (this process's part, the processes sharing
        the floor) and says the floor to apply."""
        self._processes = max(int(processes), 0)
        if math.isnan(per_second):
            return self.unreachable()
        return min(max(float(per_second), 0.0), self._configured)

    def unreachable(self) -> float:
        """The floor to apply while reports cannot be delivered."""
        return self._configured / max(self._processes, 1)
