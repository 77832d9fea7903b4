"""Lists of failure conditions, as the Rust library reads and decides them:
a policy's ``retryOn`` (the failures it retries) and its ``gate.overloadOn``
(which of those say the dependency is overloaded or down), both written
alike. ``5xx`` is every 5xx but 501 (no retry can fix Not Implemented),
``gateway-error`` is 502 to 504, a number from 400 to 599 is that status, and
``connect-failure``, ``timeout`` and ``reset`` are the failures without
one. A condition may be listed once.
"""

from collections.abc import Iterable, Iterator

FAILURES = ("connect-failure", "timeout", "reset")
LOWEST_STATUS, HIGHEST_STATUS = 400, 599
"""The statuses a list may name: errors, as the daemon's validation allows."""
OVERLOAD: tuple[str | int, ...] = ("connect-failure", "timeout", 429, 503)
"""``gate.overloadOn``'s default: the failures that say a service is
overloaded or down, by the conventions of HTTP (a refused connection, a
timeout, 429 Too Many Requests, 503 Service Unavailable). A 500 is an
error, not a sign of load."""


class RetryOn:
    """A list of conditions: a policy's ``retryOn``, or its
    ``gate.overloadOn``. ``key`` names the list in the ValueError raised for
    a condition this client does not know or one listed twice."""

    def __init__(self, conditions: Iterable[object], key: str = "retryOn") -> None:
        self._conditions = tuple(conditions)
        for i, condition in enumerate(self._conditions):
            if isinstance(condition, int) and not isinstance(condition, bool):
                if not LOWEST_STATUS <= condition <= HIGHEST_STATUS:
                    raise ValueError(f"{key}: status {condition} is not an error status; "
                                     f"retry only on {LOWEST_STATUS} to {HIGHEST_STATUS}")
            elif condition not in FAILURES and condition not in ("5xx", "gateway-error"):
                raise ValueError(f"{key}: {condition!r} is not a condition this client knows")
            if condition in self._conditions[:i]:
                raise ValueError(f"{key}: {condition!r} is listed twice")

    @classmethod
    def from_json(cls, conditions: object, key: str) -> "RetryOn":
        """The list a policy gives under ``key`` (its JSON value); raises
        ValueError naming ``key`` unless it is a list of known conditions,
        none twice."""
        if not isinstance(conditions, list):
            raise ValueError(f"{key} must be a list of conditions, not {conditions!r}")
        return cls(conditions, key)

    @classmethod
    def overload(cls) -> "RetryOn":
        """``gate.overloadOn``'s default (see :data:`OVERLOAD`)."""
        return cls(OVERLOAD, "gate.overloadOn")

    def covers_status(self, status: int) -> bool:
        """Whether a listed condition covers an answer with HTTP ``status``."""
        for condition in self._conditions:
            if condition == "5xx" and 500 <= status < 600 and status != 501:
                return True
            if condition == "gateway-error" and 502 <= status <= 504:
                return True
            if condition == status and isinstance(condition, int):
                return True
        return False

    def covers_failure(self, failure: str) -> bool:
        """Whether a listed condition covers a failure without a status (one of FAILURES)."""
        if failure not in FAILURES:
            raise ValueError(f"failure must be one of {', '.join(FAILURES)}, not {failure!r}")
        return failure in self._conditions

    def retries_status(self, status: int) -> bool:
        """Whether an answer with HTTP ``status`` is retried (the list read as ``retryOn``)."""
        return self.covers_status(status)

    def retries_failure(self, failure: str) -> bool:
        """Whether a failure without a status (one of FAILURES) is retried (the list read as ``retryOn``)."""
        return self.covers_failure(failure)

    def __contains__(self, condition: object) -> bool:
        """Whether ``condition`` itself is listed ("timeout", "5xx", 503, ...)."""
        return any(condition == listed and type(condition) is type(listed) for listed in self._conditions)

    def __iter__(self) -> Iterator[object]:
        """The conditions, in the order listed."""
        return iter(self._conditions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RetryOn) and list(self) == list(other)

    def __hash__(self) -> int:
        return hash(self._conditions)

    def __repr__(self) -> str:
        return f"RetryOn({list(self._conditions)!r})"
