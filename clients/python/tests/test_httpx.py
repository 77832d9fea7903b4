"""The httpx transports, guarding real httpx clients against loopback
dependencies, under the policy the real daemon serves: what the Go
client's Transport tests check, in both flavours."""

import asyncio
import contextlib
import http.server
import threading

import pytest

from conftest import metric, needs_httpx, requests_sample
from stormguard_client import CallNotPermitted, Dependency, PolicyWatch, Reporter, Shed
from stormguard_client.aio import AsyncDependency
from test_dependency import NoCredit, Watch

httpx = needs_httpx()

POLICY = """\
defaults:
  maxRetries: 3
services:
  payments:
    maxRetries: 2
    initialDelay: 1ms
    maxDelay: 5ms
    jitter: none
    perTryTimeout: {per_try}
    retryOn: [5xx, timeout, connect-failure]
    circuitBreaker:
      enabled: {breaker}
      consecutiveFailures: 1
      openTimeout: 60s
"""


class Loopback(http.server.ThreadingHTTPServer):
    """A dependency on loopback whose every request is answered by
    ``behave(handler, number)`` (``number`` counts from 1); ``bodies`` holds
    each request's body, in order."""

    daemon_threads = True

    def __init__(self, behave):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behave = behave
        self.bodies = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server_port}"

    def __exit__(self, *raised):
        self.shutdown()
        super().__exit__(*raised)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = _read_chunked(self.rfile)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.bodies.append(body.decode())
            number = len(self.server.bodies)
        self.server.behave(self, number)

    do_GET = do_POST

    def log_message(self, *args):
        pass


def _read_chunked(stream):
    body = b""
    while True:
        size = int(stream.readline().split(b";")[0], 16)
        chunk = stream.read(size + 2)[:size]
        if size == 0:
            return body
        body += chunk


def answer(handler, status, body=b""):
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def loopback():
    """``start(behave)``: a Loopback, shut down after the test."""
    with contextlib.ExitStack() as servers:
        yield lambda behave: servers.enter_context(Loopback(behave))


@pytest.fixture
def payments(daemon):
    """``start(flavour, per_try="500ms", breaker="false")``: (the flavour's
    Dependency under POLICY, its Reporter, the daemon's URL)."""
    watches = []

    def start(flavour, per_try="500ms", breaker="false"):
        url, _, _ = daemon(policy=POLICY.format(per_try=per_try, breaker=breaker))
        watch = PolicyWatch(url, ["payments"], watch_wait=5)
        assert watch.start() == "daemon"
        watches.append(watch)
        reporter = Reporter(url, "pod-1", interval=3600, timeout=5)
        kind = Dependency if flavour == "sync" else AsyncDependency
        return kind(watch, "payments", reporter), reporter, url

    yield start
    for watch in watches:
        watch.stop()


def send(dependency, method, url, **options):
    """``method`` ``url`` through a client guarded by ``dependency``, in its
    flavour: (status, body) of the answer, read whole."""
    if isinstance(dependency, Dependency):
        with httpx.Client(transport=dependency.transport()) as client:
            response = client.request(method, url, **options)
            return response.status_code, response.text

    async def sent():
        async with httpx.AsyncClient(transport=dependency.transport()) as client:
            response = await client.request(method, url, **options)
            return response.status_code, response.text

    return asyncio.run(sent())


FLAVOURS = pytest.mark.parametrize("flavour", ["sync", "async"])


def stream(flavour):
    """A request body that can be read only once, in ``flavour``."""
    if flavour == "sync":
        return iter([b"order ", b"7"])

    async def chunks():
        yield b"order "
        yield b"7"

    return chunks()


@FLAVOURS
def test_a_streamed_body_is_sent_again_with_every_retry_and_the_last_answer_is_returned_whole(
        flavour, payments, loopback):
    dependency, reporter, url = payments(flavour)
    server = loopback(lambda handler, n: answer(handler, 503, f"still down ({n})".encode()))
    assert send(dependency, "POST", server.url + "/charge", content=stream(flavour)) == (503, "still down (3)")
    assert server.bodies == ["order 7"] * 3
    reporter.flush()
    assert metric(url, requests_sample("/charge", "payments", "server_error")) == 3, "reported under its path"


@FLAVOURS
def test_the_per_try_timeout_bounds_the_wait_for_headers_not_the_body(flavour, payments, loopback):
    dependency, _, _ = payments(flavour, per_try="1s")
    second = threading.Event()

    def behave(handler, n):
        if n == 1:
            # Held until the per-try timeout has given up on it.
            second.wait(timeout=30)
            return
        second.set()
        handler.send_response(200)
        handler.send_header("Content-Length", "14")
        handler.end_headers()
        handler.wfile.flush()
        threading.Event().wait(1.5)  # the body comes after the per-try timeout
        handler.wfile.write(b"late but whole")

    server = loopback(behave)
    assert send(dependency, "GET", server.url + "/slow") == (200, "late but whole")
    assert len(server.bodies) == 2


