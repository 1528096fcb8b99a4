"""Reaching the nodes at all."""

from preflight.check import check
from preflight.reachable import DECLARATION, judge


@check("cluster.reachable", **DECLARATION)  # the id preflight.reachable.CHECK_ID names for the run
def test_reachable(host, gathered, verdict):
    judge(host, gathered, verdict)
