"""A fleet-scoped retry budget's floor in this process: the part of the
fleet's floor the daemon gave in its last answer to a report, or, while
reports cannot be delivered, the fallback :class:`LocalFloor` says. The part
arrives with the report's answer, off the call path: a call only reads the
floor its budget holds."""

import math
from collections.abc import Mapping

from .budget import LocalFloor, RetryBudget


class FleetFloor:
    """One dependency's floor, while its budget is fleet-scoped."""

    def __init__(self, configured: float) -> None:
        self.configured = configured
        self._local = LocalFloor(configured)
        self.applied = self._local.initial()
        self.answered_once = False

    @staticmethod
    def follow(previous: "FleetFloor | None", budget: RetryBudget | None) -> "FleetFloor | None":
        """The floor for ``budget``, following ``previous`` (the floor of the
        budget it replaces) while the configured floor is the same: a new
        policy version does not forget the daemon's last word. None unless
        ``budget`` is fleet-scoped."""
        if budget is None or budget.scope != "fleet":
            return None
        floor = previous
        if floor is None or floor.configured != budget.configured_floor:
            floor = FleetFloor(budget.configured_floor)
        budget.set_min_retries_per_second(floor.applied)
        return floor

    def answered(self, part: Mapping[str, object], budget: RetryBudget) -> None:
        """The daemon's answer gave ``part`` (``minRetriesPerSecond``,
        ``processes``); a part with a field missing, not a finite number, or
        a count that is not a whole number from 0 counts as no answer."""
        per_second, processes = part.get("minRetriesPerSecond"), part.get("processes")
        if isinstance(per_second, bool) or not isinstance(per_second, (int, float)) or not math.isfinite(per_second):
            return
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 0:
            return
        self.applied = self._local.answered(float(per_second), processes)
        self.answered_once = True
        budget.set_min_retries_per_second(self.applied)

    def unreachable(self, budget: RetryBudget) -> None:
        """A report could not be delivered."""
        self.applied = self._local.unreachable()
        budget.set_min_retries_per_second(self.applied)
