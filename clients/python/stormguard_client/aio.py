"""The asyncio flavour: :class:`AsyncPolicyWatch` and :class:`AsyncDependency`,
drivers of the very plans the blocking flavour drives (see
:mod:`stormguard_client.plans`), so a call or a watch decides exactly as
there; only how a step is performed differs. Guard an ``httpx.AsyncClient``
with :meth:`AsyncDependency.transport`::

    async with AsyncPolicyWatch(daemon_url, ["payments"]) as watch:
        payments = AsyncDependency(watch, "payments", reporter)
        async with httpx.AsyncClient(transport=payments.transport()) as client:
            response = await client.get(f"{payments_url}/charge")

The :class:`~stormguard_client.Reporter` is shared with the blocking
flavour, as it is: counting an attempt takes a lock for a few
microseconds and never does I/O, so it blocks no event loop, and it sends
from threads of its own. Its :meth:`~stormguard_client.Reporter.flush` and
:meth:`~stormguard_client.Reporter.stop` do send, and block: call them
with ``await asyncio.to_thread(reporter.stop)``.
"""

import asyncio
import random
import threading
import time
import types
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from .calls import Attempt, Clock, FailureOf, Outcome, Sleep, Step, answered, failure_of
from .gate import Criticality
from .guard import Guard, PolicySource
from .plans import Run
from .reports import Reporter
from .watching import BaseWatch, Fetch, Fetched, WatchPlan

if TYPE_CHECKING:
    import httpx

    from .httpx import AsyncGuardedTransport

__all__ = ["AsyncAttempt", "AsyncDependency", "AsyncPolicyWatch", "LoopWakeup"]

AsyncAttempt: TypeAlias = Callable[[float | None], Awaitable[int]]
"""An attempt: a coroutine function that sends one request within
``timeout`` seconds (None: no bound) and returns its HTTP status, or raises."""
_AsyncAttempt: TypeAlias = Callable[[float | None], Awaitable[int | Outcome]]
"""An attempt that may also say whether its answer carried a
``Retry-After`` (an Outcome): the httpx transport's."""
A = TypeVar("A")
T = TypeVar("T")
V = TypeVar("V")


