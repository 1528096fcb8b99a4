"""sshd limits behind a bastion (issue 6): every target's session is carried by the ONE shared
connection to the jump host, so a hardened bastion (MaxStartups 1, MaxSessions 1) still serves a
fan-out of 32.  Forwarded TCP channels (direct-tcpip) do not count against MaxSessions, and only
one unauthenticated connection (ours) ever reaches the bastion's MaxStartups; new handshakes
through it are capped at GATEWAY_HANDSHAKES (8) at a time on our side.  Gathering spread over
shards keeps that: the hosts behind one jump host are all in one shard."""
from __future__ import annotations

import json

import pytest
import yaml

from preflight.transport.ssh import GATEWAY_HANDSHAKES

from .test_preflight_e2e import problems, run_preflight

NAMES = [f"node-{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("gathering", [(), ("--gather-process", "shards", "--gather-shards", "3")],
                         ids=["one-process", "shards"])
def test_hardened_bastion_carries_a_wide_fanout(sim_cluster_factory, tmp_path, gathering):
    assert GATEWAY_HANDSHAKES <= 8  # below sshd's default MaxStartups 10 of a bastion we do not control
    sim = sim_cluster_factory(names=NAMES, head="node-02")
    bastion = sim.node("node-01")
    bastion.restart(sshd_options={"MaxStartups": "1", "MaxSessions": "1"})
    targets = NAMES[1:]
    inv = sim.write_inventory(tmp_path / "hosts.yaml", hosts=targets, head={"min_nofile": sim.default_nofile},
                              worker={"min_nofile": sim.default_nofile})
    data = yaml.safe_load(inv.read_text())
    for entry in data["hosts"]:
        entry["jump_host"] = f"root@{bastion.address}"
    inv.write_text(yaml.safe_dump(data))
    before = len(bastion.sshd_log.read_text())
    proc, doc = run_preflight(inv, tmp_path, "--fanout", "32", "-k", "not ping", *gathering)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert problems(doc) == set(), proc.stdout[-3000:]
    assert sorted(h["name"] for h in doc["hosts"] if h["reachable"]) == targets
    log = bastion.sshd_log.read_text()[before:]
    # one login on the bastion for 9 targets, and it never had to throttle or refuse
    assert log.count(f"Accepted publickey for root from {sim.gateway}") == 1, log
    assert "MaxStartups" not in log and "drop connection" not in log, log


# -- a jump host that stops answering mid-run -------------------------------------------------

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from .test_preflight_e2e import run_env  # noqa: E402


def _children(pid):
    """Every process below ``pid`` (the bastion's sshd: its session processes and theirs)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.parametrize("gathering", ["inline", "child"])
def test_a_jump_host_that_stops_answering_ends_the_run_with_it_named(sim_cluster_factory, tmp_path, gathering):
    """The bastion's sshd SIGSTOPped half a second into the run (a paused VM, a black hole): every
    thread writing through its connection (probes, keepalives, closes) waited forever on
    paramiko's send lock, the pool's thread too, and Ctrl-C wrote the reports but never ended the
    process (found by review; 60 targets behind one bastion).  Now the jump host is given up once
    it leaves a keepalive unanswered, each target says so, and the run ends with its reports."""
    sim = sim_cluster_factory(names=[f"node-{i:02d}" for i in range(1, 8)], head="node-02")
    bastion = sim.node("node-01")
    # A small receive buffer on the bastion: its TCP window fills after a probe or two, as with 60.
    bastion.run("sysctl -q -w net.ipv4.tcp_rmem='4096 8192 16384'")
    jump = f"root@{bastion.address}"
    names = [n.name for n in sim.nodes if n is not bastion]
    inv = sim.write_inventory(tmp_path / "hosts.yaml", hosts=names)
    data = yaml.safe_load(inv.read_text())
    for entry in data["hosts"]:
        entry["jump_host"] = jump
    inv.write_text(yaml.safe_dump(data))
    address = {n.name: n.address for n in sim.nodes}
    for name in names:  # every probe still running when the bastion stops, however slow this box
        sim.node(name).override("npu-smi", "info", sleep=3600)
    reports = tmp_path / "reports"
    args = [sys.executable, "-m", "pytest", "--inventory", str(inv), "--report-dir", str(reports),
            "-p", "no:cacheprovider", "--host-timeout", "90", "--command-timeout", "60", "--connect-timeout", "10",
            "--gather-process", gathering]
    stopped = []
    run = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=run_env(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while not _children(bastion.sshd.pid) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the controller's connection to the bastion is up
        time.sleep(1.0)
        stopped = _children(bastion.sshd.pid)
        assert stopped, ("the run never reached the bastion", run.poll() is None or run.communicate()[0][-3000:])
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        # Finished at all is the point; the bound is generous (a loaded 2-core box): the keepalive
        # gives the bastion up within ~25 s, far before --host-timeout 90.
        out, _ = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    doc = json.loads((reports / "preflight.json").read_text())
    assert (reports / "preflight.html").stat().st_size > 0 and (reports / "matrix.html").stat().st_size > 0
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert sorted(hosts) == names
    named = [h for h in hosts.values() if not h["reachable"]]
    assert named, out[-3000:]  # the bastion stopped long before 30 probes through it could end
    for h in named:  # one precise cause per host: the bastion, not the node nor a timeout
        assert h["error"] == (f"{h['name']} ({address[h['name']]}): jump host {jump} stopped answering (no reply to a "
                              f"keepalive within 20s: its sshd is stopped or overloaded, the machine is paused, or "
                              f"the network to it drops packets); its connection was closed") \
            or h["error"].startswith(f"jump host {jump} stopped answering"), (h, out[-3000:])
    assert run.returncode == 1, out[-3000:]
