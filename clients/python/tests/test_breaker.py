"""The Python circuit breaker against stormguard-core's, op by op."""

import dataclasses
import json
import pathlib
import threading

import pytest

from stormguard_client.breaker import (SHORTEST_TRIAL_WINDOW_NS, TRIAL_WINDOW_NS, TRIALS_PER_ACCEPTED, BreakerPolicy,
                                       CallNotPermitted, CallOutcome, CircuitBreaker, CircuitState, Report, Verdict,
                                       millis_to_nanos)

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "breaker.json"
SCENARIOS = json.loads(VECTORS.read_text())["scenarios"]


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
            permits.pop(permit).record(CallOutcome(outcome), now)
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
    assert {op[3] for s in SCENARIOS for op in s["ops"] if op[0] == "record"} == {"success", "failure", "refused"}
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


S = 1_000_000_000


def _opened_at(breaker, now):
    """Opens ``breaker`` (consecutiveFailures 2) with two failures at ``now``."""
    for _ in range(2):
        breaker.acquire(now).record(True, now)
    assert breaker.state == "open"


def test_a_retuned_open_breaker_stays_open_and_its_new_timeout_counts_from_the_open():
    policy = BreakerPolicy(enabled=True, consecutive_failures=2, open_timeout_ns=30 * S,
                           half_open_max_calls=1, success_threshold=1)
    breaker = CircuitBreaker(policy, now_ns=0)
    _opened_at(breaker, S)
    with pytest.raises(CallNotPermitted):
        breaker.acquire(2 * S)
    shorter = dataclasses.replace(policy, failure_rate_threshold=0.9, open_timeout_ns=10 * S)
    breaker.retune(shorter)
    assert breaker.state == "open" and breaker.policy == shorter, "an edit mid-outage does not close it"
    with pytest.raises(CallNotPermitted) as refused:
        breaker.acquire(10 * S)
    assert (refused.value.state, refused.value.retry_in_ns) == ("open", S), "10 s from the open, not the retune"
    trial = breaker.acquire(11 * S)
    assert trial.trial and breaker.state == "half-open"
    assert (breaker.rejected, breaker.transitions) == (2, 2), "its counts are kept"
    trial.record(True, 12 * S)
    breaker.retune(dataclasses.replace(shorter, open_timeout_ns=60 * S))
    with pytest.raises(CallNotPermitted) as refused:
        breaker.acquire(42 * S)
    assert refused.value.retry_in_ns == 30 * S, "a longer timeout extends the open"
    with pytest.raises(ValueError, match="circuitBreaker.openTimeout"):
        breaker.retune(dataclasses.replace(shorter, open_timeout_ns=0))
    assert breaker.policy.open_timeout_ns == 60 * S, "a bad setting leaves it as it was"


def test_a_retune_keeps_the_windows_outcomes_unless_the_window_changes_shape():
    policy = BreakerPolicy(enabled=True, consecutive_failures=0, minimum_calls=10, sliding_window=("count", 10))
    sooner = dataclasses.replace(policy, minimum_calls=9)

    def half_failed():
        breaker = CircuitBreaker(policy, now_ns=0)
        for i in range(8):
            breaker.acquire(i).record(i % 2 == 1, i)
        return breaker

    breaker = half_failed()
    breaker.retune(sooner)
    breaker.acquire(9).record(True, 9)
    assert breaker.state == "open", "the same window: 5 failures of 9, judged under minimumCalls 9"
    for shape in [("count", 20), ("time", 10 * S)]:
        breaker = half_failed()
        breaker.retune(dataclasses.replace(sooner, sliding_window=shape))
        assert breaker._window.tally(9) == (0, 0, 0), f"{shape}: a window of another shape starts afresh"
        breaker.acquire(9).record(True, 9)
        assert breaker.state == "closed", f"{shape}: one failure of one call, under minimumCalls 9"


def test_a_breaker_retuned_from_fleet_to_process_scope_decides_alone_at_once():
    policy = BreakerPolicy(enabled=True, consecutive_failures=2, open_timeout_ns=S, half_open_max_calls=1,
                           success_threshold=1, fleet_scoped=True)
    breaker = CircuitBreaker(policy, now_ns=0)
    _opened_at(breaker, 0)
    breaker.heard(Verdict(CircuitState.OPEN, 0, 30 * S), 60 * S, 0)
    with pytest.raises(CallNotPermitted):
        breaker.acquire(2 * S)
    breaker.retune(dataclasses.replace(policy, fleet_scoped=False))
    assert not breaker.asks_fleet() and breaker.fleet_report(2 * S) is None
    trial = breaker.acquire(2 * S)
    assert trial.trial, "its own 1 s timeout has passed"
    trial.record(True, 2 * S)
    breaker.retune(policy)
    assert breaker.asks_fleet(), "back under scope fleet, the open breaker asks the daemon"
    assert breaker.acquire(3 * S + 1).trial, "the word it dropped does not come back"