@FLAVOURS
def test_the_requests_timeout_bounds_the_call_and_a_call_without_an_answer_raises(flavour, payments, loopback):
    dependency, _, _ = payments(flavour, per_try="300ms")
    release = threading.Event()
    server = loopback(lambda handler, n: release.wait(timeout=30))
    try:
        with pytest.raises(httpx.TimeoutException):
            send(dependency, "GET", server.url + "/hang", timeout=0.5)
        bounded = len(server.bodies)
        assert bounded < 3, "maxRetries allows a third 0.3 s attempt, past the request's 0.5 s"
        with pytest.raises(httpx.TimeoutException):
            send(dependency, "GET", server.url + "/hang")  # httpx's default timeout, 5 s
        assert len(server.bodies) - bounded == 3, "each attempt cut at 0.3 s: all three"
    finally:
        release.set()


@FLAVOURS
def test_a_refused_connection_is_retried_as_a_connect_failure_and_raised(flavour, payments, reserved):
    dependency, reporter, url = payments(flavour)
    nobody = reserved()
    with pytest.raises(httpx.ConnectError):
        send(dependency, "GET", f"{nobody.url}/down")
    reporter.flush()
    assert metric(url, requests_sample("/down", "payments", "error")) == 3


@FLAVOURS
def test_an_answer_whose_retry_the_breaker_refuses_is_returned(flavour, payments, loopback):
    dependency, _, _ = payments(flavour, breaker="true")
    server = loopback(lambda handler, n: answer(handler, 500, b"broken"))
    assert send(dependency, "GET", server.url + "/charge") == (500, "broken")
    assert dependency.breaker.state == "open" and len(server.bodies) == 1
    with pytest.raises(CallNotPermitted):
        send(dependency, "GET", server.url + "/charge")
    assert len(server.bodies) == 1, "refused without a request"


@FLAVOURS
def test_a_retried_answer_that_asks_for_a_wait_turns_the_gate_on_whatever_its_status(flavour, loopback):
    retry_after = {1: None, 2: "soon", 3: "1"}

    def behave(handler, n):
        handler.send_response(500)
        if retry_after[n] is not None:
            handler.send_header("Retry-After", retry_after[n])
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    server = loopback(behave)
    kind = Dependency if flavour == "sync" else AsyncDependency
    dependency = kind(Watch(maxRetries=0, gate={"enabled": True, "overloadWhen": "any-refusal"}), "payments")
    assert send(dependency, "GET", server.url + "/charge") == (500, "")
    assert not dependency.gate.is_on, "a 500: an error the dependency answered with"
    assert send(dependency, "GET", server.url + "/charge") == (500, "")
    assert not dependency.gate.is_on, "a Retry-After that cannot be read asks for no wait"
    assert send(dependency, "GET", server.url + "/charge") == (500, "")
    assert dependency.gate.is_on, "a 500 that asks for a wait says the dependency is overloaded"


def test_a_cancelled_request_cancels_its_call(payments, loopback):
    dependency, reporter, _ = payments("async")
    arrived, release = threading.Event(), threading.Event()

    def behave(handler, n):
        arrived.set()
        release.wait(timeout=30)

    server = loopback(behave)

    async def scenario():
        async with httpx.AsyncClient(transport=dependency.transport()) as client:
            request = asyncio.create_task(client.get(server.url + "/charge"))
            while not arrived.is_set():
                await asyncio.sleep(0.01)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request

    try:
        asyncio.run(scenario())
    finally:
        release.set()
    assert len(server.bodies) == 1 and reporter._services["payments"].in_flight == 0
    assert "/charge" not in reporter._services["payments"].endpoints, "a cancelled attempt is no outcome"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_transports_class_is_its_requests_and_a_shed_request_raises_shed(flavour, loopback):
    server = loopback(lambda handler, number: answer(handler, 503 if number == 1 else 200, b"charged"))
    # Paced from the first 503 at 2 a second: its first turn half a second away.
    watch = Watch(maxRetries=0, gate={"enabled": True, "overloadWhen": "any-refusal", "minRate": 2.0})
    kind = Dependency if flavour == "sync" else AsyncDependency
    dependency = kind(watch, "payments", rng=NoCredit())

    def sent(criticality=None):
        if isinstance(dependency, Dependency):
            with httpx.Client(transport=dependency.transport(criticality=criticality)) as client:
                return client.get(server.url + "/charge").status_code

        async def sending():
            async with httpx.AsyncClient(transport=dependency.transport(criticality=criticality)) as client:
                return (await client.get(server.url + "/charge")).status_code

        return asyncio.run(sending())

    assert sent() == 503 and dependency.gate.is_on
    with pytest.raises(Shed) as shed:
        sent("sheddable")
    assert shed.value.criticality == "sheddable" and len(server.bodies) == 1, "a sheddable call waits 250 ms at most"
    assert sent("critical") == 200 and len(server.bodies) == 2, "a critical one waits for its turn"
    with pytest.raises(ValueError, match="criticality"):
        dependency.transport(criticality="low")
