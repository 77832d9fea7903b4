"""Calls to a dependency under the policy the real daemon serves, reported
back to it."""

import email.message
import http.server
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import eventually, metric, requests_sample
from stormguard_client import CallNotPermitted, Dependency, NoTurn, PolicyWatch, Reporter, Shed
from stormguard_client.calls import Outcome, _signal, parse_retry_after
from stormguard_client.dependency import failure_of
from stormguard_client.breaker import CircuitState, Verdict
from stormguard_client.gate import Asker, Signal, Tally
from stormguard_client.policies import DEFAULT_POLICY
from stormguard_client.retry_on import RetryOn

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
    """A dependency that answers ``failures`` times ``status`` (503: it is
    overloaded), then 200s; ``failures`` may be changed, ``hits`` counts
    requests."""

    def __init__(self, failures, status=503):
        self.failures = failures
        self.status = status
        self.hits = 0
        flaky = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                flaky.hits += 1
                status = flaky.status if flaky.failures > 0 else 200
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

    def make(failures, status=503):
        made.append(Flaky(failures, status))
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


def test_a_status_or_failure_retry_on_does_not_name_is_not_retried(payments, flaky, reserved):
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
    nobody = reserved()
    refused = get(f"{nobody.url}/x")
    with pytest.raises(urllib.error.URLError) as raised:
        dependency.call("/down", refused)
    assert failure_of(raised.value) == "connect-failure"
    reporter.flush()
    assert metric(url, requests_sample("/brew", "payments", "success")) == 1
    assert metric(url, requests_sample("/brew", "payments", "error")) == 1
    assert metric(url, requests_sample("/down", "payments", "error")) == 3, "connect-failure is retried"


def test_the_breaker_opens_after_consecutive_failures_and_refuses_without_calling(payments, flaky):
    url, _, dependency, reporter = payments(retries=2, breaker="true")
    server = flaky(100, status=500)  # an error, not an overload: a 503 would trip it half-open
    assert dependency.call("/charge", get(server.url + "/charge")) == 500
    assert server.hits == 3 and dependency.breaker.state == "open"
    with pytest.raises(CallNotPermitted) as refused:
        dependency.call("/charge", get(server.url + "/charge"))
    assert refused.value.state == "open" and 0 < refused.value.retry_in_ns <= 60 * 10**9
    assert server.hits == 3, "refused without a call"
    reporter.flush()
    assert metric(url, 'circuit_breaker_state{service="payments"}') == 2


def test_a_new_policy_rebuilds_what_changed_and_keeps_what_did_not(payments, flaky):
    _, policy, dependency, _ = payments(retries=2, breaker="true")
    server = flaky(100, status=500)
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
    assert dependency.call("/charge", get(server.url + "/charge")) == 500
    assert server.hits == 4, "maxRetries 0: one attempt"


CLASSED = """\
services:
  payments:
    maxRetries: 0
    gate:
      enabled: true
      overloadWhen: any-refusal
      criticality: sheddable
      maxWait: {critical: 3s}
"""


def test_the_daemons_classes_are_read_and_the_calls_shed_reach_it(daemon):
    url, _, _ = daemon(policy=CLASSED)
    watch = PolicyWatch(url, ["payments"], watch_wait=5, min_poll_interval=0.05)
    assert watch.start() == "daemon"
    assert watch.policy("payments")["gate"]["maxWait"] == {"criticalMs": 3000, "defaultMs": 1000, "sheddableMs": 250}
    reporter = Reporter(url, "pod-1", interval=3600, timeout=5).start()
    try:
        dependency = Dependency(watch, "payments", reporter, rng=NoCredit())
        policy = dependency.gate.policy
        assert policy.criticality == "sheddable" and policy.max_wait.critical_ns == 3 * S
        assert dependency.call("/charge", lambda timeout: 503) == 503
        assert dependency.gate.is_on, "its first turn 2 s away"
        # The calls' classes go to a daemon whose grant said it reads them.
        assert eventually(lambda: reporter.stats.pace_asks >= 1), "the first ask, without classes"
        for _ in range(2):
            with pytest.raises(Shed):
                dependency.call("/charge", lambda timeout: 200)
        shed = 'stormguard_fleet_shed_total{class="sheddable",service="payments"}'
        assert eventually(lambda: metric(url, shed) == 2), "the ask told the daemon of the calls shed"
        assert reporter.stats.pace_failures == 0, "the daemon took every ask, its classes included"
    finally:
        reporter.stop()
        watch.stop()


def test_failures_are_named_as_retry_on_names_them():
    assert failure_of(ConnectionRefusedError()) == "connect-failure"
    assert failure_of(TimeoutError()) == "timeout"
    assert failure_of(urllib.error.URLError(TimeoutError("timed out"))) == "timeout"
    assert failure_of(ConnectionResetError()) == "reset"
    assert failure_of(OSError("broken pipe")) == "reset"
    assert failure_of(ValueError()) is None


# --- the send gate ---------------------------------------------------------

S = 1_000_000_000


class Watch:
    """A watch that serves one policy, which a test may replace."""

    def __init__(self, **policy):
        self.current = {**DEFAULT_POLICY, **policy}

    def policy(self, service):
        return self.current


class VirtualTime:
    """A clock that moves only when a call waits: ``sleeps`` and ``waits``
    (in line) hold how long each wait was, in seconds."""

    while_waiting = None
    """Called once, if set, as a wait in line begins: what other calls do meanwhile."""

    def __init__(self):
        self.now = 0
        self.sleeps, self.waits = [], []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += round(seconds * S)

    def wait(self, event, seconds):
        if self.while_waiting is not None:
            self.while_waiting()
            self.while_waiting = None
        self.waits.append(seconds)
        self.now += round(seconds * S)
        return event.is_set()


