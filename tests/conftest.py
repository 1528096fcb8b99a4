"""Shared by every test folder: the product's own pytest runs leave out unrelated plugins.

Many tests run the product in a fresh pytest process (about 150 runs in the suite). Third-party
pytest plugins that happen to be installed on the machine have nothing to do with those runs, and
some cost a lot in each: hypothesis's plugin imports all of hypothesis at every session's end
(0.7 s of a 3 s run against the simulated cluster here, measured). The runs leave them out, as on a
machine where only ascend-preflight and its test extras are installed. ``-p no:NAME`` for a plugin
that is not installed does nothing.
"""
from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]  # the override of its fixture below needs it loaded first

UNRELATED_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:benchmark")


def _with_unrelated_plugins_left_out(addopts: str) -> str:
    if " ".join(UNRELATED_PLUGINS) in addopts:
        return addopts
    return " ".join(filter(None, [addopts, *UNRELATED_PLUGINS]))


def pytest_configure(config):
    # Inherited by every `python -m pytest` a test starts (and by pytest-xdist's workers).
    os.environ["PYTEST_ADDOPTS"] = _with_unrelated_plugins_left_out(os.environ.get("PYTEST_ADDOPTS", ""))


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester clears PYTEST_ADDOPTS for its runs: set it again for them."""
    monkeypatch.setenv("PYTEST_ADDOPTS", _with_unrelated_plugins_left_out(""))
    return pytester
