"""Reading the pieces of a policy, with the built-in defaults for what it lacks."""

import re

import pytest

from stormguard_client import settings
from stormguard_client.gate import GatePolicy, MaxWait
from stormguard_client.policies import DEFAULT_POLICY
from stormguard_client.retry_on import RetryOn


def test_an_empty_policy_reads_as_the_defaults():
    assert settings.max_retries({}) == 3
    assert settings.per_try_timeout({}) is None
    assert settings.backoff({}).initial_nanos == 100_000_000 and settings.backoff({}).jitter == "proportional"
    assert settings.retry_on({}).retries_status(429) and settings.retry_on({}).retries_failure("reset")
    budget = settings.budget({})
    assert budget is not None and budget._ratio == 0.2 and budget._slot_nanos == 1_000_000_000
    assert budget.scope == "process" and settings.budget({"budget": {"scope": "fleet"}}).scope == "fleet"
    assert settings.breaker({}) is None, "disabled by default"
    assert settings.breaker_policy({}).open_timeout_ns == 30 * 10**9


def test_a_partial_block_takes_the_rest_from_the_defaults():
    policy = {"maxRetries": 1, "perTryTimeoutMs": 250.5, "budget": {"enabled": False},
              "circuitBreaker": {"enabled": True, "openTimeoutMs": 1.5,
                                 "slidingWindow": {"type": "time", "durationMs": 2000}}}
    assert settings.max_retries(policy) == 1
    assert settings.per_try_timeout(policy) == 0.2505
    assert settings.budget(policy) is None
    breaker = settings.breaker(policy, now_ns=7)
    assert breaker.policy.open_timeout_ns == 1_500_000
    assert breaker.policy.sliding_window == ("time", 2_000_000_000)
    assert breaker.policy.success_threshold == DEFAULT_POLICY["circuitBreaker"]["successThreshold"]


def test_a_bad_value_is_refused_naming_its_key():
    for policy, key in [({"maxRetries": 101}, "maxRetries"), ({"budget": {"retryRatio": -1}}, "budget.retryRatio"),
                        ({"budget": {"ttlMs": 500}}, "budget.ttl must be between 1s and 1m0s, found 500ms"),
                        ({"budget": {"minRetriesPerSecond": 1.5}}, "budget.minRetriesPerSecond"),
                        ({"budget": {"scope": "cluster"}}, "budget.scope"),
                        ({"circuitBreaker": {"enabled": True, "halfOpenMaxCalls": 0}}, "circuitBreaker.halfOpenMaxCalls"),
                        ({"perTryTimeoutMs": -5}, "perTryTimeoutMs"), ({"delaysMs": [1, "x"]}, r"delaysMs\[1\]")]:
        with pytest.raises(ValueError, match=key):
            for read in (settings.max_retries, settings.budget, settings.breaker, settings.per_try_timeout,
                         settings.backoff):
                read(policy)


def test_the_gates_overload_on_is_read_as_retry_on_is():
    assert settings.gate_policy({}).overload_on == RetryOn(["connect-failure", "timeout", 429, 503]), "the default"
    explicit = settings.gate_policy({"gate": {"enabled": True, "overloadOn": ["5xx", 429, "reset"]}})
    assert explicit.overload_on == RetryOn(["5xx", 429, "reset"])
    assert explicit.overload_on.covers_status(500) and not explicit.overload_on.covers_status(501)
    assert not explicit.overloaded_by_timeouts and settings.gate_policy({}).overloaded_by_timeouts
    assert settings.gate_policy({"gate": {"overloadOn": []}}).overload_on == RetryOn([]), "none: nothing is overload"
    for overload_on, message in [(["timeout", "6xx"], "gate.overloadOn: '6xx' is not a condition this client knows"),
                                 ([503, "timeout", 503], "gate.overloadOn: 503 is listed twice"),
                                 ("503", "gate.overloadOn must be a list of conditions, not '503'")]:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            settings.gate_policy({"gate": {"enabled": True, "overloadOn": overload_on}})
    with pytest.raises(ValueError, match=r"^retryOn: 'reset' is listed twice$"):
        settings.retry_on({"retryOn": ["reset", "5xx", "reset"]})