class NoCredit(random.Random):
    """Random draws whose first credit for a gate is none: its first turn
    comes a whole interval (2 s at 0.5 a second) after it turns on."""

    def random(self):
        return 0.0


# A gate block whose calls of the default class may wait a minute for a turn
# (gate.maxWait), so that a test of the line is not cut short by the bound.
PATIENT = {"enabled": True, "overloadWhen": "any-refusal", "maxWait": {"defaultMs": 60_000}}


def gated(time_, **policy):
    """A Dependency in virtual time whose policy has the gate on, under
    ``overloadWhen: any-refusal``: one refusal turns it on. Its calls may
    wait a minute for a turn (:data:`PATIENT`) unless ``policy`` gives a
    gate block of its own."""
    policy = {"gate": PATIENT, "jitter": "none", **policy}
    return Dependency(Watch(**policy), "payments", clock=time_.clock, sleep=time_.sleep, wait=time_.wait,
                      rng=NoCredit())


def test_a_call_whose_turn_would_come_after_its_deadline_is_shed_at_once_taking_no_place():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0, maxElapsedMs=500)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    gate = dependency.gate
    assert gate.is_on and gate.rate == 0.5 and gate.credit == 0.0, "the 503 turned it on"
    sent = []
    with pytest.raises(Shed) as shed:
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    assert not sent, "the attempt was not sent"
    assert clock.waits == [] and clock.now == 0, \
        "it failed at once, rather than wait until its deadline (maxElapsedMs) for a turn due at 2 s"
    assert (shed.value.criticality, shed.value.attempts, shed.value.status) == ("default", 0, None)
    assert gate.waiting == 0 and gate.first_in_line() is None, "it took no place"
    assert str(shed.value).startswith("shed: at the pace the service can take, its turn would come after its "
                                      "wait bound (maxWait) or deadline")
    assert gate.tally().shed == (0, 1, 0)


def test_a_call_that_would_wait_past_its_class_max_wait_is_shed_at_once_with_no_attempt_sent():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0, gate={"enabled": True, "overloadWhen": "any-refusal"})
    assert dependency.call("/charge", lambda timeout: 503) == 503
    assert dependency.gate.is_on, "its first turn due at 2 s"
    sent = []
    with pytest.raises(Shed):
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    assert not sent and clock.waits == [], "the default class waits a second at most: shed, not sent"
    assert dependency.call("/charge", lambda timeout: sent.append(timeout) or 200, criticality="critical") == 200
    assert clock.waits == [2.0] and len(sent) == 1, "a critical call waits up to five: sent at its turn"


def test_a_shed_call_is_a_no_turn_so_code_that_handles_no_turn_handles_it():
    assert issubclass(Shed, NoTurn)
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0, gate={"enabled": True, "overloadWhen": "any-refusal"})
    assert dependency.call("/charge", lambda timeout: 503) == 503, "the 503 turned the gate on: its first turn at 2 s"
    sent = []
    try:
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    except NoTurn as error:
        caught = error
    else:
        pytest.fail("the call was not shed")
    assert isinstance(caught, Shed) and not sent and clock.waits == [], "shed at once: it waits a second at most"
    assert (caught.criticality, caught.attempts, caught.status, caught.waited_ns) == ("default", 0, None, 0), \
        "its own attributes, and as a NoTurn, it waited for no turn"
    assert str(caught) == ("shed: at the pace the service can take, its turn would come after its wait bound "
                           "(maxWait) or deadline (a default call, after 0 attempt(s))"), "its own message"


class CriticalArrivesWhileWaiting(VirtualTime):
    """Virtual time in which, while a call waits in the gate's line, a
    critical call takes a place ahead of it (once ``gate`` is set), and
    keeps it."""

    gate = None

    def wait(self, event, seconds):
        if self.gate is not None:
            self.gate.turn_for(Asker("critical"), self.now)
            self.gate = None
        return super().wait(event, seconds)


@pytest.mark.parametrize("bound", [{"gate": {**PATIENT, "maxWait": {"defaultMs": 3000}}},
                                   {"maxElapsedMs": 3000}], ids=["max-wait", "deadline"])
def test_a_call_waiting_in_line_ends_with_no_turn_at_its_bound_and_leaves_the_line(bound):
    clock = CriticalArrivesWhileWaiting()
    dependency = gated(clock, maxRetries=0, **bound)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    gate = dependency.gate
    clock.gate = gate
    sent = []
    with pytest.raises(NoTurn) as refused:
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    assert not sent, "the attempt was not sent"
    assert clock.waits == [2.0, 1.0], "in line for its turn at 2 s, then behind the critical call until 3 s"
    assert (refused.value.waited_ns, refused.value.attempts, refused.value.status) == (3 * S, 0, None)
    assert gate.waiting == 1 and gate.first_in_line()[0] == 1, "it left the line; the critical call waits"
    assert "no turn" in str(refused.value) and "maxWait" in str(refused.value)
    assert gate.tally().shed == (0, 1, 0), \
        "it waited as long as it could: shed in its class, demand the pace did not serve"


