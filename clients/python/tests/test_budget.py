"""The Python retry budget against stormguard-core's, verdict by verdict."""

import json
import pathlib

import pytest

from stormguard_client.budget import LocalFloor, RetryBudget

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "budget.json"
SCENARIOS = json.loads(VECTORS.read_text())["scenarios"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s['retryRatio']}-{s['minRetriesPerSecond']}-{s['ttlNanos']}")
def test_every_verdict_is_cores(scenario):
    budget = RetryBudget(scenario["retryRatio"], scenario["minRetriesPerSecond"], scenario["ttlNanos"])
    floor = LocalFloor(scenario["minRetriesPerSecond"])
    for op in scenario["ops"]:
        if op[0] == "deposit":
            budget.deposit(op[1])
        elif op[0] == "answer":
            budget.set_min_retries_per_second(floor.answered(op[2], op[3]))
        elif op[0] == "unreachable":
            budget.set_min_retries_per_second(floor.unreachable())
        else:
            assert budget.try_retry(op[1]) == op[2], f"retry at {op[1]} ns"


def test_the_scenarios_refuse_and_allow():
    verdicts = [op[2] for s in SCENARIOS for op in s["ops"] if op[0] == "retry"]
    assert True in verdicts and False in verdicts


def test_fleet_scoped_scenarios_hand_the_budget_its_parts():
    fleet = [s for s in SCENARIOS if s["scope"] == "fleet"]
    kinds = {op[0] for s in fleet for op in s["ops"]}
    assert {"answer", "unreachable", "retry"} <= kinds


def test_a_local_floor_starts_whole_follows_the_daemon_and_falls_back_to_an_even_part():
    floor = LocalFloor(10)
    assert floor.initial() == 10 and floor.unreachable() == 10
    assert floor.answered(0.25, 40) == 0.25
    assert floor.unreachable() == 0.25
    assert floor.answered(50, 2) == 10
    assert floor.answered(float("nan"), 4) == 2.5


def test_a_bad_setting_is_refused():
    with pytest.raises(ValueError, match="retry_ratio"):
        RetryBudget(-1, 0, 1)