def test_calls_may_run_while_the_breaker_is_retuned():
    policy = BreakerPolicy(enabled=True, consecutive_failures=2, open_timeout_ns=1_000_000, fleet_scoped=True)
    breaker = CircuitBreaker(policy, now_ns=0)
    errors = []

    def call():
        try:
            for i in range(2000):
                now = i * 1_000_000
                try:
                    breaker.acquire(now).record(i % 3 == 0, now)
                except CallNotPermitted:
                    pass
                breaker.fleet_report(now)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(200):
        breaker.retune(dataclasses.replace(policy, fleet_scoped=i % 2 == 0, sliding_window=("count", 10 + i % 3),
                                           open_timeout_ns=(1 + i % 5) * 1_000_000))
    for t in threads:
        t.join()
    assert not errors


# --- refusals: the dependency refused the call as overloaded, no gate pacing it ---

REFUSED, FAILURE, SUCCESS = CallOutcome.REFUSED, CallOutcome.FAILURE, CallOutcome.SUCCESS
# Opens after 3 failures in a row; rates judged over the last 10 calls once
# 10 are seen; 1 s open; 2 trials at once, 2 good ones close it.
POLICY = BreakerPolicy(enabled=True, consecutive_failures=3, failure_rate_threshold=0.5, minimum_calls=10,
                       sliding_window=("count", 10), open_timeout_ns=S, half_open_max_calls=2, success_threshold=2)


OPEN_TEN_SECONDS = dataclasses.replace(POLICY, open_timeout_ns=10 * S)
"""POLICY, but open for 10 s: its trials are counted over ten seconds."""


def call(breaker, outcome, now):
    """A call permitted and ended at ``now`` with ``outcome``."""
    breaker.acquire(now).record(outcome, now)


def tripped_by_refusals(breaker, now=0):
    """Refusals in a row trip a closed breaker: half-open."""
    for _ in range(3):
        call(breaker, REFUSED, now)
    assert breaker.state == "half-open"


def admits(breaker, now):
    """Whether the breaker would admit a call at ``now`` (the permit given back)."""
    try:
        breaker.acquire(now).cancel()
    except CallNotPermitted as refused:
        assert (refused.state, refused.retry_in_ns) == ("half-open", 0)
        return False
    return True


def test_the_trial_constants_are_cores():
    assert (TRIALS_PER_ACCEPTED, TRIAL_WINDOW_NS, SHORTEST_TRIAL_WINDOW_NS) == (2, 10 * S, S)


def test_refusals_trip_a_closed_breaker_half_open_and_failures_open_it():
    breaker = CircuitBreaker(OPEN_TEN_SECONDS)
    call(breaker, REFUSED, 0)
    call(breaker, FAILURE, 0)
    call(breaker, FAILURE, 0)
    assert breaker.state == "open", "the run ended on a failure"

    breaker = CircuitBreaker(OPEN_TEN_SECONDS)
    tripped_by_refusals(breaker)
    assert breaker.acquire(0).trial, "a trial, at once"


def test_half_open_trials_follow_what_the_dependency_accepts():
    breaker = CircuitBreaker(OPEN_TEN_SECONDS)
    tripped_by_refusals(breaker)
    call(breaker, REFUSED, 0)
    assert not admits(breaker, 0), "one refusal spends the first share"
    call(breaker, REFUSED, 5 * S)
    assert not admits(breaker, 5 * S), "two a window, the second after half of it"

    for outcome in (SUCCESS, REFUSED, REFUSED):
        call(breaker, outcome, 10 * S)
    assert not admits(breaker, 10 * S), \
        "the window holds 3 refused and 1 accepted: refusals may outnumber acceptances by two"
    for outcome in (SUCCESS, REFUSED, REFUSED):
        call(breaker, outcome, 15 * S)
    assert not admits(breaker, 15 * S), "2 accepted, 4 refused in the window"
    assert breaker.state == "half-open"
    rejected = breaker.rejected
    with pytest.raises(CallNotPermitted):
        breaker.acquire(15 * S)
    assert breaker.rejected == rejected + 1, "counted as rejected, as a trial slot refused is"


