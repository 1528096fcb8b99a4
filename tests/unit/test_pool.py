"""preflight.pool and the Gatherer's pool: a host past its deadline is abandoned without holding
up the others, and closing what it left never blocks the run."""

from __future__ import annotations

import threading
import time

from preflight import gather
from preflight.gather import Gatherer, GatherSettings
from preflight.inventory import Host
from preflight.pool import run_bounded


def test_a_blocking_on_timeout_does_not_keep_the_other_items_from_finishing():
    """on_timeout ran under the pool's lock: one that blocked (closing a connection through a
    stalled jump host) kept every worker from recording its result, and the run froze."""
    results: dict = {}
    stuck, abandoning = threading.Event(), threading.Event()

    def work(item):
        if item == "stuck":
            stuck.wait(120)
            return "late"
        if item == "filler":  # holds the second worker, so "quick" starts later than "stuck"
            time.sleep(2.0)
            return "ok"
        abandoning.wait(60)  # "quick" finishes while on_timeout below is still waiting
        return "ok"

    def on_timeout(item, elapsed):
        abandoning.set()
        deadline = time.monotonic() + 30
        while "quick" not in results and time.monotonic() < deadline:
            time.sleep(0.02)
        return "abandoned" if "quick" in results else "blocked the pool"

    try:
        got = run_bounded(["stuck", "filler", "quick"], work, workers=2, deadline=4.0, on_timeout=on_timeout,
                          results=results)
    finally:
        stuck.set()
    assert got == {"stuck": "abandoned", "filler": "ok", "quick": "ok"}
    time.sleep(0.1)
    assert results["stuck"] == "abandoned"  # the late answer does not replace it


class _Unclosable:
    """A transport whose close never returns (its jump host stopped reading)."""

    label = "n1"

    def __init__(self):
        self.release = threading.Event()

    def close(self):
        self.release.wait(300)

    def jump_failure(self):
        return None


def test_abandoning_a_host_and_closing_the_run_never_wait_for_a_close(monkeypatch):
    monkeypatch.setattr(gather, "CLOSE_WAIT_S", 0.5)
    g = Gatherer(GatherSettings(host_timeout=0.2, fanout=2))
    hosts = [Host(name="n1", address="n1")]
    stuck = _Unclosable()
    g.transports["n1"] = stuck
    hang = threading.Event()
    done = []

    def run():
        done.append(g.run_all(hosts, lambda host, left: hang.wait(300)))
        g.close()
        done.append("closed")

    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        runner.join(120)  # the pool's backstop is host_timeout + 5 s; far less than the closes' 300 s
        assert len(done) == 2, done
        facts = done[0]["n1"]
        assert not facts.reachable and facts.error_kind == "timeout" and "abandoned" in facts.error
    finally:
        hang.set()
        stuck.release.set()


def test_a_host_abandoned_behind_a_stalled_jump_host_names_the_jump_host():
    from preflight.transport import TransportError

    g = Gatherer(GatherSettings(host_timeout=0.2, fanout=2))
    stuck = _Unclosable()
    stuck.jump_failure = lambda: TransportError("unreachable", "jump host bastion stopped answering")
    g.transports["n1"] = stuck
    hang = threading.Event()
    try:
        facts = g.run_all([Host(name="n1", address="n1")], lambda host, left: hang.wait(300))["n1"]
    finally:
        hang.set()
        stuck.release.set()
    assert facts.error_kind == "unreachable" and facts.error == "n1: jump host bastion stopped answering"


def test_a_probe_cut_by_its_deadline_behind_a_given_up_jump_host_names_the_jump_host():
    """The jump host stalled in the last seconds of a host's time: the probe ended at its deadline,
    reported as the node's slowness ("did not finish within --host-timeout")."""
    from preflight.transport import RunResult, TransportError

    class _CutShort:
        label = "n1 (10.0.0.1)"
        failure = None

        def connect(self):
            pass

        def run(self, command, timeout, budget):
            return RunResult(b"", b"", None, False, ended="deadline")

        def jump_failure(self):
            return self.failure

    g = Gatherer(GatherSettings(host_timeout=5, fanout=2))
    cut = g.transports["n1"] = _CutShort()
    host = Host(name="n1", address="10.0.0.1")
    facts = g._probe(host, "true", "nonce", 5)
    assert facts.error_kind == "deadline" and "did not finish within --host-timeout" in facts.error
    cut.failure = TransportError("unreachable", "jump host bastion stopped answering")
    facts = g._probe(host, "true", "nonce", 5)
    assert facts.error_kind == "lost"  # cluster.reachable: "logged in, then jump host bastion stopped answering"
    assert facts.error == "jump host bastion stopped answering; facts gathered before that are kept"
