"""Guarding an ``httpx`` client in one line, as the Go client guards an
``*http.Client`` with ``Dependency.Transport``::

    client = httpx.AsyncClient(transport=payments.transport())  # an AsyncDependency
    client = httpx.Client(transport=payments.transport())       # a Dependency

(:class:`AsyncGuardedTransport` and :class:`GuardedTransport`, after
httpx's ``AsyncHTTPTransport`` and ``HTTPTransport``.) Needs the ``httpx``
extra: ``pip install 'stormguard-client[httpx]'``.

- Each request is one call: attempts, retries, backoff, budget, breaker and
  send gate as the dependency's ``call`` runs them, reported under the
  request's URL path as the endpoint.
- The request's timeout (httpx's ``timeout=``, carried in its
  ``timeout`` extension) bounds the call as a whole, retries, backoff and
  waits in the gate's line included: it ends once the longest of the
  timeouts set has passed, as the Go client's context deadline does (httpx
  has no total timeout of its own). Each attempt's socket operations keep
  the request's timeouts.
- The per-try timeout bounds the wait for the response's headers, not its
  body: a transport returns once the headers are in, and the caller reads
  the body after, under the request's own timeouts. The asyncio flavour
  cuts an attempt short when it passes; the blocking one, which cannot,
  bounds each socket operation until the headers are in (see
  :class:`GuardedTransport`). An attempt cut short is httpx's
  ``ReadTimeout`` to the caller, as plain httpx would raise it.
- The answer is the last attempt's response, whatever its status, as a
  plain transport gives it: a 503 retried until the policy stopped is
  returned as the 503, and so is an answer whose retry the breaker refused
  or the gate had no turn for. A call with no answer raises what ended it:
  the last attempt's httpx exception, CallNotPermitted, Shed or NoTurn.
- A transport's requests are calls of its ``criticality`` (``critical``,
  ``default`` or ``sheddable``), if it was given one: routes that matter
  more, or less, than the dependency's other calls get a client of their
  own (``payments.transport(criticality="sheddable")``). Otherwise the
  dependency's class, else the policy's ``gate.criticality``.
- A request body is read once, before the first attempt (a stream
  included), so that every attempt sends it whole; a retried attempt's
  response is drained (up to 64 KiB) and closed, so that its connection
  can carry the next attempt.
- An answer's ``Retry-After`` (delay-seconds or an HTTP date, as the Rust
  library reads it) tells the send gate that a failure the policy retries
  says the dependency is overloaded, whatever its status (see
  ``gate.overloadOn``).
- httpx's network errors count as the failures ``retryOn`` names
  (:func:`failure_of`): a connection that could not be made is a
  ``connect-failure``, any of httpx's timeouts a ``timeout``, a connection
  broken or answered with garbage a ``reset``.
"""

import contextlib
import itertools
from collections.abc import Awaitable, Callable
from typing import Protocol

from .calls import FailureOf, Outcome, parse_retry_after
from .calls import failure_of as _network_failure
from .gate import Criticality, criticality_of

try:
    import httpx
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError("stormguard_client.httpx needs httpx: pip install 'stormguard-client[httpx]'",
                              name="httpx") from missing

__all__ = ["AsyncGuardedTransport", "GuardedTransport", "failure_of"]

DRAIN_LIMIT = 64 * 1024
"""How much of a retried attempt's body is read before it is closed."""
TIMEOUTS = ("connect", "read", "write", "pool")
# What ends reading a retired response's body early: its connection is
# closed with it.
_GONE = (httpx.HTTPError, httpx.StreamError)


def failure_of(error: Exception) -> str | None:
    """The retryOn failure an exception from an attempt stands for, httpx's
    included: "connect-failure" (``httpx.ConnectError``), "timeout" (any
    ``httpx.TimeoutException``), "reset" (``httpx.ReadError``,
    ``WriteError``, ``CloseError``, ``RemoteProtocolError``); else as
    :func:`stormguard_client.dependency.failure_of` judges it."""
    if isinstance(error, httpx.TimeoutException):
        return "timeout"
    if isinstance(error, httpx.ConnectError):
        return "connect-failure"
    if isinstance(error, (httpx.NetworkError, httpx.RemoteProtocolError)):
        return "reset"
    return _network_failure(error)