def test_a_calls_own_class_is_honoured_over_the_dependencys_and_the_policys():
    classed = {"enabled": True, "overloadWhen": "any-refusal", "criticality": "sheddable",
               "maxWait": {"criticalMs": 5000, "defaultMs": 3000, "sheddableMs": 250}}
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0, gate=classed)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    with pytest.raises(Shed) as shed:
        dependency.call("/charge", lambda timeout: 200)
    assert shed.value.criticality == "sheddable", "a call that names no class: the policy's"
    assert dependency.call("/charge", lambda timeout: 200, criticality="default") == 200
    assert clock.waits == [2.0], "its own class: it waits up to three seconds, for its turn at 2 s"
    critical = Dependency(Watch(**dependency.watch.current), "payments", clock=clock.clock, sleep=clock.sleep,
                          wait=clock.wait, rng=NoCredit(), criticality="critical")
    assert critical.criticality == "critical"
    assert critical.call("/charge", lambda timeout: 503) == 503, "its own gate, turned on: its first turn 2 s away"
    with pytest.raises(Shed) as shed:
        critical.call("/charge", lambda timeout: 200, criticality="sheddable")
    assert shed.value.criticality == "sheddable", "the call's class over the dependency's"
    assert critical.call("/charge", lambda timeout: 200) == 200, "the dependency's class over the policy's"
    assert clock.waits == [2.0, 2.0]
    with pytest.raises(ValueError, match="criticality must be one of critical, default, sheddable, not 'urgent'"):
        critical.call("/charge", lambda timeout: 200, criticality="urgent")
    with pytest.raises(ValueError, match="criticality"):
        Dependency(dependency.watch, "payments", criticality="high")


def test_while_the_gate_paces_a_retry_waits_for_its_turn_at_its_place_not_for_a_backoff_or_the_budget():
    budget = {"enabled": True, "retryRatio": 0.0, "minRetriesPerSecond": 0, "ttlMs": 10000}
    answers = iter([503, 503, 200])
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=3, initialDelayMs=100, budget=budget)
    assert dependency.call("/charge", lambda timeout: next(answers)) == 200
    assert clock.sleeps == [], "no backoff while paced"
    assert clock.waits == [2.0, 2.0], "a turn each 2 s at the probe rate"
    assert dependency.budget.denied == 0, "the budget was not asked"
    assert dependency.gate.tally() == Tally(sent=2, accepted=1, overloaded=2, waiting=0, demand=(0.0, 1.0, 0.0)), \
        "one call asked for a turn; its second retry came back to its place"
    assert dependency.gate.turn(clock.now).number == 1, "the retry waited at the call's place: no new ticket"

    unpaced = Dependency(Watch(maxRetries=3, jitter="none", budget=budget), "payments", clock=clock.clock,
                         sleep=clock.sleep, wait=clock.wait)
    assert unpaced.call("/charge", lambda timeout: 503) == 503
    assert unpaced.budget.denied == 1, "without the gate, the budget turns the retry away"


def raises(error):
    """An attempt that raises ``error``."""
    def attempt(timeout):
        raise error
    return attempt


def test_each_outcome_tells_the_gate_what_it_says_about_the_dependency():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0)

    with pytest.raises(TimeoutError):
        dependency.call("/charge", raises(TimeoutError("timed out")))
    gate = dependency.gate
    assert gate.tally() == Tally(overloaded=1, timed_out=1), "a timeout turned it on"
    assert dependency.call("/charge", lambda timeout: 404) == 404
    with pytest.raises(ValueError):
        dependency.call("/charge", raises(ValueError("not a network failure")))
    assert dependency.call("/charge", lambda timeout: 501) == 501
    assert dependency.call("/charge", lambda timeout: 429) == 429
    with pytest.raises(ConnectionRefusedError):
        dependency.call("/charge", raises(ConnectionRefusedError()))
    assert dependency.call("/charge", lambda timeout: 500) == 500
    assert gate.tally() == Tally(sent=6, accepted=4, overloaded=2, demand=(0.0, 6.0, 0.0)), \
        "an answer, a failure retryOn leaves out or one overloadOn leaves out (a 500) is accepted; " \
        "a retried failure overloadOn names is an overload"


def http_error(status, retry_after=None):
    """The HTTPError urllib raises for ``status``, its Retry-After header ``retry_after`` if given."""
    headers = email.message.Message()
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return urllib.error.HTTPError("http://payments/charge", status, "error", headers, None)


OVERLOAD = RetryOn.overload()
# Each: overloadOn, then the attempt's failure, status, Retry-After (seconds)
# and whether the policy retries it, then what the gate hears.
SIGNALS = {
    "a retried 500 is an error the dependency answered with": (OVERLOAD, None, 500, None, True, Signal.ACCEPTED),
    "a retried 502 too": (OVERLOAD, None, 502, None, True, Signal.ACCEPTED),
    "a retried 503 is an overload": (OVERLOAD, None, 503, None, True, Signal.OVERLOADED),
    "a retried 429 is an overload": (OVERLOAD, None, 429, None, True, Signal.OVERLOADED),
    "a 500 that asks for a wait is an overload": (OVERLOAD, None, 500, 2.0, True, Signal.OVERLOADED),
    "a 500 that asks for no wait at all still asked": (OVERLOAD, None, 500, 0.0, True, Signal.OVERLOADED),
    "a refused connection is an overload": (OVERLOAD, "connect-failure", None, None, True, Signal.OVERLOADED),
    "a reset is not, by default": (OVERLOAD, "reset", None, None, True, Signal.ACCEPTED),
    "a timeout says the dependency is slow": (OVERLOAD, "timeout", None, None, True, Signal.TIMED_OUT),
    "a timeout not retried says so too": (OVERLOAD, "timeout", None, None, False, Signal.TIMED_OUT),
    "a timeout says nothing when overloadOn leaves it out": (RetryOn([503]), "timeout", None, None, True,
                                                            Signal.ACCEPTED),
    "a 500 is an overload when overloadOn lists 5xx": (RetryOn(["5xx"]), None, 500, None, True, Signal.OVERLOADED),
    "a 503 is not when overloadOn leaves it out": (RetryOn([429]), None, 503, None, True, Signal.ACCEPTED),
    "nor is anything when overloadOn is empty": (RetryOn([]), None, 503, None, True, Signal.ACCEPTED),
    "a refused connection is not when left out": (RetryOn([503]), "connect-failure", None, None, True,
                                                  Signal.ACCEPTED),
    "a 503 not retried is accepted": (OVERLOAD, None, 503, None, False, Signal.ACCEPTED),
    "even when it asks for a wait": (OVERLOAD, None, 503, 1.0, False, Signal.ACCEPTED),
    "a refused connection not retried is accepted": (OVERLOAD, "connect-failure", None, None, False,
                                                      Signal.ACCEPTED),
    "an answer is accepted": (OVERLOAD, None, 200, None, False, Signal.ACCEPTED),
    "an exception that is no network failure is accepted": (OVERLOAD, None, None, None, False, Signal.ACCEPTED),
}


