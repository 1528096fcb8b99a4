"""Fixtures for end-to-end tests against the simulated cluster (simcluster.py).

- ``sim_cluster`` (module scope): a 3-node cluster (node-01 head, node-02/03 workers, 8x910B4
  each), closed at the end of the module.
- ``sim``: the same module cluster for one test, put back to healthy after the test
  (``SimCluster.reset()``), so a test that forgot to undo a fault does not leak it.
- ``sim_cluster_factory``: ``make(**SimCluster kwargs)`` for extra clusters (other sizes,
  sshd options); each is closed after the test.
- ``require_iptables``: for tests that use ``SimNode.firewall``.

Without root, ``/usr/sbin/sshd``, ``ip``, ``unshare``, ``nsenter``, ``ssh`` or ``ssh-keygen``
these fixtures skip the test with the reason; with the environment variable ``CI`` set they
fail it instead (CI installs all of them, so a skip there would hide a broken setup).
"""
from __future__ import annotations

import os
import shutil

import pytest

from .simcluster import SimCluster, missing_prerequisites


def require(*extra_tools: str) -> None:
    """Skip (or, under CI, fail) the calling test when the simulated cluster can't run here."""
    missing = missing_prerequisites() + [t for t in extra_tools if shutil.which(t) is None]
    if missing:
        msg = "simulated cluster needs: " + ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(msg + " -- CI is set, so this is a broken CI setup, not a skip", pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def sim_prereqs() -> None:
    require()


@pytest.fixture(scope="module")
def sim_cluster(sim_prereqs):
    cluster = SimCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def sim(sim_cluster):
    yield sim_cluster
    sim_cluster.reset()


@pytest.fixture
def sim_cluster_factory(sim_prereqs):
    made: list[SimCluster] = []

    def make(**kwargs) -> SimCluster:
        cluster = SimCluster(**kwargs)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        errors = []
        for cluster in made:
            try:
                cluster.close()
            except Exception as e:  # close them all, then report
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def require_iptables(sim_prereqs) -> None:
    require("iptables")
