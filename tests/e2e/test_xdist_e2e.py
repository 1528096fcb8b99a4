"""Under pytest-xdist (-n auto, -n 2) the checker gives the same results as a serial run, the nodes are
probed once (one worker gathers for all), and the controller writes the reports."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.faults.test_hostile_nodes import _group_alive

from .test_preflight_e2e import problems, run_env, run_preflight

pytest.importorskip("xdist")


def results(doc):
    return sorted((r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"])


def _logins(sim) -> dict[str, int]:
    return {n.name: n.sshd_log.read_text(errors="replace").count("Accepted publickey") for n in sim.nodes}


def test_xdist_run_matches_serial_run(sim, tmp_path):
    groups = {"min_nofile": sim.default_nofile}
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups)
    with sim.node("node-02").set_npu(3, link="DOWN"):
        before = _logins(sim)
        serial_proc, serial = run_preflight(inv, tmp_path / "serial")
        middle = _logins(sim)
        xdist_proc, parallel = run_preflight(inv, tmp_path / "xdist", "-n", "auto")  # as the README says
        after = _logins(sim)
    # The same SSH logins on every node as the serial run: the second worker did not probe again.
    assert {n: after[n] - middle[n] for n in after} == {n: middle[n] - before[n] for n in middle}
    workers = re.search(r"created: (\d+)/\1 workers", xdist_proc.stdout)
    assert workers and int(workers.group(1)) >= 2 or os.cpu_count() < 2, xdist_proc.stdout[-1500:]
    assert results(parallel) == results(serial)
    assert ("hccl.link_up", "node-02", "npu3", "failed") in problems(parallel)
    assert parallel["ready"] is serial["ready"] is False
    assert [h["reachable"] for h in parallel["hosts"]] == [True, True, True]
    assert xdist_proc.returncode == serial_proc.returncode == 1
    # The gathering's timings reach preflight.json from the worker that gathered ({} and 0.0 before).
    assert set(parallel["timings"]) == set(serial["timings"]) and "phase_one" in parallel["timings"], parallel["timings"]
    assert parallel["gather_s"] > 0
    # One set of reports, written by the controller.
    assert len(list((tmp_path / "xdist" / "reports" / "runs").iterdir())) == 1
    # The facts the first worker left for the others (secrets included) are gone with the run.
    assert not list((tmp_path / "xdist" / "tmp").glob("preflight-*"))  # the run's TMPDIR (run_env)


def test_xdist_and_serial_fail_a_dead_host_no_selected_check_looks_at_it(sim, tmp_path):
    """-k versions_agree leaves an unreachable node out of the comparison: both runs said READY."""
    groups = {"min_nofile": sim.default_nofile}
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups,
                              extra_hosts=[{"name": "ghost-01", "address": "127.0.0.1", "port": 1}])
    serial_proc, serial = run_preflight(inv, tmp_path / "serial", "-k", "versions_agree", "--connect-timeout", "5")
    xdist_proc, parallel = run_preflight(inv, tmp_path / "xdist", "-k", "versions_agree", "--connect-timeout", "5",
                                         "-n", "2")
    for proc, doc in ((serial_proc, serial), (xdist_proc, parallel)):
        assert proc.returncode == 1 and doc["ready"] is False, proc.stdout[-1500:]
        [dead] = [r for r in doc["results"] if r["check"] == "cluster.reachable"]
        assert dead["host"] == "ghost-01" and dead["outcome"] == "failed" and "was not selected" in dead["message"]
    assert results(parallel) == results(serial)


@pytest.mark.parametrize("group", [True, False])
def test_sigterm_under_xdist_the_controller_writes_interrupted_reports(sim, tmp_path, group):
    """SIGTERM to the controller (Kubernetes, `kill PID`) or to it and its workers (`timeout`,
    Slurm, systemctl stop): the controller writes the reports, INTERRUPTED, exit code 2; no worker
    is left.  The workers keep SIGTERM's default: the controller stops them, as for Ctrl-C."""
    groups = {"min_nofile": sim.default_nofile}
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups)
    node = sim.node("node-03")
    with node.override("npu-smi", "info", sleep=3600):
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "--inventory", str(inv), "--report-dir", str(tmp_path / "reports"),
             "-p", "no:cacheprovider", "--command-timeout", "20", "-n", "2"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env(tmp_path),
            start_new_session=True)
        try:
            seen: list[str] = []
            reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)
            reader.start()
            # A worker gathers (its progress lines stay in the worker): wait until the workers have
            # collected (the controller's run has begun) and node-03 hangs in npu-smi.
            deadline = time.monotonic() + 60
            while not (any("workers [" in line for line in seen) and node.extra_processes()) \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            assert any("workers [" in line for line in seen) and node.extra_processes(), seen
            time.sleep(1)  # node-01 and node-02 done meanwhile, or not: either way an interrupted run
            proc.send_signal(signal.SIGTERM)
            if group:
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
            reader.join(timeout=5)
            out = "".join(seen)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 2, out[-2000:]
    assert "verdict: INTERRUPTED (SIGTERM)" in out, out[-2000:]
    doc = json.loads((tmp_path / "reports" / "latest" / "preflight.json").read_text())
    assert doc["interrupted"] is True and doc["ready"] is False and doc["exit_code"] == 2
    assert (tmp_path / "reports" / "latest" / "matrix.html").read_text().count("INTERRUPTED") == 1
    end = time.monotonic() + 20
    while _group_alive(proc.pid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _group_alive(proc.pid)
