"""The delay before each retry, as a pure function of the policy, the attempt
number, the previous delay and a random draw: the same law as stormguard's
Rust library, in whole nanoseconds, so a Python service backs off exactly as
a Rust one given the same draw.

The caller owns the attempt counter and the previous delay, and draws the
random 64 bits (``random.getrandbits(64)``, or a seeded ``random.Random``).
"""

from dataclasses import dataclass, field

U64_MAX = (1 << 64) - 1
JITTERS = ("none", "proportional", "full", "equal", "decorrelated")


def _saturating(value: int) -> int:
    return min(value, U64_MAX)


def _uniform(draw: int, low: int, high: int) -> int:
    """A draw from [low, high] by one 64x64-bit multiply (Lemire's method
    without its rejection step, as the Rust library draws)."""
    span = high - low + 1
    return low + ((draw * span) >> 64)


def _power(base: float, exponent: int) -> float:
    """base ** exponent by repeated squaring, in the order the Rust library
    multiplies, so that the floating-point result is the same bit for bit."""
    result = 1.0
    while exponent > 0:
        if exponent & 1:
            result *= base
        base *= base
        exponent >>= 1
    return result


def _exponential(initial: int, multiplier: float, attempt: int, cap: int) -> int:
    if initial == 0:
        return 0
    if attempt > 1024:
        raise ValueError("attempts past 1024 are not part of the shared law")
    grown = float(initial) * _power(multiplier, attempt)
    return int(grown) if grown < float(cap) else cap


def _spread(base: int, factor: float) -> int:
    fixed = int(min(max(factor, 0.0), 1.0) * 4294967296.0)
    return (base * fixed) >> 32


@dataclass(frozen=True)
class Backoff:
    """A policy's backoff settings, durations in nanoseconds."""

    initial_nanos: int
    max_nanos: int
    multiplier: float
    jitter: str
    jitter_factor: float = 0.0
    delays_nanos: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.jitter not in JITTERS:
            raise ValueError(f"jitter must be one of {', '.join(JITTERS)}, not {self.jitter!r}")
        for name in ("initial_nanos", "max_nanos"):
            value = getattr(self, name)
            if not 0 <= value <= U64_MAX:
                raise ValueError(f"{name} must be 0 to 2^64-1 nanoseconds, not {value}")

    def base(self, attempt: int) -> int:
        """The delay before retry ``attempt`` (0 = the first), before jitter."""
        if self.delays_nanos:
            base = self.delays_nanos[min(attempt, len(self.delays_nanos) - 1)]
        else:
            base = _exponential(self.initial_nanos, self.multiplier, attempt, self.max_nanos)
        return min(base, self.max_nanos)

    def delay(self, attempt: int, previous_nanos: int, draw: int) -> int:
        """The delay before retry ``attempt``, in nanoseconds, given the
        previous delay (0 before the first retry) and 64 random bits."""
        if not 0 <= draw <= U64_MAX:
            raise ValueError("draw must be 64 random bits")
        if self.jitter == "none":
            drawn = self.base(attempt)
        elif self.jitter == "full":
            drawn = _uniform(draw, 0, self.base(attempt))
        elif self.jitter == "equal":
            base = self.base(attempt)
            half = base // 2
            drawn = half + _uniform(draw, 0, base - half)
        elif self.jitter == "proportional":
            base = self.base(attempt)
            spread = _spread(base, self.jitter_factor)
            drawn = _uniform(draw, base - min(spread, base), _saturating(base + spread))
        else:
            high = _saturating(max(previous_nanos, self.initial_nanos) * 3)
            drawn = self.initial_nanos if high <= self.initial_nanos else _uniform(draw, self.initial_nanos, high - 1)
        return min(drawn, self.max_nanos)