class _Exchange:
    """One request as one guarded call: what each attempt sends, and the
    last answer, kept for the caller."""

    def __init__(self, request: httpx.Request) -> None:
        self.request = request
        self.last: httpx.Response | None = None
        # The timeouts the attempt under way was sent with, and the request's own.
        self._sent_with: dict[str, float | None] = {}
        self._own: dict[str, float | None] = dict(request.extensions.get("timeout") or {})

    @property
    def endpoint(self) -> str:
        """What the call is reported under: the request's URL path."""
        return self.request.url.path

    @property
    def bound(self) -> float | None:
        """The seconds the whole call may take: the longest timeout the
        request sets, None if it sets none."""
        given = [self._own.get(kind) for kind in TIMEOUTS]
        finite = [float(seconds) for seconds in given if seconds is not None]
        return max(finite) if finite else None

    def attempt(self, cap: float | None = None) -> httpx.Request:
        """The request an attempt sends: the one given (its body read
        already), with timeouts of its own, each at most ``cap`` seconds
        until the response's headers are in (see :meth:`answered`)."""
        request = self.request
        self._sent_with = dict(self._own)
        if cap is not None:
            for kind in TIMEOUTS:
                given = self._own.get(kind)
                self._sent_with[kind] = cap if given is None else min(given, cap)
        return httpx.Request(request.method, request.url, headers=request.headers, stream=request.stream,
                             extensions={**request.extensions, "timeout": self._sent_with})

    def answered(self, response: httpx.Response) -> Outcome:
        """Keeps an attempt's response as the last: its status, and the wait
        its ``Retry-After`` asks for, for the plan. Its body is read under
        the request's own timeouts: httpx's transports read them from the
        request sent when the body is read, so they are put back in place
        (a transport that copied them keeps the cap, each read bounded as
        the headers were)."""
        for kind in TIMEOUTS:
            self._sent_with[kind] = self._own.get(kind)
        self.last = response
        retry_after = response.headers.get("Retry-After")
        return Outcome(status=response.status_code,
                       retry_after=parse_retry_after(retry_after) if retry_after is not None else None)

    def retire(self) -> httpx.Response | None:
        """The last response, no longer the answer: the next attempt's will be."""
        response, self.last = self.last, None
        return response

    def answer(self) -> httpx.Response:
        """The answer the caller gets when the call returned: the last response."""
        if self.last is None:
            raise RuntimeError("the call ended without an answer or an exception")
        return self.last

    def ended(self, error: Exception) -> httpx.Response:
        """The answer the caller gets when the call raised ``error``: the
        last response if an attempt was answered (the breaker refused its
        retry, or the gate had no turn for it), else ``error``, raised; an
        attempt the per-try timeout cut short is httpx's ReadTimeout."""
        if self.last is not None:
            return self.last
        if isinstance(error, TimeoutError):
            raise httpx.ReadTimeout("no response within the per-try timeout", request=self.request) from error
        raise error


class DependencyCalls(Protocol):
    """What a :class:`GuardedTransport` needs of its dependency: a call
    whose attempts answer with an Outcome, which also says whether the
    answer carried a ``Retry-After``. A :class:`~stormguard_client.Dependency`
    has it. Named here, not imported: the dependency makes its transport
    (:meth:`~stormguard_client.Dependency.transport`), so its module
    imports this one, and this one importing it back would close a circle."""

    def _call(self, endpoint: str, attempt: Callable[[float | None], Outcome], *, timeout: float | None,
              failure: FailureOf, criticality: Criticality | None = None) -> int:
        """A call to ``endpoint`` of class ``criticality`` (None: the
        dependency's): ``attempt(timeout)`` until it succeeds or the policy
        says stop; the last status, or the last exception raised."""
        ...


