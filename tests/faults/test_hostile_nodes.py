"""Hostile nodes and broken networks: every run ends within its deadline, writes all reports,
gives the one precise result for the broken host or tool, and leaves every other host's
results as they are on a healthy run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.e2e.test_preflight_e2e import problems, run_env, run_preflight
from tests.factsets import fake_agent

# Connect timeout of the runs here: short enough for the silent peers, long enough for a login
# on a loaded 2-core machine (the baseline every test compares against is one such run).
CONNECT = "10"


def outcomes_except(doc, host):
    return {(r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"]
            if r["host"] != host and r["host"] is not None}


def reports_written(tmp_path):
    for name in ("preflight.json", "preflight.html", "matrix.html"):
        assert (tmp_path / "reports" / name).stat().st_size > 0, name


@pytest.fixture(scope="module")
def baseline(sim_cluster, tmp_path_factory):
    """A healthy run (once per module): the results every test compares the untouched hosts against."""
    sim = sim_cluster
    work = tmp_path_factory.mktemp("baseline")
    inv = inventory(sim, work)
    proc, doc = run_preflight(inv, work, "--connect-timeout", CONNECT)
    assert problems(doc) == set(), proc.stdout[-2000:]
    return doc


def inventory(sim, tmp_path, extra_hosts=(), **defaults):
    groups = {"min_nofile": sim.default_nofile}
    return sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups, extra_hosts=extra_hosts,
                               defaults=defaults or None)


class _Server:
    """A TCP endpoint on the controller that never speaks SSH."""

    def __init__(self, behaviour):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held = []
        self.behaviour = behaviour
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.behaviour == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()
            else:
                self.held.append(conn)  # blackhole: accept, then say nothing

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def _extra_host_run(sim, tmp_path, baseline, entry, expect_words, max_seconds=60):
    inv = inventory(sim, tmp_path, extra_hosts=[entry])
    t0 = time.monotonic()
    proc, doc = run_preflight(inv, tmp_path, "--connect-timeout", CONNECT)
    took = time.monotonic() - t0
    assert took < max_seconds, took
    reports_written(tmp_path)
    name = entry["name"]
    [bad] = [r for r in doc["results"] if r["check"] == "cluster.reachable" and r["host"] == name]
    assert bad["outcome"] == "failed"
    assert any(w in bad["message"] for w in expect_words), bad["message"]
    assert all(r["outcome"] in ("error", "skipped") for r in doc["results"]
               if r["host"] == name and r["check"] != "cluster.reachable")
    assert outcomes_except(doc, name) == outcomes_except(baseline, name)
    return doc


def test_port_open_but_no_ssh_banner(sim, tmp_path, baseline):
    server = _Server("blackhole")
    try:
        _extra_host_run(sim, tmp_path, baseline, {"name": "blackhole", "address": "127.0.0.1", "port": server.port},
                        ["no SSH banner", "no answer"])
    finally:
        server.close()


def test_connection_reset_during_handshake(sim, tmp_path, baseline):
    server = _Server("reset")
    try:
        _extra_host_run(sim, tmp_path, baseline, {"name": "resetter", "address": "127.0.0.1", "port": server.port},
                        ["reset", "handshake", "banner", "refused"])
    finally:
        server.close()


def test_name_that_does_not_resolve(sim, tmp_path, baseline):
    _extra_host_run(sim, tmp_path, baseline, {"name": "ghost", "address": "no-such-node.invalid"},
                    ["does not resolve"])


def test_authentication_refused(sim, tmp_path, baseline):
    key = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    node = sim.node("node-02")
    _extra_host_run(sim, tmp_path, baseline,
                    {"name": "wrongkey", "address": node.address, "identity_file": str(key)},
                    ["authentication refused"])


def test_sshd_dies_mid_probe(sim, tmp_path, baseline):
    node = sim.node("node-03")
    inv = inventory(sim, tmp_path)
    node.clear_calls()

    def kill_once_probed():
        # Stop sshd while the probe is inside node-03's `npu-smi info`, not after a fixed delay:
        # on a slow machine the login itself can take longer than any delay chosen here.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                c.get("args") == ["info"] for c in node.calls("npu-smi")):
            time.sleep(0.05)
        node.stop()

    with node.override("npu-smi", "info", sleep=30):
        killer = threading.Thread(target=kill_once_probed)
        killer.start()
        try:
            t0 = time.monotonic()
            proc, doc = run_preflight(inv, tmp_path, "--connect-timeout", CONNECT)
            took = time.monotonic() - t0
        finally:
            killer.join()
            node.start()
    assert took < 60, took
    reports_written(tmp_path)
    [bad] = [r for r in doc["results"] if r["check"] == "cluster.reachable" and r["host"] == "node-03"]
    assert bad["outcome"] == "failed" and "connection was lost" in bad["message"], bad
    # The checks whose facts were cut off name the lost connection and its remedy, not the deadline.
    cut = [r for r in doc["results"] if r["host"] == "node-03" and r["outcome"] == "error"
           and not r["check"].startswith("cluster.")]
    assert any("npu-smi info" in r["message"] for r in cut), cut
    for r in cut:
        assert "SSH connection was lost" in r["message"] and "deadline" not in r["message"], r
        assert "sshd" in r["remedy"] and "--host-timeout" not in r["remedy"], r
    assert outcomes_except(doc, "node-03") - {r for r in outcomes_except(baseline, "node-03")} <= {
        r for r in outcomes_except(doc, "node-03") if r[0].startswith("cluster.")}  # peers of node-03 only


@pytest.mark.parametrize("fault, words", [
    ("hundred_mb", "cut at"),
    ("binary", "unreadable output of `npu-smi info`"),
    ("empty", "output was empty"),
    ("wrong_format", "unreadable output of `npu-smi info`"),
])
def test_babbling_or_silent_vendor_tool(sim, tmp_path, baseline, fault, words):
    node = sim.node("node-02")
    tool = node.tool_path("npu-smi")
    original = tool.read_bytes()
    scripts = {
        "hundred_mb": "#!/bin/sh\nhead -c 100000000 /dev/zero | tr '\\0' x\n",
        "binary": "#!/bin/sh\nhead -c 4096 /dev/urandom\nprintf '\\377\\376\\000\\033[31m'\n",
        "empty": "#!/bin/sh\nexit 0\n",
        "wrong_format": "#!/bin/sh\necho 'Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]'\n",
    }
    tool.write_text(scripts[fault])
    try:
        t0 = time.monotonic()
        proc, doc = run_preflight(inventory(sim, tmp_path), tmp_path)
        took = time.monotonic() - t0
    finally:
        tool.write_bytes(original)
    assert took < 60, took
    reports_written(tmp_path)
    errors = [r for r in doc["results"] if r["host"] == "node-02" and r["outcome"] == "error"]
    assert errors and all("npu-smi" in r["message"] for r in errors), errors
    assert any(words in r["message"] for r in errors), [r["message"] for r in errors]
    # A check whose subject is "npu-smi works at all" may fail on it; nothing else about node-02 does.
    failed = [r for r in doc["results"] if r["host"] == "node-02" and r["outcome"] == "failed"]
    assert all(r["check"] == "devices.driver_mounts" and "npu-smi" in r["message"] for r in failed), failed
    assert outcomes_except(doc, "node-02") == outcomes_except(baseline, "node-02")


def test_tool_not_executable(sim, tmp_path, baseline):
    """Root reads any file, but cannot run a tool without an execute bit: the closest a root
    probe gets to an unreadable /usr/local/Ascend."""
    node = sim.node("node-01")
    tool = node.tool_path("hccn_tool")
    mode = tool.stat().st_mode
    tool.chmod(0)
    try:
        proc, doc = run_preflight(inventory(sim, tmp_path), tmp_path)
    finally:
        tool.chmod(mode)
    errors = [r for r in doc["results"] if r["host"] == "node-01" and r["outcome"] == "error"]
    assert errors and any("permission denied" in r["message"] for r in errors)
    assert not [r for r in doc["results"] if r["outcome"] == "failed"]


def test_login_shell_prints_junk(sim, tmp_path, baseline):
    node = sim.node("node-02")
    bashrc = node.root_dir / ".bashrc"
    original = bashrc.read_text()
    bashrc.write_text("echo 'Welcome to node-02!'\nprintf 'no newline banner'\nprintf '\\033[1m\\000bold\\n'\n"
                      + original)
    try:
        proc, doc = run_preflight(inventory(sim, tmp_path), tmp_path)
    finally:
        bashrc.write_text(original)
    assert problems(doc) == set(), proc.stdout[-2000:]
    assert {(r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"]} == \
        {(r["check"], r["host"], r["subject"], r["outcome"]) for r in baseline["results"]}


@pytest.mark.parametrize("where", ["inline", "child", "shards"])
def test_ctrl_c_while_gathering_writes_partial_reports(sim, tmp_path, where):
    # "child": the gathering process gets the Ctrl-C from the run and hands over what it has.
    # "shards": the run asks each gathering process for what it has, then ends them.
    _stop_while_gathering(sim, tmp_path, where, signal.SIGINT)


@pytest.mark.parametrize("where, group", [("inline", True), ("child", True), ("shards", True),
                                          ("child", False), ("shards", False)])
def test_sigterm_while_gathering_writes_partial_reports_as_ctrl_c_does(sim, tmp_path, where, group):
    # CI's `timeout`, Slurm and systemctl stop send SIGTERM to the run and to its process group (the
    # gathering child and shards get it too, and leave the decision to the run, as for a terminal's
    # Ctrl-C); Kubernetes and `kill PID` to the run alone.
    proc, out = _stop_while_gathering(sim, tmp_path, where, signal.SIGTERM, group)
    assert "verdict: INTERRUPTED (SIGTERM)" in out, out[-2000:]
    latest = tmp_path / "reports" / "latest"
    assert latest.is_symlink() and (latest / "preflight.json").exists() and (latest / "matrix.html").exists()


def _stop_while_gathering(sim, tmp_path, where, signum, group=False):
    node = sim.node("node-03")
    inv = inventory(sim, tmp_path)
    with node.override("npu-smi", "info", sleep=3600):
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "--inventory", str(inv), "--report-dir", str(tmp_path / "reports"),
             "-p", "no:cacheprovider", "--command-timeout", "20", "--gather-process", where, "--gather-shards", "2"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env(tmp_path),
            # Its own process group: whatever the run forks stays in it, to be looked for after.
            start_new_session=True,
            # A test run started in the background of a script inherits SIGINT ignored (POSIX), and
            # Python then installs no KeyboardInterrupt handler: give the child Ctrl-C back.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            seen = []
            reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)
            reader.start()
            deadline = time.monotonic() + 60
            # Wait until node-01 and node-02 are done and node-03 hangs in npu-smi (its timeout, 20 s,
            # must not end the wait first).
            while not any("2/3 hosts done" in line for line in seen) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert any("2/3 hosts done" in line for line in seen), seen
            proc.send_signal(signum)
            if group:  # as GNU timeout does: the run, then its whole group
                os.killpg(proc.pid, signum)
            proc.wait(timeout=60)
            reader.join(timeout=5)
            out, err = "".join(seen), proc.stderr.read()
        finally:
            if proc.poll() is None:  # a failed wait above: the run must not outlive the test
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 2, out[-2000:] + err[-2000:]  # pytest's "interrupted"
    import json

    doc = json.loads((tmp_path / "reports" / "preflight.json").read_text())
    assert doc["interrupted"] is True and doc["ready"] is False
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert hosts["node-01"]["reachable"] and hosts["node-02"]["reachable"]
    assert hosts["node-03"]["reachable"] is False and "interrupted" in hosts["node-03"]["error"]
    assert (tmp_path / "reports" / "matrix.html").read_text().count("INTERRUPTED") == 1
    assert (tmp_path / "reports" / "preflight.html").exists()
    assert "3 host(s), 0 unreachable, 1 not tried (interrupted)" in out, out[-2000:]
    assert "results: none (interrupted before any check ran)" in out, out[-2000:]  # it was an empty list
    # Nothing left behind: no child of the run survives it, and the node's session ends once
    # the hung command reaches its own timeout.
    end = time.monotonic() + 20
    while _group_alive(proc.pid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _group_alive(proc.pid)
    end = time.monotonic() + 60
    while node.extra_processes() and time.monotonic() < end:
        time.sleep(0.5)
    assert node.extra_processes() == []
    return proc, out


def _group_alive(pgid) -> bool:
    """Whether a process of the run's process group is left (its forked gathering child or shards);
    zombies aside (whether an orphan's zombie is reaped is up to the machine's PID 1)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    state, _ppid, group = fh.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if int(group) == pgid and state != "Z":
                return True
    return False


