"""Which failures a policy retries, from its served ``retryOn`` list, as the
Rust library decides: ``5xx`` is every 5xx but 501 (no retry can fix Not
Implemented), ``gateway-error`` is 502 to 504, a number is that status, and
``connect-failure``, ``timeout`` and ``reset`` are the failures without one.
"""

from collections.abc import Iterable

FAILURES = ("connect-failure", "timeout", "reset")


class RetryOn:
    """A policy's ``retryOn``."""

    def __init__(self, conditions: Iterable[object]) -> None:
        self._conditions = list(conditions)
        for condition in self._conditions:
            valid = condition in FAILURES or condition in ("5xx", "gateway-error") or (
                isinstance(condition, int) and not isinstance(condition, bool) and 100 <= condition <= 599)
            if not valid:
                raise ValueError(f"retryOn: {condition!r} is not a condition this client knows")

    def retries_status(self, status: int) -> bool:
        """Whether an answer with HTTP ``status`` is retried."""
        for condition in self._conditions:
            if condition == "5xx" and 500 <= status < 600 and status != 501:
                return True
            if condition == "gateway-error" and 502 <= status <= 504:
                return True
            if condition == status and isinstance(condition, int):
                return True
        return False

    def retries_failure(self, failure: str) -> bool:
        """Whether a failure without a status (one of FAILURES) is retried."""
        if failure not in FAILURES:
            raise ValueError(f"failure must be one of {', '.join(FAILURES)}, not {failure!r}")
        return failure in self._conditions
