"""The asyncio flavour: that it decides as the blocking one does, step for
step (both drive one plan), what only it does (a cancelled call cleans up
after itself; an attempt past its per-try timeout is cut short), and its
calls and watch against the real daemon."""

import asyncio
import json
import threading
import time

import pytest

import flavours
from conftest import eventually, metric, requests_sample
from stormguard_client import CallNotPermitted, Dependency, NoTurn, Reporter
from stormguard_client.aio import AsyncDependency, AsyncPolicyWatch
from stormguard_client.gate import Asker, Tally
from test_dependency import PATIENT, POLICY, S, NoCredit, VirtualTime, Watch

BREAKER = {"enabled": True, "consecutiveFailures": 1, "openTimeoutMs": 1000, "halfOpenMaxCalls": 1,
           "successThreshold": 1}


class AsyncVirtualTime(VirtualTime):
    """VirtualTime for the asyncio flavour: its waits are coroutines."""

    async def sleep(self, seconds):
        VirtualTime.sleep(self, seconds)

    async def wait(self, wakeup, seconds):
        if self.while_waiting is not None:
            self.while_waiting()
            self.while_waiting = None
        self.waits.append(seconds)
        self.now += round(seconds * S)


def in_virtual_time(flavour, watch, reporter=None, rng=None):
    """A dependency of ``flavour`` ("sync" or "async") on a virtual clock,
    with a ``call(endpoint, attempt, **options)`` that takes a plain
    attempt in both: (dependency's call, its VirtualTime)."""
    _, call, clock = dependency_in_virtual_time(flavour, watch, reporter, rng)
    return call, clock


def dependency_in_virtual_time(flavour, watch, reporter=None, rng=None):
    """:func:`in_virtual_time`, the dependency itself first: (dependency,
    its call, its VirtualTime)."""
    if flavour == "sync":
        clock = VirtualTime()
        dependency = Dependency(watch, "payments", reporter, clock=clock.clock, sleep=clock.sleep, wait=clock.wait,
                                rng=rng)
        return dependency, dependency.call, clock
    clock = AsyncVirtualTime()
    dependency = AsyncDependency(watch, "payments", reporter, clock=clock.clock, sleep=clock.sleep,
                                 wait=clock.wait, rng=rng)

    def call(endpoint, attempt, **options):
        async def attempted(timeout):
            return attempt(timeout)

        return asyncio.run(dependency.call(endpoint, attempted, **options))

    return dependency, call, clock


def answering(*answers):
    """An attempt that answers each of ``answers`` in turn (a status, or an
    exception to raise), noting each timeout it was given."""
    left = list(answers)
    timeouts = []

    def attempt(timeout):
        timeouts.append(timeout)
        answer = left.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    attempt.timeouts = timeouts
    return attempt


# Each: the policy (over the defaults), then per call its answers and options.
SCRIPTS = {
    "backoff with jitter, then the budget says no": (
        {"maxRetries": 4, "budget": {"enabled": True, "retryRatio": 0.0, "minRetriesPerSecond": 2, "ttlMs": 1000}},
        [([503, 503, 200], {}), ([503], {})]),
    "retryOn judges statuses and failures": (
        {"maxRetries": 3, "retryOn": ["gateway-error", "reset"], "perTryTimeoutMs": 250},
        [([502, ConnectionResetError("reset"), 504, 200], {}), ([500], {}), ([TimeoutError("slow")], {})]),
    "the gate paces retries in line": (
        {"maxRetries": 3, "gate": PATIENT},
        [([503, 503, 200], {}), ([200], {})]),
    "shed: its turn would come after the deadline": (
        {"maxRetries": 2, "maxElapsedMs": 3000, "gate": PATIENT},
        [([503, 503], {}), ([200], {})]),
    "shed: its turn would come after its class's maxWait": (
        {"maxRetries": 0, "gate": {"enabled": True, "overloadWhen": "any-refusal"}},
        [([503], {}), ([], {}), ([], {"criticality": "sheddable"}), ([200], {"criticality": "critical"})]),
    "the breaker opens and refuses": (
        {"maxRetries": 2, "circuitBreaker": BREAKER},
        [([500], {}), ([], {})]),
    "the caller's timeout bounds the call": (
        {"maxRetries": 5, "jitter": "none", "initialDelayMs": 100},
        [([503, 503, 503], {"timeout": 0.25}), ([503, 503, 503, 503, 503, 503], {"timeout": None})]),
    "a failure the caller names": (
        {"maxRetries": 1, "retryOn": ["reset"]},
        [([ValueError("torn"), 200], {"failure": lambda error: "reset"})]),
}


