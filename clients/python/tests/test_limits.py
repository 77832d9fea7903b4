"""The client holds a policy to the daemon's own ranges: every range in
``limits.json`` (which stormguard-core writes) that the client applies, at
its ends and just inside and outside them, is allowed or refused here as the
daemon allows or refuses it."""

import json
from collections.abc import Callable
from importlib import resources

import pytest

from stormguard_client import limits, settings
from stormguard_client.policies import DEFAULT_POLICY

NOT_APPLIED = ("retryThrottling.", "hedging.")
"""The blocks this client does not apply (gRPC's throttling, hedging), so
has no ranges to hold them to."""

READERS: dict[str, Callable[[dict[str, object]], object]] = {
    "maxRetries": settings.max_retries,
    "maxDelay": settings.backoff, "multiplier": settings.backoff, "jitterFactor": settings.backoff,
    "delays": settings.backoff,
    "perTryTimeout": settings.per_try_timeout, "maxElapsed": settings.max_elapsed,
    "budget": settings.budget, "circuitBreaker": settings.breaker, "gate": settings.gate,
}


def served(r: limits.Range, value: float) -> dict[str, object]:
    """A policy, as the daemon serves it, setting ``r``'s key to ``value``."""
    block, _, name = r.key.rpartition(".")
    if r.key == "delays":
        return {"delaysMs": [0] * int(value)}
    if block == "gate.maxWait":
        return {"gate": {"enabled": True, "maxWait": {name + "Ms": value / 1e6}}}
    if r.key == "circuitBreaker.slidingWindow":
        window = {"type": "count", "calls": int(value)} if r.unit == "count" else {"type": "time", "durationMs": value / 1e6}
        return {block: {"enabled": True, name: window}}
    if r.unit == "count":
        setting: object = int(value)
    elif r.unit == "duration":
        name, setting = name + "Ms", value / 1e6
    else:
        setting = value
    if block:
        return {block: {"enabled": True, name: setting}}
    return {name: setting}


def applied() -> list[limits.Range]:
    return [r for r in limits.RANGES if not r.key.startswith(NOT_APPLIED)]


@pytest.mark.parametrize("r", applied(), ids=lambda r: f"{r.key}:{r.unit}")
def test_each_range_is_the_daemons(r: limits.Range) -> None:
    if r.key == "gate.maxRate":
        r = r.starting_at(DEFAULT_POLICY["gate"]["minRate"])  # never below minRate either
    read = READERS[r.key.split(".")[0]]
    for value, allowed in r.edges():
        if r.key == "delays" and value < 0:
            continue  # a list cannot be shorter than empty
        try:
            read(served(r, value))
            refusal = None
        except ValueError as error:
            refusal = error
        assert (refusal is None) == allowed, f"{r.key} = {value} ({r.unit}): {refusal or 'allowed'}"


def test_every_range_is_applied_but_those_of_blocks_the_client_lacks() -> None:
    skipped = {r.key.split(".")[0] + "." for r in limits.RANGES if r not in applied()}
    assert skipped == set(NOT_APPLIED)
    assert len(applied()) == 29


def test_a_refusal_reads_as_the_daemons() -> None:
    with pytest.raises(ValueError, match=r"^maxRetries must be between 0 and 100, found 101$"):
        settings.max_retries({"maxRetries": 101})
    with pytest.raises(ValueError, match=r"^gate.beta must be above 0 and below 1, found 1$"):
        settings.gate({"gate": {"enabled": True, "beta": 1}})
    with pytest.raises(ValueError, match=r"^budget.retryRatio must be between 0 and 1000, found 1000.5$"):
        settings.budget({"budget": {"retryRatio": 1000.5}})


@pytest.mark.parametrize("r", [r for r in applied() if r.key != "gate.maxRate"], ids=lambda r: f"{r.key}:{r.unit}")
def test_a_refusal_is_worded_as_the_daemon_words_it(r: limits.Range) -> None:
    """Word for word, durations included ("found 1h0m0.000000001s"), as
    core gives each value just outside the range in limits.json (all but
    gate.maxRate's, whose lower end is the policy's minRate, for the
    daemon as here)."""
    read = READERS[r.key.split(".")[0]]
    for refusal in REFUSALS[(r.key, r.unit)]:
        with pytest.raises(ValueError) as raised:
            read(served(r, refusal["value"]))
        assert str(raised.value) == f"{r.key} {refusal['message']}"


REFUSALS = {(r["key"], r["unit"]): r["refusals"]
            for r in json.loads(resources.files("stormguard_client").joinpath("limits.json").read_text())["limits"]}
"""What core tells each value just outside each range."""


@pytest.mark.parametrize(("nanos", "text"), [
    (0, "0s"), (1, "1ns"), (999_999, "999.999us"), (1_500_000, "1.5ms"), (999_999_999, "999.999999ms"),
    (1_000_000_000, "1s"), (90_000_000_000, "1m30s"), (3_600_000_000_001, "1h0m0.000000001s"),
    (86_400_000_000_000, "24h0m0s"),
])
def test_durations_are_written_as_a_policy_file_writes_them(nanos: int, text: str) -> None:
    assert limits.go_duration(nanos) == text
