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


@pytest.fixture
def fds_above_1023():
    """Every file descriptor up to 1100 taken, so that the next socket or pipe gets one above
    1023, as in a controller holding a thousand connections (select() refuses those)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip(f"the open-files hard limit ({hard}) is below 1200")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