def trace(flavour, policy, calls):
    """Everything a run of ``calls`` shows: each call's result or exception,
    the timeouts given, the backoffs slept, the waits in line, the virtual
    time at the end, and what the reporter counted."""
    reporter = Reporter("http://127.0.0.1:9", "pod-1", interval=3600)
    call, clock = in_virtual_time(flavour, Watch(**policy), reporter, rng=NoCredit(7))
    results, timeouts = [], []
    for answers, options in calls:
        attempt = answering(*answers)
        try:
            results.append(call("/charge", attempt, **options))
        except Exception as error:  # noqa: BLE001 - compared below
            results.append(f"{type(error).__name__}: {error}")
        timeouts.append(attempt.timeouts)
    reports = json.loads(reporter._take()[1])["reports"]
    return results, timeouts, clock.sleeps, clock.waits, clock.now, reports


@pytest.mark.parametrize("script", SCRIPTS)
def test_both_flavours_decide_alike_step_for_step(script):
    policy, calls = SCRIPTS[script]
    blocking = trace("sync", policy, calls)
    assert trace("async", policy, calls) == blocking
    results, timeouts, sleeps, waits, _, _ = blocking
    assert len(results) == len(calls) and sum(len(t) for t in timeouts) > 0
    if script.startswith("backoff"):
        assert results == [200, 503] and len(sleeps) == 2, "two backoffs, then the budget refused the third retry"
    if script.startswith("the gate"):
        assert sleeps == [] and waits, "retries waited for turns, not for backoffs"
    if script.startswith("shed: its turn would come after the deadline"):
        assert results[0].startswith("Shed: shed:") and results[1] == 200, "shed at its second retry, at 2 s"
        assert waits == [2.0, 2.0], "its first retry's turn came in time; the next call's too"
    if script.startswith("shed: its turn would come after its class"):
        assert results[0] == 503 and results[1].startswith("Shed") and results[2].startswith("Shed")
        assert results[3] == 200 and waits == [2.0], "the critical call waits up to five seconds for its turn"
    if script.startswith("the breaker"):
        assert results[0].startswith("CallNotPermitted") and results[1].startswith("CallNotPermitted")
    if script.startswith("the caller's"):
        assert sleeps[:1] == [0.1] and timeouts[0] == [0.25, pytest.approx(0.15)], \
            "the second retry's backoff would end past the caller's 0.25 s"
        assert len(timeouts[1]) == 6, "no bound: every retry"
    if script.startswith("a failure"):
        assert results == [200]


@pytest.mark.parametrize("flavour", flavours.NAMES)
def test_in_both_flavours_500s_leave_the_gate_off_and_503s_turn_it_on(flavour):
    policy = {"maxRetries": 3, "jitter": "none", "gate": PATIENT}
    dependency, call, clock = dependency_in_virtual_time(flavour, Watch(**policy), rng=NoCredit(7))
    for _ in range(3):
        assert call("/charge", answering(500, 500, 500, 500)) == 500
    gate = dependency.gate
    assert not gate.is_on and gate.tally() == Tally(), "twelve retried 500s: errors the dependency answered with"
    assert len(clock.sleeps) == 9 and clock.waits == [], "each retry backed off; none waited for a turn"
    assert call("/charge", answering(503, 503, 200)) == 200
    assert gate.is_on and gate.tally() == Tally(sent=2, accepted=1, overloaded=2, demand=(0.0, 1.0, 0.0)), \
        "the first 503 turned it on"
    assert len(clock.sleeps) == 9 and clock.waits == [2.0, 2.0], "the retries waited for turns"

    policy["gate"] = {**PATIENT, "overloadOn": ["5xx"]}
    dependency, call, _ = dependency_in_virtual_time(flavour, Watch(**policy), rng=NoCredit(7))
    assert call("/charge", answering(500, 200)) == 200
    assert dependency.gate.is_on, "overloadOn: [5xx]: a 500 is an overload"


