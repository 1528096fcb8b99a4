"""The fault suite runs against the same simulated cluster as the e2e tests."""

from tests.e2e.conftest import require_iptables, sim, sim_cluster, sim_cluster_factory, sim_prereqs  # noqa: F401
