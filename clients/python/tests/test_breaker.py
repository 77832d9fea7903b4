"""The Python circuit breaker against stormguard-core's, op by op."""

import json
import pathlib
import threading

import pytest

from stormguard_client.breaker import (BreakerPolicy, CallNotPermitted, CircuitBreaker, CircuitState, Report,
                                       Verdict, _CountWindow, _rare, _TimeWindow, background_floor,
                                       chance_explains, millis_to_nanos)

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "breaker.json"
SCENARIOS = json.loads(VECTORS.read_text())["scenarios"]
EXCUSES = json.loads(VECTORS.read_text())["excuses"]


def _id(scenario):
    window = scenario["policy"]["slidingWindow"]
    policy = scenario["policy"]
    return (f"{window['type']}-{window.get('calls', window.get('durationMs'))}-{policy['consecutiveFailures']}"
            f"-{policy.get('scope', 'process')}")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_every_verdict_is_cores(scenario):
    breaker = CircuitBreaker(BreakerPolicy.from_json(scenario["policy"]), now_ns=0)
    permits = {}
    for i, op in enumerate(scenario["ops"]):
        where = f"op {i} {op}"
        if op[0] == "acquire":
            _, now, verdict, state = op
            if verdict[0] == "permit":
                permit = breaker.acquire(now)
                assert permit.trial == verdict[2], where
                permits[verdict[1]] = permit
            else:
                with pytest.raises(CallNotPermitted) as refused:
                    breaker.acquire(now)
                assert (refused.value.state, refused.value.retry_in_ns) == (verdict[0], verdict[1]), where
        elif op[0] == "record":
            _, now, permit, outcome, state = op
            assert outcome in ("success", "failure"), where
            permits.pop(permit).record(outcome == "failure", now)
        elif op[0] == "cancel":
            _, now, permit, state = op
            permits.pop(permit).cancel()
        elif op[0] == "heard":
            _, now, (word, trials, retry_in, lease), closed, state = op
            verdict = Verdict(CircuitState(word), trials, retry_in)
            assert breaker.heard(verdict, now + lease, now) == closed, where
        elif op[0] == "report":
            _, now, (is_open, open_for, refused, succeeded, failed), state = op
            assert breaker.fleet_report(now) == Report(is_open, open_for, refused, succeeded, failed), where
        else:
            pytest.fail(f"unknown op {op[0]!r}")
        assert breaker.state == state, where


def test_the_scenarios_visit_every_state_and_verdict():
    states = {op[-1] for s in SCENARIOS for op in s["ops"]}
    assert states == {"closed", "open", "half-open"}
    refusals = {op[2][0] for s in SCENARIOS for op in s["ops"] if op[0] == "acquire"}
    assert refusals == {"permit", "open", "half-open"}
    assert {op[0] for s in SCENARIOS for op in s["ops"]} == {"acquire", "record", "cancel", "heard", "report"}
    assert {s["policy"]["slidingWindow"]["type"] for s in SCENARIOS} == {"count", "time"}


def test_states_have_names_and_metric_numbers():
    assert [(str(s), s.metric) for s in CircuitState] == [("closed", 0), ("half-open", 1), ("open", 2)]


def test_milliseconds_round_as_rusts_duration_does():
    assert millis_to_nanos("k", 1000) == 1_000_000_000
    assert millis_to_nanos("k", 0.5) == 500_000
    assert millis_to_nanos("k", 0.999e-6) == 1, "rounded, not truncated (Rust's own doc example)"
    assert millis_to_nanos("k", 0.1) == 100_000
    with pytest.raises(ValueError, match="k must be"):
        millis_to_nanos("k", -1)
    with pytest.raises(ValueError, match="k must be"):
        millis_to_nanos("k", float("nan"))