class LoopWakeup:
    """What a call waiting in a gate's line on an event loop is woken with:
    the gate may call :meth:`set` from any thread (another thread's call,
    the reporter's pacing thread), so it hands the wake to the loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        """Set, on the loop, once woken."""

    def set(self) -> None:
        """Wakes the waiter; a wake after its loop closed is dropped."""
        try:
            self._loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:
            pass

    def clear(self) -> None:
        """Forgets an earlier wake (on the loop)."""
        self.event.clear()


async def wait_in_line(wakeup: LoopWakeup, seconds: float | None) -> None:
    """Waits until ``wakeup`` is set or ``seconds`` pass (None: without end)."""
    try:
        async with asyncio.timeout(seconds):
            await wakeup.event.wait()
    except TimeoutError:
        pass


class AsyncDependency(Guard):
    """Calls to ``service`` from coroutines, under the policy ``watch`` (an
    AsyncPolicyWatch, a PolicyWatch, or anything with ``policy(service)``)
    currently has for it, reported through ``reporter`` (a Reporter, or
    None): the plan of :class:`~stormguard_client.Dependency`'s calls, so
    its breaker, gate, budget and retries decide exactly as the blocking
    flavour's do. A call's attempts run as coroutines;
    between them it backs off with ``sleep(seconds)`` and waits in a send
    gate's line with ``wait(wakeup, seconds)`` (a :class:`LoopWakeup`; the
    turn may come sooner when it is set). ``clock`` (nanoseconds that never
    go back), ``rng`` and ``criticality`` (the class of calls that name
    none) as for the blocking flavour. Replace the first four together to
    run calls in virtual time."""

    def __init__(self, watch: PolicySource, service: str, reporter: Reporter | None = None, *,
                 clock: Clock = time.monotonic_ns, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                 wait: Callable[[LoopWakeup, float | None], Awaitable[object]] = wait_in_line,
                 rng: random.Random | None = None, criticality: Criticality | None = None) -> None:
        super().__init__(watch, service, reporter, clock, rng, criticality)
        self._sleep = sleep
        self._wait = wait

    async def call(self, endpoint: str, attempt: AsyncAttempt, *, timeout: float | None = None,
                   failure: FailureOf = failure_of, criticality: Criticality | None = None) -> int:
        """Awaits ``attempt(timeout)`` (``timeout`` in seconds, or None) until
        it succeeds or the policy says stop; returns the last HTTP status it
        returned, or raises the last exception it raised. Raises
        CallNotPermitted, without an attempt, when the breaker refuses;
        Shed, at once and without an attempt, when at the send gate's pace
        the attempt's turn would come after the call's wait bound (its
        class's ``gate.maxWait`` after it began) or its deadline; and
        NoTurn, without an attempt, when no turn comes while it waits in
        line before then (Shed is a NoTurn: ``except NoTurn`` catches
        both). ``timeout``, ``failure`` and ``criticality`` as for the
        blocking flavour's call.

        An attempt that runs past its ``timeout`` is cancelled, and counts
        as a timeout (it raised TimeoutError). A cancelled call cancels the
        attempt under way, gives back its breaker permit, leaves the gate's
        line, and raises CancelledError."""
        return await self._call(endpoint, attempt, timeout=timeout, failure=failure, criticality=criticality)

    async def _call(self, endpoint: str, attempt: _AsyncAttempt, *, timeout: float | None,
                    failure: FailureOf, criticality: Criticality | None = None) -> int:
        """:meth:`call`, its attempts answering with a status or an Outcome."""
        with self._calling(endpoint, LoopWakeup, failure, timeout, criticality) as run:
            while not run.done:
                await run.perform_async(lambda step: self._perform(step, attempt))
            return run.result

    def transport(self, inner: "httpx.AsyncBaseTransport | None" = None, *,
                  criticality: Criticality | None = None) -> "AsyncGuardedTransport":
        """An ``httpx`` transport that sends each request through ``inner``
        (``httpx.AsyncHTTPTransport()`` by default) as one call to this
        dependency, of class ``criticality`` if given (else the
        dependency's): ``httpx.AsyncClient(transport=payments.transport())``.
        Needs the ``httpx`` extra (see :mod:`stormguard_client.httpx`)."""
        # Imported when a transport is made, not with this module: httpx is an
        # optional extra, and the core must load without it.
        from .httpx import AsyncGuardedTransport

        return AsyncGuardedTransport(self, inner, criticality=criticality)

    async def _perform(self, step: Step[LoopWakeup], attempt: _AsyncAttempt) -> Outcome | None:
        if isinstance(step, Attempt):
            return await _attempted(attempt, step.timeout)
        if isinstance(step, Sleep):
            await self._sleep(step.seconds)
        else:
            await self._wait(step.wakeup, step.seconds)
        return None


async def _attempted(attempt: _AsyncAttempt, timeout: float | None) -> Outcome:
    """Awaits ``attempt(timeout)``, cancelled past ``timeout``: what came of
    it. A cancellation of the call is not an outcome: it goes on."""
    try:
        async with asyncio.timeout(timeout):
            return answered(await attempt(timeout))
    except Exception as error:  # noqa: BLE001 - the plan judges it, and raises it again
        return Outcome(error=error)


class AsyncPolicyWatch(BaseWatch):
    """The current policy of each dependency, kept up to date by a task on
    the running loop: ``async with AsyncPolicyWatch(...) as watch`` starts
    it (within ``startup_wait``, as :meth:`start`) and stops it on the way
    out. Settings as :class:`~stormguard_client.PolicyWatch`'s.

    The fetches are the blocking flavour's own request, each run in a
    daemon thread of its own that the loop awaits, rather than a second
    HTTP client: the core stays standard-library only, the daemon's TLS
    (its rotating CA and client certificate files) is handled by the same
    code, and one long-poll a minute needs no asynchronous socket. A
    cancelled or stopped watch stops awaiting at once; a long-poll under
    way then ends in its thread (when the daemon answers, or at its
    timeout), its answer dropped, and being a daemon thread it never holds
    up the program's exit nor the loop's shutdown."""

    _task: "asyncio.Task[None] | None" = None

    async def start(self) -> str:
        """Fetches within ``startup_wait`` (else the cache, else the
        defaults), then watches in a task. Returns where the policies came from."""
        if self._task is not None:
            raise RuntimeError("this watch was started already")
        await self._drive(self.starting())
        self._task = asyncio.get_running_loop().create_task(self._drive(self.watching()),
                                                            name="stormguard-policy-watch")
        return self.source

    async def stop(self) -> None:
        """Stops watching and waits for the task to end; an answer on its way is dropped."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # Waits without raising: what ended the task (its cancellation) is no error of the caller's.
        await asyncio.wait([task])

    async def __aenter__(self) -> "AsyncPolicyWatch":
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: types.TracebackType | None) -> None:
        await self.stop()

    async def _drive(self, plan: WatchPlan) -> None:
        """Drives ``plan`` until it is over or the task is cancelled."""
        run = Run(plan)
        while not run.done:
            step = run.step
            if isinstance(step, Fetch):
                answer: Fetched | None = await _in_daemon_thread(self.fetched, step)
            else:
                answer = None
                await asyncio.sleep(step.seconds)
            run.answer(answer)


async def _in_daemon_thread(function: Callable[[A], T], argument: A) -> T:
    """``function(argument)`` run in a daemon thread of its own, awaited.
    Cancelling the await leaves the thread to finish alone; what it returns
    then is dropped, even once the loop is closed."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            result = function(argument)
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            _hand_over(future, future.set_exception, error)
        else:
            _hand_over(future, future.set_result, result)

    threading.Thread(target=work, name="stormguard-policy-fetch", daemon=True).start()
    return await future


def _hand_over(future: "asyncio.Future[T]", settle: Callable[[V], None], value: V) -> None:
    """Settles ``future`` (with its ``settle``: set_result or set_exception)
    from another thread, unless it was cancelled meanwhile or its loop is
    closed."""
    def unless_cancelled() -> None:
        if not future.done():
            settle(value)

    try:
        future.get_loop().call_soon_threadsafe(unless_cancelled)
    except RuntimeError:
        pass  # the loop is closed: nobody awaits it