@pytest.mark.parametrize("flavour", flavours.NAMES)
def test_in_both_flavours_refusals_the_gate_paces_do_not_open_the_breaker_and_errors_still_do(flavour):
    # A gate any refusal turns on, beside a breaker that opens after two
    # failures in a row.
    breaker = {"enabled": True, "consecutiveFailures": 2, "openTimeoutMs": 3_600_000}
    policy = {"maxRetries": 3, "jitter": "none", "circuitBreaker": breaker, "gate": PATIENT}
    dependency, call, clock = dependency_in_virtual_time(flavour, Watch(**policy), rng=NoCredit(7))
    refused = [answering(503, 503, 503, 503) for _ in range(3)]
    for attempt in refused:
        assert call("/charge", attempt) == 503
    assert [len(attempt.timeouts) for attempt in refused] == [4, 4, 4], "every retry sent, paced by the gate"
    assert dependency.gate.is_on and clock.waits, "the first 503 turned the gate on; the retries waited for turns"
    assert dependency.breaker.state == "closed", "overload is the gate's to pace"
    assert dependency.breaker._consecutive_failures == 0, "not even the refusal that turned the gate on counted"

    # Errors the dependency answers with say nothing of its load: the gate
    # does not pace them, and the breaker opens on them.
    dependency, call, _ = dependency_in_virtual_time(flavour, Watch(**policy), rng=NoCredit(7))
    failing = answering(500, 500, 500, 500)
    with pytest.raises(CallNotPermitted):
        call("/charge", failing)
    assert len(failing.timeouts) == 2, "the second 500 in a row opened the breaker"
    assert dependency.breaker.state == "open" and not dependency.gate.is_on


@pytest.mark.parametrize("flavour", flavours.NAMES)
def test_in_both_flavours_a_call_in_line_ends_with_no_turn_at_its_classs_max_wait(flavour):
    policy = {"maxRetries": 0, "gate": {**PATIENT, "maxWait": {"defaultMs": 3000}}}
    dependency, call, clock = dependency_in_virtual_time(flavour, Watch(**policy), rng=NoCredit(7))
    assert call("/charge", answering(503)) == 503
    gate = dependency.gate
    # While the call waits for its turn, due at 2 s, a critical call takes a place ahead of it.
    clock.while_waiting = lambda: gate.turn_for(Asker("critical"), clock.now)
    sent = answering(200)
    with pytest.raises(NoTurn) as refused:
        call("/charge", sent)
    assert sent.timeouts == [] and clock.waits == [2.0, 1.0], "in line until 3 s after it began, then out"
    assert refused.value.waited_ns == 3 * S
    assert gate.waiting == 1, "it left the line"
    assert gate.tally().shed == (0, 1, 0), "it waited as long as it could: shed, in its class"


# --- what only the asyncio flavour does -----------------------------------


async def until(check, within=10.0):
    """Yields to the loop until ``check()`` comes true (failing the test
    if it does not within ``within`` seconds, rather than hanging)."""
    async with asyncio.timeout(within):
        while not check():
            await asyncio.sleep(0.001)


def test_a_cancelled_attempt_gives_back_its_breaker_permit_and_raises_cancelled_error():
    async def scenario():
        clock = VirtualTime()
        reporter = Reporter("http://127.0.0.1:9", "pod-1", interval=3600)
        payments = AsyncDependency(Watch(maxRetries=0, circuitBreaker=BREAKER), "payments", reporter,
                                   clock=clock.clock)
        assert await payments.call("/charge", _answer(500)) == 500
        breaker = payments.breaker
        assert breaker.state == "open"
        clock.now += 2 * S  # past openTimeoutMs: the next call is the one trial
        started, cancelled = asyncio.Event(), []

        async def hangs(timeout):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        call = asyncio.create_task(payments.call("/charge", hangs))
        await started.wait()
        assert breaker.state == "half-open" and reporter._services["payments"].in_flight == 1
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert cancelled == [True], "the attempt under way was cancelled"
        assert reporter._services["payments"].in_flight == 0
        assert await payments.call("/charge", _answer(200)) == 200, \
            "the one trial slot was given back: a new trial went, and closed the breaker"
        assert breaker.state == "closed"

    asyncio.run(scenario())