@pytest.mark.parametrize("case", SIGNALS)
def test_what_the_gate_hears_of_an_attempt_follows_overload_on(case):
    overload_on, failure, status, retry_after, retryable, heard = SIGNALS[case]
    assert _signal(overload_on, failure, status, retry_after, retryable) == heard


def test_retry_after_is_read_as_core_reads_it():
    now = 784_111_777.0  # Sun, 06 Nov 1994 08:49:37 GMT
    assert parse_retry_after("120", now) == 120.0 and parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after("+5", now) == 5.0, "Rust's u64 parsing takes a leading +"
    for date in ("Sun, 06 Nov 1994 08:51:37 GMT", "Sunday, 06-Nov-94 08:51:37 GMT", "Sun Nov  6 08:51:37 1994"):
        assert parse_retry_after(date, now) == 120.0, date
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now) == 0.0, "a date past: now"
    for unreadable in ("", "soon", "-5", "1.5", str(1 << 64), "Mon, 06 Nov 1994 08:51:37 GMT",
                       "Sun, 06 Nov 1994 08:51:37 +0000", "06 Nov 1994 08:51:37 GMT", "Sun, 31 Nov 1994 08:51:37 GMT",
                       "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06-Nov-94 08:51:37 GMT", "Wed, 31 Dec 1969 23:59:59 GMT"):
        assert parse_retry_after(unreadable, now) is None, unreadable


def test_a_retried_500_leaves_the_gate_off_and_a_503_turns_it_on():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=3)
    assert dependency.call("/charge", lambda timeout: 500) == 500
    gate = dependency.gate
    assert not gate.is_on and gate.tally() == Tally(), "four 500s: errors, not overload"
    assert len(clock.sleeps) == 3 and clock.waits == [], "retried after backoffs, not paced"
    with pytest.raises(urllib.error.HTTPError):
        dependency.call("/charge", raises(http_error(500, "soon")))
    assert not gate.is_on, "a Retry-After that cannot be read asks for no wait"
    with pytest.raises(urllib.error.HTTPError):
        dependency.call("/charge", raises(http_error(500, "1")))
    assert gate.is_on, "a 500 that asks for a wait says overload"
    assert gate.tally().overloaded == 4, "each of the four, from the first"

    answers = iter([503, 200])
    dependency = gated(clock, maxRetries=3)
    assert dependency.call("/charge", lambda timeout: next(answers)) == 200
    assert dependency.gate.is_on and dependency.gate.tally() == Tally(sent=1, accepted=1, overloaded=1,
                                                                      demand=(0.0, 1.0, 0.0))


def test_overload_on_names_what_turns_the_gate_on():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0, gate={"enabled": True, "overloadOn": [503], "overloadWhen": "any-refusal"})
    with pytest.raises(TimeoutError):
        dependency.call("/charge", raises(TimeoutError("timed out")))
    with pytest.raises(ConnectionRefusedError):
        dependency.call("/charge", raises(ConnectionRefusedError()))
    assert not dependency.gate.is_on, "overloadOn leaves timeouts and refused connections out"
    dependency = gated(clock, maxRetries=0,
                       gate={"enabled": True, "overloadOn": ["5xx"], "overloadWhen": "any-refusal"})
    assert dependency.call("/charge", lambda timeout: 500) == 500
    assert dependency.gate.is_on and dependency.gate.tally() == Tally(overloaded=1), "5xx: a 500 is an overload"


def test_a_waiting_call_is_woken_when_the_line_moves():
    watch = Watch(maxRetries=0, maxElapsedMs=10_000,
                  gate={"enabled": True, "minRate": 50.0, "overloadWhen": "any-refusal"})
    dependency = Dependency(watch, "payments", rng=NoCredit())
    assert dependency.call("/charge", lambda timeout: 503) == 503
    gate = dependency.gate
    ahead = gate.turn(time.monotonic_ns())
    assert ahead is not None, "no credit yet: the test's own ticket is first in line"
    results = []
    started = time.monotonic()
    caller = threading.Thread(target=lambda: results.append(dependency.call("/charge", lambda timeout: 200)))
    caller.start()
    assert eventually(lambda: gate.waiting == 2), "the call waits behind the test's ticket"
    gate.leave(ahead)
    caller.join(timeout=5)
    assert results == [200] and time.monotonic() - started < 5, "woken, not left to wait for its deadline"
    assert gate.waiting == 0


