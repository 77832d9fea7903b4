"""The Python retry budget against stormguard-core's, verdict by verdict."""

import json
import pathlib

import pytest

from stormguard_client.budget import RetryBudget

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "budget.json"
SCENARIOS = json.loads(VECTORS.read_text())["scenarios"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s['retryRatio']}-{s['minRetriesPerSecond']}-{s['ttlNanos']}")
def test_every_verdict_is_cores(scenario):
    budget = RetryBudget(scenario["retryRatio"], scenario["minRetriesPerSecond"], scenario["ttlNanos"])
    for op in scenario["ops"]:
        if op[0] == "deposit":
            budget.deposit(op[1])
        else:
            assert budget.try_retry(op[1]) == op[2], f"retry at {op[1]} ns"


def test_the_scenarios_refuse_and_allow():
    verdicts = [op[2] for s in SCENARIOS for op in s["ops"] if op[0] == "retry"]
    assert True in verdicts and False in verdicts


def test_a_bad_setting_is_refused():
    with pytest.raises(ValueError, match="retry_ratio"):
        RetryBudget(-1, 0, 1)