def test_the_gates_overload_when_is_one_of_its_names():
    assert settings.gate_policy({}).overload_when == "evidence", "the default"
    assert settings.gate_policy({}).weighs_refusals
    chosen = settings.gate_policy({"gate": {"enabled": True, "overloadWhen": "any-refusal"}})
    assert chosen.overload_when == "any-refusal" and not chosen.weighs_refusals
    gate = settings.gate({"gate": {"enabled": True, "overloadWhen": "most-refused"}})
    assert gate is not None and gate.policy.overload_when == "most-refused" and gate.policy.weighs_refusals
    for overload_when in ("most_refused", "always", "", 2, None, True):
        message = f"gate.overloadWhen must be one of evidence, any-refusal, most-refused, not {overload_when!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            settings.gate_policy({"gate": {"enabled": True, "overloadWhen": overload_when}})


def test_the_gates_criticality_is_one_of_its_classes():
    assert settings.gate_policy({}).criticality == "default", "the default"
    for name in ("critical", "default", "sheddable"):
        assert settings.gate_policy({"gate": {"enabled": True, "criticality": name}}).criticality == name
    for criticality in ("urgent", "Critical", "", 0, None, True):
        message = f"gate.criticality must be one of critical, default, sheddable, not {criticality!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            settings.gate({"gate": {"enabled": True, "criticality": criticality}})


def test_the_gates_max_wait_is_read_per_class_and_held_to_the_daemons_range():
    gate = settings.gate({"gate": {"enabled": True, "maxWait": {"criticalMs": 0, "defaultMs": 2500.5,
                                                               "sheddableMs": 86_400_000}}})
    assert gate is not None
    assert (gate.policy.max_wait.of("critical"), gate.policy.max_wait.of("default"),
            gate.policy.max_wait.of("sheddable")) == (0, 2_500_500_000, 86_400 * 10**9), "both ends allowed"
    partial = settings.gate_policy({"gate": {"enabled": True, "maxWait": {"sheddableMs": 100}}}).max_wait
    assert (partial.critical_ns, partial.default_ns, partial.sheddable_ns) == (5 * 10**9, 10**9, 100_000_000), \
        "a bound it lacks from the defaults"
    for max_wait, message in [
            ({"sheddableMs": 86_400_001}, "gate.maxWait.sheddable must be between 0s and 24h0m0s, found 24h0m0.001s"),
            ({"criticalMs": 86_400_000.000001},
             "gate.maxWait.critical must be between 0s and 24h0m0s, found 24h0m0.000000001s"),
            ({"defaultMs": -1}, "gate.maxWait.defaultMs must be 0 or more finite milliseconds, not -1"),
            ({"defaultMs": "1s"}, "gate.maxWait.defaultMs must be a number of milliseconds, not '1s'"),
            (250, "gate.maxWait must be an object, not 250")]:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            settings.gate({"gate": {"enabled": True, "maxWait": max_wait}})


def test_an_older_daemons_gate_block_without_classes_reads_as_the_defaults():
    older = {key: value for key, value in DEFAULT_POLICY["gate"].items() if key not in ("criticality", "maxWait")}
    policy = GatePolicy.from_json({**older, "enabled": True})
    assert policy.criticality == "default"
    assert (policy.max_wait.critical_ns, policy.max_wait.default_ns, policy.max_wait.sheddable_ns) == \
        (5 * 10**9, 10**9, 250_000_000)
    assert policy == settings.gate_policy({"gate": {"enabled": True}}), "as the built-in defaults read"
    assert settings.gate_policy({"gate": {"enabled": True}}).max_wait == MaxWait.from_json(
        DEFAULT_POLICY["gate"]["maxWait"]), "the built-in defaults are core's"