def test_the_gate_is_rebuilt_only_when_what_it_hears_as_overload_changes():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0)
    dependency.call("/charge", lambda timeout: 503)
    gate = dependency.gate
    assert gate.is_on
    dependency.watch.current = {**dependency.watch.current, "maxRetries": 1}
    assert dependency.gate is gate and gate.is_on, "the same block: the same gate, still pacing"
    retuned = {"enabled": True, "overloadWhen": "any-refusal", "quietMs": 60_000, "minRate": 2.0}
    dependency.watch.current = {**dependency.watch.current, "gate": retuned}
    assert dependency.gate is gate and gate.is_on, "new rates and quiet: the same gate, still pacing"
    assert gate.policy.quiet_ns == 60 * S and gate.own_rate == 2.0, "probing at the new lowest rate"
    classed = {**retuned, "criticality": "critical", "maxWait": {"criticalMs": 250}}
    dependency.watch.current = {**dependency.watch.current, "gate": classed}
    assert dependency.gate is gate and gate.is_on, "a new class or wait bound: the same gate, still pacing"
    assert gate.policy.criticality == "critical" and gate.policy.max_wait.critical_ns == 250_000_000
    dependency.watch.current = {**dependency.watch.current, "gate": {**classed, "maxWait": {"defaultMs": -1}}}
    assert dependency.gate is gate and gate.policy.max_wait.critical_ns == 250_000_000, \
        "a wait bound out of range is refused: the last policy stays"
    dependency.watch.current = {**dependency.watch.current, "gate": {"enabled": True, "quietMs": 1000}}
    assert dependency.gate is not gate and not dependency.gate.is_on, "a new overloadWhen: a new gate, off"
    assert gate.is_on, "calls in flight keep the old one"
    dependency.watch.current = {**dependency.watch.current, "gate": {"enabled": False}}
    assert dependency.gate is None
    dependency.watch.current = {**dependency.watch.current, "gate": {"enabled": True, "beta": 1.5}}
    assert dependency.gate is None, "a gate block out of range is refused: the last policy stays"


def test_an_update_of_the_breaker_block_retunes_the_breaker_and_an_open_one_stays_open():
    breaker = {"enabled": True, "consecutiveFailures": 2, "openTimeoutMs": 30_000}
    clock = VirtualTime()
    dependency = Dependency(Watch(maxRetries=1, jitter="none", circuitBreaker=breaker), "payments",
                            clock=clock.clock, sleep=clock.sleep, wait=clock.wait)
    sent = []
    assert dependency.call("/charge", lambda timeout: sent.append(timeout) or 500) == 500
    opened = dependency.breaker
    assert opened.state == "open" and len(sent) == 2
    clock.now += 12 * S
    edited = {**breaker, "failureRateThreshold": 0.9, "openTimeoutMs": 20_000}
    dependency.watch.current = {**dependency.watch.current, "circuitBreaker": edited}
    assert dependency.breaker is opened and opened.state == "open", "an edit mid-outage does not close it"
    assert opened.policy.failure_rate_threshold == 0.9
    with pytest.raises(CallNotPermitted) as refused:
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    assert len(sent) == 2, "refused without a call"
    assert refused.value.retry_in_ns <= 8 * S, "20 s counted from the open, 12 s ago"
    dependency.watch.current = {**dependency.watch.current, "circuitBreaker": {**edited, "openTimeoutMs": 10_000}}
    assert dependency.call("/charge", lambda timeout: sent.append(timeout) or 200) == 200
    assert dependency.breaker is opened and len(sent) == 3, "10 s had passed since the open: a trial went"
    dependency.watch.current = {**dependency.watch.current, "circuitBreaker": {**edited, "openTimeoutMs": 0}}
    assert dependency.breaker is opened and opened.policy.open_timeout_ns == 10 * S, \
        "a block out of range is refused: the last settings stay"
    dependency.watch.current = {**dependency.watch.current, "circuitBreaker": {"enabled": False}}
    assert dependency.breaker is None
    dependency.watch.current = {**dependency.watch.current, "circuitBreaker": breaker}
    assert dependency.breaker is not opened and dependency.breaker.state == "closed", "turned on again: a new one"


def ungated(clock, breaker):
    """A Dependency in virtual time with no gate and no budget, whose
    ``breaker`` is on."""
    policy = Watch(maxRetries=3, jitter="none", budget={**DEFAULT_POLICY["budget"], "enabled": False},
                   circuitBreaker=breaker)
    return Dependency(policy, "payments", clock=clock.clock, sleep=clock.sleep, wait=clock.wait)


def answers(*statuses):
    """An attempt that answers each of ``statuses`` in turn, noting each in ``sent``."""
    left = list(statuses)

    def attempt(timeout):
        attempt.sent.append(left[0])
        return left.pop(0)

    attempt.sent = []
    return attempt


def test_without_a_gate_503s_trip_the_breaker_half_open_and_only_a_window_with_none_accepted_opens_it():
    breaker = {"enabled": True, "consecutiveFailures": 2}  # halfOpenMaxCalls 10, successThreshold 3
    clock = VirtualTime()
    dependency = ungated(clock, breaker)
    assert dependency.gate is None
    attempt = answers(503, 503, 503, 503)
    with pytest.raises(CallNotPermitted) as refused:
        dependency.call("/charge", attempt)
    assert attempt.sent == [503, 503, 503], "two refusals trip it; the third attempt is its first trial"
    assert (refused.value.state, refused.value.retry_in_ns) == ("half-open", 0), "the next was held back"
    assert dependency.breaker.state == "half-open", "503s say overloaded, or down: trials tell which"

    for _ in range(12):
        clock.now += S
        try:
            dependency.call("/charge", lambda timeout: 503)
        except CallNotPermitted:
            pass
    assert dependency.breaker.state == "open", "ten seconds of trials, none accepted"

    clock = VirtualTime()
    dependency = ungated(clock, breaker)
    with pytest.raises(CallNotPermitted):
        dependency.call("/charge", lambda timeout: 503)
    for second in range(30):
        clock.now += S
        status = 200 if second % 3 == 0 else 503
        try:
            dependency.call("/charge", lambda timeout: status)
        except CallNotPermitted:
            pass
    assert dependency.breaker.state == "half-open", \
        "a dependency that takes a third of the calls is up: the trials go on"


def test_without_a_gate_500s_still_open_the_breaker():
    clock = VirtualTime()
    dependency = ungated(clock, {"enabled": True, "consecutiveFailures": 2})
    attempt = answers(500, 500, 500)
    with pytest.raises(CallNotPermitted) as refused:
        dependency.call("/charge", attempt)
    assert attempt.sent == [500, 500], "an error the dependency answered with says nothing of its load"
    assert refused.value.state == "open" and dependency.breaker.state == "open"