def test_a_call_cancelled_in_the_gates_line_leaves_it_and_gives_back_its_permit():
    async def scenario():
        clock = VirtualTime()
        block = {"enabled": True, "overloadWhen": "any-refusal"}
        payments = AsyncDependency(Watch(maxRetries=0, circuitBreaker=BREAKER, gate=block),
                                   "payments", clock=clock.clock, rng=NoCredit())
        assert await payments.call("/charge", _answer(503)) == 503
        gate, breaker = payments.gate, payments.breaker
        assert breaker.state == "closed", "the 503 the gate paces is not the breaker's"
        breaker.acquire(clock.now).record(True, clock.now)  # another call's failure
        assert gate.is_on and breaker.state == "open"
        clock.now += 3 * S // 2  # past openTimeoutMs; its turn, 2 s after the 503, is not due yet
        sent = []
        call = asyncio.create_task(payments.call("/charge", _answer(200, sent)))
        await until(lambda: gate.waiting == 1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert gate.waiting == 0 and gate.first_in_line() is None, "it left the line"
        assert not sent, "its attempt was never sent"
        assert breaker.state == "half-open" and breaker.acquire(clock.now).trial, \
            "its trial permit was given back"

    asyncio.run(scenario())


def test_a_call_cancelled_in_its_backoff_sends_nothing_more():
    async def scenario():
        sent = []
        payments = AsyncDependency(Watch(maxRetries=3, initialDelayMs=60_000, jitter="none"), "payments")
        call = asyncio.create_task(payments.call("/charge", _answer(503, sent)))
        await until(lambda: sent)
        await asyncio.sleep(0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert sent == [503]

    asyncio.run(scenario())


def test_an_attempt_past_its_per_try_timeout_is_cut_short_and_counts_as_a_timeout():
    async def scenario():
        attempts = []

        async def hangs(timeout):
            attempts.append(timeout)
            await asyncio.Event().wait()

        reporter = Reporter("http://127.0.0.1:9", "pod-1", interval=3600)
        payments = AsyncDependency(Watch(maxRetries=1, perTryTimeoutMs=20, initialDelayMs=1, retryOn=["timeout"]),
                                   "payments", reporter)
        with pytest.raises(TimeoutError):
            await payments.call("/charge", hangs)
        assert attempts == [0.02, 0.02], "a timeout is retried when retryOn names it"
        counted = json.loads(reporter._take()[1])["reports"][0]["endpoints"][0]
        assert counted["requests"] == {"success": 0, "error": 2, "server_error": 0}

    asyncio.run(scenario())


def test_a_waiting_call_is_woken_from_another_thread_when_the_line_moves():
    flavour = flavours.Asyncio()
    try:
        payments = flavour.dependency(Watch(maxRetries=0, maxElapsedMs=10_000, gate={"enabled": True,
                                                                                     "minRate": 50.0,
                                                                                     "overloadWhen": "any-refusal"}),
                                      "payments", rng=NoCredit())
        assert payments.call("/charge", lambda timeout: 503) == 503
        gate = payments.gate
        ahead = gate.turn(time.monotonic_ns())
        assert ahead is not None, "no credit yet: the test's own ticket is first in line"
        results = []
        caller = threading.Thread(target=lambda: results.append(payments.call("/charge", lambda timeout: 200)))
        caller.start()
        assert eventually(lambda: gate.waiting == 2), "the call waits behind the test's ticket"
        gate.leave(ahead)  # from this thread, not the loop's
        caller.join(timeout=10)
        assert results == [200], "woken, not left to wait for its deadline"
        assert gate.waiting == 0
    finally:
        flavour.close()


def _answer(status, sent=None):
    async def attempt(timeout):
        if sent is not None:
            sent.append(status)
        return status

    return attempt


# --- against the real daemon ----------------------------------------------


def test_calls_from_coroutines_follow_the_policy_and_reach_the_daemon(daemon):
    url, _, _ = daemon(policy=POLICY.format(retries=2, breaker="false"))
    reporter = Reporter(url, "pod-1", interval=3600, timeout=5)
    answers = iter([503, 503, 200, 503, 503, 503])

    async def scenario():
        async with AsyncPolicyWatch(url, ["payments"], watch_wait=5, min_poll_interval=0.05) as watch:
            assert watch.source == "daemon" and watch.policy("payments")["maxRetries"] == 2
            payments = AsyncDependency(watch, "payments", reporter)
            timeouts = []

            async def attempt(timeout):
                timeouts.append(timeout)
                await asyncio.sleep(0)
                return next(answers)

            assert await payments.call("/charge", attempt) == 200
            assert await payments.call("/charge", attempt) == 503, "out of retries: the last status"
            assert timeouts == [2.0] * 6, "perTryTimeout from the policy"
        await asyncio.to_thread(reporter.flush)

    asyncio.run(scenario())
    assert metric(url, requests_sample("/charge", "payments", "server_error")) == 5
    assert metric(url, requests_sample("/charge", "payments", "success")) == 1


def test_the_async_watch_follows_an_edit_and_stops_at_once_with_a_long_poll_open(daemon):
    url, policy, _ = daemon(retries=2)

    async def scenario():
        watch = AsyncPolicyWatch(url, ["payments"], watch_wait=30, min_poll_interval=0.05)
        async with watch:
            task = watch._task
            assert watch.policy("payments")["maxRetries"] == 2
            policy.write_text(POLICY.format(retries=4, breaker="false"))
            await until(lambda: watch.policy("payments")["maxRetries"] == 4)
            await asyncio.sleep(0.1)  # the next long-poll is open, for up to 30 s
            with pytest.raises(RuntimeError, match="started already"):
                await watch.start()
        assert task.done() and watch._task is None, "stopped without waiting for the long-poll"

    asyncio.run(scenario())
