"""Reading the pieces of a policy, with the built-in defaults for what it lacks."""

import pytest

from stormguard_client import settings
from stormguard_client.policies import DEFAULT_POLICY


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
                        ({"budget": {"ttlMs": 500}}, "budget.ttlMs"),
                        ({"budget": {"minRetriesPerSecond": 1.5}}, "budget.minRetriesPerSecond"),
                        ({"budget": {"scope": "cluster"}}, "budget.scope"),
                        ({"circuitBreaker": {"enabled": True, "halfOpenMaxCalls": 0}}, "circuitBreaker.halfOpenMaxCalls"),
                        ({"perTryTimeoutMs": -5}, "perTryTimeoutMs"), ({"delaysMs": [1, "x"]}, r"delaysMs\[1\]")]:
        with pytest.raises(ValueError, match=key):
            for read in (settings.max_retries, settings.budget, settings.breaker, settings.per_try_timeout,
                         settings.backoff):
                read(policy)