def test_a_timeout_is_no_refusal_and_opens_the_breaker_though_overload_on_names_it():
    clock = VirtualTime()
    dependency = Dependency(Watch(maxRetries=3, jitter="none", perTryTimeoutMs=100,
                                  gate={**DEFAULT_POLICY["gate"], "overloadOn": ["timeout", 503]},
                                  circuitBreaker={"enabled": True, "consecutiveFailures": 2}),
                            "payments", clock=clock.clock, sleep=clock.sleep, wait=clock.wait)
    sent = silent_until_refused(dependency, clock)
    assert len(sent) == 2 and dependency.breaker.state == "open", "nothing answered: no refusal"


def silent_until_refused(dependency, clock):
    """Calls ``dependency`` with an attempt that times out every time, in
    virtual time, until its breaker refuses one: the timeouts it waited."""
    sent = []

    def silent(timeout):
        sent.append(timeout)
        clock.now += round(timeout * S)
        raise TimeoutError("timed out")

    with pytest.raises(CallNotPermitted):
        dependency.call("/charge", silent)
    return sent


def test_overload_on_says_what_the_breaker_hears_as_refused_with_the_gate_off():
    clock = VirtualTime()
    gate = {**DEFAULT_POLICY["gate"], "enabled": False, "overloadOn": [500]}
    dependency = Dependency(Watch(maxRetries=1, jitter="none", gate=gate,
                                  circuitBreaker={"enabled": True, "consecutiveFailures": 2}),
                            "payments", clock=clock.clock, sleep=clock.sleep, wait=clock.wait)
    assert dependency.gate is None
    assert dependency.call("/charge", lambda timeout: 500) == 500
    assert dependency.breaker.state == "half-open", "the gate's overloadOn names 500: a refusal, though no gate"
    retry_after = Dependency(Watch(maxRetries=1, jitter="none", maxDelayMs=1000,
                                   circuitBreaker={"enabled": True, "consecutiveFailures": 2}),
                             "payments", clock=clock.clock, sleep=clock.sleep, wait=clock.wait)
    assert retry_after.call("/charge", lambda timeout: Outcome(status=500, retry_after=1.0)) == 500
    assert retry_after.breaker.state == "half-open", "an answer that asks for a wait is a refusal"


# --- refused policies ------------------------------------------------------

GENEROUS = {"enabled": True, "retryRatio": 0.5, "minRetriesPerSecond": 10, "ttlMs": 10_000}
NO_RETRIES = {"enabled": True, "retryRatio": 0.0, "minRetriesPerSecond": 0, "ttlMs": 10_000}


def refusals(caplog):
    """The refusals of a policy logged so far."""
    return [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]


def failing_twice(dependency):
    """Attempts sent by one call to ``dependency`` that answers 503, then 200."""
    answers, sent = iter([503, 200]), []
    dependency.call("/charge", lambda timeout: sent.append(timeout) or next(answers))
    return len(sent)


@pytest.mark.parametrize("bad_breaker", [5, {"enabled": True, "openTimeoutMs": 0}], ids=["not-an-object", "out-of-range"])
def test_after_a_refused_policy_the_next_is_compared_with_the_last_applied_and_its_budget_takes_effect(
        bad_breaker, caplog):
    clock = VirtualTime()
    dependency = Dependency(Watch(maxRetries=1, jitter="none", budget=GENEROUS), "payments", clock=clock.clock,
                            sleep=clock.sleep, wait=clock.wait)
    applied = dependency.budget
    assert failing_twice(dependency) == 2, "policy A: its budget lets the retry go"
    good = dependency.watch.current
    with caplog.at_level(logging.ERROR, logger="stormguard_client.dependency"):
        dependency.watch.current = {**good, "budget": NO_RETRIES, "circuitBreaker": bad_breaker}
        assert dependency.budget is applied and failing_twice(dependency) == 2, "policy B refused: A's budget stays"
        assert dependency.breaker is None
        [refused] = refusals(caplog)
        assert "payments" in refused and "circuitBreaker" in refused and "keeping the last" in refused, refused
        dependency.watch.current = {**good, "budget": NO_RETRIES}
        assert dependency.budget is not applied, "C's budget block differs from A's, the last applied"
        assert failing_twice(dependency) == 1, "C's budget takes effect: the retry is denied"
        assert dependency.budget.denied == 1
    assert len(refusals(caplog)) == 1, "B was reported once; C was taken up"


def test_after_a_policy_whose_budget_is_not_an_object_is_refused_the_next_valid_policy_is_applied(caplog):
    clock = VirtualTime()
    dependency = Dependency(Watch(maxRetries=1, jitter="none", budget=GENEROUS), "payments", clock=clock.clock,
                            sleep=clock.sleep, wait=clock.wait)
    applied = dependency.budget
    good = dependency.watch.current
    with caplog.at_level(logging.ERROR, logger="stormguard_client.dependency"):
        dependency.watch.current = {**good, "maxRetries": 0, "budget": 5}
        for _ in range(3):
            assert failing_twice(dependency) == 2, "refused: A's maxRetries (1) and budget stay"
        assert dependency.budget is applied
        [refused] = refusals(caplog)
        assert "budget must be an object" in refused and "payments" in refused, refused
        dependency.watch.current = {**good, "maxRetries": 0, "budget": NO_RETRIES}
        assert failing_twice(dependency) == 1, "maxRetries 0: one attempt"
        assert dependency.budget is not applied and dependency.budget.configured_floor == 0.0
    assert len(refusals(caplog)) == 1, "the valid policy was not refused too"