# -- an ssh-agent that accepts and never answers -------------------------------------------------

def test_a_hung_ssh_agent_is_left_out_and_named(sim, tmp_path, monkeypatch):
    """paramiko asks $SSH_AUTH_SOCK's agent in every login with no timeout: a hung agent held every
    host for --host-timeout + 5 s, reported as "cannot log in" with an sshd remedy (found by
    review).  It is asked once, within the connect timeout, and left out: the key in ~/.ssh logs
    in; without one, each login refused names SSH_AUTH_SOCK."""
    agent_path, agent, held = fake_agent(tmp_path, None)  # accepts, and never a word
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("SSH_AUTH_SOCK", agent_path)
    monkeypatch.setenv("HOME", str(home))
    inv = inventory(sim, tmp_path, identity_file=None)  # the agent or ~/.ssh, as plain `ssh` would
    try:
        (home / ".ssh" / "id_ed25519").write_bytes(sim.identity_file.read_bytes())
        os.chmod(home / ".ssh" / "id_ed25519", 0o600)
        proc, doc = run_preflight(inv, tmp_path / "with-key", "--connect-timeout", "3", "--host-timeout", "120",
                                  "-k", "reachable")
        assert all(h["reachable"] for h in doc["hosts"]), (doc["hosts"], proc.stdout[-3000:])
        assert max(h["gather_s"] for h in doc["hosts"]) < 100  # not held for the host timeout
        (home / ".ssh" / "id_ed25519").unlink()
        proc, doc = run_preflight(inv, tmp_path / "no-key", "--connect-timeout", "3", "--host-timeout", "120",
                                  "-k", "reachable")
        for h in doc["hosts"]:
            assert not h["reachable"] and h["error_kind"] == "auth", h
            assert f"the ssh-agent at SSH_AUTH_SOCK={agent_path} did not answer within 3s" in h["error"], h
        reports_written(tmp_path / "no-key")
    finally:
        agent.close()
        for c in held:
            c.close()