class AsyncDependencyCalls(Protocol):
    """:class:`DependencyCalls`, for an :class:`AsyncGuardedTransport`'s
    dependency (an :class:`~stormguard_client.aio.AsyncDependency`)."""

    async def _call(self, endpoint: str, attempt: Callable[[float | None], Awaitable[Outcome]], *,
                    timeout: float | None, failure: FailureOf, criticality: Criticality | None = None) -> int:
        """:meth:`DependencyCalls._call`, its attempts awaited."""
        ...


class GuardedTransport(httpx.BaseTransport):
    """Sends each request through ``inner`` (``httpx.HTTPTransport()`` by
    default) as one call to ``dependency`` (see the module's notes). A
    blocking attempt cannot be cut short: until its response's headers are
    in, each of its socket operations (connect, write, each read) is
    bounded by the per-try timeout, as httpx's own timeouts bound them.
    ``criticality``, if given, is the class of its requests' calls."""

    def __init__(self, dependency: DependencyCalls, inner: httpx.BaseTransport | None = None, *,
                 criticality: Criticality | None = None) -> None:
        self.dependency = dependency
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.criticality = None if criticality is None else criticality_of("criticality", criticality)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` under the dependency's policy: the last answer."""
        request.read()
        exchange = _Exchange(request)

        def attempt(timeout: float | None) -> Outcome:
            if (retried := exchange.retire()) is not None:
                _discard(retried)
            return exchange.answered(self.inner.handle_request(exchange.attempt(cap=timeout)))

        try:
            self.dependency._call(exchange.endpoint, attempt, timeout=exchange.bound, failure=failure_of,
                                  criticality=self.criticality)
        except Exception as error:  # noqa: BLE001 - the caller gets the last answer, or this
            return exchange.ended(error)
        except BaseException:
            if exchange.last is not None:
                exchange.last.close()
            raise
        return exchange.answer()

    def close(self) -> None:
        """Closes ``inner``."""
        self.inner.close()


class AsyncGuardedTransport(httpx.AsyncBaseTransport):
    """Sends each request through ``inner`` (``httpx.AsyncHTTPTransport()``
    by default) as one call to ``dependency`` (see the module's notes). An
    attempt that outlasts the per-try timeout is cancelled once it passes.
    A cancelled request cancels its call (see
    :meth:`~stormguard_client.aio.AsyncDependency.call`) and closes any
    response it had. ``criticality``, if given, is the class of its
    requests' calls."""

    def __init__(self, dependency: AsyncDependencyCalls, inner: httpx.AsyncBaseTransport | None = None, *,
                 criticality: Criticality | None = None) -> None:
        self.dependency = dependency
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.criticality = None if criticality is None else criticality_of("criticality", criticality)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` under the dependency's policy: the last answer."""
        await request.aread()
        exchange = _Exchange(request)

        async def attempt(timeout: float | None) -> Outcome:
            if (retried := exchange.retire()) is not None:
                await _discard_async(retried)
            # The call cuts the attempt short at ``timeout``, headers not in.
            return exchange.answered(await self.inner.handle_async_request(exchange.attempt()))

        try:
            await self.dependency._call(exchange.endpoint, attempt, timeout=exchange.bound, failure=failure_of,
                                        criticality=self.criticality)
        except Exception as error:  # noqa: BLE001 - the caller gets the last answer, or this
            return exchange.ended(error)
        except BaseException:
            if exchange.last is not None:
                await exchange.last.aclose()
            raise
        return exchange.answer()

    async def aclose(self) -> None:
        """Closes ``inner``."""
        await self.inner.aclose()


def _discard(response: httpx.Response) -> None:
    """Drains a little of a retried attempt's body, so that its connection
    can carry the next attempt, and closes it."""
    with contextlib.closing(response), contextlib.suppress(*_GONE):
        for total in itertools.accumulate(len(chunk) for chunk in response.iter_raw()):
            if total >= DRAIN_LIMIT:
                break


async def _discard_async(response: httpx.Response) -> None:
    """:func:`_discard`, for an asynchronous response."""
    async with contextlib.aclosing(response):
        with contextlib.suppress(*_GONE):
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= DRAIN_LIMIT:
                    return