def test_a_policy_refused_from_the_start_is_reported_once_and_the_defaults_serve_until_a_valid_one(caplog):
    clock = VirtualTime()
    with caplog.at_level(logging.ERROR, logger="stormguard_client.dependency"):
        dependency = Dependency(Watch(maxRetries=1, jitter="none", budget=5), "payments", clock=clock.clock,
                                sleep=clock.sleep, wait=clock.wait)
        defaults = dependency.budget
        assert defaults is not None and defaults.configured_floor == DEFAULT_POLICY["budget"]["minRetriesPerSecond"]
        for _ in range(3):
            assert failing_twice(dependency) == 2, f"the defaults' maxRetries ({DEFAULT_POLICY['maxRetries']}) serve"
        assert dependency.budget is defaults
        [refused] = refusals(caplog)
        assert "budget must be an object" in refused and "using the defaults" in refused, refused
        dependency.watch.current = {**dependency.watch.current, "maxRetries": 0, "budget": NO_RETRIES}
        assert failing_twice(dependency) == 1 and dependency.budget.configured_floor == 0.0
    assert len(refusals(caplog)) == 1


@pytest.mark.parametrize("ended", [Shed, NoTurn])
def test_a_call_that_is_shed_or_gets_no_turn_gives_back_its_breaker_permit(ended):
    breaker = {"enabled": True, "consecutiveFailures": 1, "openTimeoutMs": 1000, "halfOpenMaxCalls": 1,
               "successThreshold": 1}
    # Its turn, at 2 s, comes after its bound (Shed), or is taken by a
    # critical call that comes while it waits (NoTurn).
    clock = VirtualTime() if ended is Shed else CriticalArrivesWhileWaiting()
    dependency = gated(clock, maxRetries=0, maxElapsedMs=500 if ended is Shed else 1500, circuitBreaker=breaker)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    assert dependency.breaker.state == "closed", "the 503 the gate paces is not the breaker's"
    dependency.breaker.acquire(clock.now).record(True, clock.now)  # another call's failure
    assert dependency.breaker.state == "open" and dependency.gate.is_on
    clock.now = S
    clock.gate = dependency.gate
    sent = []
    with pytest.raises(ended) as raised:
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    assert type(raised.value) is ended, "a Shed is a NoTurn too: the call that waited was not shed"
    assert not sent and dependency.breaker.state == "half-open"
    assert dependency.breaker.acquire(clock.now).trial, "the one trial slot was given back"


class FailsWhileWaiting(VirtualTime):
    """Virtual time in which, while a call waits in the gate's line, two
    other calls' attempts fail (once ``dependency`` is set)."""

    dependency = None

    def wait(self, event, seconds):
        if self.dependency is not None:
            for _ in range(2):
                self.dependency.breaker.acquire(self.now).record(True, self.now)
            self.dependency = None
        return super().wait(event, seconds)


def test_a_call_whose_breaker_opens_while_it_waits_in_line_is_not_sent():
    breaker = {"enabled": True, "consecutiveFailures": 2, "openTimeoutMs": 60000}
    clock = FailsWhileWaiting()
    dependency = gated(clock, maxRetries=0, circuitBreaker=breaker)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    assert dependency.gate.is_on and dependency.breaker.state == "closed", "the 503 the gate paces is not the breaker's"
    clock.dependency = dependency
    turns = dependency.gate.tally().sent
    sent = []
    with pytest.raises(CallNotPermitted):
        dependency.call("/charge", lambda timeout: sent.append(timeout) or 200)
    assert dependency.breaker.state == "open" and clock.waits, "it opened while the call waited in line"
    assert not sent, "the call was not sent once its turn came"
    assert dependency.gate.tally().sent == turns, "it left the line with no turn spent"
    assert dependency.gate.waiting == 0


class FleetTrialWhileWaiting(VirtualTime):
    """Virtual time in which, while a call waits in the gate's line, the
    fleet-scoped breaker opens and the daemon grants the fleet a trial
    (once ``dependency`` is set)."""

    dependency = None

    def wait(self, event, seconds):
        if self.dependency is not None:
            breaker = self.dependency.breaker
            for _ in range(2):
                breaker.acquire(self.now).record(True, self.now)
            breaker.heard(Verdict(CircuitState.HALF_OPEN, 1, 0), self.now + 60 * S, self.now)
            self.dependency = None
        return super().wait(event, seconds)


def test_a_call_in_line_granted_the_fleets_trial_meanwhile_leaves_the_line_and_goes():
    breaker = {"enabled": True, "consecutiveFailures": 2, "openTimeoutMs": 3_600_000, "scope": "fleet"}
    clock = FleetTrialWhileWaiting()
    dependency = gated(clock, maxRetries=0, circuitBreaker=breaker)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    clock.dependency = dependency
    assert dependency.call("/charge", lambda timeout: 200) == 200, "sent as the fleet's trial"
    assert dependency.breaker.state == "open" and clock.waits, "it opened while the call waited in line"
    assert dependency.gate.waiting == 0, "it left the line"
    assert dependency.gate.credit >= 0.99, f"no turn spent: {dependency.gate.credit}"


def test_the_reporter_is_told_the_gate_and_reads_it_on_the_calls_clock():
    clock = VirtualTime()
    reporter = Reporter("http://127.0.0.1:9", "pod-1", interval=3600)
    block = {"enabled": True, "quietMs": 1000, "overloadWhen": "any-refusal"}
    dependency = Dependency(Watch(maxRetries=0, gate=block), "payments", reporter,
                            clock=clock.clock, sleep=clock.sleep, wait=clock.wait, rng=NoCredit())
    assert dependency.call("/charge", lambda timeout: 503) == 503
    report = json.loads(reporter._take()[1])["reports"][0]
    assert report["gateOn"] is True, "the 503 turned the gate on, and the report says so"
    clock.now += 2 * S
    report = json.loads(reporter._take()[1])["reports"][0]
    assert report["gateOn"] is False, "quiet for quietMs on the calls' clock, not the wall's"
    dependency.watch.current = {**dependency.watch.current, "gate": {"enabled": False}}
    dependency.call("/charge", lambda timeout: 200)
    assert "gateOn" not in json.loads(reporter._take()[1])["reports"][0], "a new policy without a gate"