def test_refused_trials_open_the_breaker_only_after_a_window_with_none_accepted():
    breaker = CircuitBreaker(OPEN_TEN_SECONDS)
    tripped_by_refusals(breaker)
    call(breaker, REFUSED, 0)
    call(breaker, REFUSED, 5 * S)
    call(breaker, REFUSED, 10 * S)
    assert breaker.state == "open", "ten seconds of refusals, nothing accepted"
    with pytest.raises(CallNotPermitted) as refused:
        breaker.acquire(10 * S)
    assert (refused.value.state, refused.value.retry_in_ns) == ("open", 10 * S)

    breaker = CircuitBreaker(OPEN_TEN_SECONDS)
    tripped_by_refusals(breaker)
    call(breaker, SUCCESS, 9 * S)
    call(breaker, REFUSED, 11 * S)
    assert breaker.state == "half-open", "a trial accepted 2 s ago: the dependency is up"
    call(breaker, REFUSED, 20 * S)
    assert breaker.state == "open", "the accepted trial slid out of the window"


def test_a_refused_trial_that_was_slow_opens_the_breaker():
    breaker = CircuitBreaker(dataclasses.replace(POLICY, slow_call_duration_ns=S))
    tripped_by_refusals(breaker)
    breaker.acquire(0).record(REFUSED, 2 * S)
    assert breaker.state == "open", "slow: the dependency is struggling, not only refusing"


def test_accepted_trials_in_a_row_close_it_and_an_overload_then_trips_it_half_open_again():
    breaker = CircuitBreaker(OPEN_TEN_SECONDS)
    tripped_by_refusals(breaker)
    for outcome in (SUCCESS, REFUSED, SUCCESS):
        call(breaker, outcome, 5 * S)
    assert breaker.state == "half-open", "a refusal broke the run"
    call(breaker, SUCCESS, 5 * S)
    assert breaker.state == "closed", "two accepted in a row"
    tripped_by_refusals(breaker, 5 * S)


FLEET_SCOPED = dataclasses.replace(POLICY, fleet_scoped=True)


def opened(breaker, now=0):
    """Failures in a row open a closed breaker."""
    for _ in range(3):
        call(breaker, FAILURE, now)
    assert breaker.state == "open"
    return breaker


def closed_by_the_fleet(now=0):
    """A fleet-scoped breaker the daemon's trials closed at ``now``."""
    breaker = opened(CircuitBreaker(dataclasses.replace(OPEN_TEN_SECONDS, fleet_scoped=True), now), now)
    assert breaker.heard(Verdict(CircuitState.CLOSED, 0, 0), now + S, now)
    return breaker


def test_a_fleet_scoped_breaker_follows_what_is_accepted_in_the_overload_after_a_return_and_leaves_outages_to_the_fleet():
    breaker = CircuitBreaker(FLEET_SCOPED)
    for _ in range(3):
        call(breaker, REFUSED, 0)
    assert breaker.state == "open", "no return to follow: the fleet's half-open judges"

    breaker = closed_by_the_fleet()
    tripped_by_refusals(breaker)
    assert not breaker.asks_fleet(), "half-open on the overload: nothing for the daemon"
    assert not breaker.fleet_report(0).open
    assert not breaker.heard(Verdict(CircuitState.CLOSED, 0, 0), S, 0), "the fleet's word is for open breakers"
    assert breaker.state == "half-open"
    call(breaker, REFUSED, 0)
    call(breaker, REFUSED, 5 * S)
    call(breaker, REFUSED, 10 * S)
    assert breaker.state == "open", "ten seconds, none accepted"
    assert breaker.asks_fleet()
    assert breaker.fleet_report(10 * S).open

    breaker = closed_by_the_fleet()
    for _ in range(3):
        call(breaker, REFUSED, TRIAL_WINDOW_NS)
    assert breaker.state == "open", "ten seconds without a refusal: the return's overload ended"

    breaker = opened(CircuitBreaker(FLEET_SCOPED))
    breaker.heard(Verdict(CircuitState.HALF_OPEN, 1, 0), S, 0)
    trial = breaker.acquire(0)
    assert trial.fleet_trial, "the daemon's slot"
    trial.record(REFUSED, 0)
    assert breaker.fleet_report(0).failed == 1, "the daemon judges its trials"


def test_a_breaker_open_for_less_than_ten_seconds_judges_its_trials_as_briefly():
    # openTimeout 1 s: two trials a second, and a second of refusals opens it.
    breaker = CircuitBreaker(POLICY)
    tripped_by_refusals(breaker)
    call(breaker, REFUSED, 0)
    assert not admits(breaker, 0)
    call(breaker, REFUSED, S // 2)
    assert breaker.state == "half-open"
    call(breaker, REFUSED, S)
    assert breaker.state == "open", "a second, none accepted"


def test_a_permit_is_recorded_with_an_outcome_or_a_bool():
    breaker = CircuitBreaker(POLICY)
    for failed in (True, True, False):
        breaker.acquire(0).record(failed, 0)
    assert breaker.state == "closed", "True a failure, False a success: the run was broken"
    for outcome in (FAILURE, FAILURE, FAILURE):
        call(breaker, outcome, 0)
    assert breaker.state == "open"
