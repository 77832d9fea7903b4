"""The Python policy watch: what the conformance scenarios
(test_conformance.py, against the real daemon) do not cover."""

import json

import pytest

from conftest import ROOT
from stormguard_client import PolicyWatch
from stormguard_client.policies import DEFAULT_POLICY


def test_bad_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="services"):
        PolicyWatch("http://127.0.0.1:1", [])
    with pytest.raises(ValueError, match="daemon"):
        PolicyWatch("ftp://x", ["a"])
    with pytest.raises(ValueError, match="watch_wait"):
        PolicyWatch("http://127.0.0.1:1", ["a"], watch_wait=0)


def test_the_defaults_are_cores():
    vectors = ROOT / "clients" / "vectors" / "default-policy.json"
    assert json.loads(vectors.read_text()) == DEFAULT_POLICY
