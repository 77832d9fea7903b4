"""Plans: the decisions of a call (:mod:`stormguard_client.calls`) or of a
policy watch (:mod:`stormguard_client.watching`) written once, with no I/O,
as generators that yield the steps to take (send an attempt, back off, wait
in a send gate's line, fetch the policies, pause) and are sent what came of
each. The blocking flavour and the asyncio flavour are thin drivers of the
same plans: each performs a step its own way and hands the result back
through a :class:`Run`, so that what to do next is decided in one place.
"""

from collections.abc import Awaitable, Callable, Generator
from typing import Generic, TypeVar

S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")


class Run(Generic[S, R, T]):
    """One plan being driven. :attr:`step` is what to do now; hand back what
    came of it with :meth:`answer`, or the exception that doing it raised (a
    cancellation, an interrupt) with :meth:`fail`, which lets the plan clean
    up (give back a breaker permit, leave a gate's line) before the
    exception goes on. Once the plan is over, :attr:`done` is true and
    :attr:`result` holds what it returned; what it raised instead is raised
    by the call (the constructor, ``answer`` or ``fail``) that ended it."""

    _step: S
    _result: T

    def __init__(self, plan: Generator[S, R, T]) -> None:
        self._plan = plan
        self.done = False
        self._advance(lambda: next(plan))

    @property
    def step(self) -> S:
        """The step the plan waits on."""
        if self.done:
            raise RuntimeError("the plan is over: it has no step")
        return self._step

    @property
    def result(self) -> T:
        """What the plan returned."""
        if not self.done:
            raise RuntimeError("the plan is not over yet")
        return self._result

    def answer(self, reply: R) -> None:
        """Hands the plan what came of its step."""
        self._advance(lambda: self._plan.send(reply))

    def fail(self, error: BaseException) -> None:
        """Hands the plan the exception its step raised; the plan raises it
        again once it has cleaned up."""
        self._advance(lambda: self._plan.throw(error))

    def perform(self, perform: Callable[[S], R]) -> None:
        """Performs the step with ``perform``, blocking, and hands the plan
        what came of it, or what it raised."""
        try:
            reply = perform(self.step)
        except BaseException as raised:  # noqa: BLE001 - the plan cleans up, then raises it again
            return self.fail(raised)
        self.answer(reply)

    async def perform_async(self, perform: Callable[[S], Awaitable[R]]) -> None:
        """Performs the step with the coroutine ``perform`` makes, and hands
        the plan what came of it, or what it raised (a cancellation too)."""
        try:
            reply = await perform(self.step)
        except BaseException as raised:  # noqa: BLE001 - the plan cleans up, then raises it again
            return self.fail(raised)
        self.answer(reply)

    def _advance(self, resume: Callable[[], S]) -> None:
        try:
            self._step = resume()
        except StopIteration as over:
            self.done = True
            self._result = over.value