def test_a_bad_setting_is_refused_naming_it():
    block = {"enabled": True, "consecutiveFailures": 3, "failureRateThreshold": 0.5, "slowCallRateThreshold": 1.0,
             "slowCallDurationMs": 100, "minimumCalls": 5, "slidingWindow": {"type": "count", "calls": 10},
             "openTimeoutMs": 1000, "halfOpenMaxCalls": 2, "successThreshold": 2}
    CircuitBreaker(BreakerPolicy.from_json(block))
    for key, value, message in [
        ("failureRateThreshold", 0.0, "failureRateThreshold must be above 0 and at most 1, found 0"),
        ("halfOpenMaxCalls", 0, "halfOpenMaxCalls must be between 1 and 1000, found 0"),
        ("openTimeoutMs", 0.5, "openTimeout must be between 1ms and 1h0m0s, found 500us"),
        ("minimumCalls", 10_001, "minimumCalls must be between 1 and 10000, found 10001"),
        ("slidingWindow", {"type": "time", "durationMs": 999}, "slidingWindow must be between 1s and"),
    ]:
        with pytest.raises(ValueError, match=f"^circuitBreaker.{message}"):
            CircuitBreaker(BreakerPolicy.from_json(dict(block, **{key: value})))
    with pytest.raises(ValueError, match="circuitBreaker.successThreshold is missing"):
        BreakerPolicy.from_json({k: v for k, v in block.items() if k != "successThreshold"})
    with pytest.raises(ValueError, match="circuitBreaker.minimumCalls must be a whole number"):
        BreakerPolicy.from_json(dict(block, minimumCalls=5.5))


def test_a_permit_from_before_a_transition_counts_for_nothing_and_threads_share_it():
    ms = 1_000_000
    policy = BreakerPolicy(enabled=True, consecutive_failures=2, open_timeout_ns=1000 * ms,
                           half_open_max_calls=1, success_threshold=1)
    breaker = CircuitBreaker(policy)
    stale = breaker.acquire(0)
    for _ in range(2):
        breaker.acquire(1 * ms).record(True, 2 * ms)
    assert breaker.state == "open"
    stale.record(False, 3 * ms)
    assert breaker.state == "open", "a call from the closed state cannot close it"
    with pytest.raises(CallNotPermitted) as refused:
        breaker.acquire(500 * ms)
    assert refused.value.retry_in_ns == 502 * ms
    trial = breaker.acquire(1002 * ms)
    assert trial.trial and breaker.state == "half-open"
    with pytest.raises(CallNotPermitted) as full:
        breaker.acquire(1003 * ms)
    assert (full.value.state, full.value.retry_in_ns) == ("half-open", 0)
    trial.cancel()
    breaker.acquire(1004 * ms).record(False, 1005 * ms)
    assert breaker.state == "closed"
    with pytest.raises(RuntimeError):
        trial.record(False, 1006 * ms)

    errors = []

    def hammer():
        try:
            for i in range(2000):
                breaker.acquire(2000 * ms + i).record(False, 2000 * ms + i)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and breaker.state == "closed"


def test_scope_is_read_and_a_bad_one_is_named():
    block = {"enabled": True, "consecutiveFailures": 3, "failureRateThreshold": 0.5, "slowCallRateThreshold": 1.0,
             "slowCallDurationMs": 100, "minimumCalls": 5, "slidingWindow": {"type": "count", "calls": 10},
             "openTimeoutMs": 1000, "halfOpenMaxCalls": 2, "successThreshold": 2}
    assert not BreakerPolicy.from_json(block).fleet_scoped, "a block without scope is each process's"
    assert BreakerPolicy.from_json({**block, "scope": "fleet"}).fleet_scoped
    with pytest.raises(ValueError, match='circuitBreaker.scope must be "process" or "fleet"'):
        BreakerPolicy.from_json({**block, "scope": "region"})


