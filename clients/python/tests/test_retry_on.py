"""The Python retryOn against stormguard-core's, status by status."""

import json
import pathlib

import pytest

from stormguard_client.retry_on import FAILURES, RetryOn

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "retry-on.json"
CASES = json.loads(VECTORS.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(map(str, c["retryOn"])) or "none")
def test_every_status_and_failure_is_decided_as_core_decides(case):
    retry_on = RetryOn(case["retryOn"])
    assert [s for s in range(100, 600) if retry_on.retries_status(s)] == case["statuses"]
    assert [f for f in FAILURES if retry_on.retries_failure(f)] == case["failures"]


def test_an_unknown_condition_is_refused_naming_it():
    with pytest.raises(ValueError, match="'6xx'"):
        RetryOn(["6xx"])


def test_a_condition_listed_twice_is_refused_naming_the_list():
    with pytest.raises(ValueError, match=r"^retryOn: 429 is listed twice$"):
        RetryOn(["5xx", 429, 429])
    with pytest.raises(ValueError, match=r"^gate\.overloadOn: 'timeout' is listed twice$"):
        RetryOn(["timeout", 503, "timeout"], key="gate.overloadOn")


def test_the_overload_conditions_are_cores_default():
    overload = RetryOn.overload()
    assert list(overload) == ["connect-failure", "timeout", 429, 503]
    assert [s for s in range(100, 600) if overload.covers_status(s)] == [429, 503]
    assert [f for f in FAILURES if overload.covers_failure(f)] == ["connect-failure", "timeout"]
    assert "timeout" in overload and 503 in overload and "503" not in overload and "5xx" not in overload
    assert overload == RetryOn(["connect-failure", "timeout", 429, 503]) != RetryOn([503])


@pytest.mark.parametrize("status", [100, 200, 304, 399, 600, 999])
def test_a_status_that_is_not_an_error_is_refused_as_the_daemon_refuses_it(status):
    # The daemon and the Go client retry only on 400 to 599: a policy that
    # lists 200 must not read differently here.
    with pytest.raises(ValueError, match=rf"^gate\.overloadOn: status {status} is not an error status; retry only on 400 to 599$"):
        RetryOn([503, status], key="gate.overloadOn")


def test_the_error_statuses_at_either_end_are_conditions():
    assert 400 in RetryOn([400, 599]) and 599 in RetryOn([400, 599])