def test_a_retry_waits_at_least_what_retry_after_asked_and_no_more_than_max_delay():
    # As the Rust library waits: the backoff's delay lengthened to the
    # answer's Retry-After, never beyond maxDelay.
    clock = VirtualTime()
    dependency = Dependency(Watch(maxRetries=2, jitter="none", initialDelayMs=100, maxDelayMs=5000,
                                  budget={"enabled": False}), "payments",
                            clock=clock.clock, sleep=clock.sleep, wait=clock.wait)
    for asked, slept in (("2", [2.0, 2.0]), ("0", [0.1, 0.2]), ("60", [5.0, 5.0]), ("soon", [0.1, 0.2])):
        clock.sleeps.clear()
        with pytest.raises(urllib.error.HTTPError):
            dependency.call("/charge", raises(http_error(503, asked)))
        assert clock.sleeps == slept, asked


def test_while_paced_a_retry_waits_what_retry_after_asked_before_its_turn():
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=1, budget={"enabled": False})
    with pytest.raises(urllib.error.HTTPError):
        dependency.call("/charge", raises(http_error(503, "3")))
    assert dependency.gate.is_on
    assert clock.sleeps == [3.0], "no backoff while paced, but the wait the dependency asked for"


def test_a_dependency_that_stops_answering_opens_the_breaker_though_the_gate_is_on():
    # Timeouts turn the gate on, but nothing answered them: they are no
    # refusal for the gate to pace, and the breaker hears them, and opens.
    breaker = {"enabled": True, "consecutiveFailures": 2, "openTimeoutMs": 3_600_000}
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=3, perTryTimeoutMs=100, circuitBreaker=breaker)
    sent = silent_until_refused(dependency, clock)
    assert sent == [0.1, 0.1], "the second timeout opened the breaker: the third attempt was refused"
    assert dependency.gate.is_on, "a timeout turns the gate on"
    assert dependency.breaker.state == "open"


def opened_behind_an_on_gate(clock, breaker):
    """A Dependency in virtual time whose gate a 503 turned on (its turns 2 s
    apart) and whose ``breaker`` another call's failure opened."""
    dependency = gated(clock, maxRetries=0, circuitBreaker=breaker)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    assert dependency.breaker.state == "closed", "the 503 the gate paces is not the breaker's"
    dependency.breaker.acquire(clock.now).record(True, clock.now)  # another call's failure
    assert dependency.breaker.state == "open" and dependency.gate.is_on
    return dependency


def test_a_half_open_trial_refused_while_the_gate_is_on_counts_as_a_success():
    # A trial refused with a 503 while the gate paces found the dependency up
    # (it answered, asking for less): a success, not a slot handed back unheard.
    breaker = {"enabled": True, "consecutiveFailures": 1, "openTimeoutMs": 1000, "halfOpenMaxCalls": 1,
               "successThreshold": 2}
    clock = VirtualTime()
    dependency = opened_behind_an_on_gate(clock, breaker)
    clock.now += 2 * S
    assert dependency.call("/charge", lambda timeout: 503) == 503
    assert dependency.breaker.state == "half-open", "one good trial of the two it takes"
    assert dependency.call("/charge", lambda timeout: 503) == 503
    assert dependency.breaker.state == "closed", "successThreshold such trials close it"


def test_a_fleet_trial_refused_while_the_gate_is_on_is_reported_as_succeeded():
    breaker = {"enabled": True, "consecutiveFailures": 1, "openTimeoutMs": 1000, "halfOpenMaxCalls": 1,
               "successThreshold": 1, "scope": "fleet"}
    clock = VirtualTime()
    dependency = opened_behind_an_on_gate(clock, breaker)
    dependency.breaker.heard(Verdict(CircuitState.HALF_OPEN, 1, 0), clock.now + 60 * S, clock.now)
    assert dependency.call("/charge", lambda timeout: 503) == 503, "the fleet's trial, sent at once"
    with pytest.raises(CallNotPermitted):
        dependency.call("/charge", lambda timeout: 200)
    report = dependency.breaker.fleet_report(clock.now)
    assert (report.succeeded, report.failed) == (1, 0), \
        "it found the dependency up: the daemon hears a trial that succeeded, and its slot is spent"


def test_a_trial_on_the_fleets_slot_is_sent_without_waiting_for_the_gates_turn():
    from stormguard_client.breaker import CircuitState, Verdict
    breaker = {"enabled": True, "consecutiveFailures": 1, "openTimeoutMs": 1000, "halfOpenMaxCalls": 1,
               "successThreshold": 1, "scope": "fleet"}
    clock = VirtualTime()
    dependency = gated(clock, maxRetries=0, maxElapsedMs=500, circuitBreaker=breaker)
    assert dependency.call("/charge", lambda timeout: 503) == 503
    dependency.breaker.acquire(clock.now).record(True, clock.now)  # another call's failure
    assert dependency.breaker.state == "open" and dependency.gate.is_on, "its next turn is 2 s away"
    dependency.breaker.heard(Verdict(CircuitState.HALF_OPEN, 1, 0), clock.now + S, clock.now)
    assert dependency.call("/charge", lambda timeout: 200) == 200
    assert clock.waits == [], "sent at once, not after a turn"
    with pytest.raises(CallNotPermitted):
        dependency.call("/charge", lambda timeout: 200)