def test_every_excuse_is_cores():
    """For every background and breaker in the shared vectors, the bound of
    the background's failure rate is core's to the last bit, and the
    shortest run that opens the breaker is core's."""
    assert EXCUSES
    for case in EXCUSES:
        consecutive, threshold, calls, failures, floor, opens_at = case
        assert background_floor(failures, calls) == floor, case
        run = consecutive
        while chance_explains(run, consecutive, (calls, failures), threshold):
            run += 1
        assert run == opens_at, case


RUNS_POLICY = BreakerPolicy(enabled=True)
"""Opens after 5 failures in a row, rates over the last 100 calls: the defaults' triggers."""
LENIENT = BreakerPolicy(enabled=True, failure_rate_threshold=0.95)
"""The same, judging a background up to 49 % by the excuse alone, never by the failure rate."""


def _feed(breaker, failed):
    breaker.acquire(0).record(failed, 0)


def _pattern(breaker, calls, failing):
    """Calls of which ``failing`` (at most 7) of every ten fail, from the
    fourth: a background with no run longer than ``failing``."""
    for i in range(calls):
        _feed(breaker, 3 <= i % 10 < 3 + failing)


def _run_that_opens(breaker):
    """Fails calls until the breaker opens: the failures in a row it opened at."""
    for _ in range(100):
        _feed(breaker, True)
        if breaker.state == "open":
            return breaker._consecutive_failures
    pytest.fail("100 failures in a row did not open it")


def test_a_ten_percent_background_opens_it_at_consecutive_failures():
    breaker = CircuitBreaker(RUNS_POLICY)
    _pattern(breaker, 90, 1)
    assert _run_that_opens(breaker) == 5
    assert 0.1 * 0.1 * 0.1 * 0.1 * 0.1 > 1e-5, "in floating point 0.1⁵ rounds above 1e-5"
    assert _rare(0.1, 5) and not _rare(0.1, 4) and not _rare(0.10000001, 5)


def test_a_window_of_few_calls_does_not_excuse_a_run():
    fresh = CircuitBreaker(LENIENT)
    for i in range(20):
        _feed(fresh, i % 5 in (0, 2))
    assert _run_that_opens(fresh) == 5, "twenty calls, eight failed, excuse nothing"
    small = CircuitBreaker(BreakerPolicy(enabled=True, failure_rate_threshold=0.95, minimum_calls=40,
                                         sliding_window=("count", 40)))
    _pattern(small, 400, 3)
    assert _run_that_opens(small) == 5, "a window of forty calls excuses nothing"


def test_a_run_of_twice_consecutive_failures_opens_it_whatever_the_background():
    breaker = CircuitBreaker(LENIENT)
    _pattern(breaker, 100, 4)
    assert _run_that_opens(breaker) == 10


def test_a_flapping_dependency_does_not_excuse_its_next_real_run():
    steady = CircuitBreaker(RUNS_POLICY)
    _pattern(steady, 80, 3)
    alone = _run_that_opens(steady)
    flapping = CircuitBreaker(RUNS_POLICY)
    _pattern(flapping, 60, 3)
    for _ in range(2):
        for _ in range(7):
            _feed(flapping, True)
        assert flapping.state == "closed", "a flap of seven is excused"
        _pattern(flapping, 10, 3)
    assert _run_that_opens(flapping) == alone < 10


@pytest.mark.parametrize("window", [_CountWindow(8), _TimeWindow(10_000_000_000, 0)], ids=["count", "time"])
def test_a_long_runs_failures_stay_out_of_the_background_until_they_slide_out(window):
    ms = 1_000_000
    for i, failed in enumerate([False, True, False, True, True, True, False, True]):
        window.record(i * 900 * ms, failed, False)
        if i == 4:
            window.long_run()
    now = 7 * 900 * ms
    assert window.background(now) == (5, 2) and window.tally(now)[1] == 5
    later = now + 7500 * ms
    if window.capacity is not None:
        later = now
        for _ in range(5):
            window.record(now, False, False)
    assert window.background(later)[1] == 1 and window.tally(later)[1] == 2
    window.clear()
    window.record(later, True, False)
    assert window.background(later) == (1, 1)
