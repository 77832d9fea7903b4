"""The package as pip installs it: its version is the Rust workspace's, and
it carries its data and its type marker. Under CI the tests run against
the wheel .ci/run built and installed (``STORMGUARD_TEST_INSTALLED`` set),
not the source tree: this checks they do."""

import importlib.metadata
import importlib.resources
import json
import os
import pathlib
import tomllib

import pytest

import stormguard_client
from conftest import ROOT

PYPROJECT = ROOT / "clients" / "python" / "pyproject.toml"


def cargo_version():
    return tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]


def test_the_package_version_is_the_workspaces():
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    assert declared == cargo_version(), "clients/python/pyproject.toml's version follows Cargo.toml's [package]"


def test_the_package_carries_its_default_policy_limits_and_type_marker():
    files = importlib.resources.files("stormguard_client")
    assert json.loads(files.joinpath("default_policy.json").read_text())["maxRetries"] == 3
    assert json.loads(files.joinpath("limits.json").read_text())["limits"][0]["key"] == "maxRetries"
    assert files.joinpath("py.typed").is_file()


def test_the_core_needs_only_the_standard_library_and_httpx_is_an_extra():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["dependencies"] == []
    assert [r.split(">")[0].split("=")[0] for r in project["optional-dependencies"]["httpx"]] == ["httpx"]


def test_under_ci_the_installed_wheel_is_what_is_tested():
    if not os.environ.get("STORMGUARD_TEST_INSTALLED"):
        pytest.skip("run against the source tree (CI sets STORMGUARD_TEST_INSTALLED for the wheel)")
    source = ROOT / "clients" / "python" / "stormguard_client"
    assert pathlib.Path(stormguard_client.__file__).resolve().parent != source.resolve(), \
        "the tests imported the source tree, not the installed wheel"
    assert importlib.metadata.version("stormguard-client") == cargo_version()
    assert "httpx" in (importlib.metadata.metadata("stormguard-client").get_all("Provides-Extra") or [])
