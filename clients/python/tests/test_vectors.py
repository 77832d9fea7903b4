"""The Python delay law against stormguard-core's, case by case."""

import json
import pathlib

import pytest

from stormguard_client import Backoff

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "backoff.json"
CASES = json.loads(VECTORS.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['jitter']}-{c['attempt']}-{c['draw']}")
def test_the_delay_is_cores_to_the_nanosecond(case):
    backoff = Backoff(
        initial_nanos=case["initialNanos"],
        max_nanos=case["maxNanos"],
        multiplier=case["multiplier"],
        jitter=case["jitter"],
        jitter_factor=case["jitterFactor"],
        delays_nanos=tuple(case["delaysNanos"]),
    )
    assert backoff.delay(case["attempt"], case["previousNanos"], case["draw"]) == case["delayNanos"]


def test_there_are_enough_cases_to_matter():
    assert len(CASES) >= 1000
    assert {c["jitter"] for c in CASES} == {"none", "full", "equal", "decorrelated", "proportional"}


def test_a_bad_setting_is_refused_naming_it():
    with pytest.raises(ValueError, match="jitter must be one of"):
        Backoff(initial_nanos=1, max_nanos=2, multiplier=2.0, jitter="gaussian")
    with pytest.raises(ValueError, match="draw must be 64 random bits"):
        Backoff(initial_nanos=1, max_nanos=2, multiplier=2.0, jitter="full").delay(0, 0, -1)
