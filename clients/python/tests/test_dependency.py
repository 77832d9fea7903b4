"""Calls to a dependency under the policy the real daemon serves, reported
back to it."""

import http.server
import threading
import urllib.error
import urllib.request

import pytest

from conftest import eventually, free_port, metric, requests_sample
from stormguard_client import CallNotPermitted, Dependency, PolicyWatch, Reporter
from stormguard_client.dependency import failure_of

POLICY = """\
defaults:
  maxRetries: 3
services:
  payments:
    maxRetries: {retries}
    initialDelay: 1ms
    maxDelay: 5ms
    perTryTimeout: 2s
    retryOn: [5xx, connect-failure]
    circuitBreaker:
      enabled: {breaker}
      consecutiveFailures: 3
      openTimeout: 60s
"""


class Flaky:
    """A dependency that answers ``failures`` 503s, then 200s; ``failures``
    may be changed, ``hits`` counts requests."""

    def __init__(self, failures):
        self.failures = failures
        self.hits = 0
        flaky = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                flaky.hits += 1
                status = 503 if flaky.failures > 0 else 200
                flaky.failures -= 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def flaky():
    made = []

    def make(failures):
        made.append(Flaky(failures))
        return made[-1]

    yield make
    for f in made:
        f.server.shutdown()
        f.server.server_close()


def get(url, timeouts=None):
    """An attempt: GET ``url``, the status it answers."""
    def attempt(timeout):
        if timeouts is not None:
            timeouts.append(timeout)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            with error:
                return error.code
    return attempt


@pytest.fixture
def payments(daemon):
    """``start(retries, breaker)``: (daemon url, policy file, Dependency, Reporter)."""
    stopping = []

    def start(retries=2, breaker="false"):
        url, policy, _ = daemon(policy=POLICY.format(retries=retries, breaker=breaker))
        watch = PolicyWatch(url, ["payments"], watch_wait=5, min_poll_interval=0.05)
        assert watch.start() == "daemon"
        reporter = Reporter(url, "pod-1", interval=3600, timeout=5)
        stopping.append(watch)
        return url, policy, Dependency(watch, "payments", reporter), reporter

    yield start
    for watch in stopping:
        watch.stop()


def test_retries_follow_the_policy_and_reach_the_daemon(payments, flaky):
    url, _, dependency, reporter = payments(retries=2)
    server = flaky(2)
    timeouts = []
    assert dependency.call("/charge", get(server.url + "/charge", timeouts)) == 200
    assert server.hits == 3 and timeouts == [2.0, 2.0, 2.0], "two retries, each with perTryTimeout"
    server.failures = 5
    assert dependency.call("/charge", get(server.url + "/charge")) == 503, "out of retries: the last status"
    assert server.hits == 6
    reporter.flush()
    assert metric(url, requests_sample("/charge", "payments", "server_error")) == 5
    assert metric(url, requests_sample("/charge", "payments", "success")) == 1
    for attempt in (1, 2):
        sample = f'http_client_retry_attempts_total{{attempt="{attempt}",endpoint="/charge",service="payments"}}'
        assert metric(url, sample) == 2


def test_a_status_or_failure_retry_on_does_not_name_is_not_retried(payments, flaky):
    url, _, dependency, reporter = payments(retries=2)
    calls = []

    def teapot(timeout):
        calls.append(timeout)
        return 418

    assert dependency.call("/brew", teapot) == 418 and len(calls) == 1

    def reset(timeout):
        calls.append(timeout)
        raise ConnectionResetError("reset by peer")

    with pytest.raises(ConnectionResetError):
        dependency.call("/brew", reset)
    assert len(calls) == 2, "reset is not in retryOn"
    refused = get(f"http://127.0.0.1:{free_port()}/x")
    with pytest.raises(urllib.error.URLError) as raised:
        dependency.call("/down", refused)
    assert failure_of(raised.value) == "connect-failure"
    reporter.flush()
    assert metric(url, requests_sample("/brew", "payments", "success")) == 1
    assert metric(url, requests_sample("/brew", "payments", "error")) == 1
    assert metric(url, requests_sample("/down", "payments", "error")) == 3, "connect-failure is retried"


def test_the_breaker_opens_after_consecutive_failures_and_refuses_without_calling(payments, flaky):
    url, _, dependency, reporter = payments(retries=2, breaker="true")
    server = flaky(100)
    assert dependency.call("/charge", get(server.url + "/charge")) == 503
    assert server.hits == 3 and dependency.breaker.state == "open"
    with pytest.raises(CallNotPermitted) as refused:
        dependency.call("/charge", get(server.url + "/charge"))
    assert refused.value.state == "open" and 0 < refused.value.retry_in_ns <= 60 * 10**9
    assert server.hits == 3, "refused without a call"
    reporter.flush()
    assert metric(url, 'circuit_breaker_state{service="payments"}') == 2


def test_a_new_policy_rebuilds_what_changed_and_keeps_what_did_not(payments, flaky):
    _, policy, dependency, _ = payments(retries=2, breaker="true")
    server = flaky(100)
    breaker, budget = dependency.breaker, dependency.budget
    assert breaker is not None and budget is not None
    dependency.call("/charge", get(server.url + "/charge"))
    assert breaker.state == "open"
    policy.write_text(POLICY.format(retries=0, breaker="true"))
    assert eventually(lambda: dependency.watch.policy("payments")["maxRetries"] == 0)
    assert dependency.breaker is breaker and dependency.budget is budget, "same blocks: the same state"
    policy.write_text(POLICY.format(retries=0, breaker="false"))
    assert eventually(lambda: dependency.breaker is None), "the breaker block changed"
    assert dependency.budget is budget
    server.failures = 100
    assert dependency.call("/charge", get(server.url + "/charge")) == 503
    assert server.hits == 4, "maxRetries 0: one attempt"


def test_failures_are_named_as_retry_on_names_them():
    assert failure_of(ConnectionRefusedError()) == "connect-failure"
    assert failure_of(TimeoutError()) == "timeout"
    assert failure_of(urllib.error.URLError(TimeoutError("timed out"))) == "timeout"
    assert failure_of(ConnectionResetError()) == "reset"
    assert failure_of(OSError("broken pipe")) == "reset"
    assert failure_of(ValueError()) is None
